//! The Winograd output transforms `Y = Aᵀ·M·A` on AVX-512 (f32), for
//! blocks of tiles side by side along one tile row, one tile per lane.
//!
//! The portable [`output_block`](super::transform::output_block) applies Aᵀ
//! lane by lane and scatters each tile's columns into its output rows one
//! element at a time; compiled for AVX2 it took about an eighth of an
//! F(4×4, 3×3) layer's time, and the band then copied each row into Y.
//! Here the products' positions are whole vectors, Aᵀ is vector
//! arithmetic, and each output row is interleaved from the m vectors of
//! its columns (column `j` of tile `l` at `m·l + j`) by two-source
//! permutes and stored straight into Y, masked at the plane's edge
//! ([`OutRows`]). The arithmetic is the portable code's,
//! operation for operation (no fused multiply-adds), so every output has
//! the same bits on either path.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::transform::{OutRows, LANES};

/// Transforms a block of F(4×4, 3×3) products (position `p` of tile `l` at
/// `m[p·stride + l]`) into `dst`'s rows and columns, as the portable code
/// does, when the CPU has AVX-512; returns whether it did.
pub(super) fn f4(m: &[f32], stride: usize, tiles: usize, dst: &mut OutRows<f32>) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(lanes) = lanes_for(m, 36, stride, tiles, dst, 4) {
        // SAFETY: the CPU has AVX-512, `m` holds every position's lanes and
        // `dst.y` the window's rows and columns (checked by `lanes_for`).
        unsafe {
            if lanes == LANES {
                avx512::f4_block::<LANES>(m, stride, dst)
            } else {
                avx512::f4_block::<{ LANES / 2 }>(m, stride, dst)
            }
        }
        return true;
    }
    let _ = (m, stride, tiles, dst);
    false
}

/// Transforms a block of F(2×2, 3×3) products into `dst`, as [`f4`] does.
pub(super) fn f2(m: &[f32], stride: usize, tiles: usize, dst: &mut OutRows<f32>) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(lanes) = lanes_for(m, 16, stride, tiles, dst, 2) {
        // SAFETY: as in `f4`.
        unsafe {
            if lanes == LANES {
                avx512::f2_block::<LANES>(m, stride, dst)
            } else {
                avx512::f2_block::<{ LANES / 2 }>(m, stride, dst)
            }
        }
        return true;
    }
    let _ = (m, stride, tiles, dst);
    false
}

/// The lanes a block of `tiles` tiles takes (half of [`LANES`] for at
/// most half as many, as on the portable path), where the CPU has AVX-512,
/// `m` holds `positions` rows of them at `stride`, and `dst` has at most
/// `side` rows (the output tile's) and `side` columns per lane, inside
/// its output.
#[cfg(target_arch = "x86_64")]
fn lanes_for(
    m: &[f32],
    positions: usize,
    stride: usize,
    tiles: usize,
    dst: &OutRows<f32>,
    side: usize,
) -> Option<usize> {
    let lanes = if tiles <= LANES / 2 { LANES / 2 } else { LANES };
    let rows_fit = dst.rows <= side
        && dst.cols <= side * lanes
        && (dst.rows == 0 || dst.at + (dst.rows - 1) * dst.pitch + dst.cols <= dst.y.len());
    let fits = tiles <= LANES && m.len() >= (positions - 1) * stride + lanes && rows_fit;
    (fits && crate::ops::gemm::simd::has_avx512()).then_some(lanes)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use crate::ops::conv::winograd::transform::OutRows;
    use std::arch::x86_64::*;

    /// The first `L` lanes of `m` from `at` (the others zero).
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `m` must hold `at + L`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load<const L: usize>(m: &[f32], at: usize) -> __m512 {
        debug_assert!(at + L <= m.len());
        let keep = if L >= 16 { u16::MAX } else { (1u16 << L) - 1 };
        // SAFETY: the masked load reads lanes at..at+L, which `m` holds
        // (the contract).
        unsafe { _mm512_maskz_loadu_ps(keep, m.as_ptr().add(at)) }
    }

    /// F(4×4, 3×3)'s `Aᵀ·m`, as `f4::at` computes it.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn at6(m: &[__m512; 6]) -> [__m512; 4] {
        let (two, four, eight) = (
            _mm512_set1_ps(2.0),
            _mm512_set1_ps(4.0),
            _mm512_set1_ps(8.0),
        );
        let [m0, m1, m2, m3, m4, m5] = *m;
        let (add, sub, mul) = (_mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps);
        let (s12, d12, s34, d34) = (add(m1, m2), sub(m1, m2), add(m3, m4), sub(m3, m4));
        [
            add(add(m0, s12), s34),
            add(d12, mul(two, d34)),
            add(s12, mul(four, s34)),
            add(add(d12, mul(eight, d34)), m5),
        ]
    }

    /// F(2×2, 3×3)'s `Aᵀ·m`, as `f2::at` computes it.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn at4(m: &[__m512; 4]) -> [__m512; 2] {
        let [m0, m1, m2, m3] = *m;
        [
            _mm512_add_ps(_mm512_add_ps(m0, m1), m2),
            _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3),
        ]
    }

    /// Index vector `[f(0), .., f(15)]`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn index(f: impl Fn(i32) -> i32) -> __m512i {
        let mut lanes = [0i32; 16];
        for (i, l) in lanes.iter_mut().enumerate() {
            *l = f(i as i32);
        }
        // SAFETY: reads the 16 lanes of the local `lanes`.
        unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) }
    }

    /// Stores the columns of `x` below `cols` (from 0 to 16) at `p`.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `p` must hold that many columns.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn store(p: *mut f32, cols: usize, x: __m512) {
        let keep = if cols >= 16 {
            u16::MAX
        } else {
            (1u16 << cols) - 1
        };
        // SAFETY: the masked store writes columns below `cols`, which `p`
        // holds (the contract).
        unsafe { _mm512_mask_storeu_ps(p, keep, x) };
    }

    /// Writes one output row of 4-column tiles: lane `l` of `cols[j]` to
    /// column `4·l + j` from `p`, below column `width`, for the first `L`
    /// lanes.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `p` must hold `width` columns.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn interleave4<const L: usize>(cols: &[__m512; 4], p: *mut f32, width: usize) {
        // [a0 b0 a1 b1 .. a7 b7] and [a8 b8 .. a15 b15] of two vectors.
        let pair_lo = index(|i| (i / 2) + 16 * (i % 2));
        let pair_hi = index(|i| 8 + (i / 2) + 16 * (i % 2));
        // [p0 p1 q0 q1 p2 p3 q2 q3 ..] of two pair vectors: 4 tiles' columns.
        let quad_lo = index(|i| 2 * (i / 4) + (i % 2) + 16 * ((i / 2) % 2));
        let quad_hi = index(|i| 8 + 2 * (i / 4) + (i % 2) + 16 * ((i / 2) % 2));
        let ab = _mm512_permutex2var_ps(cols[0], pair_lo, cols[1]);
        let cd = _mm512_permutex2var_ps(cols[2], pair_lo, cols[3]);
        let rest = |from: usize| width.saturating_sub(from);
        // SAFETY: each store starts at a column `from` < `width` (the
        // guards) and writes the `width - from` columns below `width`,
        // which `p` holds (the contract).
        unsafe {
            store(p, rest(0), _mm512_permutex2var_ps(ab, quad_lo, cd));
            if width > 16 {
                store(p.add(16), rest(16), _mm512_permutex2var_ps(ab, quad_hi, cd));
            }
        }
        if L > 8 && width > 32 {
            let ab = _mm512_permutex2var_ps(cols[0], pair_hi, cols[1]);
            let cd = _mm512_permutex2var_ps(cols[2], pair_hi, cols[3]);
            // SAFETY: as above, from columns 32 and 48.
            unsafe {
                store(p.add(32), rest(32), _mm512_permutex2var_ps(ab, quad_lo, cd));
                if width > 48 {
                    store(p.add(48), rest(48), _mm512_permutex2var_ps(ab, quad_hi, cd));
                }
            }
        }
    }

    /// Writes one output row of 2-column tiles: lane `l` of `cols[j]` to
    /// column `2·l + j` from `p`, below column `width`, for the first `L`
    /// lanes.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `p` must hold `width` columns.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn interleave2<const L: usize>(cols: &[__m512; 2], p: *mut f32, width: usize) {
        let pair_lo = index(|i| (i / 2) + 16 * (i % 2));
        let pair_hi = index(|i| 8 + (i / 2) + 16 * (i % 2));
        // SAFETY: the stores write the columns below `width` from 0 and
        // (where width > 16) from 16, which `p` holds (the contract).
        unsafe {
            store(p, width, _mm512_permutex2var_ps(cols[0], pair_lo, cols[1]));
            if L > 8 && width > 16 {
                store(
                    p.add(16),
                    width - 16,
                    _mm512_permutex2var_ps(cols[0], pair_hi, cols[1]),
                );
            }
        }
    }

    /// Expands to a block transform for tiles of side `$n`, output tiles
    /// of side `$m`, with `$at` applying Aᵀ and `$interleave` writing a row.
    macro_rules! block {
        ($(#[$doc:meta])* $name:ident, $n:literal, $m:literal, $at:ident, $interleave:ident) => {
            $(#[$doc])*
            ///
            /// # Safety
            /// The CPU must have AVX-512F, `m` hold every position's `L`
            /// lanes and `dst.y` its rows and columns.
            #[target_feature(enable = "avx512f")]
            pub(super) unsafe fn $name<const L: usize>(
                m: &[f32],
                stride: usize,
                dst: &mut OutRows<f32>,
            ) {
                // cols[j][a]: Aᵀ along row a of every tile, column j.
                let mut cols = [[_mm512_setzero_ps(); $n]; $m];
                for a in 0..$n {
                    let mut pos = [_mm512_setzero_ps(); $n];
                    for (i, x) in pos.iter_mut().enumerate() {
                        // SAFETY: `m` holds every position's L lanes (the
                        // contract); position a·n + i is one of them.
                        *x = unsafe { load::<L>(m, (a * $n + i) * stride) };
                    }
                    for (col, x) in cols.iter_mut().zip($at(&pos)) {
                        col[a] = x;
                    }
                }
                // rows[i][j]: output row i, column j of every tile.
                let mut rows = [[_mm512_setzero_ps(); $m]; $m];
                for (j, col) in cols.iter().enumerate() {
                    for (row, x) in rows.iter_mut().zip($at(col)) {
                        row[j] = x;
                    }
                }
                // SAFETY: `dst.y` holds the block's `dst.rows` rows of
                // `dst.cols` columns at pitch `dst.pitch` from `dst.at` (the
                // contract).
                unsafe {
                    let y = dst.y.as_mut_ptr().add(dst.at);
                    for (i, row) in rows.iter().enumerate().take(dst.rows) {
                        $interleave::<L>(row, y.add(i * dst.pitch), dst.cols);
                    }
                }
            }
        };
    }

    block!(
        /// One block's F(4×4, 3×3) output transform.
        f4_block, 6, 4, at6, interleave4
    );
    block!(
        /// One block's F(2×2, 3×3) output transform.
        f2_block, 4, 2, at4, interleave2
    );
}

#[cfg(test)]
mod tests {
    use super::super::transform::{OutBlock, OutRows, Variant, LANES, MAX_OUT};
    use super::super::{F2, F4};
    use super::*;

    /// Bit-for-bit equality with the portable transform on every output
    /// of blocks of 1 to 16 tiles, written into rows of an output plane
    /// (each row and column cut short, or not), and nothing written past
    /// them.
    fn same_as_portable<V: Variant>(fast: fn(&[f32], usize, usize, &mut OutRows<f32>) -> bool) {
        let stride = LANES + 5;
        let m: Vec<f32> = (0..V::POSITIONS * stride)
            .map(|i| ((i * 7919) % 1013) as f32 / 101.0 - 4.5)
            .collect();
        let pitch = V::OUT * LANES + 7;
        for tiles in [1, 3, 8, 9, 16] {
            let mut want: OutBlock<f32> = [[f32::NAN; MAX_OUT * LANES]; MAX_OUT];
            V::output(&m, stride, tiles, &mut want);
            let full = V::OUT * tiles;
            for (rows, cols) in [(V::OUT, full), (V::OUT - 1, full - 1), (1, 1)] {
                let mut y = vec![f32::NAN; 3 + V::OUT * pitch];
                let mut dst = OutRows {
                    y: &mut y,
                    at: 3,
                    pitch,
                    rows,
                    cols,
                };
                if !fast(&m, stride, tiles, &mut dst) {
                    return; // no AVX-512 here: nothing to compare
                }
                for (e, &g) in y.iter().enumerate() {
                    let (i, c) = ((e.wrapping_sub(3)) / pitch, (e.wrapping_sub(3)) % pitch);
                    if e < 3 || i >= rows || c >= cols {
                        assert!(g.is_nan(), "tiles {tiles}: element {e} written");
                        continue;
                    }
                    let w = want[i][c];
                    assert_eq!(
                        w.to_bits(),
                        g.to_bits(),
                        "tiles {tiles}, row {i}, column {c}: {w} != {g}"
                    );
                }
            }
        }
    }

    #[test]
    fn f4_output_has_the_portable_bits() {
        same_as_portable::<F4>(f4);
    }

    #[test]
    fn f2_output_has_the_portable_bits() {
        same_as_portable::<F2>(f2);
    }
}
