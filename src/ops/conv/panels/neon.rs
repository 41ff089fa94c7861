//! The aarch64 register block of the panel GEMM: 6 rows × 16 (or 8)
//! columns in 24 (or 12) NEON registers of 4 floats. Per step of k it
//! loads the strip's 4 (or 2) vectors of X and the panel's 6 weights (one
//! vector and one pair), and does a fused multiply-add by lane for each
//! row and vector. Each output is the same in-order chain of fused
//! multiply-adds from zero as on x86-64, so the bits are the same on both.
//! NEON is part of every aarch64 target, so no detection is needed.

use super::{BlockArgs, Epilogue, MR};
use std::arch::aarch64::*;

/// Runs the block of `rows` rows (1 to 12: a second panel past 6) and 16
/// columns (`wide`) or 8; `packed` where X's rows are a packed strip's
/// (the pitch then a constant of the kernel). `_zmm` is x86's 512-bit
/// block and never set here.
///
/// # Safety
/// As for [`block`] with R = `rows` and V = 2 or 1, `w` holding a panel
/// per 6 rows.
pub(super) unsafe fn dispatch(rows: usize, wide: bool, _zmm: bool, packed: bool, a: BlockArgs) {
    if rows > MR {
        let (x, xs, n, k, w, bias, z, y, epi) = a;
        let first = (x, xs, n, k, &w[..k * MR], bias, z, y, epi);
        // SAFETY: the first 6 of this call's `rows` rows, with the first
        // panel of `w`: within what the caller vouched for.
        unsafe { dispatch(MR, wide, false, packed, first) };
        // SAFETY: `y` and `z` hold `rows` > 6 rows of pitch `n`, so row 6
        // is inside them, and the rest is the remaining `rows - 6` rows
        // with the second panel of `w`.
        unsafe {
            let (bias, z) = (bias.map(|b| &b[MR..]), z.map(|z| z.add(MR * n)));
            let rest = (x, xs, n, k, &w[k * MR..], bias, z, y.add(MR * n), epi);
            dispatch(rows - MR, wide, false, packed, rest)
        }
        return;
    }
    macro_rules! rows {
        ($($r:literal)*) => {
            match (rows, wide, packed) {
                $(($r, true, true) => block::<4, $r, true>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),
                ($r, false, true) => block::<2, $r, true>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),
                ($r, true, false) => block::<4, $r, false>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),
                ($r, false, false) => block::<2, $r, false>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),)*
                _ => unreachable!("a panel has 1 to {MR} rows"),
            }
        };
    }
    // SAFETY: this function's contract is the block's (R = `rows` ≤ 6),
    // passed on unchanged.
    unsafe { rows!(1 2 3 4 5 6) }
}

/// `acc + w[lane r of (lo, hi)] · x`, one fused multiply-add by lane.
#[inline(always)]
fn fma_row(
    acc: float32x4_t,
    x: float32x4_t,
    lo: float32x4_t,
    hi: float32x2_t,
    r: usize,
) -> float32x4_t {
    // SAFETY: NEON is part of every aarch64 target, and these intrinsics
    // work on registers only.
    unsafe {
        match r {
            0 => vfmaq_laneq_f32::<0>(acc, x, lo),
            1 => vfmaq_laneq_f32::<1>(acc, x, lo),
            2 => vfmaq_laneq_f32::<2>(acc, x, lo),
            3 => vfmaq_laneq_f32::<3>(acc, x, lo),
            4 => vfmaq_lane_f32::<0>(acc, x, hi),
            _ => vfmaq_lane_f32::<1>(acc, x, hi),
        }
    }
}

/// One block: `y[r·n + j] = act(Σ_k w[k·6 + r]·x[k·xs + j] + bias[r] +
/// z[r·n + j])` for R rows r and 4·Q columns j.
///
/// # Safety
/// `x` must hold `k` rows of 4·Q at pitch `xs` (which is 4·Q where `P`, a
/// packed strip), `w` `k` groups of 6, `bias` (if any) R values, and `y`
/// (and `z`) R rows of pitch `n` with 4·Q writable (readable) columns each.
#[target_feature(enable = "neon")]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const Q: usize, const R: usize, const P: bool>(
    x: *const f32,
    xs: usize,
    n: usize,
    k: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    z: Option<*const f32>,
    y: *mut f32,
    epi: &Epilogue,
) {
    assert!(w.len() >= k * MR);
    let mut acc = [[vdupq_n_f32(0.0); Q]; R];
    let wp = w.as_ptr();
    let xs = if P { 4 * Q } else { xs };
    for kk in 0..k {
        // SAFETY: `x` holds `k` rows of 4·Q at pitch `xs` (the caller's
        // contract), and kk < k.
        let xr = unsafe { x.add(kk * xs) };
        let mut xv = [vdupq_n_f32(0.0); Q];
        for (h, v) in xv.iter_mut().enumerate() {
            // SAFETY: columns 4h..4h+4 of row kk, h < Q.
            *v = unsafe { vld1q_f32(xr.add(4 * h)) };
        }
        // SAFETY: group kk < k of 6 weights in `w` (asserted above).
        let (lo, hi) = unsafe { (vld1q_f32(wp.add(kk * MR)), vld1_f32(wp.add(kk * MR + 4))) };
        for (r, a) in acc.iter_mut().enumerate() {
            for (h, v) in a.iter_mut().enumerate() {
                *v = fma_row(*v, xv[h], lo, hi, r);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (h, &v) in a.iter().enumerate() {
            let mut v = v;
            if let Some(b) = bias {
                v = vaddq_f32(v, vdupq_n_f32(b[r]));
            }
            if let Some(z) = z {
                // SAFETY: `z` holds R rows of pitch `n` with 4·Q readable
                // columns; r < R, h < Q.
                v = vaddq_f32(v, unsafe { vld1q_f32(z.add(r * n + 4 * h)) });
            }
            // FMAX/FMIN return NaN for a NaN operand, so NaN stays, as the
            // definitions (and x86's max/min with the bound first) keep it.
            match *epi {
                Epilogue::Relu => v = vmaxq_f32(vdupq_n_f32(0.0), v),
                Epilogue::Clip(lo, hi) => {
                    v = vmaxq_f32(vdupq_n_f32(lo), v);
                    v = vminq_f32(vdupq_n_f32(hi), v);
                }
                Epilogue::None | Epilogue::Other(_) => {}
            }
            // SAFETY: `y` holds R rows of pitch `n` with 4·Q writable
            // columns; r < R, h < Q.
            unsafe { vst1q_f32(y.add(r * n + 4 * h), v) };
        }
        if let Epilogue::Other(a) = *epi {
            // SAFETY: row r's 4·Q writable columns of `y`, which nothing
            // else borrows while the slice lives.
            a.apply(unsafe { std::slice::from_raw_parts_mut(y.add(r * n), 4 * Q) });
        }
    }
}
