//! The Winograd input transforms `V = Bᵀ·d·B` on AVX-512 (f32), for blocks
//! of tiles side by side along one tile row, one tile per lane.
//!
//! The portable [`input_block`](super::transform::input_block) copies each
//! input row into a segment and gathers every tile's taps from it lane by
//! lane; compiled for AVX2 that gather went through the stack and took
//! about a fifth of an F(4×4, 3×3) layer's time. Here each input row is
//! loaded once into two vectors (four for 16 tiles of F(4×4, 3×3), which
//! span 66 columns), and again from column m for the taps a permute of
//! those cannot reach; tap `j` of the row's tiles (columns `j`, `j + m`,
//! `j + 2m`, ... for output tiles of side m) is one two-source permute
//! (two, and a lane shuffle, for the 16 tiles). Columns outside the plane
//! or past the block's tiles load as zero, as the portable code reads
//! them. The arithmetic is the portable code's,
//! operation for operation (no fused multiply-adds), so every tile's
//! transform has the same bits on either path.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::transform::{InputBlock, LANES};

/// Transforms `blk` for F(4×4, 3×3) into `v` (position `p` of lane `l` at
/// `v[p·stride + l]`) when the CPU has AVX-512; returns whether it did.
pub(super) fn f4(blk: &InputBlock<f32>, v: &mut [f32], stride: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(lanes) = lanes_for(blk, v, 36, stride) {
        // SAFETY: the CPU has AVX-512 and `v` has room for every position
        // (both checked by `lanes_for`).
        unsafe {
            if lanes == LANES {
                avx512::f4_block::<LANES>(blk, v, stride)
            } else {
                avx512::f4_block::<{ LANES / 2 }>(blk, v, stride)
            }
        }
        return true;
    }
    let _ = (blk, v, stride);
    false
}

/// Transforms `blk` for F(2×2, 3×3) into `v`, as [`f4`] does.
pub(super) fn f2(blk: &InputBlock<f32>, v: &mut [f32], stride: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(lanes) = lanes_for(blk, v, 16, stride) {
        // SAFETY: as in `f4`.
        unsafe {
            if lanes == LANES {
                avx512::f2_block::<LANES>(blk, v, stride)
            } else {
                avx512::f2_block::<{ LANES / 2 }>(blk, v, stride)
            }
        }
        return true;
    }
    let _ = (blk, v, stride);
    false
}

/// The lanes a block of `blk.tiles` tiles takes (half of [`LANES`] for at
/// most half as many tiles, as on the portable path), where the CPU has
/// AVX-512, the block's plane is as large as it says and `v` has room for
/// `positions` rows of them at `stride`.
#[cfg(target_arch = "x86_64")]
fn lanes_for(blk: &InputBlock<f32>, v: &[f32], positions: usize, stride: usize) -> Option<usize> {
    let lanes = if blk.tiles <= LANES / 2 {
        LANES / 2
    } else {
        LANES
    };
    let fits = blk.tiles <= LANES
        && blk.plane.len() >= blk.width * blk.height
        && v.len() >= (positions - 1) * stride + lanes;
    (fits && crate::ops::gemm::simd::has_avx512()).then_some(lanes)
}

/// The columns `k` with `lo <= k < hi`, as bits of a segment of at most
/// 128 columns.
fn columns(lo: isize, hi: isize) -> u128 {
    let (lo, hi) = (lo.clamp(0, 127) as u32, hi.clamp(0, 127) as u32);
    if lo >= hi {
        return 0;
    }
    ((1u128 << hi) - 1) & !((1u128 << lo) - 1)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::columns;
    use crate::ops::conv::winograd::transform::InputBlock;
    use std::arch::x86_64::*;

    /// Taps `j < N` of every tile of the block in input row `y`: lane `l`
    /// of tap `j` is column `x0 + M·l + j`, zero outside the plane and
    /// past the block's `M·tiles + 2` columns. `L` tiles (at most 16).
    ///
    /// # Safety
    /// The CPU must have AVX-512F, and `blk.plane` hold `width × height`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn taps<const N: usize, const M: usize, const L: usize>(
        blk: &InputBlock<f32>,
        y: isize,
    ) -> [__m512; N] {
        // The segment's columns inside the plane's row and the block (at
        // most 4·16 + 2 of them); the loads read only those.
        let used = (M * blk.tiles + 2) as isize;
        let valid = if y >= 0 && (y as usize) < blk.height {
            columns((-blk.x0).max(0), (blk.width as isize - blk.x0).min(used))
        } else {
            0
        };
        let row = blk
            .plane
            .as_ptr()
            .wrapping_offset(y * blk.width as isize + blk.x0);
        let load = |o: usize| {
            // SAFETY: the mask keeps only the lanes of `valid`, columns of
            // the row inside the plane (the contract: `width × height`).
            unsafe { _mm512_maskz_loadu_ps((valid >> o) as u16, row.wrapping_add(o)) }
        };
        // 16 tiles of F(4×4, 3×3) span 66 columns: two halves of 8 tiles,
        // 32 columns apart. One permute of two vectors reaches 32 columns,
        // so the last taps of a half come from vectors loaded M columns on.
        let halves = M * L > 32;
        let per_perm = if halves { 8 } else { L };
        let near = 32 - M * (per_perm - 1);
        let vectors = |o: usize| {
            if halves {
                [load(o), load(o + 16), load(o + 32), load(o + 48)]
            } else {
                let zero = _mm512_setzero_ps();
                [load(o), load(o + 16), zero, zero]
            }
        };
        let from_start = vectors(0);
        let from_next = if N > near { vectors(M) } else { from_start };
        // Lane l reads lane M·l of two vectors (of each half's two).
        let idx = _mm512_setr_epi32(
            0,
            M as i32,
            2 * M as i32,
            3 * M as i32,
            4 * M as i32,
            5 * M as i32,
            6 * M as i32,
            7 * M as i32,
            (8 * M % 32) as i32,
            (9 * M % 32) as i32,
            (10 * M % 32) as i32,
            (11 * M % 32) as i32,
            (12 * M % 32) as i32,
            (13 * M % 32) as i32,
            (14 * M % 32) as i32,
            (15 * M % 32) as i32,
        );
        let mut out = [_mm512_setzero_ps(); N];
        for (j, tap) in out.iter_mut().enumerate() {
            let (v, shift) = if j < near {
                (&from_start, j)
            } else {
                (&from_next, j - M)
            };
            let at = _mm512_add_epi32(idx, _mm512_set1_epi32(shift as i32));
            let first = _mm512_permutex2var_ps(v[0], at, v[1]);
            *tap = if halves {
                let second = _mm512_permutex2var_ps(v[2], at, v[3]);
                _mm512_shuffle_f32x4::<0b0100_0100>(first, second)
            } else {
                first
            };
        }
        out
    }

    /// Stores the first `L` lanes of `x` at `v[at..]`.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `v` must hold `at + L`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn store<const L: usize>(v: &mut [f32], at: usize, x: __m512) {
        debug_assert!(at + L <= v.len());
        let keep = if L >= 16 { u16::MAX } else { (1u16 << L) - 1 };
        // SAFETY: the masked store writes v[at..at + L], which `v` holds
        // (the contract).
        unsafe { _mm512_mask_storeu_ps(v.as_mut_ptr().add(at), keep, x) };
    }

    /// F(4×4, 3×3)'s `Bᵀ·z`, as `f4::bt` computes it.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn bt6(z: &[__m512; 6]) -> [__m512; 6] {
        let (two, four, five) = (
            _mm512_set1_ps(2.0),
            _mm512_set1_ps(4.0),
            _mm512_set1_ps(5.0),
        );
        let [z0, z1, z2, z3, z4, z5] = *z;
        let (add, sub, mul) = (_mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps);
        [
            add(sub(mul(four, z0), mul(five, z2)), z4),
            sub(add(z3, z4), mul(four, add(z1, z2))),
            add(sub(z4, z3), mul(four, sub(z1, z2))),
            add(sub(z4, z2), mul(two, sub(z3, z1))),
            sub(sub(z4, z2), mul(two, sub(z3, z1))),
            add(sub(mul(four, z1), mul(five, z3)), z5),
        ]
    }

    /// F(2×2, 3×3)'s `Bᵀ·z`, as `f2::bt` computes it.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn bt4(z: &[__m512; 4]) -> [__m512; 4] {
        let [z0, z1, z2, z3] = *z;
        [
            _mm512_sub_ps(z0, z2),
            _mm512_add_ps(z1, z2),
            _mm512_sub_ps(z2, z1),
            _mm512_sub_ps(z1, z3),
        ]
    }

    /// Expands to a block transform for tiles of side `$n`, output tiles of
    /// side `$m`, with `$bt` applying Bᵀ: rows first, then columns.
    macro_rules! block {
        ($(#[$doc:meta])* $name:ident, $n:literal, $m:literal, $bt:ident) => {
            $(#[$doc])*
            ///
            /// # Safety
            /// The CPU must have AVX-512F, `blk.plane` hold `width × height`
            /// and `v` hold every position's `L` lanes.
            #[target_feature(enable = "avx512f")]
            pub(super) unsafe fn $name<const L: usize>(
                blk: &InputBlock<f32>,
                v: &mut [f32],
                stride: usize,
            ) {
                // cols[i][r]: column i of the row-transformed tiles, row r.
                let mut cols = [[_mm512_setzero_ps(); $n]; $n];
                for r in 0..$n {
                    // SAFETY: `blk.plane` holds `width × height` (the
                    // contract).
                    let rowt = $bt(&unsafe { taps::<$n, $m, L>(blk, blk.y0 + r as isize) });
                    for (col, x) in cols.iter_mut().zip(rowt) {
                        col[r] = x;
                    }
                }
                for (i, col) in cols.iter().enumerate() {
                    for (a, x) in $bt(col).into_iter().enumerate() {
                        // SAFETY: `v` holds every position's L lanes (the
                        // contract); position a·n + i is one of them.
                        unsafe { store::<L>(v, (a * $n + i) * stride, x) };
                    }
                }
            }
        };
    }

    block!(
        /// One block's F(4×4, 3×3) input transform.
        f4_block, 6, 4, bt6
    );
    block!(
        /// One block's F(2×2, 3×3) input transform.
        f2_block, 4, 2, bt4
    );
}

#[cfg(test)]
mod tests {
    use super::super::transform::{InputBlock, Variant, LANES};
    use super::super::{F2, F4};
    use super::*;

    /// Bit-for-bit equality with the portable transform on every tile of
    /// blocks at the plane's corners, edges and inside, of 1 to 16 tiles.
    fn same_as_portable<V: Variant>(fast: fn(&InputBlock<f32>, &mut [f32], usize) -> bool) {
        let (width, height) = (37, 23);
        let plane: Vec<f32> = (0..width * height)
            .map(|i| ((i * 7919) % 1009) as f32 / 97.0 - 5.0)
            .collect();
        let n = V::OUT + 2;
        let stride = LANES + 3;
        for tiles in [1, 2, 5, 8, 9, 13, 16] {
            for y0 in [-1, 0, 5, height as isize - n as isize, height as isize - 2] {
                for x0 in [-1, 0, 3, width as isize - (V::OUT * tiles) as isize - 1] {
                    let blk = InputBlock {
                        plane: &plane,
                        width,
                        height,
                        y0,
                        x0,
                        tiles,
                    };
                    let mut want = vec![f32::NAN; V::POSITIONS * stride];
                    V::input(&blk, &mut want, stride);
                    let mut got = vec![f32::NAN; V::POSITIONS * stride];
                    if !fast(&blk, &mut got, stride) {
                        return; // no AVX-512 here: nothing to compare
                    }
                    for p in 0..V::POSITIONS {
                        for l in 0..tiles {
                            let (w, g) = (want[p * stride + l], got[p * stride + l]);
                            assert_eq!(
                                w.to_bits(),
                                g.to_bits(),
                                "tiles {tiles}, y0 {y0}, x0 {x0}, position {p}, lane {l}: {w} != {g}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn f4_input_has_the_portable_bits() {
        same_as_portable::<F4>(f4);
    }

    #[test]
    fn f2_input_has_the_portable_bits() {
        same_as_portable::<F2>(f2);
    }

    #[test]
    fn columns_keeps_the_range() {
        assert_eq!(columns(0, 16), 0xFFFF);
        assert_eq!(columns(-3, 2), 0b11);
        assert_eq!(columns(14, 66), ((1u128 << 52) - 1) << 14);
        assert_eq!(columns(5, 5), 0);
        assert_eq!(columns(30, 20), 0);
    }
}
