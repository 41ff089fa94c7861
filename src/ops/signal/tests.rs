//! Unit tests of the signal operators against a naive O(n²) DFT, round trips
//! (inverse of forward), and closed-form window values.

use crate::ir::attributes::Attribute;
use crate::ops::shape::test_util::*;
use crate::tensor::Tensor;
use std::f64::consts::PI;

fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}

/// A deterministic signal of `n` values.
fn signal(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 37 + 11) % 23) as f64 / 7.0 - 1.5)
        .collect()
}

/// Naive DFT of the complex sequence (re, im), zero-padded or cut to `n`.
fn naive(re: &[f64], im: &[f64], n: usize, sign: f64) -> Vec<(f64, f64)> {
    (0..n)
        .map(|k| {
            let mut acc = (0.0, 0.0);
            for t in 0..re.len().min(n) {
                let a = sign * 2.0 * PI * ((k * t) % n) as f64 / n as f64;
                acc.0 += re[t] * a.cos() - im[t] * a.sin();
                acc.1 += re[t] * a.sin() + im[t] * a.cos();
            }
            acc
        })
        .collect()
}

fn dft20(x: &Tensor, axis: i64, len: Option<i64>, attrs: &[(&str, Attribute)]) -> Tensor {
    let l = len.map(Tensor::scalar);
    let ins = vec![Some(x.clone()), l, Some(Tensor::scalar(axis))];
    run("DFT", 20, attrs, &ins).unwrap().remove(0)
}

#[test]
fn forward_dft_matches_naive_along_each_axis() {
    // Shape [2, 6, 5, 1]: real signals along axis 1 (length 6) and 2 (length 5).
    let x = signal(60);
    let xt = t(&[2, 6, 5, 1], x.clone());
    for (axis, n) in [(1usize, 6usize), (2, 5)] {
        let y = dft20(&xt, axis as i64, None, &[]).to_f64_vec().unwrap();
        for o in 0..2 {
            for i in 0..(30 / n) {
                let line: Vec<f64> = (0..n)
                    .map(|t| {
                        let (a, b) = if axis == 1 { (t, i) } else { (i, t) };
                        x[(o * 6 + a) * 5 + b]
                    })
                    .collect();
                let want = naive(&line, &vec![0.0; n], n, -1.0);
                for (k, w) in want.iter().enumerate() {
                    let (a, b) = if axis == 1 { (k, i) } else { (i, k) };
                    let p = ((o * 6 + a) * 5 + b) * 2;
                    assert!((y[p] - w.0).abs() < 1e-12 && (y[p + 1] - w.1).abs() < 1e-12);
                }
            }
        }
    }
    // Opset 17 takes the axis from its attribute.
    let y17 = run1("DFT", 17, &[("axis", int(2))], std::slice::from_ref(&xt));
    assert_eq!(y17, dft20(&xt, 2, None, &[]));
}

#[test]
fn onesided_and_dft_length() {
    let x = signal(10);
    let xt = t(&[1, 10, 1], x.clone());
    let y = dft20(&xt, 1, Some(16), &[("onesided", int(1))]);
    assert_eq!(y.shape(), &[1, 9, 2]);
    let want = naive(&x, &[0.0; 10], 16, -1.0);
    let y = y.to_f64_vec().unwrap();
    for (k, w) in want.iter().take(9).enumerate() {
        assert!((y[2 * k] - w.0).abs() < 1e-12 && (y[2 * k + 1] - w.1).abs() < 1e-12);
    }
    // Truncation to 7 points.
    let y = dft20(&xt, -2, Some(7), &[]).to_f64_vec().unwrap();
    let want = naive(&x[..7], &[0.0; 7], 7, -1.0);
    for (k, w) in want.iter().enumerate() {
        assert!((y[2 * k] - w.0).abs() < 1e-12 && (y[2 * k + 1] - w.1).abs() < 1e-12);
    }
}

#[test]
fn inverse_undoes_forward() {
    let x = t(&[3, 12, 2], signal(72));
    let f = dft20(&x, 1, None, &[]);
    let back = dft20(&f, 1, None, &[("inverse", int(1))]);
    assert_close(&back, &x, 1e-12);
    // irfft of rfft gives the real signal back, for even and odd lengths.
    for n in [10usize, 9] {
        let r = t(&[2, n, 1], signal(2 * n));
        let half = dft20(&r, 1, None, &[("onesided", int(1))]);
        let attrs = [("inverse", int(1)), ("onesided", int(1))];
        let back = dft20(&half, 1, Some(n as i64), &attrs);
        assert_close(&back, &r, 1e-12);
    }
}

#[test]
fn dft_rejects_bad_signals() {
    let x = t(&[4, 3], vec![0.0f32; 12]);
    let e = fails("DFT", 17, &[], &[x]);
    assert!(e.contains("last axis"), "{e}");
    let x = t(&[4, 2], vec![0.0f32; 8]);
    let e = fails("DFT", 17, &[("axis", int(1))], std::slice::from_ref(&x));
    assert!(e.contains("out of range"), "{e}");
    let e = fails("DFT", 20, &[], &[x, Tensor::scalar(0i64)]);
    assert!(e.contains("positive"), "{e}");
}

#[test]
fn stft_matches_windowed_naive_dft() {
    let x = signal(40);
    let w: Vec<f64> = (0..8).map(|i| 1.0 + i as f64 / 8.0).collect();
    let ins = [
        t(&[1, 40, 1], x.clone()),
        Tensor::scalar(5i64),
        t(&[8], w.clone()),
    ];
    let y = run1("STFT", 17, &[], &ins);
    assert_eq!(y.shape(), &[1, 7, 5, 2]);
    let y = y.to_f64_vec().unwrap();
    for f in 0..7 {
        let frame: Vec<f64> = (0..8).map(|t| x[f * 5 + t] * w[t]).collect();
        let want = naive(&frame, &[0.0; 8], 8, -1.0);
        for (k, v) in want.iter().take(5).enumerate() {
            let p = (f * 5 + k) * 2;
            assert!((y[p] - v.0).abs() < 1e-12 && (y[p + 1] - v.1).abs() < 1e-12);
        }
    }
    // Two-sided, no window, frame_length given.
    let ins = vec![
        Some(t(&[1, 40, 1], x)),
        Some(Tensor::scalar(16i64)),
        None,
        Some(Tensor::scalar(8i64)),
    ];
    let y = run("STFT", 17, &[("onesided", int(0))], &ins).unwrap();
    assert_eq!(y[0].shape(), &[1, 3, 8, 2]);
    let e = fails(
        "STFT",
        17,
        &[],
        &[t(&[1, 4, 1], vec![0.0f32; 4]), Tensor::scalar(0i64)],
    );
    assert!(e.contains("frame_step"), "{e}");
}

#[test]
fn window_values() {
    let win = |op: &str, n: i64, periodic: i64| -> Vec<f64> {
        let attrs = [("periodic", int(periodic)), ("output_datatype", int(11))];
        run1(op, 17, &attrs, &[Tensor::scalar(n)])
            .to_f64_vec()
            .unwrap()
    };
    let close = |a: Vec<f64>, b: &[f64]| {
        assert_eq!(a.len(), b.len());
        assert!(
            a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12),
            "{a:?} vs {b:?}"
        );
    };
    close(win("HannWindow", 4, 1), &[0.0, 0.5, 1.0, 0.5]);
    close(win("HannWindow", 5, 0), &[0.0, 0.5, 1.0, 0.5, 0.0]);
    let (a, b) = (25.0 / 46.0, 21.0 / 46.0);
    close(win("HammingWindow", 4, 1), &[a - b, a, a + b, a]);
    close(win("BlackmanWindow", 3, 0), &[0.0, 1.0, 0.0]);
    close(win("BlackmanWindow", 1, 0), &[1.0]);
    let f = run1("HannWindow", 17, &[], &[Tensor::scalar(3i32)]);
    assert_eq!(f.dtype(), crate::tensor::DType::F32);
    let e = fails("HannWindow", 17, &[], &[Tensor::scalar(-1i64)]);
    assert!(e.contains("negative"), "{e}");
}

#[test]
fn mel_weight_matrix_small_case() {
    // Two mel bins over 0–4 Hz at 8 Hz with an 8-point DFT: edges at bins 0, 1, 2, 3.
    let ins = [
        Tensor::scalar(2i32),
        Tensor::scalar(8i32),
        Tensor::scalar(8i32),
        Tensor::scalar(0.0f32),
        Tensor::scalar(4.0f32),
    ];
    let y = run1("MelWeightMatrix", 17, &[], &ins);
    let want = t(
        &[5, 2],
        vec![0.0f32, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    );
    assert_eq!(y, want);
    let mut bad = ins.to_vec();
    bad[4] = Tensor::scalar(100.0f32);
    let e = fails("MelWeightMatrix", 17, &[], &bad);
    assert!(e.contains("beyond"), "{e}");
}

#[test]
fn hostile_sizes_are_errors() {
    let x = t(&[1, 4, 1], vec![1.0f32; 4]);
    let e = fails("DFT", 20, &[], &[x.clone(), Tensor::scalar(i64::MAX)]);
    assert!(e.contains("too many elements"), "{e}");
    let ins = [
        x.clone(),
        Tensor::scalar(1i64),
        t(&[3], vec![1.0f32; 3]),
        Tensor::scalar(2i64),
    ];
    let e = fails("STFT", 17, &[], &ins);
    assert!(e.contains("does not match frame_length 2"), "{e}");
    let ins = vec![
        Some(x),
        Some(Tensor::scalar(1i64)),
        None,
        Some(Tensor::scalar(5i64)),
    ];
    let e = run("STFT", 17, &[], &ins).unwrap_err().to_string();
    assert!(e.contains("at most the signal length"), "{e}");
    let e = fails("HannWindow", 17, &[], &[Tensor::scalar(i64::MAX)]);
    assert!(e.contains("too many elements"), "{e}");
}
