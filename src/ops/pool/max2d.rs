//! MaxPool over 2-D planes, separably: every input row is first reduced
//! along the columns (the running max of its `kw` taps at each column, over
//! a copy of the row padded with the type's lowest value), once per plane;
//! each output row is then the element-wise max of the reduced rows its
//! window covers, sampled at the column stride. All inner loops run over
//! contiguous slices and vectorise, where the generic walk gathers every tap
//! at the stride. As in the generic kernel, a NaN never replaces the running
//! max (which starts at the type's lowest value).

use super::kernels::MaxElem;
use crate::ops::conv::geom::Window;
use crate::ops::gemm::simd::multiversion;
use crate::ops::util::par_rows;

/// The sizes of one 2-D window.
struct Geometry {
    h: usize,
    wd: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: usize,
    pl: usize,
    /// Columns of a reduced row: `(ow − 1)·sw + 1`.
    red: usize,
    /// Columns of the padded row the reduction reads.
    padded: usize,
}

impl Geometry {
    fn new(win: &Window) -> Geometry {
        let ow = win.output[1];
        let (sw, dw, kw) = (win.strides[1], win.dilations[1], win.kernel[1]);
        let red = ow.saturating_sub(1) * sw + 1;
        Geometry {
            h: win.input[0],
            wd: win.input[1],
            ow,
            kh: win.kernel[0],
            kw,
            sh: win.strides[0],
            sw,
            dh: win.dilations[0],
            dw,
            pt: win.pad_begin[0],
            pl: win.pad_begin[1],
            red,
            padded: red + kw.saturating_sub(1) * dw,
        }
    }
}

/// MaxPool of 2-D planes `x` into `y` (every element of `y` is written).
pub(super) fn max_2d<T: MaxElem>(win: &Window, x: &[T], y: &mut [T]) {
    let g = Geometry::new(win);
    let (in_len, out_len) = (win.in_len(), win.out_len());
    if out_len == 0 || g.ow == 0 {
        return;
    }
    par_rows(y, out_len, |first, chunk| {
        let mut pad = vec![T::LOWEST; g.padded];
        let mut reduced = vec![T::LOWEST; g.h * g.red];
        let mut acc = vec![T::LOWEST; g.red];
        for (i, out) in chunk.chunks_mut(out_len).enumerate() {
            let p = first + i;
            let xp = &x[p * in_len..(p + 1) * in_len];
            for (src, dst) in xp
                .chunks_exact(g.wd.max(1))
                .zip(reduced.chunks_exact_mut(g.red))
            {
                // Input column c lands at padded column pl + c.
                let n = g.wd.min(g.padded.saturating_sub(g.pl));
                pad[g.pl.min(g.padded)..g.pl.min(g.padded) + n].copy_from_slice(&src[..n]);
                dst.fill(T::LOWEST);
                for k in 0..g.kw {
                    combine(dst, &pad[k * g.dw..k * g.dw + g.red]);
                }
            }
            for (oy, orow) in out.chunks_exact_mut(g.ow).enumerate() {
                acc.fill(T::LOWEST);
                for ky in 0..g.kh {
                    let r = oy * g.sh + ky * g.dh;
                    if r < g.pt || r - g.pt >= g.h {
                        continue;
                    }
                    let r = r - g.pt;
                    combine(&mut acc, &reduced[r * g.red..(r + 1) * g.red]);
                }
                for (ox, o) in orow.iter_mut().enumerate() {
                    *o = acc[ox * g.sw];
                }
            }
        }
    });
}

multiversion! {
    /// `dst[j] = max(dst[j], src[j])`, a NaN never replacing the running max.
    fn combine<T: MaxElem>(dst: &mut [T], src: &[T]) {
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = d.max_of(v);
        }
    }
}
