//! The f32 Softmax and LogSoftmax of contiguous rows (the normalised axis
//! is the last one, as in attention) in three vectorisable passes (the
//! transform and the maximum; the exponentials and their sum; the scale),
//! compiled for the baseline target, AVX2 and AVX-512 with plain
//! multiplies and adds (the same bits on every path). The maximum and the
//! sum run over 32 interleaved partial results combined pairwise in a
//! fixed order, and each row is computed by one thread, so results do not
//! depend on the thread count.
//!
//! Optionally the row is first scaled and offset, `x · scale + mask`
//! (attention's `MatMul / √d + mask` fused into the Softmax), with the
//! same roundings as the separate Mul (or Div) and Add nodes.

use crate::ops::gemm::simd::multiversion;
use crate::ops::unary::kernel::exp_normal;

/// What a row kernel computes before normalising: `x · scale + mask`
/// (`scale` None: x as is; `divide`: `x / scale` instead).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pre<'a> {
    /// Multiplier (or divisor) of the input, if any.
    pub scale: Option<f32>,
    /// Whether the scale divides rather than multiplies (a Div node).
    pub divide: bool,
    /// The additive mask row (same length as the row), if any.
    pub mask: Option<&'a [f32]>,
}

/// `1 / k` when it is exact and dividing by `k` rounds exactly as
/// multiplying by it does: `k` a power of two whose reciprocal is a normal
/// number (attention's `√d` for d = 64 is 8).
#[inline(always)]
fn exact_reciprocal(k: f32) -> Option<f32> {
    let bits = k.abs().to_bits();
    let exponent = (bits >> 23) as i32 - 127;
    (bits & 0x7f_ffff == 0 && (-126..=126).contains(&exponent)).then(|| 1.0 / k)
}

/// Below this, `e^x` is taken as +0: its exact value is at most a few
/// subnormal steps (under `f32::MIN_POSITIVE`), and producing subnormals
/// costs a microcode assist per vector on x86. An attention mask of
/// −10 000 on one column in seven made the whole Softmax twice as slow.
const FLUSH_BELOW: f32 = -87.0;

/// `e^x`, or +0 for `x` below [`FLUSH_BELOW`] (−∞ included; NaN stays NaN).
/// Against a row's largest element the flushed terms cannot move the sum,
/// which is at least 1.
#[inline(always)]
fn exp_or_zero(x: f32) -> f32 {
    let low = x < FLUSH_BELOW;
    // x is a row's element less the row's largest: at most 0, or NaN.
    let e = exp_normal(if low { FLUSH_BELOW } else { x });
    if low {
        0.0
    } else {
        e
    }
}

/// Lanes of the partial maxima and sums: two AVX-512 vectors, so each pass
/// keeps two independent chains in flight.
const LANES: usize = 32;

/// The sum of the lanes, pairwise in a fixed order.
#[inline(always)]
fn reduce_sum(mut acc: [f32; LANES]) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for k in 0..width {
            acc[k] += acc[k + width];
        }
        width /= 2;
    }
    acc[0]
}

/// The largest lane, pairwise (a NaN element never enters a lane; it
/// reaches the result through the exponentials and their sum).
#[inline(always)]
fn reduce_max(mut acc: [f32; LANES]) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for k in 0..width {
            let v = acc[k + width];
            max_into(&mut acc[k], v);
        }
        width /= 2;
    }
    acc[0]
}

#[inline(always)]
fn max_into(acc: &mut f32, v: f32) {
    *acc = if v > *acc { v } else { *acc };
}

/// `d = pre(s)`, returning the largest element, in one pass. The scale is
/// resolved once per row, each case its own loop (no measurable change
/// against resolving it inside the loop, where the compiler hoisted it).
#[inline(always)]
fn transform_max(s: &[f32], d: &mut [f32], pre: Pre<'_>) -> f32 {
    match (pre.scale, pre.divide) {
        (Some(k), true) => match exact_reciprocal(k) {
            // x / 2^e and x · 2^-e are the same correctly rounded value.
            Some(r) => map_max(s, d, pre.mask, |v| v * r),
            None => map_max(s, d, pre.mask, |v| v / k),
        },
        (Some(k), false) => map_max(s, d, pre.mask, |v| v * k),
        (None, _) => map_max(s, d, pre.mask, |v| v),
    }
}

/// `d = f(s) (+ mask)`, returning the largest element.
#[inline(always)]
fn map_max(s: &[f32], d: &mut [f32], mask: Option<&[f32]>, f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let done = d.len() / LANES * LANES;
    match mask {
        Some(m) => {
            let chunks = d[..done].chunks_exact_mut(LANES).zip(s.chunks_exact(LANES));
            for ((dc, sc), mc) in chunks.zip(m.chunks_exact(LANES)) {
                for k in 0..LANES {
                    dc[k] = f(sc[k]) + mc[k];
                    max_into(&mut acc[k], dc[k]);
                }
            }
            for (k, i) in (done..d.len()).enumerate() {
                d[i] = f(s[i]) + m[i];
                max_into(&mut acc[k], d[i]);
            }
        }
        None => {
            for (dc, sc) in d[..done].chunks_exact_mut(LANES).zip(s.chunks_exact(LANES)) {
                for k in 0..LANES {
                    dc[k] = f(sc[k]);
                    max_into(&mut acc[k], dc[k]);
                }
            }
            for (k, i) in (done..d.len()).enumerate() {
                d[i] = f(s[i]);
                max_into(&mut acc[k], d[i]);
            }
        }
    }
    reduce_max(acc)
}

/// `d = e^(d - max)`, returning the sum, in one pass.
#[inline(always)]
fn exp_sum(d: &mut [f32], max: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut dc = d.chunks_exact_mut(LANES);
    for c in &mut dc {
        for k in 0..LANES {
            c[k] = exp_or_zero(c[k] - max);
            acc[k] += c[k];
        }
    }
    for (k, v) in dc.into_remainder().iter_mut().enumerate() {
        *v = exp_or_zero(*v - max);
        acc[k] += *v;
    }
    reduce_sum(acc)
}

/// The sum of `e^(v - max)` over a row (`d` unchanged).
#[inline(always)]
fn sum_exp(d: &[f32], max: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut dc = d.chunks_exact(LANES);
    for c in &mut dc {
        for k in 0..LANES {
            acc[k] += exp_or_zero(c[k] - max);
        }
    }
    for (k, &v) in dc.remainder().iter().enumerate() {
        acc[k] += exp_or_zero(v - max);
    }
    reduce_sum(acc)
}

multiversion! {
    wide
    /// Softmax (or, with `log`, LogSoftmax) of row `s` into `d` (same
    /// length), after the `pre` transform: three passes (transform and
    /// maximum; exponentials and their sum; scale), each over
    /// [`LANES`]-wide partial results combined in a fixed order.
    pub(crate) fn softmax_row(s: &[f32], d: &mut [f32], log: bool, pre: Pre<'_>) {
        let max = transform_max(s, d, pre);
        if log {
            let l = sum_exp(d, max).ln();
            d.iter_mut().for_each(|o| *o = *o - max - l);
        } else {
            let r = 1.0 / exp_sum(d, max);
            d.iter_mut().for_each(|o| *o *= r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[f64], log: bool) -> Vec<f64> {
        let max = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = x.iter().map(|v| (v - max).exp()).sum();
        x.iter()
            .map(|v| {
                if log {
                    v - max - sum.ln()
                } else {
                    (v - max).exp() / sum
                }
            })
            .collect()
    }

    #[test]
    fn rows_match_f64_reference_with_scale_and_mask() {
        for n in [1usize, 5, 8, 13, 128, 197] {
            let s: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.9)
                .collect();
            let mask: Vec<f32> = (0..n)
                .map(|i| if i % 4 == 1 { -1e4 } else { 0.5 })
                .collect();
            for (log, scale, divide, masked) in [
                (false, None, false, false),
                (true, None, false, false),
                (false, Some(8.0f32), true, true),
                (true, Some(0.125f32), false, true),
            ] {
                let pre = Pre {
                    scale,
                    divide,
                    mask: masked.then_some(&mask[..]),
                };
                let x: Vec<f64> = s
                    .iter()
                    .zip(&mask)
                    .map(|(&v, &m)| {
                        let v = match (scale, divide) {
                            (Some(k), true) => v / k,
                            (Some(k), false) => v * k,
                            _ => v,
                        };
                        (if masked { v + m } else { v }) as f64
                    })
                    .collect();
                let want = naive(&x, log);
                let mut got = vec![0.0f32; n];
                softmax_row(&s, &mut got, log, pre);
                for (g, w) in got.iter().zip(&want) {
                    let tol = 1e-6 * (1.0 + w.abs());
                    assert!((*g as f64 - w).abs() <= tol, "n {n}, log {log}: {g} vs {w}");
                }
            }
        }
    }

    /// Dividing by a power of two is done as a multiply, with the same bits
    /// as the division for every input, subnormals and huge values included;
    /// other divisors keep the division.
    #[test]
    fn power_of_two_divisors_multiply_with_the_same_bits() {
        for k in [8.0f32, 0.125, -4.0, 2f32.powi(126), 2f32.powi(-126)] {
            let r = exact_reciprocal(k).expect("a power of two");
            for bits in (0u32..u32::MAX).step_by(65_537) {
                let v = f32::from_bits(bits);
                let (a, b) = (v / k, v * r);
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{v} / {k}"
                );
            }
        }
        for k in [
            3.0f32,
            8.5,
            0.0,
            f32::INFINITY,
            f32::NAN,
            2f32.powi(127),
            2f32.powi(-127),
        ] {
            assert_eq!(exact_reciprocal(k), None, "{k}");
        }
    }

    /// The kernel's fixed order written out one element at a time: element
    /// i goes to partial i mod LANES, the partials are combined pairwise.
    fn fixed_order(s: &[f32], log: bool, pre: Pre<'_>) -> Vec<f32> {
        let x: Vec<f32> = s
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let v = pre
                    .scale
                    .map_or(v, |k| if pre.divide { v / k } else { v * k });
                pre.mask.map_or(v, |m| v + m[i])
            })
            .collect();
        let mut top = [f32::NEG_INFINITY; LANES];
        x.iter()
            .enumerate()
            .for_each(|(i, &v)| max_into(&mut top[i % LANES], v));
        let max = reduce_max(top);
        let e: Vec<f32> = x.iter().map(|&v| exp_or_zero(v - max)).collect();
        let mut sum = [0.0f32; LANES];
        e.iter().enumerate().for_each(|(i, &v)| sum[i % LANES] += v);
        let total = reduce_sum(sum);
        if log {
            let l = total.ln();
            x.iter().map(|&v| v - max - l).collect()
        } else {
            let r = 1.0 / total;
            e.iter().map(|&v| v * r).collect()
        }
    }

    /// Every row length, whole chunks and tails alike, gives the bits of
    /// the element-by-element fixed order, on whichever vector path this
    /// CPU takes: the lanes a tail lacks enter neither the maximum nor the
    /// sum.
    #[test]
    fn every_length_gives_the_fixed_order_bits() {
        for n in (1usize..=70).chain([96, 127, 197]) {
            // Largest values in the last lanes, where a tail ends.
            let s: Vec<f32> = (0..n)
                .map(|i| (i as f32 * 0.37).sin() * 3.0 + i as f32 * 0.05)
                .collect();
            let mask: Vec<f32> = (0..n)
                .map(|i| if i % 5 == 2 { -1e4 } else { -0.25 })
                .collect();
            for log in [false, true] {
                for pre in [
                    Pre::default(),
                    Pre {
                        scale: Some(3.0),
                        divide: true,
                        mask: Some(&mask),
                    },
                ] {
                    let mut got = vec![0.0f32; n];
                    softmax_row(&s, &mut got, log, pre);
                    let want = fixed_order(&s, log, pre);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "n {n}, log {log}, {pre:?}");
                }
            }
        }
    }

    /// Terms far below the row's maximum are exactly zero, the rest are
    /// the unflushed exponentials, and the row still sums to one.
    #[test]
    fn terms_far_below_the_maximum_are_zero() {
        assert_eq!(exp_or_zero(-1e4).to_bits(), 0);
        assert_eq!(exp_or_zero(f32::NEG_INFINITY).to_bits(), 0);
        assert_eq!(exp_or_zero(-87.5).to_bits(), 0);
        assert_eq!(exp_or_zero(-86.5), exp_normal(-86.5));
        assert!(exp_or_zero(-86.5) >= f32::MIN_POSITIVE);
        assert_eq!(exp_or_zero(-3.0), exp_normal(-3.0));
        for i in 0..=8700 {
            let x = -0.01 * i as f32;
            let want = (x as f64).exp();
            let rel = (exp_or_zero(x) as f64 - want).abs() / want;
            assert!(rel < 2.5e-7, "e^{x}: relative error {rel:e}");
        }
        assert!(exp_or_zero(f32::NAN).is_nan());
        let s: Vec<f32> = (0..40).map(|i| i as f32 * 0.1).collect();
        let mask: Vec<f32> = (0..40)
            .map(|i| if i % 3 == 0 { -1e4 } else { 0.0 })
            .collect();
        let pre = Pre {
            mask: Some(&mask),
            ..Pre::default()
        };
        let mut d = vec![1.0f32; 40];
        softmax_row(&s, &mut d, false, pre);
        for (i, v) in d.iter().enumerate() {
            assert_eq!(*v == 0.0, i % 3 == 0, "element {i}: {v}");
        }
        assert!((d.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn nan_spreads_over_the_row() {
        let mut d = [0.0f32; 9];
        softmax_row(
            &[1.0, f32::NAN, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            &mut d,
            false,
            Pre::default(),
        );
        assert!(d.iter().all(|v| v.is_nan()));
    }
}
