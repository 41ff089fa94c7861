//! The f32 kernel of the exact (erf) GELU, `x · ½ · (1 + erf(x / √2))`,
//! branch-free so that the loop over a slice vectorises (compiled for the
//! baseline target, AVX2 with FMA and AVX-512; fused multiply-adds by name,
//! exact on every build, so the bits do not depend on the CPU path taken).
//!
//! `1 + erf(z)` is written through the complementary error function:
//! `2 − erfc(z)` for `z ≥ 0` and `erfc(|z|)` for `z < 0`, so the negative
//! tail keeps its relative precision (`1 + erf(z)` computed as written
//! cancels to nothing below `z ≈ −3.9`). `erfc(z) = t · e^(−z² + P(t))`
//! with `t = 1 / (1 + z/2)` and a degree-9 polynomial `P`: the Chebyshev
//! fit of Press et al. (Numerical Recipes, `erfcc`), fractional error below
//! 1.2e-7 for every `z ≥ 0`; with the f32 `exp` the GELU is within a few
//! ulp of the exact value (tested against f64 `libm::erf`). Beyond
//! `|x| = 13` the tail (below 1e-37) is held at its value at 13, so the
//! exponential's argument stays above −87 and its result a normal number.
//! Every element is computed alone, so results do not depend on the thread
//! count.
//!
//! The kernel works on blocks of [`BLOCK`] elements one step at a time
//! (every element's `t`, then every element's polynomial, ...): each step
//! is a few independent vectors, so the long dependency chain of one
//! element no longer serialises the loop (issue 43: 1.6× faster on AVX-512
//! than element by element, with the same operations and bits). Blocks of
//! 128 rather than 64, and the polynomial by Estrin's scheme rather than
//! Horner's (a shorter chain of dependent steps), take another 16 % off a
//! 784×768 GELU on Zen 4 (0.405 → 0.340 ms); 256 spills registers and is
//! slower. A single value goes through the same steps with a block of one.

use crate::ir::Activation;
use crate::ops::unary::kernel::exp_normal;
use crate::ops::util::par_spans;

/// Elements the slice kernels compute together.
pub(crate) const BLOCK: usize = 128;

/// The Numerical Recipes `erfcc` coefficients, lowest degree first.
const P: [f32; 10] = [
    -1.265_512_2,
    1.000_023_7,
    0.374_091_96,
    0.096_784_18,
    -0.186_288_06,
    0.278_868_07,
    -1.135_204,
    1.488_515_9,
    -0.822_152_2,
    0.170_872_77,
];

/// Applies `$e` for every lane `$k` of a block of `$n`.
macro_rules! lanes {
    ($n:expr, |$k:ident| $e:expr) => {
        for $k in 0..$n {
            $e;
        }
    };
}

/// `a · b + c` with one rounding (a fused multiply-add on every CPU the
/// kernels are compiled for; the same exact operation elsewhere).
#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// The erf GELU of a block of `N` values, step by step over the block.
///
/// `erfc(|x| / √2)` is `t · e^(hi + lo)` with the exponent `−x²/2 + P(t)`
/// carried as an unevaluated sum `hi + lo` (it reaches −87, where one f32
/// rounding of it costs 5e-6 of the result): `x²` as its rounding plus
/// the exact error (a fused multiply-add), the rounding error of `hi`
/// recovered exactly (two-sum), and `e^(hi + lo) ≈ e^hi · (1 + lo)`.
/// Fused multiply-adds throughout: 40-odd operations per element where
/// plain multiplies and adds took 70 (the fused GELU epilogue of a
/// 196×384 by 384×1536 product was a quarter of the layer's time).
#[inline(always)]
fn gelu_lanes<const N: usize>(x: &[f32; N], out: &mut [f32; N]) {
    let mut ax = [0.0f32; N];
    let mut t = [0.0f32; N];
    let mut p = [0.0f32; N];
    let mut lo = [0.0f32; N];
    lanes!(N, |k| ax[k] = x[k].abs().min(13.0));
    lanes!(N, |k| t[k] =
        1.0 / fma(ax[k], 0.5 * std::f32::consts::FRAC_1_SQRT_2, 1.0));
    // P(t) by Estrin's scheme: pairs, then powers t², t⁴, t⁸ (a short
    // chain of dependent steps, so the block keeps the vector units busy).
    lanes!(N, |k| {
        let t1 = t[k];
        let t2 = t1 * t1;
        let t4 = t2 * t2;
        let t8 = t4 * t4;
        let q01 = fma(P[1], t1, P[0]);
        let q23 = fma(P[3], t1, P[2]);
        let q45 = fma(P[5], t1, P[4]);
        let q67 = fma(P[7], t1, P[6]);
        let q89 = fma(P[9], t1, P[8]);
        let q03 = fma(q23, t2, q01);
        let q47 = fma(q67, t2, q45);
        p[k] = fma(q89, t8, fma(q47, t4, q03));
    });
    lanes!(N, |k| {
        let a = ax[k];
        let sq = a * a;
        let err = fma(a, a, -sq); // a² = sq + err exactly
        let half = -0.5 * sq; // exact
        let hi = half + p[k];
        let v = hi - p[k];
        lo[k] = fma(-0.5, err, (p[k] - (hi - v)) + (half - v));
        out[k] = hi;
    });
    lanes!(N, |k| out[k] = exp_normal(out[k]));
    lanes!(N, |k| {
        let c = t[k] * fma(out[k], lo[k], out[k]);
        let one_plus_erf = if x[k] >= 0.0 { 2.0 - c } else { c };
        out[k] = 0.5 * x[k] * one_plus_erf;
    });
}

/// The erf GELU of one f32 value (the same steps, and bits, as the slice
/// kernels).
#[inline(always)]
pub(crate) fn gelu_erf_f32(x: f32) -> f32 {
    let mut out = [0.0f32];
    gelu_lanes(&[x], &mut out);
    out[0]
}

/// Elements of the small blocks that take what whole [`BLOCK`]s leave.
const TAIL_BLOCK: usize = 16;

/// `xs[i] = gelu(xs[i])`, in whole blocks of [`BLOCK`], then the rest in
/// blocks of [`TAIL_BLOCK`] (the last padded), so that a slice of 300
/// (a fused epilogue's row over a group of panels) computes 304 values,
/// not 384. Every lane runs the same operations at either block size, so
/// the bits do not depend on where a block boundary falls. Inlined into
/// the caller's compiled variant.
#[inline(always)]
pub(crate) fn gelu_in_place(xs: &mut [f32]) {
    let mut whole = xs.chunks_exact_mut(BLOCK);
    for block in &mut whole {
        gelu_block::<BLOCK>(block);
    }
    for block in whole.into_remainder().chunks_mut(TAIL_BLOCK) {
        gelu_block::<TAIL_BLOCK>(block);
    }
}

/// `block[i] = gelu(block[i])` for a block of at most `N` values, through
/// a padded stack copy.
#[inline(always)]
fn gelu_block<const N: usize>(block: &mut [f32]) {
    let n = block.len();
    let mut x = [0.0f32; N];
    let mut y = [0.0f32; N];
    x[..n].copy_from_slice(block);
    gelu_lanes(&x, &mut y);
    block.copy_from_slice(&y[..n]);
}

/// GELU `act` (the erf or the tanh form, as the fused epilogues apply
/// it) of every element of `src` into `dst` (same length), split over the
/// current rayon pool; each element alone, so the thread count does not
/// change the bits.
pub(crate) fn gelu_into(act: Activation, src: &[f32], dst: &mut [f32]) {
    par_spans(dst, |start, span| {
        span.copy_from_slice(&src[start..start + span.len()]);
        act.apply(span);
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

    /// The blocked kernel gives the scalar kernel's bits at every length
    /// (full blocks and a padded tail) and at every offset into a block,
    /// also through the fused activation's in-place path.
    #[test]
    fn blocked_kernel_equals_scalar_at_every_length() {
        let src: Vec<f32> = (0..3 * BLOCK + 7)
            .map(|i| (i as f32 * 0.61).cos() * 14.0 - 0.5)
            .collect();
        for len in [
            0,
            1,
            5,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            2 * BLOCK + 3,
            BLOCK + 2 * TAIL_BLOCK + 5,
            src.len(),
        ] {
            let s = &src[src.len() - len..];
            let mut got = s.to_vec();
            gelu_in_place(&mut got);
            let mut fused = s.to_vec();
            crate::ir::Activation::Gelu.apply(&mut fused);
            for (i, &x) in s.iter().enumerate() {
                let want = gelu_erf_f32(x).to_bits();
                assert_eq!(got[i].to_bits(), want, "len {len}, x = {x}");
                assert_eq!(fused[i].to_bits(), want, "fused, len {len}, x = {x}");
            }
        }
    }

    /// Both forms over a slice: each element's scalar value (the tanh
    /// form's against the formula in f64 too), whatever the thread count.
    #[test]
    fn slice_kernel_equals_scalar_and_ignores_thread_count() {
        let src: Vec<f32> = (0..70_001).map(|i| (i as f32 * 0.37).sin() * 6.0).collect();
        for act in [Activation::Gelu, Activation::GeluTanh] {
            slice_matches_scalar(act, &src);
        }
        for &x in &src {
            let v = x as f64;
            let exact =
                0.5 * v * (1.0 + (0.797_884_560_802_865_4 * (v + 0.044_715 * v * v * v)).tanh());
            let got = Activation::GeluTanh.eval(x) as f64;
            assert!((got - exact).abs() <= 1e-6 * (1.0 + exact.abs()), "{x}");
        }
    }

    fn slice_matches_scalar(act: Activation, src: &[f32]) {
        let want: Vec<f32> = src.iter().map(|&x| act.eval(x)).collect();
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut got = vec![0.0; src.len()];
            pool.install(|| gelu_into(act, src, &mut got));
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{act:?}, {threads} threads"
            );
        }
    }
}
