//! The aarch64 int8 micro-kernels: one [`MR`] × [`NR`] tile of exact i32
//! sums `Σ_k w[r][k] · x[k][c]` (u8 × s8), as the portable kernel computes
//! them, in NEON registers.
//!
//! NEON multiplies s8 by s8, so X's bytes are flipped to s8 (`x ^ 0x80` is
//! `x − 128`) and the sum corrected: `Σ w·x = Σ w·(x − 128) + 128·Σ w`,
//! with `Σ w` per row summed by the same kernel. Every step is exact, so
//! the tile equals the portable kernel's (modulo 2³², as its wrapping
//! adds).
//!
//! - **Dot** (ARMv8.2 dotprod, run-time detected): `sdot` by lane adds four
//!   products into each i32 lane, one instruction per 4 columns × 4 k of a
//!   row. The dotprod intrinsics are not stable in Rust, so `sdot` is
//!   written as inline assembly (one instruction, registers only).
//! - **Widening** (every ARMv8.0 core): `smull` multiplies eight byte pairs
//!   into i16 (|product| ≤ 2¹⁴: exact), `sadalp` adds neighbouring pairs
//!   into i32 lanes; a final pairwise add gives each column's sum.

use super::{Tile, MR, NR};
use std::arch::aarch64::*;

/// True when the CPU has the dot-product instructions (ARMv8.2 dotprod).
pub(crate) fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

/// `x ^ 0x80` of 16 bytes at `p`, as s8: `x − 128`.
///
/// # Safety
/// `p` must hold 16 readable bytes.
#[inline(always)]
unsafe fn load_flipped(p: *const u8) -> int8x16_t {
    // SAFETY: 16 readable bytes at `p` (the contract); NEON is part of
    // every aarch64 target.
    unsafe { vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p), vdupq_n_u8(0x80))) }
}

/// `acc[i] += Σ_j x[4i + j] · w[4L + j]`: `sdot` by lane `L`.
///
/// Only inlined into functions compiled with dotprod (the assembler
/// accepts `sdot` there).
///
/// # Safety
/// The CPU must have dotprod.
#[inline(always)]
pub(crate) unsafe fn sdot_lane<const L: i32>(
    acc: int32x4_t,
    x: int8x16_t,
    w: int8x16_t,
) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: one instruction on registers only, no memory, no flags; the
    // CPU has dotprod (the contract).
    unsafe {
        std::arch::asm!(
            "sdot {acc:v}.4s, {x:v}.16b, {w:v}.4b[{lane}]",
            acc = inout(vreg) acc,
            x = in(vreg) x,
            w = in(vreg) w,
            lane = const L,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    acc
}

/// `acc[i] += Σ_j x[4i + j]`: the row sums of four rows of W (`sdot`
/// against ones).
///
/// # Safety
/// The CPU must have dotprod.
#[inline(always)]
unsafe fn sdot_ones(acc: int32x4_t, w: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: as for `sdot_lane`.
    unsafe {
        std::arch::asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {ones:v}.16b",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            ones = in(vreg) vdupq_n_s8(1),
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    acc
}

// The kernels below are written for tiles of 8 rows and 32 columns.
const _: () = assert!(MR == 8 && NR == 32);

/// `128 · Σ_k w[r][k]` of the 8 rows (wrapping), `sum` adding four rows'
/// sums of one group into a vector.
///
/// # Safety
/// `w` must hold `k4 · MR · 4` bytes.
#[inline(always)]
unsafe fn corrections(
    w: *const i8,
    k4: usize,
    sum: impl Fn(int32x4_t, int8x16_t) -> int32x4_t,
) -> [i32; MR] {
    // SAFETY: NEON is part of every aarch64 target; registers only.
    let mut s = [unsafe { vdupq_n_s32(0) }; 2];
    for g in 0..k4 {
        // SAFETY: group g < k4 of MR·4 = 32 bytes of `w` (the contract),
        // two vectors of 16.
        let (w0, w1) = unsafe {
            let wg = w.add(g * MR * 4);
            (vld1q_s8(wg), vld1q_s8(wg.add(16)))
        };
        s[0] = sum(s[0], w0);
        s[1] = sum(s[1], w1);
    }
    let mut fix = [0i32; MR];
    // SAFETY: two vectors of 4 into the local MR = 8 values.
    unsafe {
        vst1q_s32(fix.as_mut_ptr(), vshlq_n_s32::<7>(s[0]));
        vst1q_s32(fix.as_mut_ptr().add(4), vshlq_n_s32::<7>(s[1]));
    }
    fix
}

/// The tile on `sdot`: 8 rows × 8 columns (16 accumulators) per pass over
/// k, four passes.
///
/// # Safety
/// The CPU must have dotprod; `w` must hold `k4 · MR · 4` bytes and `x`
/// `k4 · NR · 4`.
#[target_feature(enable = "dotprod")]
pub(super) unsafe fn tile_dot(w: &[i8], x: &[u8], k4: usize, out: &mut Tile) {
    assert!(w.len() >= k4 * MR * 4 && x.len() >= k4 * NR * 4);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    // SAFETY: the CPU has dotprod (the contract) for the `sdot`s, and the
    // assert above bounds every read: group g < k4 of `w` (MR·4 bytes) and
    // bytes 32·quarter..32·quarter + 32 < NR·4 of group g of `x`; `store`
    // writes quarter < NR/8 of the tile.
    unsafe {
        let fix = corrections(wp, k4, |s, v| sdot_ones(s, v));
        for quarter in 0..NR / 8 {
            let mut acc = [[vdupq_n_s32(0); 2]; MR];
            for g in 0..k4 {
                let xg = xp.add(g * NR * 4 + quarter * 32);
                let x0 = load_flipped(xg);
                let x1 = load_flipped(xg.add(16));
                let wg = wp.add(g * MR * 4);
                let (w0, w1) = (vld1q_s8(wg), vld1q_s8(wg.add(16)));
                macro_rules! rows {
                ($($r:literal $w:ident $l:literal),*) => {$(
                    acc[$r][0] = sdot_lane::<$l>(acc[$r][0], x0, $w);
                    acc[$r][1] = sdot_lane::<$l>(acc[$r][1], x1, $w);
                )*};
            }
                rows!(0 w0 0, 1 w0 1, 2 w0 2, 3 w0 3, 4 w1 0, 5 w1 1, 6 w1 2, 7 w1 3);
            }
            store(&acc, &fix, out, quarter);
        }
    }
}

/// `Σ_j w[4i + j]` added to `acc[i]` without dotprod: widen and add pairs.
#[inline(always)]
fn row_sums_widening(acc: int32x4_t, w: int8x16_t) -> int32x4_t {
    // Pairs of bytes into i16, then pairs of those into the i32 lanes.
    // SAFETY: NEON is part of every aarch64 target; registers only.
    unsafe { vpadalq_s16(acc, vpaddlq_s8(w)) }
}

/// The tile on ARMv8.0 NEON: 4 rows × 8 columns per pass (16
/// accumulators of column pairs), eight passes.
///
/// # Safety
/// `w` must hold `k4 · MR · 4` bytes and `x` `k4 · NR · 4`.
pub(super) unsafe fn tile_widening(w: &[i8], x: &[u8], k4: usize, out: &mut Tile) {
    assert!(w.len() >= k4 * MR * 4 && x.len() >= k4 * NR * 4);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    // SAFETY: the assert above bounds every read: group g < k4 of `w`
    // (MR·4 bytes, rows 4·half..4·half + 4 of it), bytes 32·quarter..
    // 32·quarter + 32 < NR·4 of group g of `x`; `store` writes quarter
    // < NR/8 of the tile.
    unsafe {
        let fix = corrections(wp, k4, row_sums_widening);
        for quarter in 0..NR / 8 {
            let mut sums = [[vdupq_n_s32(0); 2]; MR];
            for half in 0..MR / 4 {
                // acc[r][v][h]: row r, X vector v (4 columns), h the first or
                // last 2 columns' sums of k pairs.
                let mut acc = [[[vdupq_n_s32(0); 2]; 2]; 4];
                for g in 0..k4 {
                    let xg = xp.add(g * NR * 4 + quarter * 32);
                    let xs = [load_flipped(xg), load_flipped(xg.add(16))];
                    let wg = wp.add(g * MR * 4 + half * 16).cast::<i32>();
                    for (r, a) in acc.iter_mut().enumerate() {
                        // Row r's 4 weights repeated over the 4 columns.
                        let wr = vreinterpretq_s8_s32(vld1q_dup_s32(wg.add(r)));
                        for (v, &xv) in xs.iter().enumerate() {
                            let lo = vmull_s8(vget_low_s8(xv), vget_low_s8(wr));
                            let hi = vmull_high_s8(xv, wr);
                            a[v][0] = vpadalq_s16(a[v][0], lo);
                            a[v][1] = vpadalq_s16(a[v][1], hi);
                        }
                    }
                }
                for (r, a) in acc.iter().enumerate() {
                    // [c0, c1] pairs and [c2, c3] pairs into [c0, c1, c2, c3].
                    sums[half * 4 + r] =
                        [vpaddq_s32(a[0][0], a[0][1]), vpaddq_s32(a[1][0], a[1][1])];
                }
            }
            store(&sums, &fix, out, quarter);
        }
    }
}

/// Stores rows × columns `8·quarter .. 8·quarter + 8` of the tile: the
/// flipped sums plus each row's `128 · Σ w`.
///
/// # Safety
/// `quarter` must be below NR / 8.
#[inline(always)]
unsafe fn store(acc: &[[int32x4_t; 2]; MR], fix: &[i32; MR], out: &mut Tile, quarter: usize) {
    let o = out.as_mut_ptr();
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: columns 8·quarter..8·quarter + 8 ≤ NR (the contract) of
        // row r < MR of the MR × NR tile; NEON is part of every aarch64
        // target.
        unsafe {
            let f = vdupq_n_s32(fix[r]);
            let at = o.add(r * NR + quarter * 8);
            vst1q_s32(at, vaddq_s32(a[0], f));
            vst1q_s32(at.add(4), vaddq_s32(a[1], f));
        }
    }
}
