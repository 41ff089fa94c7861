//! Conv and ConvTranspose against naive direct references written here, the
//! ONNX specification examples, error cases and thread-count bit identity.

use crate::ir::attributes::Attribute;
use crate::ir::{Activation, Fusion};
use crate::ops::testutil::{
    activation, assert_close, assert_tensor_close, bits, build_fused, build_op, int, ints,
    rand_vec, run, run_fused, string, with_threads,
};
use crate::tensor::Tensor;
use half::f16;

mod ahead;
#[cfg(target_arch = "x86_64")]
mod grouped;
mod patches;
mod pointwise;
mod transpose;
mod winograd;

/// Multi-index of linear `i` in `dims`.
pub(super) fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        idx[d] = i % dims[d];
        i /= dims[d];
    }
    idx
}

/// Linear index of `idx` in `dims`.
pub(super) fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |a, (&i, &d)| a * d + i)
}

/// Window parameters of a reference convolution.
#[derive(Clone)]
pub(super) struct Geo {
    pub strides: Vec<usize>,
    pub dil: Vec<usize>,
    pub pad_begin: Vec<usize>,
    pub group: usize,
}

/// Naive Conv: y[n, m, o] = b[m] + Σ x[n, g·cg + c, o·s + k·d − p]·w[m, c, k].
fn ref_conv(
    x: &[f64],
    xs: &[usize],
    w: &[f64],
    ws: &[usize],
    b: Option<&[f64]>,
    g: &Geo,
    out: &[usize],
) -> Vec<f64> {
    let (n, cg, m) = (xs[0], ws[1], ws[0]);
    let mg = m / g.group;
    let (ins, ks) = (&xs[2..], &ws[2..]);
    let olen: usize = out.iter().product();
    let klen: usize = ks.iter().product();
    let mut y = Vec::new();
    for ni in 0..n {
        for mi in 0..m {
            let gi = mi / mg;
            for oi in 0..olen {
                let o = unravel(oi, out);
                let mut acc = b.map_or(0.0, |b| b[mi]);
                for c in 0..cg {
                    for ki in 0..klen {
                        let k = unravel(ki, ks);
                        let mut pos = Vec::new();
                        let mut inside = true;
                        for d in 0..ins.len() {
                            let p = (o[d] * g.strides[d] + k[d] * g.dil[d]) as isize
                                - g.pad_begin[d] as isize;
                            if p < 0 || p >= ins[d] as isize {
                                inside = false;
                            }
                            pos.push(p.max(0) as usize);
                        }
                        if inside {
                            let xv = x[(ni * xs[1] + gi * cg + c) * ins.iter().product::<usize>()
                                + ravel(&pos, ins)];
                            acc += xv * w[(mi * cg + c) * klen + ki];
                        }
                    }
                }
                y.push(acc);
            }
        }
    }
    y
}

pub(super) fn t32(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_vec(shape, v.iter().map(|&x| x as f32).collect::<Vec<f32>>()).unwrap()
}

pub(super) fn rand64(n: usize, seed: u64) -> Vec<f64> {
    rand_vec(n, seed).into_iter().map(f64::from).collect()
}

/// Runs Conv on random f32 data and compares with the reference.
#[allow(clippy::too_many_arguments)]
fn check_conv(
    xs: &[usize],
    ws: &[usize],
    bias: bool,
    attrs: &[(&str, Attribute)],
    g: &Geo,
    out: &[usize],
) {
    let x = rand64(xs.iter().product(), 1);
    let w = rand64(ws.iter().product(), 2);
    let b = rand64(ws[0], 3);
    let (xt, wt, bt) = (t32(xs, &x), t32(ws, &w), t32(&[ws[0]], &b));
    let mut inputs = vec![Some(&xt), Some(&wt)];
    if bias {
        inputs.push(Some(&bt));
    }
    let y = run("Conv", 13, attrs, &inputs).unwrap();
    let mut shape = vec![xs[0], ws[0]];
    shape.extend_from_slice(out);
    assert_eq!(y[0].shape(), shape.as_slice());
    let want = ref_conv(&x, xs, &w, ws, bias.then_some(b.as_slice()), g, out);
    assert_tensor_close(&y[0], &want, 1e-4, 1e-4);
}

/// A fused-Conv case: its name, the fusion, the expected outputs.
pub(super) type FusedCase = (&'static str, Fusion, Vec<f64>);

/// The fused cases every kernel's fusion test runs, from the reference's
/// plain outputs and a residual `z` laid out like them: none, Relu, Clip,
/// Sigmoid (a pass after the sums), and a residual then Relu.
pub(super) fn fused_cases(plain: &[f64], z: &[f64]) -> Vec<FusedCase> {
    let relu = |v: f64| v.max(0.0);
    vec![
        ("plain", Fusion::NONE, plain.to_vec()),
        (
            "Relu",
            activation(Activation::Relu),
            plain.iter().map(|&v| relu(v)).collect(),
        ),
        (
            "Clip",
            activation(Activation::Clip(-0.5, 0.75)),
            plain.iter().map(|&v| v.clamp(-0.5, 0.75)).collect(),
        ),
        (
            "Sigmoid",
            activation(Activation::Sigmoid),
            plain.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).collect(),
        ),
        (
            "residual and Relu",
            Fusion {
                residual: true,
                ..activation(Activation::Relu)
            },
            plain.iter().zip(z).map(|(&v, &r)| relu(v + r)).collect(),
        ),
    ]
}

pub(super) fn geo(r: usize) -> Geo {
    Geo {
        strides: vec![1; r],
        dil: vec![1; r],
        pad_begin: vec![0; r],
        group: 1,
    }
}

#[test]
fn conv_1d_2d_3d_plain() {
    check_conv(&[2, 3, 9], &[4, 3, 3], true, &[], &geo(1), &[7]);
    check_conv(&[2, 3, 6, 7], &[5, 3, 3, 2], false, &[], &geo(2), &[4, 6]);
    check_conv(
        &[1, 2, 4, 5, 6],
        &[3, 2, 2, 3, 2],
        true,
        &[],
        &geo(3),
        &[3, 3, 5],
    );
    // 4 spatial dimensions.
    check_conv(
        &[1, 2, 3, 3, 3, 4],
        &[2, 2, 2, 2, 1, 3],
        true,
        &[],
        &geo(4),
        &[2, 2, 3, 2],
    );
}

#[test]
fn conv_strides_dilations_asymmetric_pads() {
    let g = Geo {
        strides: vec![2, 3],
        dil: vec![2, 1],
        pad_begin: vec![1, 0],
        group: 1,
    };
    // H: (10 + 1 + 2 − 5) / 2 + 1 = 5; W: (11 + 0 + 1 − 3) / 3 + 1 = 4.
    check_conv(
        &[2, 3, 10, 11],
        &[4, 3, 3, 3],
        true,
        &[
            ("strides", ints(&[2, 3])),
            ("dilations", ints(&[2, 1])),
            ("pads", ints(&[1, 0, 2, 1])),
        ],
        &g,
        &[5, 4],
    );
}

/// Few input channels (the direct kernel on AVX-512 machines, and on AVX2
/// machines for sums of at least 64 taps; im2col elsewhere): RGB-stem
/// geometry with rows of several register blocks and both tail widths,
/// output channels not a multiple of four or eight, one and four input
/// channels, dilation.
#[test]
fn conv_few_channels_direct() {
    let stem = Geo {
        strides: vec![2, 2],
        dil: vec![1, 1],
        pad_begin: vec![3, 3],
        group: 1,
    };
    // H: (21 + 6 − 7) / 2 + 1 = 11; W: (89 + 6 − 7) / 2 + 1 = 45 (32 + 13).
    let attrs = [("strides", ints(&[2, 2])), ("pads", ints(&[3, 3, 3, 3]))];
    check_conv(
        &[2, 3, 21, 89],
        &[7, 3, 7, 7],
        true,
        &attrs,
        &stem,
        &[11, 45],
    );
    // H: (9 + 6 − 7) / 2 + 1 = 5; W: (117 + 6 − 7) / 2 + 1 = 59 = 32 + 27 (a wide tail).
    check_conv(
        &[1, 3, 9, 117],
        &[5, 3, 7, 7],
        false,
        &attrs,
        &stem,
        &[5, 59],
    );
    // SqueezeNet's stem (3×3, stride 2, unpadded), 13 output channels: on
    // AVX-512 a block of eight and one of five. H: (29 − 3) / 2 + 1 = 14;
    // W: (71 − 3) / 2 + 1 = 35 = 32 + 3.
    let unpadded = Geo {
        pad_begin: vec![0, 0],
        ..stem
    };
    check_conv(
        &[1, 3, 29, 71],
        &[13, 3, 3, 3],
        true,
        &[("strides", ints(&[2, 2]))],
        &unpadded,
        &[14, 35],
    );
    let dilated = Geo {
        strides: vec![1, 1],
        dil: vec![2, 3],
        pad_begin: vec![2, 3],
        group: 1,
    };
    let attrs = [("dilations", ints(&[2, 3])), ("pads", ints(&[2, 3, 2, 3]))];
    check_conv(
        &[1, 1, 17, 40],
        &[9, 1, 3, 3],
        true,
        &attrs,
        &dilated,
        &[17, 40],
    );
    check_conv(
        &[1, 4, 17, 40],
        &[4, 4, 3, 3],
        true,
        &attrs,
        &dilated,
        &[17, 40],
    );
    // 4 × 5 × 5 = 100 taps, dilated: H: 17 + 8 − 8 = 17; W: 40 + 12 − 12 = 40.
    let wide = Geo {
        pad_begin: vec![4, 6],
        ..dilated
    };
    check_conv(
        &[1, 4, 17, 40],
        &[6, 4, 5, 5],
        true,
        &[("dilations", ints(&[2, 3])), ("pads", ints(&[4, 6, 4, 6]))],
        &wide,
        &[17, 40],
    );
}

/// Stride-1 layers with at least 8 input channels (the implicit-GEMM kernel
/// on AVX2 machines): output channels not a multiple of the 16-channel
/// block, windows of 3×3, 5×5 and 1×7, asymmetric pads, dilation, a
/// one-column output and two images.
#[test]
fn conv_stride_one_geometries() {
    let pads = |p: [usize; 4]| ("pads", ints(&p.map(|v| v as i64)));
    let g = |pad: [usize; 2], dil: [usize; 2]| Geo {
        strides: vec![1, 1],
        dil: dil.to_vec(),
        pad_begin: pad.to_vec(),
        group: 1,
    };
    check_conv(
        &[2, 8, 11, 13],
        &[20, 8, 3, 3],
        true,
        &[pads([1, 1, 1, 1])],
        &g([1, 1], [1, 1]),
        &[11, 13],
    );
    check_conv(
        &[1, 9, 14, 10],
        &[33, 9, 5, 5],
        false,
        &[pads([2, 2, 2, 2])],
        &g([2, 2], [1, 1]),
        &[14, 10],
    );
    // H: 12 + 0 + 1 − 1 = 12; W: 9 + 3 + 3 − 6 = 9.
    check_conv(
        &[1, 16, 12, 9],
        &[17, 16, 1, 7],
        true,
        &[pads([0, 3, 1, 3])],
        &g([0, 3], [1, 1]),
        &[13, 9],
    );
    // H: 10 + 2 + 2 − 4 = 10; W: 7 + 1 + 0 − 6 = 2.
    check_conv(
        &[1, 8, 10, 7],
        &[16, 8, 3, 3],
        true,
        &[pads([2, 1, 2, 0]), ("dilations", ints(&[2, 3]))],
        &g([2, 1], [2, 3]),
        &[10, 2],
    );
    // A single output column, unpadded.
    check_conv(
        &[1, 12, 6, 3],
        &[5, 12, 3, 3],
        true,
        &[],
        &g([0, 0], [1, 1]),
        &[4, 1],
    );
}

/// Grouped layers on small planes go through im2col, whose rows are many
/// spans of a few elements, zeroed and copied as whole blocks that run on
/// into the next span: strides 1 and 2, dilation, asymmetric pads, planes
/// narrower than a block.
#[test]
fn conv_grouped_small_planes_short_spans() {
    // (input shape, weight shape, group, strides, dilations, pads)
    type Case = ([usize; 4], [usize; 4], usize, usize, usize, [usize; 4]);
    let cases: [Case; 5] = [
        ([1, 32, 7, 7], [32, 8, 3, 3], 4, 1, 1, [1, 1, 1, 1]),
        ([1, 16, 5, 9], [16, 8, 3, 3], 2, 1, 1, [0, 2, 1, 0]),
        ([2, 16, 9, 9], [32, 8, 3, 3], 2, 2, 1, [1, 1, 1, 1]),
        ([1, 16, 11, 6], [16, 8, 3, 3], 2, 1, 2, [2, 1, 2, 1]),
        ([1, 8, 3, 4], [8, 4, 3, 3], 2, 1, 1, [1, 1, 1, 1]),
    ];
    for (xs, ws, group, stride, dil, pads) in cases {
        let g = Geo {
            strides: vec![stride; 2],
            dil: vec![dil; 2],
            pad_begin: vec![pads[0], pads[1]],
            group,
        };
        let out: Vec<usize> = (0..2)
            .map(|a| (xs[2 + a] + pads[a] + pads[a + 2] - dil * 2 - 1) / stride + 1)
            .collect();
        let attrs = [
            ("group", int(group as i64)),
            ("strides", ints(&[stride as i64; 2])),
            ("dilations", ints(&[dil as i64; 2])),
            ("pads", ints(&pads.map(|p| p as i64))),
        ];
        check_conv(&xs, &ws, true, &attrs, &g, &out);
    }
}

#[test]
fn conv_groups_and_depthwise() {
    let mut g = geo(2);
    g.group = 2;
    g.pad_begin = vec![1, 1];
    check_conv(
        &[2, 4, 5, 6],
        &[6, 2, 3, 3],
        true,
        &[("group", int(2)), ("pads", ints(&[1, 1, 1, 1]))],
        &g,
        &[5, 6],
    );
    // Depthwise, with and without a channel multiplier, strided and padded.
    let mut g = geo(2);
    g.group = 4;
    g.strides = vec![2, 2];
    g.pad_begin = vec![1, 1];
    let attrs = [
        ("group", int(4)),
        ("strides", ints(&[2, 2])),
        ("pads", ints(&[1, 1, 1, 1])),
    ];
    check_conv(&[2, 4, 7, 8], &[4, 1, 3, 3], true, &attrs, &g, &[4, 4]);
    check_conv(&[1, 4, 7, 8], &[8, 1, 3, 3], false, &attrs, &g, &[4, 4]);
    // Depthwise stride 2 on odd widths, padded on one side: the phase rows'
    // stride-2 gathers end without an odd partner.
    let mut g = geo(2);
    g.group = 2;
    g.strides = vec![2, 2];
    g.pad_begin = vec![0, 1];
    let attrs = [
        ("group", int(2)),
        ("strides", ints(&[2, 2])),
        ("pads", ints(&[0, 1, 1, 0])),
    ];
    check_conv(&[1, 2, 9, 11], &[2, 1, 3, 3], true, &attrs, &g, &[4, 5]);
    check_conv(&[1, 2, 9, 11], &[4, 1, 3, 3], false, &attrs, &g, &[4, 5]);
    // Depthwise 2-D: dilated, asymmetric padding, different strides per dim.
    let mut g = geo(2);
    g.group = 3;
    g.strides = vec![2, 1];
    g.dil = vec![2, 1];
    g.pad_begin = vec![2, 0];
    let attrs = [
        ("group", int(3)),
        ("strides", ints(&[2, 1])),
        ("dilations", ints(&[2, 1])),
        ("pads", ints(&[2, 0, 1, 1])),
    ];
    check_conv(&[1, 3, 9, 8], &[3, 1, 3, 2], true, &attrs, &g, &[4, 8]);
    // Depthwise 2-D with more taps (9×9) than one pass of register sums
    // takes: a second pass resumes from the first one's stores, in chunks
    // that must not overlap (rows of 13 and of 40).
    let mut g = geo(2);
    g.group = 2;
    g.pad_begin = vec![4, 4];
    let attrs = [("group", int(2)), ("pads", ints(&[4, 4, 4, 4]))];
    check_conv(&[1, 2, 12, 13], &[2, 1, 9, 9], true, &attrs, &g, &[12, 13]);
    check_conv(&[1, 2, 5, 40], &[2, 1, 9, 9], true, &attrs, &g, &[5, 40]);
    // Depthwise 3-D (the any-rank path).
    let mut g = geo(3);
    g.group = 2;
    g.pad_begin = vec![1, 1, 1];
    let attrs = [("group", int(2)), ("pads", ints(&[1, 1, 1, 1, 1, 1]))];
    check_conv(
        &[1, 2, 4, 5, 3],
        &[2, 1, 3, 3, 3],
        true,
        &attrs,
        &g,
        &[4, 5, 3],
    );
    // Depthwise 1-D with dilation.
    let mut g = geo(1);
    g.group = 3;
    g.dil = vec![2];
    check_conv(
        &[1, 3, 10],
        &[3, 1, 3],
        true,
        &[("group", int(3)), ("dilations", ints(&[2]))],
        &g,
        &[6],
    );
}

/// A fused residual (input 3, `Fusion::residual`) gives the bits of the
/// unfused Conv → Add → Relu on every kernel path; a wrong residual is a
/// typed error.
#[test]
fn conv_fused_residual_matches_conv_then_add() {
    type Case<'a> = (&'a str, Vec<usize>, Vec<usize>, Vec<(&'a str, Attribute)>);
    let pad1 = || ("pads", ints(&[1, 1, 1, 1]));
    let cases: Vec<Case> = vec![
        ("pointwise", vec![2, 8, 9, 11], vec![12, 8, 1, 1], vec![]),
        (
            "winograd",
            vec![1, 16, 20, 20],
            vec![16, 16, 3, 3],
            vec![pad1()],
        ),
        (
            "im2col",
            vec![1, 8, 15, 15],
            vec![8, 8, 3, 3],
            vec![pad1(), ("strides", ints(&[2, 2]))],
        ),
        (
            // Strided, so that no stride-1 kernel takes it.
            "im2col in chunks",
            vec![1, 16, 259, 259],
            vec![4, 16, 3, 3],
            vec![pad1(), ("strides", ints(&[2, 2]))],
        ),
        (
            "stride 1, few output channels",
            vec![1, 12, 10, 9],
            vec![20, 12, 3, 3],
            vec![pad1()],
        ),
        (
            "depthwise",
            vec![1, 8, 12, 12],
            vec![8, 1, 3, 3],
            vec![pad1(), ("group", int(8))],
        ),
        (
            "few channels",
            vec![1, 3, 20, 20],
            vec![8, 3, 3, 3],
            vec![pad1()],
        ),
        (
            "patches (kernel = stride)",
            vec![1, 3, 32, 16],
            vec![12, 3, 8, 8],
            vec![("strides", ints(&[8, 8]))],
        ),
    ];
    for (what, xs, ws, attrs) in cases {
        let x = t32(&xs, &rand64(xs.iter().product(), 31));
        let w = t32(&ws, &rand64(ws.iter().product(), 32));
        let b = t32(&[ws[0]], &rand64(ws[0], 33));
        let plain = run("Conv", 13, &attrs, &[Some(&x), Some(&w), Some(&b)]).unwrap();
        let shape = plain[0].shape().to_vec();
        let zv: Vec<f32> = rand_vec(shape.iter().product(), 34);
        let z = Tensor::from_vec(&shape, zv.clone()).unwrap();
        let plain = plain[0].array::<f32>().unwrap();
        let want: Vec<u64> = plain
            .iter()
            .zip(&zv)
            .map(|(&y, &r)| u64::from((y + r).max(0.0).to_bits()))
            .collect();
        assert!(
            want.contains(&0) && want.iter().any(|&v| v != 0),
            "{what}: Relu exercised"
        );
        let fused = Fusion {
            residual: true,
            ..activation(Activation::Relu)
        };
        for threads in [1, 2] {
            let inputs = [Some(&x), Some(&w), Some(&b), Some(&z)];
            let y = with_threads(threads, || {
                run_fused("Conv", 13, &attrs, &fused, &inputs).unwrap()
            });
            assert_eq!(bits(&y[0]), want, "{what}, {threads} threads");
        }
        // The residual must have the output's shape and type.
        let short =
            Tensor::from_vec(&[shape[0], shape[1], 1], vec![0f32; shape[0] * shape[1]]).unwrap();
        let err = run_fused(
            "Conv",
            13,
            &attrs,
            &fused,
            &[Some(&x), Some(&w), Some(&b), Some(&short)],
        );
        assert!(err.unwrap_err().to_string().contains("residual"), "{what}");
        assert!(run_fused("Conv", 13, &attrs, &fused, &[Some(&x), Some(&w), Some(&b)]).is_err());
    }
}

#[test]
fn conv_large_plane_in_chunks() {
    // 144 column rows × 16900 positions exceed one im2col chunk, so the
    // plane is done in chunks (7232 + 7232 + 2436 columns; 288 rows and
    // five chunks when grouped). Strided, so that no stride-1 kernel takes
    // it.
    let mut g = geo(2);
    g.pad_begin = vec![1, 1];
    g.strides = vec![2, 2];
    let attrs = |group| {
        let mut a = vec![("pads", ints(&[1, 1, 1, 1])), ("strides", ints(&[2, 2]))];
        a.push(("group", int(group)));
        a
    };
    let (xs, out) = ([1, 16, 259, 259], [130, 130]);
    check_conv(&xs, &[4, 16, 3, 3], true, &attrs(1), &g, &out);
    g.group = 2;
    let xs = [1, 32, 259, 259];
    check_conv(&xs, &[6, 16, 3, 3], true, &attrs(2), &g, &out);
    // 1-D, 48 column rows: chunks of 21824 columns and a last one of 5,
    // narrower than the panel GEMM's strips, on the GEMM engine.
    let g = geo(1);
    check_conv(&[1, 16, 21831], &[5, 16, 3], true, &[], &g, &[21829]);
}

#[test]
fn conv_pointwise_fast_path() {
    check_conv(&[2, 8, 5, 5], &[6, 8, 1, 1], true, &[], &geo(2), &[5, 5]);
    let mut g = geo(2);
    g.group = 2;
    check_conv(
        &[2, 8, 3, 4],
        &[6, 4, 1, 1],
        false,
        &[("group", int(2))],
        &g,
        &[3, 4],
    );
    // 1×1 but strided: goes through im2col.
    let mut g = geo(2);
    g.strides = vec![2, 2];
    check_conv(
        &[1, 3, 5, 5],
        &[2, 3, 1, 1],
        true,
        &[("strides", ints(&[2, 2]))],
        &g,
        &[3, 3],
    );
}

#[test]
fn conv_auto_pad_modes() {
    // in 7, kernel 3, stride 2: SAME output 4, total pad (4−1)·2 + 3 − 7 = 2.
    // in 6, kernel 2, stride 2: SAME output 3, total pad 0+... = 4 + 2 − 6 = 0.
    // in 5, kernel 4, stride 1: SAME output 5, total pad 4 + 4 − 5 = 3 (odd).
    let xs = [1, 2, 7, 5];
    let ws = [3, 2, 3, 4];
    let strides = ints(&[2, 1]);
    let mut g = geo(2);
    g.strides = vec![2, 1];
    g.pad_begin = vec![1, 1];
    check_conv(
        &xs,
        &ws,
        true,
        &[
            ("auto_pad", string("SAME_UPPER")),
            ("strides", strides.clone()),
        ],
        &g,
        &[4, 5],
    );
    g.pad_begin = vec![1, 2];
    check_conv(
        &xs,
        &ws,
        true,
        &[
            ("auto_pad", string("SAME_LOWER")),
            ("strides", strides.clone()),
        ],
        &g,
        &[4, 5],
    );
    g.pad_begin = vec![0, 0];
    // VALID ignores pads.
    check_conv(
        &xs,
        &ws,
        false,
        &[
            ("auto_pad", string("VALID")),
            ("strides", strides.clone()),
            ("pads", ints(&[3, 3, 3, 3])),
        ],
        &g,
        &[3, 2],
    );
    check_conv(
        &xs,
        &ws,
        false,
        &[("auto_pad", string("NOTSET")), ("strides", strides)],
        &g,
        &[3, 2],
    );
}

#[test]
fn conv_kernel_shape_attribute() {
    check_conv(
        &[1, 1, 4, 4],
        &[1, 1, 2, 3],
        true,
        &[("kernel_shape", ints(&[2, 3]))],
        &geo(2),
        &[3, 2],
    );
    let x = t32(&[1, 1, 4, 4], &[0.0; 16]);
    let w = t32(&[1, 1, 2, 3], &[0.0; 6]);
    let e = run(
        "Conv",
        11,
        &[("kernel_shape", ints(&[3, 3]))],
        &[Some(&x), Some(&w)],
    );
    assert!(e.unwrap_err().to_string().contains("kernel_shape"));
}

/// The 5×5 and 7×5 examples of the ONNX Conv specification.
#[test]
fn conv_onnx_spec_examples() {
    let x5: Vec<f64> = (0..25).map(f64::from).collect();
    let x75: Vec<f64> = (0..35).map(f64::from).collect();
    let w = t32(&[1, 1, 3, 3], &[1.0; 9]);
    let case =
        |xs: &[usize], x: &[f64], attrs: &[(&str, Attribute)], want: &[f64], oshape: &[usize]| {
            let xt = t32(xs, x);
            let y = run("Conv", 11, attrs, &[Some(&xt), Some(&w)]).unwrap();
            assert_eq!(y[0].shape(), oshape);
            assert_tensor_close(&y[0], want, 0.0, 0.0);
        };
    case(
        &[1, 1, 5, 5],
        &x5,
        &[
            ("kernel_shape", ints(&[3, 3])),
            ("pads", ints(&[1, 1, 1, 1])),
        ],
        &[
            12., 21., 27., 33., 24., 33., 54., 63., 72., 51., 63., 99., 108., 117., 81., 93., 144.,
            153., 162., 111., 72., 111., 117., 123., 84.,
        ],
        &[1, 1, 5, 5],
    );
    case(
        &[1, 1, 5, 5],
        &x5,
        &[
            ("kernel_shape", ints(&[3, 3])),
            ("pads", ints(&[0, 0, 0, 0])),
        ],
        &[54., 63., 72., 99., 108., 117., 144., 153., 162.],
        &[1, 1, 3, 3],
    );
    case(
        &[1, 1, 7, 5],
        &x75,
        &[("strides", ints(&[2, 2])), ("pads", ints(&[1, 1, 1, 1]))],
        &[
            12., 27., 24., 63., 108., 81., 123., 198., 141., 112., 177., 124.,
        ],
        &[1, 1, 4, 3],
    );
    case(
        &[1, 1, 7, 5],
        &x75,
        &[("strides", ints(&[2, 2]))],
        &[54., 72., 144., 162., 234., 252.],
        &[1, 1, 3, 2],
    );
    case(
        &[1, 1, 7, 5],
        &x75,
        &[("strides", ints(&[2, 2])), ("pads", ints(&[1, 0, 1, 0]))],
        &[21., 33., 99., 117., 189., 207., 171., 183.],
        &[1, 1, 4, 2],
    );
}

/// Depthwise 3×3 planes whose rows and row counts are not multiples of
/// the register chunks (32 columns; 2 rows of 16; 4 rows of 8; a row of 8):
/// the last chunks are pulled back over outputs already stored.
#[test]
fn depthwise_chunks_cover_ragged_planes() {
    let mut g = geo(2);
    g.group = 3;
    g.pad_begin = vec![1, 1];
    let attrs = [("group", int(3)), ("pads", ints(&[1, 1, 1, 1]))];
    for (h, w) in [(3, 37), (5, 20), (7, 14), (3, 5), (1, 70), (9, 8)] {
        check_conv(&[1, 3, h, w], &[3, 1, 3, 3], true, &attrs, &g, &[h, w]);
    }
}

#[test]
fn conv_fused_activations() {
    let x = rand64(2 * 3 * 6 * 6, 5);
    let w = rand64(4 * 3 * 9, 6);
    let b = rand64(4, 7);
    let (xt, wt, bt) = (
        t32(&[2, 3, 6, 6], &x),
        t32(&[4, 3, 3, 3], &w),
        t32(&[4], &b),
    );
    let g = Geo {
        pad_begin: vec![1, 1],
        ..geo(2)
    };
    let plain = ref_conv(&x, &[2, 3, 6, 6], &w, &[4, 3, 3, 3], Some(&b), &g, &[6, 6]);
    let pads = ("pads", ints(&[1, 1, 1, 1]));
    let y = run_fused(
        "Conv",
        13,
        std::slice::from_ref(&pads),
        &activation(Activation::Relu),
        &[Some(&xt), Some(&wt), Some(&bt)],
    )
    .unwrap();
    let relu: Vec<f64> = plain.iter().map(|v| v.max(0.0)).collect();
    assert_tensor_close(&y[0], &relu, 1e-4, 1e-4);
    let y = run_fused(
        "Conv",
        13,
        &[pads],
        &activation(Activation::Clip(-0.5, 0.25)),
        &[Some(&xt), Some(&wt), Some(&bt)],
    )
    .unwrap();
    let clip: Vec<f64> = plain.iter().map(|v| v.clamp(-0.5, 0.25)).collect();
    assert_tensor_close(&y[0], &clip, 1e-4, 1e-4);
    // Three input channels take the direct kernel on AVX-512, which clamps
    // Relu and Clip in registers; other activations run as a pass.
    let y = run_fused(
        "Conv",
        13,
        &[("pads", ints(&[1, 1, 1, 1]))],
        &activation(Activation::LeakyRelu(0.125)),
        &[Some(&xt), Some(&wt), Some(&bt)],
    )
    .unwrap();
    let leaky: Vec<f64> = plain
        .iter()
        .map(|&v| if v < 0.0 { v * 0.125 } else { v })
        .collect();
    assert_tensor_close(&y[0], &leaky, 1e-4, 1e-4);
    // Depthwise and pointwise paths apply it too.
    let w1 = rand64(3 * 9, 8);
    let wt1 = t32(&[3, 1, 3, 3], &w1);
    let xs1 = [2, 3, 6, 6];
    let y = run_fused(
        "Conv",
        13,
        &[("group", int(3))],
        &activation(Activation::Relu),
        &[Some(&xt), Some(&wt1)],
    )
    .unwrap();
    let g1 = Geo { group: 3, ..geo(2) };
    let want: Vec<f64> = ref_conv(&x, &xs1, &w1, &[3, 1, 3, 3], None, &g1, &[4, 4])
        .iter()
        .map(|v| v.max(0.0))
        .collect();
    assert_tensor_close(&y[0], &want, 1e-4, 1e-4);
    let w2 = rand64(5 * 3, 9);
    let wt2 = t32(&[5, 3, 1, 1], &w2);
    let y = run_fused(
        "Conv",
        13,
        &[],
        &activation(Activation::Relu),
        &[Some(&xt), Some(&wt2)],
    )
    .unwrap();
    let want: Vec<f64> = ref_conv(&x, &xs1, &w2, &[5, 3, 1, 1], None, &geo(2), &[6, 6])
        .iter()
        .map(|v| v.max(0.0))
        .collect();
    assert_tensor_close(&y[0], &want, 1e-4, 1e-4);
    // So does the implicit-GEMM path (10 input channels, 3×3, stride 1),
    // which applies them to each block before storing it: 21 outputs end
    // in a partial block of channels; with and without a bias.
    let (xs3, ws3) = ([1, 10, 7, 9], [21, 10, 3, 3]);
    let x3 = rand64(xs3.iter().product(), 10);
    let w3 = rand64(ws3.iter().product(), 11);
    let b3 = rand64(21, 12);
    let (xt3, wt3, bt3) = (t32(&xs3, &x3), t32(&ws3, &w3), t32(&[21], &b3));
    let pads = ("pads", ints(&[1, 0, 1, 2]));
    let g3 = Geo {
        pad_begin: vec![1, 0],
        ..geo(2)
    };
    for bias in [true, false] {
        let bb = bias.then_some(&b3[..]);
        let plain = ref_conv(&x3, &xs3, &w3, &ws3, bb, &g3, &[7, 9]);
        let clip = activation(Activation::Clip(-0.5, 0.25));
        let inputs = [Some(&xt3), Some(&wt3), bias.then_some(&bt3)];
        let y = run_fused("Conv", 13, std::slice::from_ref(&pads), &clip, &inputs).unwrap();
        let clip: Vec<f64> = plain.iter().map(|v| v.clamp(-0.5, 0.25)).collect();
        assert_tensor_close(&y[0], &clip, 1e-4, 1e-4);
    }
}

#[test]
fn conv_f64_and_f16() {
    let xs = [1, 2, 5, 5];
    let ws = [3, 2, 3, 3];
    let x = rand64(50, 11);
    let w = rand64(54, 12);
    let b = rand64(3, 13);
    let g = Geo {
        strides: vec![2, 2],
        pad_begin: vec![1, 1],
        ..geo(2)
    };
    let attrs = [("strides", ints(&[2, 2])), ("pads", ints(&[1, 1, 1, 1]))];
    let want = ref_conv(&x, &xs, &w, &ws, Some(&b), &g, &[3, 3]);
    let (x64, w64, b64) = (
        Tensor::from_vec(&xs, x.clone()).unwrap(),
        Tensor::from_vec(&ws, w.clone()).unwrap(),
        Tensor::from_vec(&[3], b.clone()).unwrap(),
    );
    let y = run("Conv", 13, &attrs, &[Some(&x64), Some(&w64), Some(&b64)]).unwrap();
    assert!(matches!(y[0], Tensor::F64(_)));
    assert_tensor_close(&y[0], &want, 1e-12, 1e-12);
    let h = |v: &[f64], s: &[usize]| {
        Tensor::from_vec(s, v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>()).unwrap()
    };
    let y = run(
        "Conv",
        13,
        &attrs,
        &[Some(&h(&x, &xs)), Some(&h(&w, &ws)), Some(&h(&b, &[3]))],
    )
    .unwrap();
    assert!(matches!(y[0], Tensor::F16(_)));
    assert_tensor_close(&y[0], &want, 1e-2, 2e-2);
}

#[test]
fn conv_bits_identical_across_thread_counts() {
    // Large enough to split into many tasks on every path.
    type Case<'a> = (Vec<usize>, Vec<usize>, Vec<(&'a str, Attribute)>, Fusion);
    let cases: Vec<Case> = vec![
        (
            vec![2, 16, 40, 40],
            vec![32, 16, 3, 3],
            vec![("pads", ints(&[1, 1, 1, 1]))],
            Fusion::NONE,
        ),
        (
            vec![2, 32, 40, 40],
            vec![32, 1, 3, 3],
            vec![("group", int(32)), ("pads", ints(&[1, 1, 1, 1]))],
            Fusion::NONE,
        ),
        (
            vec![2, 64, 30, 30],
            vec![64, 64, 1, 1],
            vec![],
            activation(Activation::Relu),
        ),
        // k = 1152 spans several reduction blocks of the GEMM kernel.
        (
            vec![1, 128, 28, 28],
            vec![96, 128, 3, 3],
            vec![("pads", ints(&[1, 1, 1, 1]))],
            Fusion::NONE,
        ),
        // 40 output channels: two full 16-channel blocks and a tail.
        (
            vec![1, 24, 19, 23],
            vec![40, 24, 3, 3],
            vec![("pads", ints(&[1, 1, 1, 1]))],
            Fusion::NONE,
        ),
        // RGB stem: few input channels, 7×7, stride 2.
        (
            vec![1, 3, 64, 64],
            vec![14, 3, 7, 7],
            vec![("strides", ints(&[2, 2])), ("pads", ints(&[3, 3, 3, 3]))],
            Fusion::NONE,
        ),
        // Patch embedding: kernel = stride, no padding.
        (
            vec![2, 3, 64, 48],
            vec![40, 3, 8, 8],
            vec![("strides", ints(&[8, 8]))],
            Fusion::NONE,
        ),
        // Strided, dilated depthwise.
        (
            vec![1, 24, 33, 31],
            vec![24, 1, 3, 3],
            vec![
                ("group", int(24)),
                ("strides", ints(&[2, 2])),
                ("dilations", ints(&[2, 1])),
                ("pads", ints(&[2, 1, 2, 1])),
            ],
            Fusion::NONE,
        ),
        // Channel-blocked depthwise (MobileNet v3's 5×5 stride 2), 72
        // channels: tasks cut on whole blocks of lanes.
        (
            vec![1, 72, 56, 56],
            vec![72, 1, 5, 5],
            vec![
                ("group", int(72)),
                ("strides", ints(&[2, 2])),
                ("pads", ints(&[2, 2, 2, 2])),
            ],
            Fusion::NONE,
        ),
    ];
    for (xs, ws, attrs, fusion) in cases {
        let x = t32(&xs, &rand64(xs.iter().product(), 21));
        let w = t32(&ws, &rand64(ws.iter().product(), 22));
        let b = t32(&[ws[0]], &rand64(ws[0], 23));
        let op = build_fused("Conv", 13, &attrs, &fusion, &[], 3, 1).unwrap();
        let one = with_threads(1, || op.run(&[Some(&x), Some(&w), Some(&b)]).unwrap());
        for threads in [2, 3, 5] {
            let other = with_threads(threads, || op.run(&[Some(&x), Some(&w), Some(&b)]).unwrap());
            assert_eq!(bits(&one[0]), bits(&other[0]), "{xs:?} {ws:?} {threads}");
        }
    }
}

#[test]
fn conv_errors() {
    let x = t32(&[1, 4, 5, 5], &[0.0; 100]);
    let w = t32(&[2, 3, 3, 3], &[0.0; 54]);
    let err = |attrs: &[(&str, Attribute)], inputs: &[Option<&Tensor>]| {
        run("Conv", 13, attrs, inputs).unwrap_err().to_string()
    };
    // C != W.shape[1]·group.
    assert!(err(&[], &[Some(&x), Some(&w)]).contains("channels"));
    // group does not divide M.
    let w2 = t32(&[3, 2, 3, 3], &[0.0; 54]);
    assert!(err(&[("group", int(2))], &[Some(&x), Some(&w2)]).contains("divide"));
    // Wrong ranks.
    let w3 = t32(&[2, 4, 3], &[0.0; 24]);
    assert!(err(&[], &[Some(&x), Some(&w3)]).contains("rank"));
    let x2 = t32(&[4, 5], &[0.0; 20]);
    assert!(err(&[], &[Some(&x2), Some(&w3)]).contains("rank"));
    // Bad pads length, zero or negative strides, bad group, bad auto_pad.
    let w4 = t32(&[2, 4, 3, 3], &[0.0; 72]);
    assert!(err(&[("pads", ints(&[1, 1]))], &[Some(&x), Some(&w4)]).contains("pads"));
    assert!(err(&[("strides", ints(&[0, 1]))], &[Some(&x), Some(&w4)]).contains("strides"));
    assert!(err(&[("pads", ints(&[-1, 0, 0, 0]))], &[Some(&x), Some(&w4)]).contains("pads"));
    assert!(err(&[("group", int(0))], &[Some(&x), Some(&w4)]).contains("group"));
    assert!(err(&[("auto_pad", string("SAME"))], &[Some(&x), Some(&w4)]).contains("auto_pad"));
    // Kernel larger than the padded input.
    let w5 = t32(&[2, 4, 7, 1], &[0.0; 56]);
    assert!(err(&[], &[Some(&x), Some(&w5)]).contains("larger"));
    // Bias of the wrong length, types that differ, integer input.
    let b = t32(&[3], &[0.0; 3]);
    assert!(err(&[], &[Some(&x), Some(&w4), Some(&b)]).contains("B"));
    let w64 = Tensor::from_vec(&[2, 4, 3, 3], vec![0.0f64; 72]).unwrap();
    assert!(err(&[], &[Some(&x), Some(&w64)]).contains("type"));
    let xi = Tensor::from_vec(&[1, 1, 2, 2], vec![1i32; 4]).unwrap();
    assert!(err(&[], &[Some(&xi), Some(&xi)]).contains("floating"));
    // Hostile sizes: huge dilations are an error, not a panic or overflow.
    assert!(err(
        &[("dilations", ints(&[i64::MAX, 1]))],
        &[Some(&x), Some(&w4)]
    )
    .contains("Conv"));
    // Window attributes are bounded, so window arithmetic cannot overflow.
    let w6 = t32(&[2, 4, 5, 1], &[0.0; 40]);
    assert!(err(
        &[("dilations", ints(&[i64::MAX, 1]))],
        &[Some(&x), Some(&w6)]
    )
    .contains("1..=2147483648"));
    // Missing W.
    assert!(err(&[], &[Some(&x)]).contains("missing"));
}

#[test]
fn conv_flops_and_infer() {
    use crate::ir::{Fact, InferInput};
    use crate::tensor::DType;
    let op = build_op("Conv", 13, &[("pads", ints(&[1, 1, 1, 1]))], &[], 3, 1).unwrap();
    let (xf, wf, bf) = (
        Fact::new(DType::F32, vec![2, 3, 8, 8]),
        Fact::new(DType::F32, vec![4, 3, 3, 3]),
        Fact::new(DType::F32, vec![4]),
    );
    let inp = |f| InferInput {
        fact: Some(f),
        value: None,
    };
    let out = op.infer(&[inp(&xf), inp(&wf), inp(&bf)]).unwrap();
    assert_eq!(out[0], Fact::new(DType::F32, vec![2, 4, 8, 8]));
    let flops = op.flops(&[Some(&xf), Some(&wf), Some(&bf)], &out);
    assert_eq!(flops, 2 * 2 * 4 * 64 * 27 + 2 * 4 * 64);
    // Unknown W shape: unknown output shape.
    let wu = Fact::unknown_shape(DType::F32);
    let out = op.infer(&[inp(&xf), inp(&wu)]).unwrap();
    assert_eq!(out[0].shape, None);
    let _ = assert_close;
}

#[test]
fn conv_empty_and_bf16() {
    // Empty batch: empty output of the right shape.
    let x = t32(&[0, 2, 4, 4], &[]);
    let w = t32(&[3, 2, 3, 3], &[0.5; 54]);
    let y = run("Conv", 13, &[], &[Some(&x), Some(&w)]).unwrap();
    assert_eq!(y[0].shape(), &[0, 3, 2, 2]);
    let y = run(
        "ConvTranspose",
        13,
        &[],
        &[Some(&x), Some(&t32(&[2, 3, 3, 3], &[0.5; 54]))],
    )
    .unwrap();
    assert_eq!(y[0].shape(), &[0, 3, 6, 6]);
    // No input channels: the output is the bias.
    let x = t32(&[1, 0, 3, 3], &[]);
    let w = t32(&[2, 0, 2, 2], &[]);
    let b = t32(&[2], &[1.5, -2.0]);
    let y = run("Conv", 13, &[], &[Some(&x), Some(&w), Some(&b)]).unwrap();
    assert_tensor_close(
        &y[0],
        &[1.5, 1.5, 1.5, 1.5, -2.0, -2.0, -2.0, -2.0],
        0.0,
        0.0,
    );
    // bfloat16 goes through f32 like float16.
    let xs = [1, 2, 4, 4];
    let ws = [2, 2, 3, 3];
    let xv = rand64(32, 51);
    let wv = rand64(36, 52);
    let bf = |v: &[f64], s: &[usize]| {
        Tensor::from_vec(
            s,
            v.iter()
                .map(|&x| half::bf16::from_f64(x))
                .collect::<Vec<_>>(),
        )
        .unwrap()
    };
    let y = run("Conv", 22, &[], &[Some(&bf(&xv, &xs)), Some(&bf(&wv, &ws))]).unwrap();
    assert!(matches!(y[0], Tensor::BF16(_)));
    let want = ref_conv(&xv, &xs, &wv, &ws, None, &geo(2), &[2, 2]);
    assert_tensor_close(&y[0], &want, 3e-2, 5e-2);
}
