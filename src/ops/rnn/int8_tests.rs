//! The int8 products against a direct evaluation of their definition:
//! quantize with DynamicQuantizeLinear's formula, sum the integer products,
//! scale; bit for bit.

use super::*;
use crate::ops::testutil::xorshift32;

/// DynamicQuantizeLinear's definition, one value at a time.
fn quantize_ref(x: &[f32]) -> (Vec<i32>, f32, i32) {
    let lo = x.iter().fold(0f32, |m, &v| m.min(v));
    let hi = x.iter().fold(0f32, |m, &v| m.max(v));
    let scale = if hi == lo { 1.0 } else { hi - lo } / 255.0;
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    let q = x
        .iter()
        .map(|&v| ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as i32)
        .collect();
    (q, scale, zp as i32)
}

/// One direction's gate columns for the rows of `x` (`rows × k`), plus
/// `bias`: `Σ_k (xq − zx)(w − zw) · (sx · sw) + bias`.
fn product_ref(x: &[f32], rows: usize, m: &Matrix, di: usize, bias: Option<&[f32]>) -> Vec<f32> {
    let [_, k, cols] = m.shape;
    let (xq, sx, zx) = quantize_ref(&x[..rows * k]);
    let mut out = vec![0f32; rows * cols];
    for r in 0..rows {
        for j in 0..cols {
            let p = if m.scale.len() == m.shape[0] {
                di
            } else {
                di * cols + j
            };
            let mut acc = 0i32;
            for kk in 0..k {
                let w = m.value(di, kk, j);
                acc += (xq[r * k + kk] - zx) * (w - m.zero[p]);
            }
            let v = acc as f32 * (sx * m.scale[p]);
            out[r * cols + j] = match bias {
                Some(b) => v + b[j],
                None => v,
            };
        }
    }
    out
}

/// Random quantized weights with their parameters.
type Matrix = QuantizedParts;

impl Matrix {
    fn random(
        next: &mut impl FnMut() -> u32,
        shape: [usize; 3],
        signed: bool,
        per_col: bool,
    ) -> Matrix {
        let [dirs, k, cols] = shape;
        let per = if per_col { dirs * cols } else { dirs };
        let bytes = (0..dirs * k * cols).map(|_| next() as u8).collect();
        let scale = (0..per).map(|i| 0.002 + 0.001 * (i % 7) as f32).collect();
        let zero = (0..per)
            .map(|i| {
                let z = (i % 5) as i32 * 3;
                if signed {
                    z - 6
                } else {
                    120 + z
                }
            })
            .collect();
        Matrix {
            bytes,
            signed,
            shape,
            scale,
            zero,
        }
    }

    fn value(&self, di: usize, kk: usize, j: usize) -> i32 {
        let [_, k, cols] = self.shape;
        let b = self.bytes[(di * k + kk) * cols + j];
        if self.signed {
            b as i8 as i32
        } else {
            b as i32
        }
    }
}

fn floats(next: &mut impl FnMut() -> u32, n: usize, shift: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0 + shift)
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn projection_and_steps_equal_the_definition() {
    let mut next = xorshift32(7);
    // (dirs, input, hidden, gates·hidden, rows/batch); K not a multiple of
    // four, one direction and two, s8 and u8, per direction and per column.
    for (case, &(dirs, input, hidden, rows)) in [(1, 5, 3, 1), (2, 13, 6, 4), (2, 64, 16, 50)]
        .iter()
        .enumerate()
    {
        let gh = 4 * hidden;
        for (signed, per_col) in [(true, false), (false, true), (true, true)] {
            let w = Matrix::random(&mut next, [dirs, input, gh], signed, per_col);
            let r = Matrix::random(&mut next, [dirs, hidden, gh], !signed, per_col);
            let weights = Int8Weights::new(w.view(), r.view()).expect("consistent weights");
            assert!(weights.fits(dirs, gh, input, hidden));
            assert!(!weights.fits(dirs, gh, input + 1, hidden));
            // Inputs all positive in one case: the range still includes 0.
            let x = floats(&mut next, rows * input, if case == 0 { 1.5 } else { 0.0 });
            let bias = floats(&mut next, dirs * gh, 0.0);
            let mut xw = vec![f32::NAN; rows * dirs * gh];
            weights.project(&x, rows, &bias, &mut xw);
            for di in 0..dirs {
                let want = product_ref(&x, rows, &w, di, Some(&bias[di * gh..(di + 1) * gh]));
                let got: Vec<f32> = xw
                    .chunks_exact(dirs * gh)
                    .flat_map(|row| row[di * gh..(di + 1) * gh].to_vec())
                    .collect();
                assert_eq!(bits(&got), bits(&want), "projection, case {case} dir {di}");
                // A step: the batch rows' hidden states, written with a
                // row stride wider than the gate columns.
                let h = floats(&mut next, rows * hidden, -0.2);
                let ld = gh + 3;
                let mut out = vec![f32::NAN; rows * ld];
                let mut scratch = StepScratch::default();
                weights.step(di, &h, rows, &mut out, ld, &mut scratch);
                let want = product_ref(&h, rows, &r, di, None);
                for bi in 0..rows {
                    let got = &out[bi * ld..bi * ld + gh];
                    assert_eq!(bits(got), bits(&want[bi * gh..(bi + 1) * gh]), "step");
                    assert!(out[bi * ld + gh..(bi + 1) * ld].iter().all(|v| v.is_nan()));
                }
            }
        }
    }
}

#[test]
fn inconsistent_weights_are_refused() {
    let mut next = xorshift32(3);
    let w = Matrix::random(&mut next, [2, 4, 8], true, false);
    let r = Matrix::random(&mut next, [2, 2, 8], true, false);
    assert!(Int8Weights::new(w.view(), r.view()).is_some());
    // Directions, columns, scales and zero points that disagree.
    let one_dir = Matrix::random(&mut next, [1, 2, 8], true, false);
    assert!(Int8Weights::new(w.view(), one_dir.view()).is_none());
    let narrow = Matrix::random(&mut next, [2, 2, 4], true, false);
    assert!(Int8Weights::new(w.view(), narrow.view()).is_none());
    let mut bad = r.view();
    bad.scale = &r.scale[..1];
    assert!(Int8Weights::new(w.view(), bad).is_none());
    let mut bad = r.view();
    bad.zero = &[];
    assert!(Int8Weights::new(w.view(), bad).is_none());
    let mut bad = r.view();
    bad.bytes = &r.bytes[1..];
    assert!(Int8Weights::new(w.view(), bad).is_none());
}
