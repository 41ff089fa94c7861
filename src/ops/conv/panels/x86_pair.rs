//! The AVX-512 register block over two strips at once: up to 12 rows (two
//! panels) × 32 columns in 24 accumulators. Per step of k it loads one
//! vector from each strip and folds each of the 12 weights' broadcasts
//! into two multiply-adds, so 14 loads feed 24 of them, where the
//! one-strip block (`x86::block512`) needs 13 loads for 12 and is bound
//! by the two vector loads a cycle of Intel's cores. Each output is the
//! same in-order chain from zero as in the other blocks: the same bits.

use super::super::pointwise::clamp::Clamp;
use super::{BlockArgs, Epilogue, MR};
use std::arch::x86_64::*;

/// Where the second strip's vector lies, next to the first block's
/// arguments.
#[derive(Clone, Copy)]
pub(super) struct Second {
    /// The second strip's first row of X (at the same pitch as the first).
    pub x: *const f32,
    /// Columns from the first strip's outputs to the second's (16, or
    /// fewer where the last strip is pulled back over its neighbour).
    pub dj: usize,
}

/// `y[r·n + j] = act(Σ_k w[k·6 + r]·x[k·xs + j] + bias[r] + z[r·n + j])`
/// for R rows and the 16 columns of each strip: the first at `x` (outputs
/// at `y`), the second at `second.x` (outputs `second.dj` further on).
///
/// # Safety
/// The CPU must support AVX-512F. Each strip must hold `k` rows of 16 at
/// pitch `xs` (16 where `P`, a packed strip); `w` a panel per 6 rows,
/// each `k` groups of 6; `bias` (if any) R values; `y` (and `z`) R rows
/// of pitch `n` with `second.dj + 16` writable (readable) columns each.
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn block512_pair<const R: usize, const P: bool>(
    x: *const f32,
    second: Second,
    xs: usize,
    n: usize,
    k: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    z: Option<*const f32>,
    y: *mut f32,
    epi: &Epilogue,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let xs = if P { 16 } else { xs };
    assert!(w.len() >= R.div_ceil(MR) * k * MR);
    // SAFETY: the assert above: `w` holds a second panel where R > 6.
    let (w0, w1) = (w.as_ptr(), unsafe {
        w.as_ptr().add(if R > MR { k * MR } else { 0 })
    });
    for kk in 0..k {
        // SAFETY: row kk < k of each strip at pitch `xs`, 16 readable
        // columns (the caller's contract).
        let (a, b) = unsafe {
            (
                _mm512_loadu_ps(x.add(kk * xs)),
                _mm512_loadu_ps(second.x.add(kk * xs)),
            )
        };
        // SAFETY: group kk < k of each panel (the assert above).
        let (p0, p1) = unsafe { (w0.add(kk * MR), w1.add(kk * MR)) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: r < 6 in the first panel's group, r - 6 < 6 in the
            // second's; both groups are in `w` (the assert above).
            let wv = _mm512_set1_ps(unsafe {
                if r < MR {
                    *p0.add(r)
                } else {
                    *p1.add(r - MR)
                }
            });
            acc[0] = _mm512_fmadd_ps(wv, a, acc[0]);
            acc[1] = _mm512_fmadd_ps(wv, b, acc[1]);
        }
    }
    let clamp = match *epi {
        Epilogue::Relu => Clamp::Relu,
        Epilogue::Clip(lo, hi) => Clamp::Clip(lo, hi),
        Epilogue::HardSwish => Clamp::HardSwish,
        Epilogue::None | Epilogue::Other(_) => Clamp::None,
    };
    for (r, pair) in acc.iter().enumerate() {
        for (h, &v) in pair.iter().enumerate() {
            let at = r * n + h * second.dj;
            // SAFETY: row r < R of `z`, columns at..at + 16 within its
            // `second.dj + 16` readable ones (the caller's contract).
            let resid = z.map(|z| unsafe { _mm512_loadu_ps(z.add(at)) });
            let v = finish(v, bias.map(|b| b[r]), resid, clamp);
            // SAFETY: the same columns of row r of `y`, writable.
            unsafe { _mm512_storeu_ps(y.add(at), v) };
            if let Epilogue::Other(a) = *epi {
                // SAFETY: the 16 columns just stored, which nothing else
                // borrows while the slice lives.
                a.apply(unsafe { std::slice::from_raw_parts_mut(y.add(at), 16) });
            }
        }
    }
}

/// Bias, residual and the in-register activation (the pointwise kernels'
/// [`Clamp`], the same operations as the other blocks' epilogues), in
/// that order.
#[target_feature(enable = "avx512f")]
#[inline]
fn finish(v: __m512, bias: Option<f32>, resid: Option<__m512>, clamp: Clamp) -> __m512 {
    let mut v = v;
    if let Some(b) = bias {
        v = _mm512_add_ps(v, _mm512_set1_ps(b));
    }
    if let Some(z) = resid {
        v = _mm512_add_ps(v, z);
    }
    clamp.apply(v)
}

/// Runs [`block512_pair`] for `rows` (1 to 12) rows.
///
/// # Safety
/// As for [`block512_pair`] with R = `rows`.
pub(super) unsafe fn dispatch_pair(rows: usize, packed: bool, a: BlockArgs, second: Second) {
    let (x, xs, n, k, w, bias, z, y, epi) = a;
    macro_rules! rows {
        ($($r:literal)*) => {
            match (rows, packed) {
                $(($r, true) => block512_pair::<$r, true>(x, second, xs, n, k, w, bias, z, y, epi),
                ($r, false) => block512_pair::<$r, false>(x, second, xs, n, k, w, bias, z, y, epi),)*
                _ => unreachable!("two panels have 1 to {} rows", 2 * MR),
            }
        };
    }
    // SAFETY: this function's contract is the block's, passed on.
    unsafe { rows!(1 2 3 4 5 6 7 8 9 10 11 12) }
}
