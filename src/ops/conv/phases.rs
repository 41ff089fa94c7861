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

multiversion! {
    /// Splits the `h × wd` plane `xc`, padded by `pt` rows and `pl` columns
    /// before, into the phases of `ph`. Compiled for AVX2 where the CPU has
    /// it: the copies, zero fills and stride-2 gathers are most of a
    /// depthwise layer's time.
    pub(super) fn fill_phases<T: GemmFloat>(
        ph: &Phases,
        phases: &mut [T],
        xc: &[T],
        h: usize,
        wd: usize,
        pt: usize,
        pl: usize,
    ) {
        for (k, dst) in phases.chunks_exact_mut(ph.len).enumerate() {
            let (a, b) = (k / ph.sw, k % ph.sw);
            // Phase columns j read input column b + sw·j − pl when in range.
            let lo = pl.saturating_sub(b).div_ceil(ph.sw).min(ph.cols);
            let hi = (pl + wd)
                .saturating_sub(b)
                .div_ceil(ph.sw)
                .clamp(lo, ph.cols);
            // One fill for the padding, then only the in-range spans: most
            // rows are short, and a fill call per piece cost more than it.
            dst.fill(T::zero());
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
                    for (d, &v) in dst.iter_mut().zip(&src[first..first + n]) {
                        *d = v;
                    }
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
