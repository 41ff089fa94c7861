//! The tiled transpose behind Transpose when the input's innermost axis
//! moves (NCHW ↔ NHWC, matrix transposes): the output is written in square
//! tiles of the two axes that swap roles (the output's innermost axis and
//! the input's), so both the reads and the writes of a tile stay within a
//! few cache lines, instead of one gathered read per element through the
//! offset maps of [`offset_copy`](super::offset_copy). Only elements move,
//! so the result does not depend on the tiling or the number of threads;
//! the work is split over whole output rows on the current rayon pool.

use super::strides;
use crate::ops::util::par_rows;

#[cfg(target_arch = "x86_64")]
mod avx2;

/// The side of a tile for elements of `size` bytes: 64 bytes per tile row
/// (one cache line), at least 8 elements.
fn tile_side(size: usize) -> usize {
    (64 / size.max(1)).clamp(8, 64)
}

/// The transpose of `src` (row-major, of shape `shape`) by `perm` into
/// `out` (of `src`'s length), for a permutation that moves the input's last
/// axis: `perm[rank - 1] != rank - 1`. `shape` and `perm` are best first
/// reduced by `merge_axes`.
pub(super) fn transpose_tiled<T: Clone + Send + Sync + 'static>(
    src: &[T],
    shape: &[usize],
    perm: &[usize],
    out: &mut [T],
) {
    let rank = shape.len();
    debug_assert!(rank >= 2 && perm.len() == rank && perm[rank - 1] != rank - 1);
    debug_assert_eq!(src.len(), out.len());
    if out.is_empty() {
        return;
    }
    let in_st = strides(shape);
    // Output dimensions, their strides in the input and in the output.
    let dims: Vec<usize> = perm.iter().map(|&a| shape[a]).collect();
    let from: Vec<usize> = perm.iter().map(|&a| in_st[a]).collect();
    let to = strides(&dims);
    // The output axis that reads the input's contiguous axis.
    let k = perm.iter().position(|&a| a == rank - 1).unwrap_or(0);
    let side = tile_side(std::mem::size_of::<T>());
    let plan = Plan {
        dims: &dims,
        from: &from,
        to: &to,
        k,
        side,
    };
    // A row: one index of the output axes 0..=k, all the later axes.
    par_rows(out, to[k], |first, chunk| plan.rows(src, first, chunk));
}

/// The geometry of one tiled transpose (see [`transpose_tiled`]).
struct Plan<'a> {
    dims: &'a [usize],
    from: &'a [usize],
    to: &'a [usize],
    k: usize,
    side: usize,
}

impl Plan<'_> {
    /// Fills output rows `first..` into `chunk` (whole rows of `to[k]`).
    fn rows<T: Clone + 'static>(&self, src: &[T], first: usize, chunk: &mut [T]) {
        let (dims, k) = (self.dims, self.k);
        let row = self.to[k];
        let rows = chunk.len() / row;
        let mut r = 0;
        while r < rows {
            let flat = first + r;
            let i0 = flat % dims[k];
            // Consecutive rows of one outer index, at most a tile's side.
            let g = self.side.min(dims[k] - i0).min(rows - r);
            let mut outer = flat / dims[k];
            let mut base = i0 * self.from[k];
            for d in (0..k).rev() {
                base += (outer % dims[d]) * self.from[d];
                outer /= dims[d];
            }
            self.group(src, base, g, &mut chunk[r * row..(r + g) * row]);
            r += g;
        }
    }

    /// Output rows for `g` consecutive indices of axis `k` (input offset
    /// `base` for the first), each spanning the output axes after `k`.
    fn group<T: Clone + 'static>(&self, src: &[T], base: usize, g: usize, dst: &mut [T]) {
        let (dims, k) = (self.dims, self.k);
        let rank = dims.len();
        let last = rank - 1;
        let (n, stride) = (dims[last], self.from[last]);
        let row = self.to[k];
        // The axes strictly between k and the last one.
        let mid = &dims[k + 1..last];
        let count: usize = mid.iter().product();
        let mut idx = vec![0usize; mid.len()];
        for _ in 0..count {
            let (mut s_off, mut d_off) = (base, 0);
            for (m, &i) in idx.iter().enumerate() {
                s_off += i * self.from[k + 1 + m];
                d_off += i * self.to[k + 1 + m];
            }
            let mut j0 = 0;
            while j0 < n {
                let w = self.side.min(n - j0);
                let t = Tile {
                    s: s_off + j0 * stride,
                    stride,
                    o: d_off + j0,
                    row,
                };
                t.copy(src, dst, g, w);
                j0 += w;
            }
            super::increment(&mut idx, mid);
        }
    }
}

/// One tile: element `(i, j)` is read at `s + i + j * stride` and written
/// at `o + i * row + j`.
struct Tile {
    s: usize,
    stride: usize,
    o: usize,
    row: usize,
}

impl Tile {
    /// Copies the `g × w` tile, in 8×8 AVX2 blocks where the elements are
    /// 32-bit and the CPU has AVX2.
    fn copy<T: Clone + 'static>(&self, src: &[T], dst: &mut [T], g: usize, w: usize) {
        #[cfg(target_arch = "x86_64")]
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<u32>()
            && crate::ops::gemm::simd::has_avx2()
        {
            let mut i = 0;
            while i + 8 <= g {
                let mut j = 0;
                while j + 8 <= w {
                    let (s, o) = (self.s + i + j * self.stride, self.o + i * self.row + j);
                    if s + 7 * self.stride + 8 > src.len() || o + 7 * self.row + 8 > dst.len() {
                        break;
                    }
                    // SAFETY: AVX2 is present and T is u32 (both checked
                    // above), and the bounds just checked are the kernel's
                    // contract on the two pointers.
                    unsafe {
                        avx2::block8(
                            src.as_ptr().cast::<u32>().add(s),
                            self.stride,
                            dst.as_mut_ptr().cast::<u32>().add(o),
                            self.row,
                        )
                    };
                    j += 8;
                }
                self.scalar(src, dst, i..i + 8, j..w);
                i += 8;
            }
            self.scalar(src, dst, i..g, 0..w);
            return;
        }
        self.scalar(src, dst, 0..g, 0..w);
    }

    /// Copies rows `is` and columns `js` of the tile element by element.
    fn scalar<T: Clone>(
        &self,
        src: &[T],
        dst: &mut [T],
        is: std::ops::Range<usize>,
        js: std::ops::Range<usize>,
    ) {
        for i in is {
            let o = self.o + i * self.row;
            let s = self.s + i;
            for (j, v) in dst[o + js.start..o + js.end].iter_mut().enumerate() {
                *v = src[s + (js.start + j) * self.stride].clone();
            }
        }
    }
}
