//! ConvTranspose against a naive scatter reference, the ONNX specification
//! examples, error cases and thread-count bit identity.

use super::{geo, rand64, ravel, t32, unravel, Geo};
use crate::ir::attributes::Attribute;
use crate::ops::testutil::{
    assert_tensor_close, bits, build_op, int, ints, run, string, with_threads,
};
use crate::tensor::Tensor;
use half::f16;

/// Naive ConvTranspose: y[n, g·mg + m, i·s + k·d − p] += x[n, g·cg + c, i]·w[g·cg + c, m, k].
fn ref_convt(
    x: &[f64],
    xs: &[usize],
    w: &[f64],
    ws: &[usize],
    b: Option<&[f64]>,
    g: &Geo,
    out: &[usize],
) -> Vec<f64> {
    let (n, c, mg) = (xs[0], xs[1], ws[1]);
    let (cg, m) = (c / g.group, mg * g.group);
    let (ins, ks) = (&xs[2..], &ws[2..]);
    let (ilen, olen, klen) = (
        ins.iter().product::<usize>(),
        out.iter().product::<usize>(),
        ks.iter().product::<usize>(),
    );
    let mut y = vec![0.0; n * m * olen];
    for ni in 0..n {
        for mi in 0..m {
            for v in &mut y[(ni * m + mi) * olen..(ni * m + mi + 1) * olen] {
                *v = b.map_or(0.0, |b| b[mi]);
            }
        }
        for ci in 0..c {
            let gi = ci / cg;
            for ii in 0..ilen {
                let i = unravel(ii, ins);
                for ml in 0..mg {
                    for ki in 0..klen {
                        let k = unravel(ki, ks);
                        let mut pos = Vec::new();
                        let mut inside = true;
                        for d in 0..ins.len() {
                            let p = (i[d] * g.strides[d] + k[d] * g.dil[d]) as isize
                                - g.pad_begin[d] as isize;
                            if p < 0 || p >= out[d] as isize {
                                inside = false;
                            }
                            pos.push(p.max(0) as usize);
                        }
                        if inside {
                            let mo = gi * mg + ml;
                            y[(ni * m + mo) * olen + ravel(&pos, out)] +=
                                x[(ni * c + ci) * ilen + ii] * w[(ci * mg + ml) * klen + ki];
                        }
                    }
                }
            }
        }
    }
    y
}

fn check_convt(
    xs: &[usize],
    ws: &[usize],
    bias: bool,
    attrs: &[(&str, Attribute)],
    g: &Geo,
    out: &[usize],
) {
    let x = rand64(xs.iter().product(), 31);
    let w = rand64(ws.iter().product(), 32);
    let m = ws[1] * g.group;
    let b = rand64(m, 33);
    let (xt, wt, bt) = (t32(xs, &x), t32(ws, &w), t32(&[m], &b));
    let mut inputs = vec![Some(&xt), Some(&wt)];
    if bias {
        inputs.push(Some(&bt));
    }
    let y = run("ConvTranspose", 13, attrs, &inputs).unwrap();
    let mut shape = vec![xs[0], m];
    shape.extend_from_slice(out);
    assert_eq!(y[0].shape(), shape.as_slice());
    let want = ref_convt(&x, xs, &w, ws, bias.then_some(b.as_slice()), g, out);
    assert_tensor_close(&y[0], &want, 1e-4, 1e-4);
}

#[test]
fn convt_1d_2d_3d_groups_strides_dilations() {
    check_convt(&[2, 3, 5], &[3, 2, 3], true, &[], &geo(1), &[7]);
    let g = Geo {
        strides: vec![2, 3],
        dil: vec![1, 2],
        pad_begin: vec![1, 0],
        group: 1,
    };
    // H: 2·3 + 0 + 3 − 1 − 2 = 6; W: 3·4 + 1 + 5 − 0 − 1 = 17.
    check_convt(
        &[2, 3, 4, 5],
        &[3, 2, 3, 3],
        true,
        &[
            ("strides", ints(&[2, 3])),
            ("dilations", ints(&[1, 2])),
            ("pads", ints(&[1, 0, 2, 1])),
            ("output_padding", ints(&[0, 1])),
        ],
        &g,
        &[6, 17],
    );
    let g = Geo {
        group: 2,
        strides: vec![2, 1, 2],
        ..geo(3)
    };
    check_convt(
        &[1, 4, 2, 3, 2],
        &[4, 3, 2, 2, 3],
        false,
        &[("group", int(2)), ("strides", ints(&[2, 1, 2]))],
        &g,
        &[4, 4, 5],
    );
    // Depthwise-style transpose.
    let g = Geo {
        group: 3,
        strides: vec![2, 2],
        ..geo(2)
    };
    check_convt(
        &[1, 3, 3, 3],
        &[3, 1, 2, 2],
        true,
        &[("group", int(3)), ("strides", ints(&[2, 2]))],
        &g,
        &[6, 6],
    );
}

#[test]
fn convt_auto_pad_and_output_shape() {
    // SAME_UPPER, in 3, stride 2, kernel 3: out 6, total 2·2 + 3 − 6 = 1 → (0, 1).
    let g = Geo {
        strides: vec![2, 2],
        ..geo(2)
    };
    let attrs_upper = [
        ("auto_pad", string("SAME_UPPER")),
        ("strides", ints(&[2, 2])),
    ];
    check_convt(
        &[1, 2, 3, 3],
        &[2, 2, 3, 3],
        true,
        &attrs_upper,
        &g,
        &[6, 6],
    );
    let g = Geo {
        strides: vec![2, 2],
        pad_begin: vec![1, 1],
        ..geo(2)
    };
    let attrs_lower = [
        ("auto_pad", string("SAME_LOWER")),
        ("strides", ints(&[2, 2])),
    ];
    check_convt(
        &[1, 2, 3, 3],
        &[2, 2, 3, 3],
        true,
        &attrs_lower,
        &g,
        &[6, 6],
    );
    // output_shape smaller than the full extent: total 2·3 + 3 − 7 = 2 → (1, 1).
    let g = Geo {
        strides: vec![2],
        pad_begin: vec![1],
        ..geo(1)
    };
    check_convt(
        &[1, 2, 4],
        &[2, 1, 3],
        true,
        &[("strides", ints(&[2])), ("output_shape", ints(&[7]))],
        &g,
        &[7],
    );
    // output_shape with N and C listed too.
    check_convt(
        &[1, 2, 4],
        &[2, 1, 3],
        true,
        &[("strides", ints(&[2])), ("output_shape", ints(&[1, 1, 7]))],
        &g,
        &[7],
    );
    // VALID: no padding.
    let g = Geo {
        strides: vec![2],
        ..geo(1)
    };
    check_convt(
        &[1, 2, 4],
        &[2, 1, 3],
        false,
        &[
            ("strides", ints(&[2])),
            ("auto_pad", string("VALID")),
            ("pads", ints(&[1, 1])),
        ],
        &g,
        &[9],
    );
}

/// Examples from the ONNX ConvTranspose specification.
#[test]
fn convt_onnx_spec_examples() {
    let x = t32(&[1, 1, 3, 3], &[0., 1., 2., 3., 4., 5., 6., 7., 8.]);
    let w = t32(&[1, 2, 3, 3], &[1.0; 18]);
    let twice = |v: &[f64]| [v, v].concat();
    let y = run("ConvTranspose", 11, &[], &[Some(&x), Some(&w)]).unwrap();
    assert_eq!(y[0].shape(), &[1, 2, 5, 5]);
    assert_tensor_close(
        &y[0],
        &twice(&[
            0., 1., 3., 3., 2., 3., 8., 15., 12., 7., 9., 21., 36., 27., 15., 9., 20., 33., 24.,
            13., 6., 13., 21., 15., 8.,
        ]),
        0.0,
        0.0,
    );
    let x1 = t32(&[1, 1, 3], &[0., 1., 2.]);
    let w1 = t32(&[1, 2, 3], &[1.0; 6]);
    let y = run("ConvTranspose", 11, &[], &[Some(&x1), Some(&w1)]).unwrap();
    assert_tensor_close(&y[0], &twice(&[0., 1., 3., 3., 2.]), 0.0, 0.0);
    // strides (3, 2) with output_shape (10, 8), or with output_padding (1, 1).
    let want = twice(&[
        0., 0., 1., 1., 3., 2., 2., 0., 0., 0., 1., 1., 3., 2., 2., 0., 0., 0., 1., 1., 3., 2., 2.,
        0., 3., 3., 7., 4., 9., 5., 5., 0., 3., 3., 7., 4., 9., 5., 5., 0., 3., 3., 7., 4., 9., 5.,
        5., 0., 6., 6., 13., 7., 15., 8., 8., 0., 6., 6., 13., 7., 15., 8., 8., 0., 6., 6., 13.,
        7., 15., 8., 8., 0., 0., 0., 0., 0., 0., 0., 0., 0.,
    ]);
    for extra in [
        ("output_shape", ints(&[10, 8])),
        ("output_padding", ints(&[1, 1])),
    ] {
        let y = run(
            "ConvTranspose",
            11,
            &[("strides", ints(&[3, 2])), extra],
            &[Some(&x), Some(&w)],
        )
        .unwrap();
        assert_eq!(y[0].shape(), &[1, 2, 10, 8]);
        assert_tensor_close(&y[0], &want, 0.0, 0.0);
    }
    // strides (3, 2) with pads (1, 2, 1, 2).
    let y = run(
        "ConvTranspose",
        11,
        &[("strides", ints(&[3, 2])), ("pads", ints(&[1, 2, 1, 2]))],
        &[Some(&x), Some(&w)],
    )
    .unwrap();
    assert_eq!(y[0].shape(), &[1, 2, 7, 3]);
    assert_tensor_close(
        &y[0],
        &twice(&[
            1., 1., 3., 1., 1., 3., 7., 4., 9., 7., 4., 9., 7., 4., 9., 13., 7., 15., 13., 7., 15.,
        ]),
        0.0,
        0.0,
    );
    // SAME_UPPER with strides (2, 2).
    let y = run(
        "ConvTranspose",
        11,
        &[
            ("strides", ints(&[2, 2])),
            ("auto_pad", string("SAME_UPPER")),
        ],
        &[Some(&x), Some(&w)],
    )
    .unwrap();
    assert_tensor_close(
        &y[0],
        &twice(&[
            0., 0., 1., 1., 3., 2., 0., 0., 1., 1., 3., 2., 3., 3., 8., 5., 12., 7., 3., 3., 7.,
            4., 9., 5., 9., 9., 20., 11., 24., 13., 6., 6., 13., 7., 15., 8.,
        ]),
        0.0,
        0.0,
    );
    // Dilations (2, 2).
    let xd = t32(&[1, 1, 3, 3], &[3., 8., 1., 9., 5., 7., 3., 2., 6.]);
    let wd = t32(&[1, 1, 2, 2], &[7., 2., 1., 9.]);
    let y = run(
        "ConvTranspose",
        11,
        &[("dilations", ints(&[2, 2]))],
        &[Some(&xd), Some(&wd)],
    )
    .unwrap();
    assert_tensor_close(
        &y[0],
        &[
            21., 56., 13., 16., 2., 63., 35., 67., 10., 14., 24., 22., 76., 76., 21., 9., 5., 88.,
            45., 63., 3., 2., 33., 18., 54.,
        ],
        0.0,
        0.0,
    );
}

#[test]
fn convt_f64_f16_and_threads() {
    let xs = [1, 2, 4, 4];
    let ws = [2, 3, 3, 3];
    let x = rand64(32, 41);
    let w = rand64(54, 42);
    let g = Geo {
        strides: vec![2, 2],
        pad_begin: vec![1, 1],
        ..geo(2)
    };
    let attrs = [("strides", ints(&[2, 2])), ("pads", ints(&[1, 1, 1, 1]))];
    let want = ref_convt(&x, &xs, &w, &ws, None, &g, &[7, 7]);
    let (x64, w64) = (
        Tensor::from_vec(&xs, x.clone()).unwrap(),
        Tensor::from_vec(&ws, w.clone()).unwrap(),
    );
    let y = run("ConvTranspose", 13, &attrs, &[Some(&x64), Some(&w64)]).unwrap();
    assert_tensor_close(&y[0], &want, 1e-12, 1e-12);
    let h = |v: &[f64], s: &[usize]| {
        Tensor::from_vec(s, v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>()).unwrap()
    };
    let y = run(
        "ConvTranspose",
        13,
        &attrs,
        &[Some(&h(&x, &xs)), Some(&h(&w, &ws))],
    )
    .unwrap();
    assert!(matches!(y[0], Tensor::F16(_)));
    assert_tensor_close(&y[0], &want, 1e-2, 2e-2);
    // Bit identity across thread counts on a larger problem.
    let x = t32(&[2, 16, 24, 24], &rand64(2 * 16 * 576, 43));
    let w = t32(&[16, 8, 4, 4], &rand64(16 * 8 * 16, 44));
    let op = build_op(
        "ConvTranspose",
        13,
        &[("strides", ints(&[2, 2])), ("pads", ints(&[1, 1, 1, 1]))],
        &[],
        2,
        1,
    )
    .unwrap();
    let one = with_threads(1, || op.run(&[Some(&x), Some(&w)]).unwrap());
    let three = with_threads(3, || op.run(&[Some(&x), Some(&w)]).unwrap());
    assert_eq!(one[0].shape(), &[2, 8, 48, 48]);
    assert_eq!(bits(&one[0]), bits(&three[0]));
}

#[test]
fn convt_errors_and_flops() {
    use crate::ir::{Fact, InferInput};
    use crate::tensor::DType;
    let x = t32(&[1, 4, 3, 3], &[0.0; 36]);
    let err = |attrs: &[(&str, Attribute)], w: &Tensor| {
        run("ConvTranspose", 13, attrs, &[Some(&x), Some(w)])
            .unwrap_err()
            .to_string()
    };
    let w = t32(&[3, 2, 3, 3], &[0.0; 54]);
    assert!(err(&[], &w).contains("channels"));
    let w = t32(&[4, 2, 3, 3], &[0.0; 72]);
    assert!(err(&[("group", int(3))], &w).contains("divide"));
    assert!(err(&[("pads", ints(&[1, 1, 1]))], &w).contains("pads"));
    assert!(err(&[("strides", ints(&[0, 1]))], &w).contains("strides"));
    assert!(err(&[("output_padding", ints(&[1]))], &w).contains("output_padding"));
    assert!(err(&[("output_shape", ints(&[1, 2, 3]))], &w).contains("output_shape"));
    assert!(err(&[("pads", ints(&[3, 3, 3, 3]))], &w).contains("exceed"));
    assert!(err(&[("kernel_shape", ints(&[2, 2]))], &w).contains("kernel_shape"));
    let w3 = t32(&[4, 2, 3], &[0.0; 24]);
    assert!(err(&[], &w3).contains("rank"));
    assert!(err(&[("strides", ints(&[i64::MAX, 1]))], &w).contains("1..=2147483648"));
    let op = build_op(
        "ConvTranspose",
        13,
        &[("strides", ints(&[2, 2]))],
        &[],
        3,
        1,
    )
    .unwrap();
    let (xf, wf, bf) = (
        Fact::new(DType::F32, vec![1, 4, 3, 3]),
        Fact::new(DType::F32, vec![4, 2, 3, 3]),
        Fact::new(DType::F32, vec![2]),
    );
    let inp = |f| InferInput {
        fact: Some(f),
        value: None,
    };
    let out = op.infer(&[inp(&xf), inp(&wf), inp(&bf)]).unwrap();
    assert_eq!(out[0], Fact::new(DType::F32, vec![1, 2, 7, 7]));
    let flops = op.flops(&[Some(&xf), Some(&wf), Some(&bf)], &out);
    assert_eq!(flops, 2 * 36 * 18 + 2 * 49);
}
