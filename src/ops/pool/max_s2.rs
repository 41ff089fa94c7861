//! MaxPool with 3×3 windows at stride 2 (the stems and reductions of
//! Inception, ResNet and their kin) over f32 planes, on AVX-512: each
//! output row is computed straight from its (up to) three input rows, 16
//! outputs at a time. The 33 input columns of 16 windows are loaded from
//! each row and maxed vertically in registers; two permutes then split
//! them into the windows' left and middle columns, and a one-lane shift
//! gives the right ones. Padding columns are masked-off lanes that load as
//! −∞. No padded row is written and read back, as in [`super::max2d`],
//! which stays the kernel for other windows, types and CPUs. As in every
//! max kernel here, a NaN never replaces the running max, which starts at
//! −∞.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::kernels::MaxElem;
use crate::ops::conv::geom::Window;
use crate::ops::util::{as_f32, as_f32_mut, par_rows};

/// Runs the pool of 2-D planes `x` into `y` when the window is 3×3 at
/// stride 2 without dilation, `T` is f32 and the CPU has AVX-512; returns
/// whether it did (writing every element of `y`).
pub(super) fn try_max_s2<T: MaxElem + 'static>(win: &Window, x: &[T], y: &mut [T]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if win.rank() == 2
        && win.kernel == [3, 3]
        && win.strides == [2, 2]
        && win.dilations == [1, 1]
        && crate::ops::gemm::simd::has_avx512()
    {
        if let (Some(x), Some(y)) = (as_f32(x), as_f32_mut(y)) {
            let g = Geometry::new(win);
            let (in_len, out_len) = (g.h * g.wd, g.oh * g.ow);
            if in_len == 0 {
                // Planes of padding alone: the 2-D kernel writes them.
                return false;
            }
            if out_len > 0 {
                let blocks = g.blocks();
                par_rows(y, out_len, |first, chunk| {
                    let planes = chunk.len() / out_len;
                    let xs = &x[first * in_len..(first + planes) * in_len];
                    for (xp, yp) in xs.chunks_exact(in_len).zip(chunk.chunks_exact_mut(out_len)) {
                        // SAFETY: the CPU has AVX-512 (checked above).
                        unsafe { avx512::plane(&g, &blocks, xp, yp) };
                    }
                });
            }
            return true;
        }
    }
    let _ = (win, x, y);
    false
}

/// The sizes of one plane's pool.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    h: usize,
    wd: usize,
    oh: usize,
    ow: usize,
    /// Padding above and left.
    pt: usize,
    pl: usize,
}

impl Geometry {
    fn new(win: &Window) -> Geometry {
        Geometry {
            h: win.input[0],
            wd: win.input[1],
            oh: win.output[0],
            ow: win.output[1],
            pt: win.pad_begin[0],
            pl: win.pad_begin[1],
        }
    }

    /// The input rows output row `oy`'s window covers (at most three).
    fn rows(&self, oy: usize) -> std::ops::Range<usize> {
        let first = (2 * oy).saturating_sub(self.pt).min(self.h);
        first..(2 * oy + 3).saturating_sub(self.pt).min(self.h)
    }

    /// The lanes of a 16-column vector from column `c` that lie inside a
    /// row (the others are padding).
    fn inside(&self, c: isize) -> u16 {
        let lo = (-c).clamp(0, 16) as u32;
        let hi = (self.wd as isize - c).clamp(0, 16) as u32;
        below(hi) & !below(lo)
    }

    /// The blocks of 16 outputs (the last one shorter) of every row.
    fn blocks(&self) -> Vec<Block> {
        (0..self.ow)
            .step_by(16)
            .map(|j| {
                // The windows of outputs j .. j + 16 read columns b .. b + 32.
                let b = (2 * j) as isize - self.pl as isize;
                let masks = [self.inside(b), self.inside(b + 16), self.inside(b + 32) & 1];
                let keep = below((self.ow - j).min(16) as u32);
                Block {
                    j,
                    b,
                    masks,
                    keep,
                    full: masks == [u16::MAX, u16::MAX, 1] && keep == u16::MAX,
                }
            })
            .collect()
    }
}

/// The first `n` (at most 16) lanes.
fn below(n: u32) -> u16 {
    if n >= 16 {
        u16::MAX
    } else {
        (1u16 << n) - 1
    }
}

/// One block of 16 outputs of a row.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// First output.
    j: usize,
    /// First input column its windows read (negative in the padding).
    b: isize,
    /// The lanes inside the row of columns `b ..`, `b + 16 ..` and of
    /// column `b + 32` (lane 0).
    masks: [u16; 3],
    /// The outputs it writes.
    keep: u16,
    /// Whether every lane of `masks` and `keep` is set (no padding, 16
    /// outputs): its loads and store need no mask.
    full: bool,
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Block, Geometry, MaxElem};
    use std::arch::x86_64::*;

    /// Every output of one plane: `xp` (h × wd) into `yp` (oh × ow), by
    /// `blocks` of each row. Two output rows whose windows both lie inside
    /// the plane are computed together from their five input rows (the
    /// middle one loaded once for both).
    ///
    /// # Safety
    /// The CPU must have AVX-512F, and `blocks` must be `g`'s.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn plane(g: &Geometry, blocks: &[Block], xp: &[f32], yp: &mut [f32]) {
        assert!(xp.len() >= g.h * g.wd && yp.len() >= g.oh * g.ow);
        let at = |r: usize| xp.as_ptr().wrapping_add(r * g.wd);
        let mut oy = 0;
        while oy < g.oh {
            let rows = g.rows(oy);
            // SAFETY: row oy < oh of `yp` (asserted ≥ oh × ow).
            let out = unsafe { yp.as_mut_ptr().add(oy * g.ow) };
            let n = rows.len();
            if n == 3 && oy + 1 < g.oh && g.rows(oy + 1).len() == 3 {
                // Rows 2·oy − pt .. + 5: the next window starts two rows on.
                let p: [*const f32; 5] = std::array::from_fn(|i| at(rows.start + i));
                // SAFETY: the five rows are those of both windows, inside
                // `xp`; row oy + 1 < oh of `yp` follows row oy's `ow`
                // values; the blocks read and write as in `block`.
                unsafe {
                    let next = out.add(g.ow);
                    for k in blocks {
                        if k.full {
                            pair::<true>(k, &p, out, next);
                        } else {
                            pair::<false>(k, &p, out, next);
                        }
                    }
                }
                oy += 2;
                continue;
            }
            let p = [at(rows.start), at(rows.start + 1), at(rows.start + 2)];
            // SAFETY: `p[..n]` are the window's rows of `xp` (inside it,
            // asserted ≥ h × wd) and `out` this output row's `ow` values;
            // `g`'s blocks read inside those rows and write below `ow`.
            unsafe {
                for k in blocks {
                    block(k, &p[..n], out);
                }
            }
            oy += 1;
        }
    }

    /// The three vectors of block `k` from one input row at `row`: columns
    /// `k.b ..`, `k.b + 16 ..` and (lane 0) `k.b + 32`, −∞ outside the row.
    /// `FULL` says every lane of the first two and lane 0 of the third lie
    /// inside the row (`k.full`), so the loads need no mask.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `row` must hold the columns of
    /// `k.masks`' lanes from `k.b`, and all of them when `FULL`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load<const FULL: bool>(k: &Block, row: *const f32) -> [__m512; 3] {
        let lowest = _mm512_set1_ps(f32::LOWEST);
        let p = row.wrapping_offset(k.b);
        // SAFETY: only the lanes of `k.masks` are read, inside the row
        // (the contract); when FULL those are all 32 and column b + 32.
        unsafe {
            if FULL {
                [
                    _mm512_loadu_ps(p),
                    _mm512_loadu_ps(p.add(16)),
                    _mm512_castps128_ps512(_mm_load_ss(p.add(32))),
                ]
            } else {
                let [m0, m1, m2] = k.masks;
                [
                    _mm512_mask_loadu_ps(lowest, m0, p),
                    _mm512_mask_loadu_ps(lowest, m1, p.wrapping_add(16)),
                    _mm512_mask_loadu_ps(lowest, m2, p.wrapping_add(32)),
                ]
            }
        }
    }

    /// The element-wise max of two rows' vectors.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn max3(a: [__m512; 3], b: [__m512; 3]) -> [__m512; 3] {
        [
            _mm512_max_ps(a[0], b[0]),
            _mm512_max_ps(a[1], b[1]),
            _mm512_max_ps(a[2], b[2]),
        ]
    }

    /// The 16 window maxima of block `k` from the vertical maxima of its
    /// rows: left, middle and right columns of each window.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn windows(v: [__m512; 3]) -> __m512 {
        // Lanes 0, 2, .. 30 and 1, 3, .. 31 of two vectors.
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let [lo, hi, next] = v;
        let left = _mm512_permutex2var_ps(lo, even, hi);
        let middle = _mm512_permutex2var_ps(lo, odd, hi);
        // Right columns: the next window's left one, the last from column
        // b + 32.
        let right = _mm512_castsi512_ps(_mm512_alignr_epi32(
            _mm512_castps_si512(next),
            _mm512_castps_si512(left),
            1,
        ));
        _mm512_max_ps(_mm512_max_ps(left, middle), right)
    }

    /// Writes the outputs of `k.keep` from `k.j` (all 16 when `FULL`).
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `out` must hold those outputs.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn store<const FULL: bool>(k: &Block, out: *mut f32, m: __m512) {
        // SAFETY: the outputs of `k.keep` from `k.j` lie inside `out`
        // (the contract).
        unsafe {
            if FULL {
                _mm512_storeu_ps(out.add(k.j), m);
            } else {
                _mm512_mask_storeu_ps(out.add(k.j), k.keep, m);
            }
        }
    }

    /// Block `k` of two output rows at once, from the five input rows at
    /// `rows` (the first window's three, then two more), into `out0` and
    /// `out1`. The max of each window is taken in the order `block` takes
    /// it, so the bits are the same.
    ///
    /// # Safety
    /// As for `block`, for each of the rows, with `FULL` only where
    /// `k.full`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn pair<const FULL: bool>(
        k: &Block,
        rows: &[*const f32; 5],
        out0: *mut f32,
        out1: *mut f32,
    ) {
        let lowest = _mm512_set1_ps(f32::LOWEST);
        let start = [lowest; 3];
        // SAFETY: the contract.
        unsafe {
            let r0 = load::<FULL>(k, rows[0]);
            let r1 = load::<FULL>(k, rows[1]);
            let r2 = load::<FULL>(k, rows[2]);
            let r3 = load::<FULL>(k, rows[3]);
            let r4 = load::<FULL>(k, rows[4]);
            let top = max3(r2, max3(r1, max3(r0, start)));
            let bottom = max3(r4, max3(r3, max3(r2, start)));
            store::<FULL>(k, out0, windows(top));
            store::<FULL>(k, out1, windows(bottom));
        }
    }

    /// The outputs of block `k` of a row from the input rows starting at
    /// `rows`, written from `out`.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; each of `rows` must hold the columns of
    /// `k.masks`' lanes from `k.b`, and `out` the outputs of `k.keep` from
    /// `k.j`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn block(k: &Block, rows: &[*const f32], out: *mut f32) {
        let lowest = _mm512_set1_ps(f32::LOWEST);
        let mut v = [lowest; 3];
        for &row in rows {
            // Lanes are read only inside the row (the masks); padding
            // loads as −∞, which never wins.
            // SAFETY: the contract.
            v = max3(unsafe { load::<false>(k, row) }, v);
        }
        // SAFETY: the contract.
        unsafe { store::<false>(k, out, windows(v)) };
    }
}
