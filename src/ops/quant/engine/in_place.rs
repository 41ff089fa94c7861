//! Products whose u8 operand is read where it lies, without packing
//! panels: column c's four-k group g is the word at byte `4·c +
//! offsets[g]` of one buffer. A stride-1 convolution's staged input
//! (`[c/4][h][w]` words, padded) is such an operand when its columns are
//! the output pixels laid out at the staged row's width: pixel (y, x) is
//! column `y·row + x`, and every tap is one offset. The columns past an
//! output row's width (`row − width` per row) are computed and not
//! stored.
//!
//! Only the AVX-512 VNNI tile with requantization in registers runs this
//! way (weights without zero points, a requantizing sink); elsewhere
//! [`Product::run_in_place`] declines and the caller packs panels. The
//! sums are the tile kernel's integers and the requantization its f32
//! operations, so the bytes are the same.

use super::sink::Sink;
use super::{Product, NR};

/// A u8 operand read in place (see the module header). Off x86-64 nothing
/// reads it: [`Product::run_in_place`] declines there.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct InPlace<'a> {
    /// The words; every column's groups must lie inside, and the last
    /// panel's padding columns too.
    pub words: &'a [u8],
    /// Per four-k group of the product, its byte offset from a column's
    /// word.
    pub offsets: &'a [usize],
    /// Columns per output row, stored or not.
    pub row: usize,
    /// Stored columns per output row: column c goes to output element
    /// `(c / row)·width + c % row` when `c % row < width`.
    pub width: usize,
}

impl InPlace<'_> {
    /// Bytes a product of `cols` columns reads: up to the last panel's
    /// last column at the largest offset.
    pub(crate) fn bytes_read(offsets: &[usize], cols: usize) -> usize {
        let max = offsets.iter().copied().max().unwrap_or(0);
        cols.div_ceil(NR).max(1) * NR * 4 + max
    }

    /// The runs of stored columns among `c0 .. c0 + NR` (and below
    /// `cols`): (first tile column, length, output element), into `out`;
    /// returns how many.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn pieces(&self, c0: usize, cols: usize, out: &mut [(usize, usize, usize); NR]) -> usize {
        let end = (c0 + NR).min(cols);
        let (mut c, mut n) = (c0, 0);
        while c < end {
            let (y, x) = (c / self.row, c % self.row);
            if x >= self.width {
                c += self.row - x;
                continue;
            }
            let len = (self.width - x).min(end - c);
            out[n] = (c - c0, len, y * self.width + x);
            n += 1;
            c += len;
        }
        n
    }
}

impl Product<'_> {
    /// Runs the product over `src` read in place, requantized into `sink`;
    /// returns false (nothing done) where this path does not apply: no
    /// AVX-512 VNNI or another int8 kernel chosen, weights with zero
    /// points, or a sink that does not requantize in registers.
    pub(crate) fn run_in_place(&self, src: &InPlace, sink: &dyn Sink) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::ops::overflow as guard;
            if guard::current().kernel.resolve() != guard::Resolved::Vnni
                || self.w.zero.iter().any(|&z| z != 0)
            {
                return false;
            }
            let Some(dst) = sink.requant() else {
                return false;
            };
            let w = self.w;
            assert!(
                src.offsets.len() == w.k4
                    && (1..=src.row).contains(&src.width)
                    && src.words.len() >= InPlace::bytes_read(src.offsets, self.cols),
                "in-place operand does not cover the product"
            );
            let row_add = self.row_add();
            let panels = self.cols.div_ceil(NR);
            let blocks = w.blocks();
            let (col_tasks, row_tasks) = self.task_split(panels);
            crate::ops::parallel::par_for(col_tasks * row_tasks, |t| {
                let (ct, rt) = (t / row_tasks, t % row_tasks);
                let (p0, p1) = super::split(panels, col_tasks, ct);
                let (b0, b1) = super::split(blocks, row_tasks, rt);
                let mut pieces = [(0, 0, 0); NR];
                for p in p0..p1 {
                    let c0 = p * NR;
                    let count = src.pieces(c0, self.cols, &mut pieces);
                    let pieces = &pieces[..count];
                    let end = pieces
                        .iter()
                        .map(|&(_, len, at)| at + len)
                        .max()
                        .unwrap_or(0);
                    let words = &src.words[c0 * 4..];
                    for b in b0..b1 {
                        let r0 = b * super::MR;
                        let nr = super::MR.min(w.rows - r0);
                        let rows = dst.row_starts(r0, nr, end);
                        let tile = Tile {
                            add: &row_add[r0..r0 + nr],
                            scales: std::array::from_fn(|r| dst.scale_of(r0 + r.min(nr - 1))),
                            rows: &rows,
                            pieces,
                        };
                        // SAFETY: the CPU has AVX-512 VNNI (the resolved
                        // kernel says so); the block holds k4 groups; every
                        // group's 128 bytes lie in `words` (asserted above
                        // for the last panel, so for every one); each
                        // piece's bytes lie in its row (`row_starts`).
                        unsafe { tile_vnni512(w.block(b), words, src.offsets, &dst, &tile) };
                    }
                }
            });
            true
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (src, sink);
            false
        }
    }
}

/// One tile's destination: its rows' additions and scales, row starts,
/// and the runs of stored columns.
#[cfg(target_arch = "x86_64")]
struct Tile<'a> {
    add: &'a [i32],
    scales: [f32; super::MR],
    rows: &'a [*mut u8; super::MR],
    pieces: &'a [(usize, usize, usize)],
}

/// The VNNI tile of [`super::kernel`], its x groups read at `words +
/// offsets[g]`, requantized in registers and stored piece by piece.
///
/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI; `w` must hold
/// `offsets.len()` groups, `words` 128 bytes from every offset, and each
/// row start the bytes of every piece.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_vnni512(
    w: &[i8],
    words: &[u8],
    offsets: &[usize],
    dst: &super::sink::Requant,
    tile: &Tile,
) {
    use super::sink::Requant16;
    use super::MR;
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_si512(); 2]; MR];
    let wp = w.as_ptr().cast::<i32>();
    let xp = words.as_ptr();
    for (g, &off) in offsets.iter().enumerate() {
        // SAFETY: 128 bytes from `off` lie in `words`, and group g's
        // MR·4 bytes in `w` (the contract).
        unsafe {
            let x0 = _mm512_loadu_si512(xp.add(off).cast());
            let x1 = _mm512_loadu_si512(xp.add(off + 64).cast());
            for (r, a) in acc.iter_mut().enumerate() {
                let wr = _mm512_set1_epi32(wp.add(g * MR + r).read_unaligned());
                a[0] = _mm512_dpbusd_epi32(a[0], x0, wr);
                a[1] = _mm512_dpbusd_epi32(a[1], x1, wr);
            }
        }
    }
    let requant = Requant16::new(dst.zero, dst.lo, dst.hi);
    for (r, a) in acc.iter().enumerate().take(tile.add.len()) {
        let bias = _mm512_set1_epi32(tile.add[r]);
        let s = _mm512_set1_ps(tile.scales[r]);
        let low = _mm512_cvtepi32_epi8(requant.apply(_mm512_add_epi32(a[0], bias), s));
        let high = _mm512_cvtepi32_epi8(requant.apply(_mm512_add_epi32(a[1], bias), s));
        let bytes = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(low), high);
        for &(j, len, at) in tile.pieces {
            let mask = (((1u64 << len) - 1) << j) as u32;
            // Lane j lands on element `at`: the store starts j bytes
            // before it, and the mask keeps only the piece's lanes, which
            // lie in the row (the contract); masked-off lanes are not
            // touched.
            let to = tile.rows[r].wrapping_add(at).wrapping_sub(j);
            // SAFETY: as said above.
            unsafe { _mm256_mask_storeu_epi8(to.cast(), mask, bytes) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_skip_the_columns_past_each_row() {
        // Rows of 9 columns, 7 stored (a 7×7 plane padded by one each side).
        let src = InPlace {
            words: &[],
            offsets: &[],
            row: 9,
            width: 7,
        };
        let cols = 6 * 9 + 7;
        let mut out = [(0, 0, 0); NR];
        let n = src.pieces(0, cols, &mut out);
        assert_eq!(
            out[..n],
            [(0, 7, 0), (9, 7, 7), (18, 7, 14), (27, 5, 21)],
            "first panel"
        );
        let n = src.pieces(32, cols, &mut out);
        assert_eq!(
            out[..n],
            [(0, 2, 26), (4, 7, 28), (13, 7, 35), (22, 7, 42)],
            "last panel, cut at the last stored column"
        );
        assert_eq!(InPlace::bytes_read(&[0, 8, 100], cols), 2 * NR * 4 + 100);
    }
}
