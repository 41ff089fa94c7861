//! The f32 kernel of the exact (erf) GELU, `x · ½ · (1 + erf(x / √2))`,
//! branch-free so that the loop over a slice vectorises (compiled for the
//! baseline target and for AVX2, plain multiplies and adds in both, so the
//! bits do not depend on the CPU path taken).
//!
//! `1 + erf(z)` is written through the complementary error function:
//! `2 − erfc(z)` for `z ≥ 0` and `erfc(|z|)` for `z < 0`, so the negative
//! tail keeps its relative precision (`1 + erf(z)` computed as written
//! cancels to nothing below `z ≈ −3.9`). `erfc(z) = t · e^(−z² + P(t))`
//! with `t = 1 / (1 + z/2)` and a degree-9 polynomial `P`: the Chebyshev
//! fit of Press et al. (Numerical Recipes, `erfcc`), fractional error below
//! 1.2e-7 for every `z ≥ 0`; with the f32 `exp` the GELU is within a few
//! ulp of the exact value (tested against f64 `libm::erf`). Every element
//! is computed alone, so results do not depend on the thread count.

use crate::ops::gemm::simd::multiversion;
use crate::ops::unary::kernel::exp_f32;
use crate::ops::util::par_spans;

/// `erfc(x / √2)` for `x ≥ 0` (clamped at 20, where it underflows). The
/// exponent `−x²/2 + P(t)` reaches −200, where one f32 rounding of it costs
/// 1e-5 of the result, so it is carried as an unevaluated sum `hi + lo`:
/// `x` split into a 12-bit head (whose square is exact) and a tail, the
/// rounding error of `hi` recovered exactly (two-sum), and
/// `e^(hi + lo) ≈ e^hi · (1 + lo)`.
#[inline(always)]
fn erfc_scaled(x: f32) -> f32 {
    let x = x.min(20.0);
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let p = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_204
                                + t * (1.488_515_9 + t * (-0.822_152_2 + t * 0.170_872_77))))))));
    let head = f32::from_bits(x.to_bits() & 0xffff_f000);
    let a = -(head * head * 0.5); // exact
    let s = p - (x - head) * (x + head) * 0.5;
    let hi = s + a;
    let v = hi - s;
    let lo = (s - (hi - v)) + (a - v);
    t * (exp_f32(hi) * (1.0 + lo))
}

/// The erf GELU of one f32 value.
#[inline(always)]
pub(crate) fn gelu_erf_f32(x: f32) -> f32 {
    let c = erfc_scaled(x.abs());
    let one_plus_erf = if x >= 0.0 { 2.0 - c } else { c };
    0.5 * x * one_plus_erf
}

multiversion! {
    wide
    /// `dst[i] = gelu(src[i])`; the slices have equal lengths.
    fn gelu_slice(src: &[f32], dst: &mut [f32]) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = gelu_erf_f32(x);
        }
    }
}

/// The erf GELU of every element of `src` into `dst` (same length), split
/// over the current rayon pool.
pub(crate) fn gelu_erf(src: &[f32], dst: &mut [f32]) {
    par_spans(dst, |start, span| {
        gelu_slice(&src[start..start + span.len()], span);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `½ · x · erfc(−x / √2)`: the same value without the cancellation
    /// of `1 + erf` that loses every digit in f64 too below x ≈ −8.
    fn reference(x: f64) -> f64 {
        0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2)
    }

    /// Within a few ulp of the exact value over the whole range: relative
    /// error 1e-6 of the result plus an absolute 1e-30 (the far negative
    /// tail underflows).
    #[test]
    fn gelu_matches_f64_erf() {
        let mut worst = 0.0f64;
        for i in -200_000..=200_000 {
            let x = i as f32 * 1e-4;
            let got = gelu_erf_f32(x) as f64;
            let want = reference(x as f64);
            let err = (got - want).abs() / (want.abs() + 1e-30);
            worst = worst.max(err);
            assert!(err <= 1e-6, "x = {x}: {got} vs {want} (relative {err:e})");
        }
        assert!(worst > 0.0, "the approximation is not exact");
    }

    #[test]
    fn gelu_edge_values() {
        assert_eq!(gelu_erf_f32(0.0), 0.0);
        assert_eq!(gelu_erf_f32(f32::INFINITY), f32::INFINITY);
        assert!(gelu_erf_f32(f32::NAN).is_nan());
        assert_eq!(gelu_erf_f32(100.0), 100.0);
        let tail = gelu_erf_f32(-9.0) as f64;
        assert!((tail - reference(-9.0)).abs() <= 1e-6 * reference(-9.0).abs());
        assert!(gelu_erf_f32(-200.0).abs() < 1e-30);
    }

    #[test]
    fn slice_kernel_equals_scalar_and_ignores_thread_count() {
        let src: Vec<f32> = (0..70_001).map(|i| (i as f32 * 0.37).sin() * 6.0).collect();
        let want: Vec<f32> = src.iter().map(|&x| gelu_erf_f32(x)).collect();
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut got = vec![0.0; src.len()];
            pool.install(|| gelu_erf(&src, &mut got));
            assert!(got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
}
