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

multiversion! {
    /// Splits the `h × wd` plane `xc`, padded by `pt` rows and `pl` columns
    /// before, into the phases of `ph`, writing only the in-input spans: the
    /// buffer must have been zeroed by [`clear_phases`] (or hold an earlier
    /// plane of the same geometry). Compiled for AVX2 where the CPU has it:
    /// the copies and stride-2 gathers are a large part of a depthwise
    /// layer's time.
    pub(super) fn fill_phases<T: GemmFloat>(
        ph: &Phases,
        phases: &mut [T],
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
            let (a, b) = (k / ph.sw, k % ph.sw);
            // Phase columns j read input column b + sw·j − pl when in range.
            let lo = pl.saturating_sub(b).div_ceil(ph.sw).min(ph.cols);
            let hi = (pl + wd)
                .saturating_sub(b)
                .div_ceil(ph.sw)
                .clamp(lo, ph.cols);
            if lo == hi {
                continue;
            }
            for (i, row) in dst.chunks_exact_mut(ph.cols).take(ph.rows).enumerate() {
                let r = a + ph.sh * i;
                if r < pt || r >= pt + h {
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
