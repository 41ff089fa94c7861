//! Unit tests of the quantization family against naive references and the
//! ONNX specification examples.

use crate::ir::attributes::Attribute;
use crate::ops::unary::kernel::tests::{build_op, run_op, t1};
use crate::tensor::{Tensor, F4E2M1, F8E4M3FN, F8E5M2, I2, I4, U4};

fn t<T: crate::Element>(shape: &[usize], v: Vec<T>) -> Tensor {
    Tensor::from_vec(shape, v).unwrap()
}

fn run(op: &str, opset: i64, attrs: &[(&str, Attribute)], ins: &[Option<&Tensor>]) -> Tensor {
    let o = build_op(op, attrs, opset, &[]).unwrap();
    run_op(o.as_ref(), ins).unwrap()
}

fn fails(op: &str, opset: i64, attrs: &[(&str, Attribute)], ins: &[Option<&Tensor>]) -> String {
    match build_op(op, attrs, opset, &[]) {
        Err(e) => e.to_string(),
        Ok(o) => o.run(ins).unwrap_err().to_string(),
    }
}

#[test]
fn quantize_spec_example() {
    let x = t(&[6], vec![0.0f32, 2.0, 3.0, 1000.0, -254.0, -1000.0]);
    let s = Tensor::scalar(2.0f32);
    let z = Tensor::scalar(128u8);
    let y = run("QuantizeLinear", 13, &[], &[Some(&x), Some(&s), Some(&z)]);
    assert_eq!(y, t(&[6], vec![128u8, 129, 130, 255, 1, 0]));
    // Default uint8 without zero point; half to even: 2.5 → 2, 3.5 → 4.
    let x = t1(vec![5.0f32, 7.0, -3.0]);
    let y = run("QuantizeLinear", 10, &[], &[Some(&x), Some(&s)]);
    assert_eq!(y, t1(vec![2u8, 4, 0]));
}

#[test]
fn quantize_per_axis_and_int_types() {
    let x = t(
        &[1, 3, 2],
        vec![-162.0f32, 10.0, -100.0, 232.0, -20.0, -50.0],
    );
    let s = t1(vec![2.0f32, 4.0, 5.0]);
    let z = t1(vec![84i8, 24, 96]);
    let y = run("QuantizeLinear", 13, &[], &[Some(&x), Some(&s), Some(&z)]);
    assert_eq!(y, t(&[1, 3, 2], vec![3i8, 89, -1, 82, 92, 86]));
    // int16 and uint16 saturate to their ranges.
    let x = t1(vec![1e9f32, -1e9, 3.0]);
    let one = Tensor::scalar(1.0f32);
    let y = run(
        "QuantizeLinear",
        21,
        &[],
        &[Some(&x), Some(&one), Some(&Tensor::scalar(0i16))],
    );
    assert_eq!(y, t1(vec![32767i16, -32768, 3]));
    let y = run(
        "QuantizeLinear",
        21,
        &[("output_dtype", Attribute::Int(4))],
        &[Some(&x), Some(&one)],
    );
    assert_eq!(y, t1(vec![65535u16, 0, 3]));
}

#[test]
fn quantize_blocked_matches_naive() {
    // x [3, 5], blocks of 2 along axis 1 → scale [3, 3].
    let xv: Vec<f32> = (0..15).map(|i| i as f32 * 3.7 - 20.0).collect();
    let sv: Vec<f32> = (0..9).map(|i| 0.5 + i as f32 * 0.25).collect();
    let zv: Vec<i8> = (0..9).map(|i| i as i8 - 4).collect();
    let y = run(
        "QuantizeLinear",
        21,
        &[
            ("axis", Attribute::Int(1)),
            ("block_size", Attribute::Int(2)),
        ],
        &[
            Some(&t(&[3, 5], xv.clone())),
            Some(&t(&[3, 3], sv.clone())),
            Some(&t(&[3, 3], zv.clone())),
        ],
    );
    let want: Vec<i8> = (0..15)
        .map(|i| {
            let (r, c) = (i / 5, i % 5);
            let k = r * 3 + c / 2;
            ((xv[i] / sv[k]).round_ties_even() as i32 + zv[k] as i32).clamp(-128, 127) as i8
        })
        .collect();
    assert_eq!(y, t(&[3, 5], want));
    let msg = fails(
        "QuantizeLinear",
        21,
        &[("block_size", Attribute::Int(2))],
        &[Some(&t(&[3, 5], xv)), Some(&t(&[3, 2], vec![1.0f32; 6]))],
    );
    assert!(msg.contains("blocked"), "{msg}");
}

#[test]
fn dequantize_examples() {
    let x = t1(vec![0u8, 3, 128, 255]);
    let s = Tensor::scalar(2.0f32);
    let z = Tensor::scalar(128u8);
    let y = run("DequantizeLinear", 13, &[], &[Some(&x), Some(&s), Some(&z)]);
    assert_eq!(y, t1(vec![-256.0f32, -250.0, 0.0, 254.0]));
    // Per axis.
    let x = t(&[1, 3, 2], vec![3u8, 89, 34, 200, 74, 59]);
    let s = t1(vec![2.0f32, 4.0, 5.0]);
    let z = t1(vec![84u8, 24, 196]);
    let y = run("DequantizeLinear", 13, &[], &[Some(&x), Some(&s), Some(&z)]);
    assert_eq!(
        y,
        t(
            &[1, 3, 2],
            vec![-162.0f32, 10.0, 40.0, 704.0, -610.0, -685.0]
        )
    );
    // int32 input, float16 scale and output_dtype.
    let x = t1(vec![i32::MAX, -5]);
    let y = run(
        "DequantizeLinear",
        19,
        &[],
        &[Some(&x), Some(&Tensor::scalar(0.5f64))],
    );
    assert_eq!(y, t1(vec![i32::MAX as f64 * 0.5, -2.5]));
    let h = Tensor::scalar(half::f16::from_f32(0.5));
    let y = run(
        "DequantizeLinear",
        23,
        &[("output_dtype", Attribute::Int(1))],
        &[Some(&t1(vec![3i16])), Some(&h)],
    );
    assert_eq!(y, t1(vec![1.5f32]));
    let msg = fails(
        "DequantizeLinear",
        13,
        &[],
        &[
            Some(&x),
            Some(&Tensor::scalar(1.0f32)),
            Some(&Tensor::scalar(0u8)),
        ],
    );
    assert!(msg.contains("zero point type"), "{msg}");
}

#[test]
fn unsupported_types_are_clear_errors() {
    let msg = build_op(
        "QuantizeLinear",
        &[("output_dtype", Attribute::Int(24))],
        21,
        &[],
    )
    .unwrap_err()
    .to_string();
    // FLOAT8E8M0 is an element type, but no quantized output.
    assert!(msg.contains("float8e8m0"), "{msg}");
    let msg = fails(
        "DequantizeLinear",
        13,
        &[],
        &[Some(&t1(vec![1.0f32])), Some(&Tensor::scalar(1.0f32))],
    );
    assert!(msg.contains("not a supported quantized type"), "{msg}");
}

#[test]
fn dynamic_quantize_spec_example() {
    let x = t1(vec![0.0f32, 2.0, -3.0, -2.5, 1.34, 0.5]);
    let o = build_op("DynamicQuantizeLinear", &[], 11, &[]).unwrap();
    let out = o.run(&[Some(&x)]).unwrap();
    let scale = (2.0f32 + 3.0) / 255.0;
    let zp = (0.0f32 - -3.0 / scale).round_ties_even().clamp(0.0, 255.0);
    let want: Vec<u8> = [0.0f32, 2.0, -3.0, -2.5, 1.34, 0.5]
        .iter()
        .map(|&v| ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8)
        .collect();
    assert_eq!(out[0], t1(want));
    assert_eq!(out[1], Tensor::scalar(scale));
    assert_eq!(out[2], Tensor::scalar(153u8));
}

#[test]
fn quantize_is_thread_count_independent() {
    let xv: Vec<f32> = (0..70_000)
        .map(|i| (i as f32 * 0.37).sin() * 300.0)
        .collect();
    let x = t(&[7, 10_000], xv);
    let s = t1((0..10_000)
        .map(|i| 1.0 + i as f32 * 1e-3)
        .collect::<Vec<_>>());
    let go = |n: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap();
        pool.install(|| {
            let q = run("QuantizeLinear", 13, &[], &[Some(&x), Some(&s)]);
            let d = run("DequantizeLinear", 13, &[], &[Some(&q), Some(&s)]);
            (q, d)
        })
    };
    assert_eq!(go(1), go(3));
}

#[test]
fn integer_matmul_spec_examples() {
    let a = t(&[4, 3], vec![11u8, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0]);
    let b = t(&[3, 2], vec![1u8, 4, 2, 5, 3, 6]);
    let (az, bz) = (Tensor::scalar(12u8), Tensor::scalar(0u8));
    let y = run(
        "MatMulInteger",
        10,
        &[],
        &[Some(&a), Some(&b), Some(&az), Some(&bz)],
    );
    let want = vec![-38i32, -83, -44, -98, -50, -113, -56, -128];
    assert_eq!(y, t(&[4, 2], want));
    let a = t(&[2, 4], vec![208u8, 236, 0, 238, 3, 214, 255, 29]);
    let b = t(
        &[4, 3],
        vec![152u8, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247],
    );
    let f = |v: f32| Tensor::scalar(v);
    let (as_, bs, ys) = (f(0.0066), f(0.00705), f(0.0107));
    let (az, bz, yz) = (
        Tensor::scalar(113u8),
        Tensor::scalar(114u8),
        Tensor::scalar(118u8),
    );
    let ins = [&a, &as_, &az, &b, &bs, &bz, &ys, &yz].map(Some);
    let y = run("QLinearMatMul", 10, &[], &ins);
    assert_eq!(y, t(&[2, 3], vec![168u8, 115, 255, 1, 66, 151]));
}

#[test]
fn conv_integer_spec_example() {
    let x = t(&[1, 1, 3, 3], (2u8..11).collect());
    let w = t(&[1, 1, 2, 2], vec![1u8; 4]);
    let xz = Tensor::scalar(1u8);
    let y = run("ConvInteger", 10, &[], &[Some(&x), Some(&w), Some(&xz)]);
    assert_eq!(y, t(&[1, 1, 2, 2], vec![12i32, 16, 24, 28]));
}

#[test]
fn quantize_to_narrow_integers_saturates_to_their_range() {
    let x = t1(vec![0.0f32, 2.0, 3.0, 5.0, 100.0, -100.0]);
    let s = Tensor::scalar(2.0f32);
    let z = Tensor::scalar(I4::wrapping(1));
    let y = run("QuantizeLinear", 21, &[], &[Some(&x), Some(&s), Some(&z)]);
    // 1.5 and 2.5 round to even (2, 2), plus the zero point 1.
    assert_eq!(y.to_i64_vec().unwrap(), vec![1, 2, 3, 3, 7, -8]);
    assert_eq!(y.dtype(), crate::DType::I4);
    let y = run(
        "QuantizeLinear",
        21,
        &[("output_dtype", Attribute::Int(25))],
        &[Some(&x), Some(&s)],
    );
    assert_eq!(y.to_i64_vec().unwrap(), vec![0, 1, 2, 2, 3, 0]);
    let q = t1([0u8, 1, 7, 10, 15].map(|v| U4::wrapping(v as i64)).to_vec());
    let zq = Tensor::scalar(U4::wrapping(1));
    let y = run(
        "DequantizeLinear",
        21,
        &[],
        &[Some(&q), Some(&s), Some(&zq)],
    );
    assert_eq!(y, t1(vec![-2.0f32, 0.0, 12.0, 18.0, 28.0]));
    let q = t1(vec![I2::wrapping(-2), I2::wrapping(1)]);
    let y = run("DequantizeLinear", 21, &[], &[Some(&q), Some(&s)]);
    assert_eq!(y, t1(vec![-4.0f32, 2.0]));
}

#[test]
fn quantize_to_float8_and_float4() {
    let x = t1(vec![0.0f32, 1.0, 2.0, 1000.0, -1000.0, 0.3]);
    let s = Tensor::scalar(2.0f32);
    let z = Tensor::scalar(F8E4M3FN::from_bits(0));
    let y = run("QuantizeLinear", 21, &[], &[Some(&x), Some(&s), Some(&z)]);
    let want = [0.0, 0.5, 1.0, 448.0, -448.0, 0.15].map(|v| F8E4M3FN::from_f64(v, true));
    assert_eq!(y, t1(want.to_vec()));
    // Without saturation, overflow is infinity in E5M2.
    let big = t1(vec![1e6f32]);
    let z5 = Tensor::scalar(F8E5M2::from_bits(0));
    let y = run(
        "QuantizeLinear",
        21,
        &[("saturate", Attribute::Int(0))],
        &[Some(&big), Some(&s), Some(&z5)],
    );
    assert_eq!(y.to_f64_vec().unwrap(), vec![f64::INFINITY]);
    // A nonzero float8 zero point is refused.
    let bad = Tensor::scalar(F8E4M3FN::from_f64(1.0, true));
    let msg = fails("QuantizeLinear", 21, &[], &[Some(&x), Some(&s), Some(&bad)]);
    assert!(msg.contains("must be zero"), "{msg}");
    // float4 adds its zero point, then saturates at 6.
    let z4 = Tensor::scalar(F4E2M1::from_f64(1.0, true));
    let y = run("QuantizeLinear", 21, &[], &[Some(&x), Some(&s), Some(&z4)]);
    assert_eq!(y.to_f64_vec().unwrap(), vec![1.0, 1.5, 2.0, 6.0, -6.0, 1.0]);
    let q = t1([0x38u8, 0xc4, 0x7f].map(F8E4M3FN::from_bits).to_vec());
    let y = run("DequantizeLinear", 21, &[], &[Some(&q), Some(&s)]);
    let v = y.to_f64_vec().unwrap();
    assert_eq!(v[..2], [2.0, -6.0]);
    assert!(v[2].is_nan());
}

/// Batched, broadcast int8 products on the engine equal the shifted naive
/// product, for every signedness mix and per-column B zero points.
#[test]
fn engine_matmul_matches_the_naive_product() {
    use super::matmul::{engine_product, matmul_i32, plan, sub_zero_point};
    let bytes = |n: usize, seed: usize| -> Vec<u8> {
        (0..n)
            .map(|i| ((i * 37 + seed * 101) % 251) as u8)
            .collect()
    };
    let t8 = |shape: &[usize], v: Vec<u8>, signed: bool| {
        if signed {
            Tensor::from_vec(shape, v.into_iter().map(|b| b as i8).collect::<Vec<_>>()).unwrap()
        } else {
            Tensor::from_vec(shape, v).unwrap()
        }
    };
    for (sa, sb, a_signed, b_signed, per_col) in [
        (vec![3, 5, 7], vec![7, 9], false, true, false),
        (vec![2, 1, 33, 20], vec![3, 20, 40], true, false, true),
        (vec![7], vec![7, 4], false, false, true),
        (vec![4, 6], vec![6], true, true, false),
    ] {
        let p = plan("t", &sa, &sb).unwrap();
        let a = t8(&sa, bytes(sa.iter().product(), 1), a_signed);
        let b = t8(&sb, bytes(sb.iter().product(), 2), b_signed);
        let za = t8(&[], vec![if a_signed { 0xfd } else { 129 }], a_signed);
        let n = p.n;
        let zb = if per_col && sb.len() >= 2 {
            t8(&[n], (0..n).map(|j| (j * 7 % 9) as u8).collect(), b_signed)
        } else {
            t8(&[], vec![3], b_signed)
        };
        let want = matmul_i32(
            &p,
            &sub_zero_point("t", &a, Some(&za)).unwrap(),
            &sub_zero_point("t", &b, Some(&zb)).unwrap(),
        );
        let got = engine_product(&p, (&a, Some(&za)), (&b, Some(&zb)), None)
            .unwrap()
            .expect("the engine applies");
        assert_eq!(got, want, "{sa:?} x {sb:?}");
        // B packed once (a constant at build) for every batch: 2-D B only.
        let packed = super::matmul::prepack_b(Some(&b), Some(Some(&zb)));
        assert_eq!(packed.is_some(), sb.len() == 2, "{sb:?}");
        let got = engine_product(&p, (&a, Some(&za)), (&b, Some(&zb)), packed.as_ref())
            .unwrap()
            .expect("the engine applies");
        assert_eq!(got, want, "prepacked: {sa:?} x {sb:?}");
    }
}
