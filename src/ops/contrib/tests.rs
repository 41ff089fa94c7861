//! Unit tests of the com.microsoft quantized operators against naive
//! references computed here (dequantize, float operation, quantize with
//! round half to even and saturation), and of the domain-keyed registry.

use crate::error::Error;
use crate::ir::attributes::{Attribute, Attributes};
use crate::ir::{BuildContext, Operator};
use crate::ops::unary::kernel::tests::run_op;
use crate::ops::{registry, MS_DOMAIN};
use crate::tensor::{DType, Tensor};

fn build(op: &str, attrs: &[(&str, Attribute)]) -> crate::Result<Box<dyn Operator>> {
    build_with(op, attrs, &[])
}

/// [`build`] with the inputs in `consts` known as constants.
fn build_with(
    op: &str,
    attrs: &[(&str, Attribute)],
    consts: &[Option<&Tensor>],
) -> crate::Result<Box<dyn Operator>> {
    let map = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let attrs = Attributes::new("node", op, map);
    let ctx = BuildContext {
        attrs: &attrs,
        opset: 1,
        consts,
        num_inputs: 0,
        num_outputs: 1,
        fusion: &crate::ir::Fusion::NONE,
    };
    crate::ops::build(MS_DOMAIN, op, &ctx)
}

fn run(op: &str, attrs: &[(&str, Attribute)], ins: &[Option<&Tensor>]) -> Tensor {
    run_op(build(op, attrs).unwrap().as_ref(), ins).unwrap()
}

fn fails(op: &str, attrs: &[(&str, Attribute)], ins: &[Option<&Tensor>]) -> String {
    match build(op, attrs) {
        Err(e) => e.to_string(),
        Ok(o) => o.run(ins).unwrap_err().to_string(),
    }
}

fn t<T: crate::Element>(shape: &[usize], v: Vec<T>) -> Tensor {
    Tensor::from_vec(shape, v).unwrap()
}

fn f(v: f32) -> Tensor {
    Tensor::scalar(v)
}

/// Deterministic pseudo-random 8-bit codes of type `dt` (as i32).
fn codes(n: usize, seed: u64, dt: DType) -> Vec<i32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let b = (s >> 33) as u8;
            if dt == DType::I8 {
                b as i8 as i32
            } else {
                b as i32
            }
        })
        .collect()
}

/// An 8-bit tensor of type `dt` from codes.
fn q(dt: DType, shape: &[usize], v: &[i32]) -> Tensor {
    match dt {
        DType::U8 => t(shape, v.iter().map(|&x| x as u8).collect()),
        _ => t(shape, v.iter().map(|&x| x as i8).collect()),
    }
}

fn zp(dt: DType, v: i32) -> Tensor {
    q(dt, &[], &[v])
}

fn codes_of(t: &Tensor) -> Vec<i32> {
    crate::ops::quant::to_i32("test", t).unwrap()
}

fn range(dt: DType) -> (f64, f64) {
    if dt == DType::U8 {
        (0.0, 255.0)
    } else {
        (-128.0, 127.0)
    }
}

/// Reference quantization: round half to even, then saturate.
fn quant(v: f64, s: f64, z: i32, dt: DType) -> i32 {
    let (lo, hi) = range(dt);
    ((v / s).round_ties_even() + z as f64).clamp(lo, hi) as i32
}

// ----- registry -----

#[test]
fn registry_is_keyed_by_domain() {
    let r = registry();
    assert!(r.get_in(MS_DOMAIN, "QLinearAdd").is_some());
    assert!(r.get("QLinearAdd").is_none());
    assert!(r.get_in("ai.onnx", "Conv").is_some());
    assert!(r.names().contains(&"Conv"));
    assert!(!r.names().contains(&"QGemm"));
    let ms = r.names_in(MS_DOMAIN);
    for op in [
        "QLinearAdd",
        "QLinearMul",
        "QLinearConcat",
        "QLinearGlobalAveragePool",
        "QLinearAveragePool",
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QGemm",
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
    ] {
        assert!(ms.contains(&op), "{op} missing");
        let e = r.get_in(MS_DOMAIN, op).unwrap();
        assert_eq!((e.domain, e.since, e.family), (MS_DOMAIN, 1, "contrib"));
    }
    let entries = r.entries();
    assert!(entries
        .iter()
        .any(|(n, e)| *n == "QGemm" && e.domain == MS_DOMAIN));
    assert!(entries
        .iter()
        .any(|(n, e)| *n == "Gemm" && e.domain.is_empty()));
    assert!(crate::ops::is_supported_domain(MS_DOMAIN));
    assert!(crate::ops::is_supported_domain("ai.onnx"));
    assert!(!crate::ops::is_supported_domain("com.example"));
}

#[test]
fn unknown_or_misplaced_operators_are_unsupported() {
    let err = build("NoSuchOp", &[]).unwrap_err();
    match &err {
        Error::UnsupportedOperator {
            op, domain, opset, ..
        } => {
            assert_eq!(
                (op.as_str(), domain.as_str(), *opset),
                ("NoSuchOp", MS_DOMAIN, 1)
            );
        }
        other => panic!("unexpected {other}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("NoSuchOp") && msg.contains(MS_DOMAIN), "{msg}");
    // A contrib operator asked for in the default domain is unknown there.
    let attrs = Attributes::new("n", "QLinearAdd", Default::default());
    let ctx = BuildContext {
        attrs: &attrs,
        opset: 13,
        consts: &[],
        num_inputs: 0,
        num_outputs: 1,
        fusion: &crate::ir::Fusion::NONE,
    };
    assert!(matches!(
        crate::ops::build("", "QLinearAdd", &ctx),
        Err(Error::UnsupportedOperator { .. })
    ));
}

// ----- QLinearAdd / QLinearMul -----

fn binary_case(op: &str, dt: DType, sa: &[usize], sb: &[usize]) {
    let (na, nb) = (sa.iter().product(), sb.iter().product());
    let (av, bv) = (codes(na, 1, dt), codes(nb, 2, dt));
    let (a_s, a_z, b_s, b_z, c_s, c_z) = if dt == DType::U8 {
        (0.05f32, 120, 0.03f32, 130, 0.07f32, 125)
    } else {
        (0.05f32, -3, 0.03f32, 4, 0.07f32, 1)
    };
    let a = q(dt, sa, &av);
    let b = q(dt, sb, &bv);
    let y = run(
        op,
        &[],
        &[
            Some(&a),
            Some(&f(a_s)),
            Some(&zp(dt, a_z)),
            Some(&b),
            Some(&f(b_s)),
            Some(&zp(dt, b_z)),
            Some(&f(c_s)),
            Some(&zp(dt, c_z)),
        ],
    );
    let out = crate::ops::util::broadcast_shapes("t", sa, sb).unwrap();
    assert_eq!(y.shape(), out.as_slice());
    let ma = crate::ops::quant::Bcast::new("t", sa, &out).unwrap();
    let mb = crate::ops::quant::Bcast::new("t", sb, &out).unwrap();
    let got = codes_of(&y);
    for (i, &g) in got.iter().enumerate() {
        // Dequantize, operate, quantize (in f32, the reference's precision).
        let x = a_s * (av[ma.index(i)] - a_z) as f32;
        let z = b_s * (bv[mb.index(i)] - b_z) as f32;
        let v = if op == "QLinearAdd" { x + z } else { x * z };
        // onnxruntime's reference kernel adds the zero point before rounding.
        let want = quant((v / c_s + c_z as f32) as f64, 1.0, 0, dt);
        assert_eq!(g, want, "{op} {dt} at {i}");
    }
}

#[test]
fn qlinear_add_and_mul_broadcast_uint8_and_int8() {
    for op in ["QLinearAdd", "QLinearMul"] {
        for dt in [DType::U8, DType::I8] {
            binary_case(op, dt, &[2, 3, 4], &[3, 1]);
            binary_case(op, dt, &[4], &[2, 3, 4]);
            binary_case(op, dt, &[5], &[]);
            binary_case(op, dt, &[2, 1, 3], &[1, 4, 1]);
        }
    }
}

#[test]
fn qlinear_add_rounds_half_to_even_and_saturates() {
    // (a + b) / 2 with unit scales: 0.5 → 0, 1.5 → 2, 2.5 → 2; 400/2 → 255.
    let a = t(&[4], vec![0u8, 1, 2, 200]);
    let b = t(&[4], vec![1u8, 2, 3, 200]);
    let one = f(1.0);
    let y = run(
        "QLinearAdd",
        &[],
        &[
            Some(&a),
            Some(&one),
            None,
            Some(&b),
            Some(&one),
            None,
            Some(&f(2.0)),
            None,
        ],
    );
    assert_eq!(y, t(&[4], vec![0u8, 2, 2, 200]));
    let y = run(
        "QLinearAdd",
        &[],
        &[
            Some(&a),
            Some(&one),
            None,
            Some(&b),
            Some(&one),
            None,
            Some(&f(1.0)),
            None,
        ],
    );
    assert_eq!(y, t(&[4], vec![1u8, 3, 5, 255]));
    // int8 saturates at both ends.
    let a = t(&[2], vec![-100i8, 100]);
    let y = run(
        "QLinearMul",
        &[],
        &[
            Some(&a),
            Some(&one),
            None,
            Some(&a),
            Some(&one),
            None,
            Some(&f(-1.0)),
            None,
        ],
    );
    assert_eq!(y, t(&[2], vec![-128i8, -128]));
}

#[test]
fn qlinear_binary_rejects_bad_inputs() {
    let a = t(&[2], vec![1u8, 2]);
    let b8 = t(&[2], vec![1i8, 2]);
    let s = f(1.0);
    let e = fails(
        "QLinearAdd",
        &[],
        &[
            Some(&a),
            Some(&s),
            None,
            Some(&b8),
            Some(&s),
            None,
            Some(&s),
            None,
        ],
    );
    assert!(e.contains("B is int8"), "{e}");
    let fl = t(&[2], vec![1f32, 2.0]);
    let e = fails(
        "QLinearMul",
        &[],
        &[
            Some(&fl),
            Some(&s),
            None,
            Some(&fl),
            Some(&s),
            None,
            Some(&s),
            None,
        ],
    );
    assert!(e.contains("uint8 or int8"), "{e}");
    let e = fails("QLinearAdd", &[], &[Some(&a), Some(&s), None, Some(&a)]);
    assert!(e.contains("missing"), "{e}");
    let e = fails(
        "QLinearAdd",
        &[],
        &[
            Some(&a),
            Some(&Tensor::scalar(1.0f64)),
            None,
            Some(&a),
            Some(&s),
            None,
            Some(&s),
            None,
        ],
    );
    assert!(e.contains("float32"), "{e}");
    let e = fails(
        "QLinearAdd",
        &[],
        &[
            Some(&a),
            Some(&s),
            Some(&zp(DType::I8, 0)),
            Some(&a),
            Some(&s),
            None,
            Some(&s),
            None,
        ],
    );
    assert!(e.contains("A_zero_point"), "{e}");
    let e = fails(
        "QLinearAdd",
        &[],
        &[
            Some(&a),
            Some(&t(&[2], vec![1f32, 2.0])),
            None,
            Some(&a),
            Some(&s),
            None,
            Some(&s),
            None,
        ],
    );
    assert!(e.contains("A_scale"), "{e}");
    let c = t(&[3], vec![1u8, 2, 3]);
    let e = fails(
        "QLinearAdd",
        &[],
        &[
            Some(&a),
            Some(&s),
            None,
            Some(&c),
            Some(&s),
            None,
            Some(&s),
            None,
        ],
    );
    assert!(e.contains("broadcast"), "{e}");
}

// ----- QLinearSigmoid / QLinearLeakyRelu -----

#[test]
fn qlinear_sigmoid_and_leaky_relu_match_reference_on_every_code() {
    for dt in [DType::U8, DType::I8] {
        let (lo, hi) = if dt == DType::U8 {
            (0, 255)
        } else {
            (-128, 127)
        };
        let all: Vec<i32> = (lo..=hi).collect();
        let x = q(dt, &[2, 128], &all);
        let (xs, xz, ys, yz) = if dt == DType::U8 {
            (0.05f32, 128, 1.0f32 / 256.0, 0)
        } else {
            (0.05f32, 0, 1.0f32 / 256.0, -128)
        };
        let ins = [
            Some(&x),
            Some(&f(xs)),
            Some(&zp(dt, xz)),
            Some(&f(ys)),
            Some(&zp(dt, yz)),
        ];
        let ins: Vec<Option<&Tensor>> = ins.iter().map(|o| o.as_ref().map(|r| *r)).collect();
        let y = codes_of(&run("QLinearSigmoid", &[], &ins));
        for (i, &c) in all.iter().enumerate() {
            let v = xs * (c - xz) as f32;
            let s = 1.0 / (1.0 + (-v).exp());
            assert_eq!(
                y[i],
                quant((s / ys) as f64, 1.0, yz, dt),
                "sigmoid {dt} {c}"
            );
        }
        let alpha = 0.2f32;
        let ys2 = 0.04f32;
        let ins2: Vec<Option<&Tensor>> =
            vec![Some(&x), Some(ins[1].unwrap()), Some(ins[2].unwrap())];
        let s2 = f(ys2);
        let z2 = zp(dt, xz);
        let mut ins2 = ins2;
        ins2.push(Some(&s2));
        ins2.push(Some(&z2));
        let y = codes_of(&run(
            "QLinearLeakyRelu",
            &[("alpha", Attribute::Float(alpha))],
            &ins2,
        ));
        for (i, &c) in all.iter().enumerate() {
            let v = xs * (c - xz) as f32;
            let r = if v >= 0.0 { v } else { alpha * v };
            assert_eq!(y[i], quant((r / ys2) as f64, 1.0, xz, dt), "leaky {dt} {c}");
        }
    }
}

#[test]
fn qlinear_leaky_relu_defaults_and_errors() {
    // Default alpha 0.01, zero points absent (0).
    let x = t(&[3], vec![-100i8, 0, 50]);
    let s = f(0.5);
    let y = run(
        "QLinearLeakyRelu",
        &[],
        &[Some(&x), Some(&s), None, Some(&s), None],
    );
    // -100·0.5·0.01 = -0.5 → /0.5 = -1.
    assert_eq!(y, t(&[3], vec![-1i8, 0, 50]));
    let e = fails("QLinearSigmoid", &[], &[Some(&x), Some(&s), None]);
    assert!(e.contains("missing"), "{e}");
    let xi = t(&[1], vec![1i32]);
    let e = fails(
        "QLinearSigmoid",
        &[],
        &[Some(&xi), Some(&s), None, Some(&s), None],
    );
    assert!(e.contains("uint8 or int8"), "{e}");
}

// ----- QLinearConcat -----

#[test]
fn qlinear_concat_requantizes_each_input() {
    for dt in [DType::U8, DType::I8] {
        let shapes: [&[usize]; 3] = [&[2, 1, 3], &[2, 2, 3], &[2, 3, 3]];
        let params = [(0.1f32, 5), (0.02f32, -3), (0.05f32, 0)];
        let (ys, yz) = (0.05f32, if dt == DType::U8 { 10 } else { 0 });
        let xs: Vec<(Vec<i32>, Tensor)> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let v = codes(s.iter().product(), 10 + i as u64, dt);
                let tt = q(dt, s, &v);
                (v, tt)
            })
            .collect();
        let zps: Vec<Tensor> = params
            .iter()
            .map(|&(_, z)| zp(dt, if dt == DType::U8 { z.max(0) } else { z }))
            .collect();
        let sc: Vec<Tensor> = params.iter().map(|&(s, _)| f(s)).collect();
        let (yst, yzt) = (f(ys), zp(dt, yz));
        let mut ins: Vec<Option<&Tensor>> = vec![Some(&yst), Some(&yzt)];
        for i in 0..3 {
            ins.extend([Some(&xs[i].1), Some(&sc[i]), Some(&zps[i])]);
        }
        let y = run("QLinearConcat", &[("axis", Attribute::Int(-2))], &ins);
        assert_eq!(y.shape(), &[2, 6, 3]);
        let got = codes_of(&y);
        let mut want = Vec::new();
        for b in 0..2 {
            for (i, s) in shapes.iter().enumerate() {
                let per = s[1] * 3;
                let z = codes_of(&zps[i])[0];
                for &c in &xs[i].0[b * per..(b + 1) * per] {
                    let v = params[i].0 * (c - z) as f32;
                    want.push(quant((v / ys).into(), 1.0, yz, dt));
                }
            }
        }
        assert_eq!(got, want, "{dt}");
    }
}

#[test]
fn qlinear_concat_rejects_bad_inputs() {
    let x = t(&[2, 2], vec![1u8, 2, 3, 4]);
    let x3 = t(&[3, 3], vec![1u8; 9]);
    let s = f(1.0);
    let z = zp(DType::U8, 0);
    let ax = [("axis", Attribute::Int(0))];
    let e = fails(
        "QLinearConcat",
        &ax,
        &[Some(&s), Some(&z), Some(&x), Some(&s)],
    );
    assert!(e.contains("2 + 3"), "{e}");
    let e = fails(
        "QLinearConcat",
        &ax,
        &[
            Some(&s),
            Some(&z),
            Some(&x),
            Some(&s),
            Some(&z),
            Some(&x3),
            Some(&s),
            Some(&z),
        ],
    );
    assert!(e.contains("differ"), "{e}");
    let xi = t(&[2, 2], vec![1i8, 2, 3, 4]);
    let e = fails(
        "QLinearConcat",
        &ax,
        &[
            Some(&s),
            Some(&z),
            Some(&xi),
            Some(&s),
            Some(&zp(DType::I8, 0)),
        ],
    );
    assert!(e.contains("expected uint8"), "{e}");
    let e = fails(
        "QLinearConcat",
        &[],
        &[Some(&s), Some(&z), Some(&x), Some(&s), Some(&z)],
    );
    assert!(e.contains("axis"), "{e}");
}

// ----- QLinearGlobalAveragePool -----

#[test]
fn qlinear_global_average_pool_nchw_and_nhwc() {
    for dt in [DType::U8, DType::I8] {
        for channels_last in [false, true] {
            let (n, c, h, w) = (2, 3, 4, 2);
            let shape = if channels_last {
                [n, h, w, c]
            } else {
                [n, c, h, w]
            };
            let v = codes(n * c * h * w, 7, dt);
            let x = q(dt, &shape, &v);
            let (xs, xz, ys, yz) = if dt == DType::U8 {
                (0.5f32, 100, 0.25f32, 3)
            } else {
                (0.5f32, -5, 0.25f32, 2)
            };
            let y = run(
                "QLinearGlobalAveragePool",
                &[("channels_last", Attribute::Int(channels_last as i64))],
                &[
                    Some(&x),
                    Some(&f(xs)),
                    Some(&zp(dt, xz)),
                    Some(&f(ys)),
                    Some(&zp(dt, yz)),
                ],
            );
            let out_shape = if channels_last {
                [n, 1, 1, c]
            } else {
                [n, c, 1, 1]
            };
            assert_eq!(y.shape(), &out_shape);
            let got = codes_of(&y);
            for b in 0..n {
                for ch in 0..c {
                    let mut sum = 0f64;
                    for p in 0..h * w {
                        let i = if channels_last {
                            (b * h * w + p) * c + ch
                        } else {
                            (b * c + ch) * h * w + p
                        };
                        sum += xs as f64 * (v[i] - xz) as f64;
                    }
                    let want = quant(sum / (h * w) as f64, ys as f64, yz, dt);
                    assert_eq!(got[b * c + ch], want, "{dt} cl={channels_last} {b} {ch}");
                }
            }
        }
    }
}

#[test]
fn qlinear_global_average_pool_errors() {
    let x = t(&[2, 3], vec![1u8; 6]);
    let s = f(1.0);
    let z = zp(DType::U8, 0);
    let e = fails(
        "QLinearGlobalAveragePool",
        &[],
        &[Some(&x), Some(&s), Some(&z), Some(&s), Some(&z)],
    );
    assert!(e.contains("rank"), "{e}");
    let x = t(&[1, 1, 2, 2], vec![1u8; 4]);
    let e = fails(
        "QLinearGlobalAveragePool",
        &[],
        &[
            Some(&x),
            Some(&s),
            Some(&zp(DType::I8, 0)),
            Some(&s),
            Some(&z),
        ],
    );
    assert!(e.contains("x_zero_point"), "{e}");
    // A scale ratio out of onnxruntime's computable range.
    let e = fails(
        "QLinearGlobalAveragePool",
        &[],
        &[Some(&x), Some(&f(4096.0)), Some(&z), Some(&s), Some(&z)],
    );
    assert!(e.contains("range"), "{e}");
}

// ----- QLinearAveragePool -----

/// Naive 2-D average pool of dequantized NCHW data, quantized as the
/// reference kernel does (sum in f32, divide, `round(v / ys + yz)`).
#[allow(clippy::too_many_arguments)]
fn avg_pool_ref(
    v: &[i32],
    (n, c, h, w): (usize, usize, usize, usize),
    (kh, kw): (usize, usize),
    (sh, sw): (usize, usize),
    (ph, pw): (usize, usize),
    (oh, ow): (usize, usize),
    include_pad: bool,
    (xs, xz, ys, yz): (f32, i32, f32, i32),
    dt: DType,
) -> Vec<i32> {
    let mut out = Vec::new();
    for b in 0..n {
        for ch in 0..c {
            for oy in 0..oh {
                for ox in 0..ow {
                    let y0 = (oy * sh) as isize - ph as isize;
                    let x0 = (ox * sw) as isize - pw as isize;
                    let mut sum = 0f32;
                    let mut cnt = 0;
                    for yy in y0.max(0)..(y0 + kh as isize).min(h as isize) {
                        for xx in x0.max(0)..(x0 + kw as isize).min(w as isize) {
                            let i = ((b * c + ch) * h + yy as usize) * w + xx as usize;
                            sum += xs * (v[i] - xz) as f32;
                            cnt += 1;
                        }
                    }
                    let size = if include_pad { kh * kw } else { cnt };
                    let m = sum / size as f32;
                    out.push(quant((m / ys + yz as f32) as f64, 1.0, 0, dt));
                }
            }
        }
    }
    out
}

#[test]
fn qlinear_average_pool_pads_strides_and_layouts() {
    for dt in [DType::U8, DType::I8] {
        for include_pad in [false, true] {
            for (channels_last, c) in [(false, 3), (true, 3), (false, 19), (true, 19)] {
                let (n, h, w) = (2, 5, 6);
                let v = codes(n * c * h * w, 21, dt);
                let params = if dt == DType::U8 {
                    (0.1f32, 120, 0.07f32, 130)
                } else {
                    (0.1f32, -2, 0.07f32, 1)
                };
                // Reference data in NCHW; the operator sees NHWC when channels_last.
                let x = if channels_last {
                    let mut t2 = vec![0; v.len()];
                    for b in 0..n {
                        for ch in 0..c {
                            for p in 0..h * w {
                                t2[(b * h * w + p) * c + ch] = v[(b * c + ch) * h * w + p];
                            }
                        }
                    }
                    q(dt, &[n, h, w, c], &t2)
                } else {
                    q(dt, &[n, c, h, w], &v)
                };
                let attrs = [
                    ("kernel_shape", Attribute::Ints(vec![3, 2])),
                    ("strides", Attribute::Ints(vec![2, 2])),
                    ("pads", Attribute::Ints(vec![1, 1, 1, 0])),
                    ("count_include_pad", Attribute::Int(include_pad as i64)),
                    ("channels_last", Attribute::Int(channels_last as i64)),
                ];
                let y = run(
                    "QLinearAveragePool",
                    &attrs,
                    &[
                        Some(&x),
                        Some(&f(params.0)),
                        Some(&zp(dt, params.1)),
                        Some(&f(params.2)),
                        Some(&zp(dt, params.3)),
                    ],
                );
                // out = floor((5 + 2 - 3) / 2) + 1 = 3, floor((6 + 1 - 2) / 2) + 1 = 3.
                let (oh, ow) = (3, 3);
                let want = avg_pool_ref(
                    &v,
                    (n, c, h, w),
                    (3, 2),
                    (2, 2),
                    (1, 1),
                    (oh, ow),
                    include_pad,
                    params,
                    dt,
                );
                let got = codes_of(&y);
                if channels_last {
                    assert_eq!(y.shape(), &[n, oh, ow, c]);
                    for b in 0..n {
                        for ch in 0..c {
                            for p in 0..oh * ow {
                                assert_eq!(
                                    got[(b * oh * ow + p) * c + ch],
                                    want[(b * c + ch) * oh * ow + p]
                                );
                            }
                        }
                    }
                } else {
                    assert_eq!(y.shape(), &[n, c, oh, ow]);
                    assert_eq!(got, want, "{dt} pad={include_pad}");
                }
            }
        }
    }
}

#[test]
fn qlinear_average_pool_1d_and_errors() {
    let x = t(&[1, 1, 4], vec![10u8, 20, 30, 41]);
    let s = f(1.0);
    let y = run(
        "QLinearAveragePool",
        &[("kernel_shape", Attribute::Ints(vec![2]))],
        &[Some(&x), Some(&s), None, Some(&s), None],
    );
    // Means 15, 25, 35.5 → 36 (half to even).
    assert_eq!(y, t(&[1, 1, 3], vec![15u8, 25, 36]));
    let e = fails(
        "QLinearAveragePool",
        &[],
        &[Some(&x), Some(&s), None, Some(&s), None],
    );
    assert!(e.contains("kernel_shape"), "{e}");
    let e = fails(
        "QLinearAveragePool",
        &[("kernel_shape", Attribute::Ints(vec![2, 2]))],
        &[Some(&x), Some(&s), None, Some(&s), None],
    );
    assert!(e.contains("kernel"), "{e}");
    let e = fails(
        "QLinearAveragePool",
        &[("kernel_shape", Attribute::Ints(vec![9]))],
        &[Some(&x), Some(&s), None, Some(&s), None],
    );
    assert!(e.contains("larger"), "{e}");
}

// ----- QGemm -----

/// Dequantized matrix of codes minus per-column zero points, times scales.
fn deq(v: &[i32], rows: usize, cols: usize, trans: bool, s: &[f64], z: &[i32]) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            let c = if trans {
                v[j * rows + i]
            } else {
                v[i * cols + j]
            };
            let k = if s.len() == 1 { 0 } else { j };
            out[i * cols + j] = s[k] * (c - z[if z.len() == 1 { 0 } else { j }]) as f64;
        }
    }
    out
}

fn mm(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    y
}

#[test]
fn qgemm_per_column_bias_and_transposes() {
    // Power-of-two scales keep every step exact, so the float reference is exact.
    let (m, k, n) = (3, 5, 4);
    for (adt, bdt, trans_a, trans_b) in [
        (DType::U8, DType::I8, false, true),
        (DType::U8, DType::U8, true, false),
        (DType::I8, DType::I8, true, true),
    ] {
        let av = codes(m * k, 31, adt);
        let bv = codes(k * n, 32, bdt);
        let a_shape = if trans_a { [k, m] } else { [m, k] };
        let b_shape = if trans_b { [n, k] } else { [k, n] };
        let a = q(adt, &a_shape, &av);
        let b = q(bdt, &b_shape, &bv);
        let (sa, za) = (0.5f32, if adt == DType::U8 { 128 } else { 3 });
        let bs = [0.25f32, 0.125, 0.5, 0.0625];
        let bz: Vec<i32> = if bdt == DType::U8 {
            vec![120, 128, 131, 127]
        } else {
            vec![0, 1, -2, 3]
        };
        let bias = [100i32, -200, 0, 7];
        let (ys, yz) = (64.0f32, if adt == DType::U8 { 128 } else { 0 });
        let alpha = 2.0f32;
        let bst = t(&[n], bs.to_vec());
        let bzt = q(bdt, &[n], &bz);
        let ct = t(&[n], bias.to_vec());
        let (sat, zat, yst, yzt) = (f(sa), zp(adt, za), f(ys), zp(adt, yz));
        let attrs = [
            ("transA", Attribute::Int(trans_a as i64)),
            ("transB", Attribute::Int(trans_b as i64)),
            ("alpha", Attribute::Float(alpha)),
        ];
        let y = run(
            "QGemm",
            &attrs,
            &[
                Some(&a),
                Some(&sat),
                Some(&zat),
                Some(&b),
                Some(&bst),
                Some(&bzt),
                Some(&ct),
                Some(&yst),
                Some(&yzt),
            ],
        );
        assert_eq!((y.dtype(), y.shape()), (adt, &[m, n][..]));
        let ad = deq(&av, m, k, trans_a, &[sa as f64], &[za]);
        let bsf: Vec<f64> = bs.iter().map(|&s| s as f64).collect();
        let bd = deq(&bv, k, n, trans_b, &bsf, &bz);
        let yf = mm(&ad, &bd, m, k, n);
        let got = codes_of(&y);
        for i in 0..m * n {
            let j = i % n;
            let v = alpha as f64 * (yf[i] + bias[j] as f64 * sa as f64 * bsf[j]);
            assert_eq!(got[i], quant(v, ys as f64, yz, adt), "{adt}x{bdt} at {i}");
        }
        // Without y_scale / y_zero_point the output is float32.
        let y = run(
            "QGemm",
            &attrs,
            &[
                Some(&a),
                Some(&sat),
                Some(&zat),
                Some(&b),
                Some(&bst),
                Some(&bzt),
                Some(&ct),
            ],
        );
        let yv = y.view::<f32>().unwrap();
        for (i, &g) in yv.iter().enumerate() {
            let j = i % n;
            let v = alpha as f64 * (yf[i] + bias[j] as f64 * sa as f64 * bsf[j]);
            assert_eq!(g as f64, v, "float {adt}x{bdt} at {i}");
        }
    }
}

/// C's value at row i, column j of Y.
type BiasAt = Box<dyn Fn(usize, usize) -> i32>;

#[test]
fn qgemm_every_bias_shape_one_row_or_more_constant_or_not() {
    // One row takes the engine's matrix-vector kernel; C per column joins
    // the engine's sums, any other C a second pass; constants are packed
    // (and C folded) at build.
    let (k, n) = (70, 21);
    for m in [1, 3] {
        let av = codes(m * k, 41, DType::U8);
        let bv = codes(k * n, 42, DType::I8);
        let a = q(DType::U8, &[m, k], &av);
        let b = q(DType::I8, &[n, k], &bv);
        let bs: Vec<f32> = (0..n).map(|j| 1.0 / (1 << (j % 4)) as f32).collect();
        let bz: Vec<i32> = (0..n as i32).map(|j| j % 3 - 1).collect();
        let (bst, bzt) = (t(&[n], bs.clone()), q(DType::I8, &[n], &bz));
        let (sat, zat, yst, yzt) = (f(0.5), zp(DType::U8, 100), f(32.0), zp(DType::U8, 120));
        let full: Vec<i32> = (0..(m * n) as i32).map(|i| i * 37 % 501 - 250).collect();
        let cs: [(Option<Tensor>, BiasAt); 5] = [
            (None, Box::new(|_, _| 0)),
            (Some(t(&[], vec![-90i32])), Box::new(|_, _| -90)),
            (
                Some(t(&[1, n], (0..n as i32).map(|j| 9 * j - 60).collect())),
                Box::new(|_, j| 9 * j as i32 - 60),
            ),
            (Some(t(&[m, 1], vec![33i32; m])), Box::new(|_, _| 33)),
            (
                Some(t(&[m, n], full.clone())),
                Box::new(move |i, j| full[i * n + j]),
            ),
        ];
        let attrs = [("transB", Attribute::Int(1))];
        let ad = deq(&av, m, k, false, &[0.5], &[100]);
        let bsf: Vec<f64> = bs.iter().map(|&s| s as f64).collect();
        let bd = deq(&bv, k, n, true, &bsf, &bz);
        let yf = mm(&ad, &bd, m, k, n);
        for (c, bias) in &cs {
            let ins = [
                Some(&a),
                Some(&sat),
                Some(&zat),
                Some(&b),
                Some(&bst),
                Some(&bzt),
                c.as_ref(),
                Some(&yst),
                Some(&yzt),
            ];
            // Everything but A and the output's scale and zero point known.
            let mut consts = ins[..7].to_vec();
            consts[0] = None;
            for known in [&[][..], &consts[..]] {
                let op = build_with("QGemm", &attrs, known).unwrap();
                let got = codes_of(&run_op(op.as_ref(), &ins).unwrap());
                for i in 0..m * n {
                    let (r, j) = (i / n, i % n);
                    let v = yf[i] + bias(r, j) as f64 * 0.5 * bsf[j];
                    let shape = c.as_ref().map(|c| c.shape().to_vec());
                    assert_eq!(
                        got[i],
                        quant(v, 32.0, 120, DType::U8),
                        "m {m} C {shape:?} at {i}"
                    );
                }
                let float = run_op(op.as_ref(), &ins[..7]).unwrap();
                for (i, &g) in float.view::<f32>().unwrap().iter().enumerate() {
                    let v = yf[i] + bias(i / n, i % n) as f64 * 0.5 * bsf[i % n];
                    assert_eq!(g as f64, v, "float, m {m} at {i}");
                }
            }
        }
    }
}

#[test]
fn qgemm_rejects_bad_inputs() {
    let a = t(&[2, 3], vec![1u8; 6]);
    let b = t(&[3, 2], vec![1u8; 6]);
    let s = f(1.0);
    let z = zp(DType::U8, 0);
    let e = fails(
        "QGemm",
        &[],
        &[
            Some(&a),
            Some(&s),
            Some(&z),
            Some(&b),
            Some(&t(&[3], vec![1f32; 3])),
            Some(&z),
        ],
    );
    assert!(e.contains("b_scale"), "{e}");
    let e = fails(
        "QGemm",
        &[],
        &[
            Some(&a),
            Some(&s),
            Some(&z),
            Some(&b),
            Some(&s),
            Some(&z),
            Some(&t(&[2], vec![1f32; 2])),
        ],
    );
    assert!(e.contains("int32"), "{e}");
    let e = fails(
        "QGemm",
        &[],
        &[Some(&a), Some(&s), Some(&z), Some(&a), Some(&s), Some(&z)],
    );
    assert!(e.contains("inner"), "{e}");
    let e = fails(
        "QGemm",
        &[],
        &[Some(&a), Some(&s), None, Some(&b), Some(&s), Some(&z)],
    );
    assert!(e.contains("missing"), "{e}");
    let e = fails(
        "QGemm",
        &[],
        &[
            Some(&a),
            Some(&s),
            Some(&z),
            Some(&b),
            Some(&s),
            Some(&z),
            None,
            Some(&s),
            Some(&zp(DType::I8, 0)),
        ],
    );
    assert!(e.contains("y_zero_point"), "{e}");
}

// ----- MatMulIntegerToFloat / DynamicQuantizeMatMul -----

#[test]
fn matmul_integer_to_float_batched_per_column() {
    let (k, n) = (4, 5);
    for (bshape, sshape, batches) in [
        (vec![k, n], vec![n], 1usize),
        (vec![2, k, n], vec![2, 1, n], 2),
    ] {
        let ashape = [2, 3, k];
        let av = codes(24, 41, DType::U8);
        let bv = codes(batches * k * n, 42, DType::I8);
        let a = q(DType::U8, &ashape, &av);
        let b = q(DType::I8, &bshape, &bv);
        let bs: Vec<f32> = (0..batches * n)
            .map(|i| [0.5f32, 0.25, 0.125][i % 3])
            .collect();
        let bz: Vec<i32> = (0..batches * n).map(|i| i as i32 % 3 - 1).collect();
        let bias: Vec<f32> = (0..n).map(|j| j as f32 - 2.0).collect();
        let (sa, za) = (0.25f32, 128);
        let y = run(
            "MatMulIntegerToFloat",
            &[],
            &[
                Some(&a),
                Some(&b),
                Some(&f(sa)),
                Some(&t(&sshape, bs.clone())),
                Some(&zp(DType::U8, za)),
                Some(&q(DType::I8, &sshape, &bz)),
                Some(&t(&[n], bias.clone())),
            ],
        );
        assert_eq!(y.shape(), &[2, 3, n]);
        let yv: Vec<f32> = y.view::<f32>().unwrap().iter().copied().collect();
        for bi in 0..2 {
            let bb = if batches == 1 { 0 } else { bi };
            for i in 0..3 {
                for j in 0..n {
                    let mut acc = 0f64;
                    for p in 0..k {
                        let x = sa as f64 * (av[(bi * 3 + i) * k + p] - za) as f64;
                        let pj = bb * n + j;
                        let w = bs[pj] as f64 * (bv[(bb * k + p) * n + j] - bz[pj]) as f64;
                        acc += x * w;
                    }
                    let want = acc + bias[j] as f64;
                    assert_eq!(yv[(bi * 3 + i) * n + j] as f64, want, "{bi} {i} {j}");
                }
            }
        }
    }
}

#[test]
fn dynamic_quantize_matmul_matches_reference() {
    let (m, k, n) = (3, 6, 4);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 37 % 23) as f32 - 8.0) * 0.37)
        .collect();
    let bv = codes(k * n, 51, DType::U8);
    let b = q(DType::U8, &[k, n], &bv);
    let (bs, bz) = (0.02f32, 120);
    let bias: Vec<f32> = vec![0.5, -1.0, 0.0, 2.0];
    let at = t(&[m, k], a.clone());
    let y = run(
        "DynamicQuantizeMatMul",
        &[],
        &[
            Some(&at),
            Some(&b),
            Some(&f(bs)),
            Some(&zp(DType::U8, bz)),
            Some(&t(&[n], bias.clone())),
        ],
    );
    // Reference: uint8 parameters from A's range (with 0), quantize A,
    // dequantize both, float matmul, add bias.
    let lo = a.iter().fold(0f32, |x, &v| x.min(v));
    let hi = a.iter().fold(0f32, |x, &v| x.max(v));
    let sa = (hi - lo) / 255.0;
    let za = (-lo / sa).clamp(0.0, 255.0).round_ties_even() as i32;
    let aq: Vec<f64> = a
        .iter()
        .map(|&v| sa as f64 * (quant((v / sa) as f64, 1.0, za, DType::U8) - za) as f64)
        .collect();
    let yv: Vec<f32> = y.view::<f32>().unwrap().iter().copied().collect();
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f64;
            for p in 0..k {
                acc += aq[i * k + p] * bs as f64 * (bv[p * n + j] - bz) as f64;
            }
            let want = acc + bias[j] as f64;
            let got = yv[i * n + j] as f64;
            assert!(
                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                "{got} vs {want}"
            );
            // And close to the float product.
            let exact: f64 = (0..k)
                .map(|p| a[i * k + p] as f64 * bs as f64 * (bv[p * n + j] - bz) as f64)
                .sum::<f64>()
                + bias[j] as f64;
            assert!((got - exact).abs() < 0.5, "{got} vs float {exact}");
        }
    }
}

#[test]
fn matmul_to_float_rejects_bad_inputs() {
    let a = t(&[2, 3], vec![1u8; 6]);
    let b = t(&[3, 2], vec![1i8; 6]);
    let s = f(1.0);
    let e = fails(
        "MatMulIntegerToFloat",
        &[],
        &[Some(&a), Some(&b), Some(&s), Some(&t(&[3], vec![1f32; 3]))],
    );
    assert!(e.contains("b_scale"), "{e}");
    let e = fails("MatMulIntegerToFloat", &[], &[Some(&a), Some(&b), Some(&s)]);
    assert!(e.contains("missing"), "{e}");
    let fa = t(&[2, 3], vec![1f32; 6]);
    let e = fails(
        "MatMulIntegerToFloat",
        &[],
        &[Some(&fa), Some(&b), Some(&s), Some(&s)],
    );
    assert!(e.contains("uint8 or int8"), "{e}");
    let e = fails(
        "DynamicQuantizeMatMul",
        &[],
        &[Some(&a), Some(&b), Some(&s)],
    );
    assert!(e.contains("float32"), "{e}");
    let e = fails(
        "DynamicQuantizeMatMul",
        &[],
        &[
            Some(&fa),
            Some(&b),
            Some(&s),
            None,
            Some(&t(&[3], vec![1f32; 3])),
        ],
    );
    assert!(e.contains("bias"), "{e}");
    let e = fails(
        "DynamicQuantizeMatMul",
        &[],
        &[Some(&fa), Some(&a), Some(&s)],
    );
    assert!(e.contains("inner"), "{e}");
}
