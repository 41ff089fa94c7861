//! Stride phases of a padded 2-D input plane, shared by the direct
//! convolution kernels (depthwise and few-input-channel): each plane is
//! split once into its `sh·sw` phases, zero-filled in the padding, so that
//! every kernel tap reads one contiguous span for a whole output row.

use super::conv_op::ConvPlan;
use crate::ops::gemm::engine::GemmFloat;
use crate::ops::gemm::simd::multiversion;

/// Zero elements after each phase, so a kernel may read this many outputs
/// past the last one (whole vector chunks).
pub(super) const TAIL: usize = 32;

/// The 2-D layout: each input plane is split once into its `sh·sw` stride
/// phases (phase `(a, b)` holds padded rows `a + sh·i`, columns `b + sw·j`,
/// zeros in the padding), each `rows × cols` plus a zero tail. Tap `(ky, kx)`
/// then reads one phase at a fixed offset for every output, so the output
/// plane, laid out `oh` rows of `cols` (the columns past `ow` are scratch),
/// takes each tap as one contiguous multiply-add over the whole plane.
pub(super) struct Phases {
    /// Vertical stride.
    pub sh: usize,
    /// Horizontal stride.
    pub sw: usize,
    /// Rows per phase.
    pub rows: usize,
    /// Columns per phase (also the row pitch of the output layout).
    pub cols: usize,
    /// Elements per phase (rows·cols plus the tail).
    pub len: usize,
}

/// The largest stride the phase split takes: each of the `sh·sw` phases
/// spans the whole output grid, so a stride that outruns the input would
/// grow the buffer with the stride's square (a hostile stride of 2^30 asks
/// for exabytes). Larger strides take the other convolution kernels.
pub(super) const MAX_STRIDE: usize = 8;

/// Whether `p`'s strides suit the phase split (see [`MAX_STRIDE`]).
pub(super) fn strides_suit(p: &ConvPlan) -> bool {
    p.win.strides.iter().all(|&s| s <= MAX_STRIDE)
}

impl Phases {
    pub(super) fn new(p: &ConvPlan) -> Phases {
        let win = &p.win;
        let (sh, sw) = (win.strides[0].max(1), win.strides[1].max(1));
        let ri = (win.kernel[0].saturating_sub(1) * win.dilations[0]) / sh;
        let cj = (win.kernel[1].saturating_sub(1) * win.dilations[1]) / sw;
        let (rows, cols) = (win.output[0] + ri, win.output[1] + cj);
        Phases {
            sh,
            sw,
            rows,
            cols,
            // The zero tail lets every tap read whole TAIL-wide chunks.
            len: rows * cols + cj + TAIL,
        }
    }

    /// The columns `lo..hi` of phase column offset `b` that read input
    /// columns (input column `b + sw·j − pl` for phase column `j`), for an
    /// input `wd` wide padded by `pl` before.
    fn in_columns(&self, b: usize, wd: usize, pl: usize) -> (usize, usize) {
        let lo = pl.saturating_sub(b).div_ceil(self.sw).min(self.cols);
        let hi = (pl + wd)
            .saturating_sub(b)
            .div_ceil(self.sw)
            .clamp(lo, self.cols);
        (lo, hi)
    }

    /// Whether padded row `r` is an input row, for an input `h` high padded
    /// by `pt` before.
    fn in_row(r: usize, h: usize, pt: usize) -> bool {
        r >= pt && r < pt + h
    }

    /// Offset of tap `(ky, kx)` (already dilated) in the phases buffer.
    pub(super) fn tap(&self, ty: usize, tx: usize) -> usize {
        let phase = (ty % self.sh) * self.sw + tx % self.sw;
        phase * self.len + (ty / self.sh) * self.cols + tx / self.sw
    }
}

/// Zeroes a phases buffer once: [`fill_phases`] writes only the spans that
/// lie inside the input, which are the same for every plane of a layer, so
/// the padding stays zero for all the planes filled after it.
pub(super) fn clear_phases<T: GemmFloat>(phases: &mut [T]) {
    phases.fill(T::zero());
}

/// Zeroes exactly what [`fill_phases`] leaves unwritten in phases `first
/// ..` (as many as `phases` holds) of one plane (`h × wd`, padded by `pt`
/// rows and `pl` columns before): the padding and the tails. Where few
/// planes share a buffer, this replaces [`clear_phases`], and each phase
/// can be prepared by its own task. (Only the x86 direct kernel uses it.)
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) fn clear_padding<T: GemmFloat>(
    ph: &Phases,
    phases: &mut [T],
    first: usize,
    h: usize,
    wd: usize,
    pt: usize,
    pl: usize,
) {
    for (k, dst) in phases.chunks_exact_mut(ph.len).enumerate() {
        let k = first + k;
        let (a, b) = (k / ph.sw, k % ph.sw);
        let (lo, hi) = ph.in_columns(b, wd, pl);
        let (body, tail) = dst.split_at_mut(ph.rows * ph.cols);
        tail.fill(T::zero());
        for (i, row) in body.chunks_exact_mut(ph.cols.max(1)).enumerate() {
            if lo == hi || !Phases::in_row(a + ph.sh * i, h, pt) {
                row.fill(T::zero());
            } else {
                row[..lo].fill(T::zero());
                row[hi..].fill(T::zero());
            }
        }
    }
}

multiversion! {
    /// Splits the `h × wd` plane `xc`, padded by `pt` rows and `pl` columns
    /// before, into phases `first ..` of `ph` (as many as `phases` holds),
    /// writing only the in-input spans: the buffer must have been zeroed by
    /// [`clear_phases`] or [`clear_padding`] (or hold an earlier plane of
    /// the same geometry). Compiled for AVX2 where the CPU has it: the
    /// copies and stride-2 gathers are a large part of a depthwise layer's
    /// time.
    pub(super) fn fill_phases<T: GemmFloat>(
        ph: &Phases,
        phases: &mut [T],
        first: usize,
        xc: &[T],
        h: usize,
        wd: usize,
        pt: usize,
        pl: usize,
    ) {
        if ph.sh == 1 && ph.sw == 1 {
            // One phase, the padded plane: input row i lands on row pt + i
            // from column pl on.
            let n = wd.min(ph.cols.saturating_sub(pl));
            for (i, src) in xc.chunks_exact(wd.max(1)).take(h).enumerate() {
                let r = pt + i;
                if r >= ph.rows || n == 0 {
                    break;
                }
                let at = r * ph.cols + pl;
                copy_span(&mut phases[at..at + n], &src[..n]);
            }
            return;
        }
        for (k, dst) in phases.chunks_exact_mut(ph.len).enumerate() {
            let k = first + k;
            let (a, b) = (k / ph.sw, k % ph.sw);
            // Phase columns j read input column b + sw·j − pl when in range.
            let (lo, hi) = ph.in_columns(b, wd, pl);
            if lo == hi {
                continue;
            }
            for (i, row) in dst.chunks_exact_mut(ph.cols).take(ph.rows).enumerate() {
                let r = a + ph.sh * i;
                if !Phases::in_row(r, h, pt) {
                    continue;
                }
                let src = &xc[(r - pt) * wd..(r - pt + 1) * wd];
                let first = b + ph.sw * lo - pl;
                let dst = &mut row[lo..hi];
                let n = dst.len();
                if ph.sw == 1 {
                    copy_span(dst, &src[first..first + n]);
                } else if ph.sw == 2 {
                    // Even elements of a contiguous span vectorise as
                    // shuffles; the last one may lack its odd partner.
                    let pairs = ((src.len() - first) / 2).min(n);
                    let (head, rest) = dst.split_at_mut(pairs);
                    let span = src[first..first + 2 * pairs].chunks_exact(2);
                    for (d, pair) in head.iter_mut().zip(span) {
                        *d = pair[0];
                    }
                    for (j, d) in rest.iter_mut().enumerate() {
                        *d = src[first + 2 * (pairs + j)];
                    }
                } else {
                    for (j, d) in dst.iter_mut().enumerate() {
                        *d = src[first + j * ph.sw];
                    }
                }
            }
        }
    }
}

/// Elements [`copy_span`] moves at a time.
const COPY_BLOCK: usize = 8;

/// `dst.copy_from_slice(src)` for the short rows of a plane, inline in
/// fixed-size blocks (the last one pulled back to end at the row's end):
/// a `memcpy` call per row of 14 cost more than the copy.
#[inline(always)]
fn copy_span<T: Copy>(dst: &mut [T], src: &[T]) {
    let n = dst.len();
    if n < COPY_BLOCK {
        // Two blocks of 4 overlapping, or up to 3 single elements: a loop
        // here would become a `memcpy` call again.
        const HALF: usize = 4;
        if n >= HALF {
            dst[..HALF].copy_from_slice(&src[..HALF]);
            dst[n - HALF..].copy_from_slice(&src[n - HALF..n]);
        } else {
            if n > 0 {
                dst[0] = src[0];
            }
            if n > 1 {
                dst[1] = src[1];
            }
            if n > 2 {
                dst[2] = src[2];
            }
        }
        return;
    }
    let mut i = 0;
    while i + COPY_BLOCK <= n {
        dst[i..i + COPY_BLOCK].copy_from_slice(&src[i..i + COPY_BLOCK]);
        i += COPY_BLOCK;
    }
    if i < n {
        dst[n - COPY_BLOCK..].copy_from_slice(&src[n - COPY_BLOCK..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::conv_op::plan;
    use super::super::geom::{AutoPad, WindowAttrs};
    use super::*;

    /// On a buffer full of NaN, [`clear_padding`] then [`fill_phases`] give
    /// what [`fill_phases`] gives on a zeroed buffer, for strides 1 to 3,
    /// pads up to past the input and inputs narrower than the window.
    #[test]
    fn clearing_the_padding_equals_clearing_everything() {
        let cases = [
            // (h, wd, kernel, stride, pads [top, left, bottom, right])
            (96, 96, 7, 2, [3, 3, 3, 3]),
            (9, 7, 3, 1, [1, 1, 1, 1]),
            (8, 11, 3, 2, [0, 1, 2, 0]),
            (10, 10, 5, 3, [2, 2, 2, 2]),
            (2, 3, 3, 2, [4, 3, 1, 2]),
            (1, 1, 3, 1, [2, 2, 2, 2]),
        ];
        for (h, wd, k, s, pads) in cases {
            let attrs = WindowAttrs {
                kernel: None,
                strides: Some(vec![s, s]),
                dilations: None,
                pads: Some(pads.to_vec()),
                auto_pad: AutoPad::NotSet,
            };
            let p = plan(&attrs, 1, &[1, 1, h, wd], &[1, 1, k, k], None).unwrap();
            let ph = Phases::new(&p);
            let x: Vec<f32> = (0..h * wd).map(|i| i as f32 + 1.0).collect();
            let len = ph.sh * ph.sw * ph.len;
            let mut want = vec![0f32; len];
            fill_phases(&ph, &mut want, 0, &x, h, wd, pads[0], pads[1]);
            // Phase by phase, as the direct kernel's tasks prepare them.
            let mut got = vec![f32::NAN; len];
            for (k, dst) in got.chunks_exact_mut(ph.len).enumerate() {
                clear_padding(&ph, dst, k, h, wd, pads[0], pads[1]);
                fill_phases(&ph, dst, k, &x, h, wd, pads[0], pads[1]);
            }
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{h}×{wd}, {k}×{k} stride {s}, pads {pads:?}");
        }
    }
}
