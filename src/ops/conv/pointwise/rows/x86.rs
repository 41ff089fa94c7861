//! The AVX-512 tile of the rows kernel: up to 6 output channels (one
//! panel of the panel GEMM's packed W) × up to 4 vectors of 16 positions in
//! as many registers, summed over k with X's vectors (loaded from its rows
//! in place, the last under a mask of the tile's positions) times each
//! weight's broadcast, then bias, residual and the activation in registers
//! before one masked store per vector.

use super::super::super::panels::MR;
use super::super::clamp::Clamp;
use std::arch::x86_64::*;

/// Positions per vector.
const LANES: usize = 16;
/// Vectors of positions per tile at most.
pub(super) const VECS: usize = 4;

/// One tile's operands.
pub(super) struct Tile<'a> {
    /// X at the tile's first position: `k` rows at pitch `pitch`.
    pub x: *const f32,
    /// Distance between rows of X, and of Y and Z (the plane's positions).
    pub pitch: usize,
    pub k: usize,
    /// One panel of W packed by `panels::pack`: per step of k, 6 weights.
    pub w: &'a [f32],
    /// The biases of the tile's rows.
    pub bias: Option<&'a [f32]>,
    /// The residual at the tile's first output, laid out like Y.
    pub z: Option<*const f32>,
    /// Y at the tile's first output.
    pub y: *mut f32,
    pub clamp: Clamp,
}

/// Computes `rows` (1 to 6) output channels × `positions` (1 to 64)
/// positions.
///
/// # Safety
/// The CPU must have AVX-512F; `x` must hold `k` rows of `positions`
/// readable floats at `pitch`, `w` `k` steps of 6, `bias` (if any) `rows`
/// values, and `y` (and `z`) `rows` rows at `pitch`, each with `positions`
/// writable (readable) floats.
pub(super) unsafe fn tile(rows: usize, positions: usize, t: Tile) {
    let vecs = positions.div_ceil(LANES);
    let tail = positions - (vecs.max(1) - 1) * LANES;
    let last: __mmask16 = ((1u32 << tail) - 1) as u16;
    macro_rules! by {
        ($($r:literal)*) => {
            match (rows, vecs) {
                $(($r, 1) => tile_of::<$r, 1>(t, last),
                ($r, 2) => tile_of::<$r, 2>(t, last),
                ($r, 3) => tile_of::<$r, 3>(t, last),
                ($r, 4) => tile_of::<$r, 4>(t, last),)*
                _ => unreachable!("a tile has 1 to {MR} rows and 1 to {VECS} vectors"),
            }
        };
    }
    // SAFETY: this function's contract, passed on with R = `rows` and V
    // vectors covering `positions` (the last one's lanes in `last`).
    unsafe { by!(1 2 3 4 5 6) }
}

/// [`tile`] for R rows and V vectors of positions, the last one's lanes
/// in `last`.
///
/// # Safety
/// As for [`tile`].
#[target_feature(enable = "avx512f")]
unsafe fn tile_of<const R: usize, const V: usize>(t: Tile, last: __mmask16) {
    let (k, xs) = (t.k, t.pitch);
    assert!(t.w.len() >= k * MR && R <= MR);
    assert!(t.bias.is_none_or(|b| b.len() >= R));
    let mask = |v: usize| if v + 1 == V { last } else { !0 };
    let mut acc = [[_mm512_setzero_ps(); V]; R];
    let wp = t.w.as_ptr();
    for kk in 0..k {
        // SAFETY: row kk < k of X, its tile's positions readable (the
        // caller's contract); masked-off lanes are not read.
        let xr = unsafe { t.x.add(kk * xs) };
        let mut xv = [_mm512_setzero_ps(); V];
        for (v, s) in xv.iter_mut().enumerate() {
            // SAFETY: as above, vector v < V of the row.
            *s = unsafe { _mm512_maskz_loadu_ps(mask(v), xr.add(LANES * v)) };
        }
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: weight r < 6 of step kk < k (the assert above).
            let wb = _mm512_set1_ps(unsafe { *wp.add(kk * MR + r) });
            for (s, &xv) in a.iter_mut().zip(&xv) {
                *s = _mm512_fmadd_ps(wb, xv, *s);
            }
        }
    }
    // The epilogue in passes of small bodies, each unrolled whole, so the
    // accumulators stay in registers (one loop over them all, with every
    // step's branches, was left rolled and kept them in memory: a store
    // after each multiply-add).
    if let Some(b) = t.bias {
        let b = &b[..R];
        for (a, &b) in acc.iter_mut().zip(b) {
            let bv = _mm512_set1_ps(b);
            for s in a.iter_mut() {
                *s = _mm512_add_ps(*s, bv);
            }
        }
    }
    if let Some(z) = t.z {
        for (r, a) in acc.iter_mut().enumerate() {
            for (v, s) in a.iter_mut().enumerate() {
                // SAFETY: row r < R of Z, the tile's positions readable
                // (the caller's contract); masked-off lanes are not read.
                let zv = unsafe { _mm512_maskz_loadu_ps(mask(v), z.add(r * xs + LANES * v)) };
                *s = _mm512_add_ps(*s, zv);
            }
        }
    }
    macro_rules! each {
        (|$s:ident| $e:expr) => {
            for a in acc.iter_mut() {
                for $s in a.iter_mut() {
                    *$s = $e;
                }
            }
        };
    }
    match t.clamp {
        Clamp::None => {}
        Clamp::Relu => each!(|s| Clamp::Relu.apply(*s)),
        Clamp::Clip(lo, hi) => each!(|s| Clamp::Clip(lo, hi).apply(*s)),
        Clamp::HardSwish => each!(|s| Clamp::HardSwish.apply(*s)),
    }
    for (r, a) in acc.iter().enumerate() {
        for (v, &s) in a.iter().enumerate() {
            let at = r * xs + LANES * v;
            // SAFETY: row r < R of Y, the tile's positions writable (the
            // caller's contract); masked-off lanes are not written.
            unsafe { _mm512_mask_storeu_ps(t.y.add(at), mask(v), s) };
        }
    }
}
