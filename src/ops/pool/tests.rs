//! Unit tests of the pooling family: a naive N-D reference over random
//! geometries, the ONNX spec examples, the global pools, argmax indices,
//! MaxUnpool, error paths and thread-count independence.

use crate::ir::attributes::{Attribute, Attributes};
use crate::ir::{BuildContext, Operator};
use crate::ops::unary::kernel::tests::{build_op, run_op};
use crate::tensor::Tensor;
use half::f16;

fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

fn tensor(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, v).unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

/// Deterministic pseudo-random values in [-1, 1).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Geometry of one reference case.
struct Geo {
    k: Vec<usize>,
    s: Vec<usize>,
    d: Vec<usize>,
    pads: Vec<usize>,
    ceil: bool,
}

/// Naive pooling of one plane set: kind 0 max, 1 avg, 2 avg incl. pad, 3 Lp(p=3).
fn reference(x: &[f32], shape: &[usize], g: &Geo, kind: u8) -> (Vec<usize>, Vec<f64>) {
    let r = shape.len() - 2;
    let mut out = shape[..2].to_vec();
    for i in 0..r {
        let dk = (g.k[i] - 1) * g.d[i] + 1;
        let span = shape[i + 2] + g.pads[i] + g.pads[i + r] - dk;
        let mut o = if g.ceil {
            span.div_ceil(g.s[i])
        } else {
            span / g.s[i]
        } + 1;
        if g.ceil && (o - 1) * g.s[i] >= shape[i + 2] + g.pads[i] {
            o -= 1;
        }
        out.push(o);
    }
    let planes = shape[0] * shape[1];
    let in_len: usize = shape[2..].iter().product();
    let out_len: usize = out[2..].iter().product();
    let klen: usize = g.k.iter().product();
    let mut y = Vec::new();
    for p in 0..planes {
        for oi in 0..out_len {
            let mut oc = vec![0; r];
            let mut rem = oi;
            for i in (0..r).rev() {
                oc[i] = rem % out[i + 2];
                rem /= out[i + 2];
            }
            let (mut mx, mut sum, mut n, mut np) = (f64::NEG_INFINITY, 0.0, 0, 0);
            for ki in 0..klen {
                let mut kc = vec![0; r];
                let mut rem = ki;
                for i in (0..r).rev() {
                    kc[i] = rem % g.k[i];
                    rem /= g.k[i];
                }
                let (mut inside, mut in_padded, mut flat) = (true, true, 0);
                for i in 0..r {
                    let pos = (oc[i] * g.s[i] + kc[i] * g.d[i]) as isize - g.pads[i] as isize;
                    if pos < 0 || pos >= shape[i + 2] as isize {
                        inside = false;
                    }
                    if pos >= (shape[i + 2] + g.pads[i + r]) as isize {
                        in_padded = false;
                    }
                    flat = flat * shape[i + 2] + pos.max(0) as usize;
                }
                if in_padded {
                    np += 1;
                }
                if inside {
                    let v = x[p * in_len + flat] as f64;
                    mx = mx.max(v);
                    n += 1;
                    sum += if kind == 3 { v.abs().powi(3) } else { v };
                }
            }
            y.push(match kind {
                0 => mx,
                1 => sum / n as f64,
                2 => sum / np as f64,
                _ => sum.powf(1.0 / 3.0),
            });
        }
    }
    (out, y)
}

fn window_attrs(g: &Geo) -> Vec<(&'static str, Attribute)> {
    let c = |v: &[usize]| ints(&v.iter().map(|&x| x as i64).collect::<Vec<_>>());
    vec![
        ("kernel_shape", c(&g.k)),
        ("strides", c(&g.s)),
        ("dilations", c(&g.d)),
        ("pads", c(&g.pads)),
        ("ceil_mode", Attribute::Int(g.ceil as i64)),
    ]
}

/// Windows that keep the plane's size (stride 1, pads adding up to the
/// kernel less one: the whole-plane MaxPool path), with the pads split
/// evenly, unevenly and all on one side, kernels of one to seven taps, and
/// kernels taller or wider than the plane.
fn size_keeping_cases() -> Vec<(Vec<usize>, Geo)> {
    let cases: [([usize; 4], [usize; 2], [usize; 4]); 7] = [
        ([2, 3, 7, 9], [3, 3], [1, 1, 1, 1]),
        ([1, 1, 5, 24], [3, 3], [1, 1, 1, 1]),
        ([1, 2, 6, 5], [2, 4], [0, 1, 1, 2]),
        ([1, 2, 4, 3], [5, 3], [4, 0, 0, 2]),
        ([1, 3, 3, 2], [5, 4], [2, 1, 2, 2]),
        ([1, 1, 6, 6], [7, 2], [3, 1, 3, 0]),
        ([1, 2, 4, 4], [1, 1], [0, 0, 0, 0]),
    ];
    cases
        .iter()
        .map(|(shape, k, pads)| {
            let geo = Geo {
                k: k.to_vec(),
                s: vec![1, 1],
                d: vec![1, 1],
                pads: pads.to_vec(),
                ceil: false,
            };
            (shape.to_vec(), geo)
        })
        .collect()
}

/// 3×3 windows at stride 2 (the stride-2 paths of the 2-D max kernel and,
/// on AVX-512, the kernel of `max_s2`): rows wide enough for the 2-D
/// kernel's vectorised loop and a remainder; for `max_s2`, two blocks of 16
/// outputs and one more with padding at both ends, two columns of padding
/// on one side only, rows too narrow for a window inside them, and planes
/// with no input rows; pads of none, one and two, partial last windows
/// (ceil mode); SqueezeNet's stem pool (111² → 55², unpadded: blocks whose
/// loads and stores need no mask, rows taken in pairs, then an odd one).
fn stride_two_cases() -> Vec<(Vec<usize>, Geo)> {
    let cases: [([usize; 4], [usize; 4], bool); 8] = [
        ([1, 2, 111, 111], [0, 0, 0, 0], false),
        ([2, 2, 9, 8], [1, 1, 1, 1], false),
        ([1, 3, 13, 47], [0, 0, 0, 0], false),
        ([1, 2, 9, 40], [1, 1, 1, 1], true),
        ([1, 3, 11, 70], [1, 1, 1, 1], false),
        ([1, 2, 10, 36], [2, 0, 0, 2], true),
        ([2, 1, 5, 2], [1, 1, 1, 1], true),
        // No input rows: one output row of windows over padding alone.
        ([1, 2, 0, 5], [2, 1, 2, 1], false),
    ];
    cases
        .iter()
        .map(|&(shape, pads, ceil)| {
            let geo = Geo {
                k: vec![3, 3],
                s: vec![2, 2],
                d: vec![1, 1],
                pads: pads.to_vec(),
                ceil,
            };
            (shape.to_vec(), geo)
        })
        .collect()
}

#[test]
fn random_geometries_match_reference() {
    let mut cases: Vec<(Vec<usize>, Geo)> = vec![
        (
            vec![2, 3, 11],
            Geo {
                k: vec![3],
                s: vec![2],
                d: vec![1],
                pads: vec![1, 1],
                ceil: false,
            },
        ),
        (
            vec![1, 2, 10],
            Geo {
                k: vec![2],
                s: vec![3],
                d: vec![2],
                pads: vec![0, 1],
                ceil: true,
            },
        ),
        (
            vec![1, 3, 7, 9],
            Geo {
                k: vec![2, 3],
                s: vec![2, 1],
                d: vec![2, 1],
                pads: vec![0, 2, 1, 0],
                ceil: true,
            },
        ),
        (
            // The fused three-tap, three-row path of the 2-D max kernel.
            vec![1, 2, 8, 9],
            Geo {
                k: vec![3, 3],
                s: vec![1, 1],
                d: vec![1, 1],
                pads: vec![1, 1, 1, 1],
                ceil: false,
            },
        ),
        (
            // More than three rows per window, dilated taps.
            vec![1, 1, 9, 10],
            Geo {
                k: vec![4, 3],
                s: vec![1, 1],
                d: vec![1, 2],
                pads: vec![2, 1, 1, 2],
                ceil: false,
            },
        ),
        (
            vec![1, 1, 6, 6],
            Geo {
                k: vec![3, 2],
                s: vec![3, 3],
                d: vec![1, 1],
                pads: vec![1, 0, 1, 1],
                ceil: true,
            },
        ),
        (
            // One window over the whole input (ResNet's final AveragePool):
            // reduced plane by plane.
            vec![2, 3, 7, 7],
            Geo {
                k: vec![7, 7],
                s: vec![1, 1],
                d: vec![1, 1],
                pads: vec![0, 0, 0, 0],
                ceil: false,
            },
        ),
        (
            vec![1, 2, 5, 6, 7],
            Geo {
                k: vec![2, 3, 2],
                s: vec![1, 2, 2],
                d: vec![2, 1, 1],
                pads: vec![1, 0, 1, 0, 1, 1],
                ceil: false,
            },
        ),
        (
            vec![1, 1, 5, 5, 5],
            Geo {
                k: vec![3, 3, 3],
                s: vec![2, 2, 2],
                d: vec![1, 1, 1],
                pads: vec![1, 1, 1, 1, 1, 1],
                ceil: true,
            },
        ),
    ];
    cases.extend(size_keeping_cases());
    cases.extend(stride_two_cases());
    for (ci, (shape, g)) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        let clean = data(n, ci as u64);
        // Kind 4: MaxPool again with every seventh input NaN, which never
        // wins a window (the reference's f64::max skips it too).
        let mut with_nan = clean.clone();
        with_nan.iter_mut().step_by(7).for_each(|v| *v = f32::NAN);
        for kind in 0..5u8 {
            let xv = if kind == 4 { &with_nan } else { &clean };
            let x = tensor(shape, xv.clone());
            let (op, opset, mut attrs) = match kind {
                0 | 4 => ("MaxPool", 22, window_attrs(g)),
                1 | 2 => ("AveragePool", 22, window_attrs(g)),
                _ => ("LpPool", 22, window_attrs(g)),
            };
            if kind == 2 {
                attrs.push(("count_include_pad", Attribute::Int(1)));
            }
            if kind == 3 {
                attrs.push(("p", Attribute::Int(3)));
            }
            let o = build_op(op, &attrs, opset, &[]).unwrap();
            let y = run_op(o.as_ref(), &[Some(&x)]).unwrap();
            let (want_shape, want) = reference(xv, shape, g, kind % 4);
            assert_eq!(y.shape(), want_shape.as_slice(), "case {ci} kind {kind}");
            for (a, b) in vals(&y).iter().zip(&want) {
                // An average over padding alone is 0 / 0 on both sides.
                assert!(
                    a == b
                        || (a.is_nan() && b.is_nan())
                        || (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "case {ci} kind {kind}: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn spec_examples() {
    let x = tensor(&[1, 1, 5, 5], (1..=25).map(|v| v as f32).collect());
    // maxpool_2d_precomputed_pads
    let o = build_op(
        "MaxPool",
        &[
            ("kernel_shape", ints(&[5, 5])),
            ("pads", ints(&[2, 2, 2, 2])),
        ],
        12,
        &[],
    )
    .unwrap();
    let y = run_op(o.as_ref(), &[Some(&x)]).unwrap();
    let row = |a: f64| vec![a, a + 1.0, a + 2.0, a + 2.0, a + 2.0];
    let want: Vec<f64> = [13.0, 18.0, 23.0, 23.0, 23.0]
        .iter()
        .flat_map(|&a| row(a))
        .collect();
    assert_eq!(vals(&y), want);
    // averagepool_2d_precomputed_same_upper
    let o = build_op(
        "AveragePool",
        &[
            ("kernel_shape", ints(&[3, 3])),
            ("strides", ints(&[2, 2])),
            ("auto_pad", Attribute::String(b"SAME_UPPER".to_vec())),
        ],
        11,
        &[],
    )
    .unwrap();
    let y = run_op(o.as_ref(), &[Some(&x)]).unwrap();
    assert_eq!(
        vals(&y),
        vec![4.0, 5.5, 7.0, 11.5, 13.0, 14.5, 19.0, 20.5, 22.0]
    );
    // averagepool_2d_precomputed_pads_count_include_pad
    let o = build_op(
        "AveragePool",
        &[
            ("kernel_shape", ints(&[5, 5])),
            ("pads", ints(&[2, 2, 2, 2])),
            ("count_include_pad", Attribute::Int(1)),
        ],
        11,
        &[],
    )
    .unwrap();
    let y = run_op(o.as_ref(), &[Some(&x)]).unwrap();
    assert!((vals(&y)[0] - 2.5200).abs() < 1e-4);
}

fn build_two_outputs(op: &str, attrs: &[(&str, Attribute)], opset: i64) -> Box<dyn Operator> {
    let map = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let attrs = Attributes::new("node", op, map);
    let ctx = BuildContext {
        attrs: &attrs,
        opset,
        consts: &[],
        num_inputs: 1,
        num_outputs: 2,
        fusion: &crate::ir::Fusion::NONE,
    };
    crate::ops::build("", op, &ctx).unwrap()
}

#[test]
fn argmax_indices_row_and_column_major() {
    // Two planes, so the indices carry the plane offset.
    let x = tensor(&[1, 2, 5, 5], (1..=50).map(|v| v as f32).collect());
    for (order, want) in [(0, [6, 8, 16, 18]), (1, [6, 16, 8, 18])] {
        let o = build_two_outputs(
            "MaxPool",
            &[
                ("kernel_shape", ints(&[2, 2])),
                ("strides", ints(&[2, 2])),
                ("storage_order", Attribute::Int(order)),
            ],
            12,
        );
        let r = o.run(&[Some(&x)]).unwrap();
        assert_eq!(
            vals(&r[0]),
            vec![7.0, 9.0, 17.0, 19.0, 32.0, 34.0, 42.0, 44.0]
        );
        let mut w: Vec<i64> = want.to_vec();
        w.extend(want.iter().map(|v| v + 25));
        assert_eq!(r[1], Tensor::from_vec(&[1, 2, 2, 2], w).unwrap());
    }
}

#[test]
fn int_and_half_maxpool() {
    let v: Vec<u8> = (0..16).map(|i| (i * 7 % 16) as u8).collect();
    let x = Tensor::from_vec(&[1, 1, 4, 4], v).unwrap();
    let o = build_op(
        "MaxPool",
        &[("kernel_shape", ints(&[2, 2])), ("strides", ints(&[2, 2]))],
        12,
        &[],
    )
    .unwrap();
    let y = run_op(o.as_ref(), &[Some(&x)]).unwrap();
    assert_eq!(
        y,
        Tensor::from_vec(&[1, 1, 2, 2], vec![12u8, 14, 15, 13]).unwrap()
    );
    let xi = Tensor::from_vec(&[1, 1, 3], vec![-5i8, -9, -7]).unwrap();
    let o = build_op("MaxPool", &[("kernel_shape", ints(&[2]))], 12, &[]).unwrap();
    assert_eq!(
        run_op(o.as_ref(), &[Some(&xi)]).unwrap(),
        Tensor::from_vec(&[1, 1, 2], vec![-5i8, -7]).unwrap()
    );
    let xh = Tensor::from_vec(
        &[1, 1, 3],
        vec![f16::from_f32(1.0), f16::from_f32(3.0), f16::from_f32(2.0)],
    )
    .unwrap();
    let o = build_op("AveragePool", &[("kernel_shape", ints(&[2]))], 19, &[]).unwrap();
    let y = run_op(o.as_ref(), &[Some(&xh)]).unwrap();
    assert_eq!(vals(&y), vec![2.0, 2.5]);
}

#[test]
fn global_pools_match_naive() {
    let shape = [2, 3, 7, 5];
    let xv = data(210, 9);
    let x = tensor(&shape, xv.clone());
    for (op, f) in [
        ("GlobalAveragePool", 0),
        ("GlobalMaxPool", 1),
        ("GlobalLpPool", 2),
        ("GlobalLpPool", 3),
        ("GlobalLpPool", 4),
    ] {
        let attrs = match f {
            3 => vec![("p", Attribute::Int(1))],
            4 => vec![("p", Attribute::Int(3))],
            _ => vec![],
        };
        let y = run_op(build_op(op, &attrs, 22, &[]).unwrap().as_ref(), &[Some(&x)]).unwrap();
        assert_eq!(y.shape(), &[2, 3, 1, 1]);
        for (p, got) in vals(&y).iter().enumerate() {
            let s = &xv[p * 35..(p + 1) * 35];
            let want = match f {
                0 => s.iter().map(|&v| v as f64).sum::<f64>() / 35.0,
                1 => s.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64)),
                2 => s.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt(),
                3 => s.iter().map(|&v| (v as f64).abs()).sum::<f64>(),
                _ => s
                    .iter()
                    .map(|&v| (v as f64).abs().powi(3))
                    .sum::<f64>()
                    .cbrt(),
            };
            assert!((got - want).abs() < 1e-5, "{op}: {got} vs {want}");
        }
    }
}

#[test]
fn maxunpool_spec_examples() {
    let x = tensor(&[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]);
    let i = Tensor::from_vec(&[1, 1, 2, 2], vec![5i64, 7, 13, 15]).unwrap();
    let attrs = [("kernel_shape", ints(&[2, 2])), ("strides", ints(&[2, 2]))];
    let o = build_op("MaxUnpool", &attrs, 11, &[]).unwrap();
    let y = run_op(o.as_ref(), &[Some(&x), Some(&i)]).unwrap();
    let mut want = vec![0.0; 16];
    (want[5], want[7], want[13], want[15]) = (1.0, 2.0, 3.0, 4.0);
    assert_eq!(vals(&y), want);
    let shape = Tensor::from_vec(&[4], vec![1i64, 1, 5, 5]).unwrap();
    let y = o
        .run(&[Some(&x), Some(&i), Some(&shape)])
        .unwrap()
        .remove(0);
    assert_eq!(y.shape(), &[1, 1, 5, 5]);
    assert_eq!(vals(&y)[6], 1.0);
    assert_eq!(vals(&y)[18], 4.0);
    let bad = Tensor::from_vec(&[1, 1, 2, 2], vec![5i64, 7, 13, 99]).unwrap();
    assert!(o.run(&[Some(&x), Some(&bad)]).is_err());
}

#[test]
fn bad_inputs_are_errors() {
    let k = [("kernel_shape", ints(&[2, 2]))];
    assert!(build_op("MaxPool", &[], 12, &[]).is_err());
    assert!(build_op("AveragePool", &[("kernel_shape", ints(&[0]))], 11, &[]).is_err());
    let o = build_op("MaxPool", &k, 12, &[]).unwrap();
    let rank2 = tensor(&[2, 2], vec![0.0; 4]);
    assert!(o.run(&[Some(&rank2)]).is_err());
    let small = tensor(&[1, 1, 1, 4], vec![0.0; 4]);
    assert!(o.run(&[Some(&small)]).is_err());
    let ints_in = Tensor::from_vec(&[1, 1, 2, 2], vec![1i32; 4]).unwrap();
    assert!(o.run(&[Some(&ints_in)]).is_err());
    let avg = build_op("AveragePool", &k, 11, &[]).unwrap();
    let u8_in = Tensor::from_vec(&[1, 1, 2, 2], vec![1u8; 4]).unwrap();
    assert!(avg.run(&[Some(&u8_in)]).is_err());
    let three = build_op(
        "AveragePool",
        &[("kernel_shape", ints(&[2, 2, 2]))],
        11,
        &[],
    )
    .unwrap();
    assert!(three
        .run(&[Some(&tensor(&[1, 1, 3, 3], vec![0.0; 9]))])
        .is_err());
    assert!(run_op(
        build_op("GlobalAveragePool", &[], 1, &[]).unwrap().as_ref(),
        &[Some(&tensor(&[3], vec![0.0; 3]))]
    )
    .is_err());
}

#[test]
fn thread_count_does_not_change_results() {
    let shape = [2, 16, 40, 40];
    let x = tensor(&shape, data(2 * 16 * 1600, 3));
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let three = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let g = Geo {
        k: vec![3, 3],
        s: vec![1, 1],
        d: vec![1, 1],
        pads: vec![1, 1, 1, 1],
        ceil: false,
    };
    let ops: Vec<Box<dyn Operator>> = vec![
        build_op("AveragePool", &window_attrs(&g), 22, &[]).unwrap(),
        build_op("LpPool", &window_attrs(&g), 22, &[]).unwrap(),
        build_two_outputs("MaxPool", &window_attrs(&g), 22),
        build_op("MaxPool", &window_attrs(&g), 22, &[]).unwrap(),
        build_op("GlobalAveragePool", &[], 22, &[]).unwrap(),
    ];
    for o in &ops {
        let a = one.install(|| o.run(&[Some(&x)]).unwrap());
        let b = three.install(|| o.run(&[Some(&x)]).unwrap());
        assert_eq!(a, b);
    }
}
