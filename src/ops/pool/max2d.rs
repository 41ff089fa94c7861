//! MaxPool over 2-D planes, vertically first: each output row is the
//! element-wise max of the input rows its window covers, taken in one pass
//! into a row padded with the type's lowest value; the output row is then
//! the max of the `kw` taps of that padded row at the column stride. Both
//! passes read contiguous (or, for the taps, evenly strided) slices, fuse up
//! to three operands per pass, and vectorise; no pass touches an input row
//! that no window covers. As in the generic kernel, a NaN never replaces the
//! running max (which starts at the type's lowest value).

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
    /// Columns of the padded row the taps read: `(ow − 1)·sw + 1 + (kw − 1)·dw`.
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
    // Input column c lands at padded column pl + c; columns past the last
    // window are never read.
    let (lead, cols) = (g.pl.min(g.padded), g.wd.min(g.padded.saturating_sub(g.pl)));
    par_rows(y, out_len, |first, chunk| {
        let mut pad = vec![T::LOWEST; g.padded];
        let mut rows: Vec<&[T]> = Vec::with_capacity(g.kh);
        for (i, out) in chunk.chunks_mut(out_len).enumerate() {
            let p = first + i;
            let xp = &x[p * in_len..(p + 1) * in_len];
            for (oy, orow) in out.chunks_exact_mut(g.ow).enumerate() {
                rows.clear();
                for ky in 0..g.kh {
                    let r = oy * g.sh + ky * g.dh;
                    if r >= g.pt && r - g.pt < g.h {
                        let start = (r - g.pt) * g.wd;
                        rows.push(&xp[start..start + cols]);
                    }
                }
                max_rows(&mut pad[lead..lead + cols], &rows);
                max_taps(orow, &pad, g.kw, g.dw, g.sw);
            }
        }
    });
}

multiversion! {
    /// `dst[j]` = the max of `rows[..][j]` (the lowest value when there are
    /// none), three rows per pass.
    fn max_rows<T: MaxElem>(dst: &mut [T], rows: &[&[T]]) {
        let n = dst.len();
        match rows {
            [] => dst.fill(T::LOWEST),
            [a] => {
                for (d, &va) in dst.iter_mut().zip(&a[..n]) {
                    *d = T::LOWEST.max_of(va);
                }
            }
            [a, b] => {
                for ((d, &va), &vb) in dst.iter_mut().zip(&a[..n]).zip(&b[..n]) {
                    *d = T::LOWEST.max_of(va).max_of(vb);
                }
            }
            [a, b, c, rest @ ..] => {
                let (a, b, c) = (&a[..n], &b[..n], &c[..n]);
                for j in 0..n {
                    dst[j] = T::LOWEST.max_of(a[j]).max_of(b[j]).max_of(c[j]);
                }
                for r in rest {
                    for (d, &v) in dst.iter_mut().zip(&r[..n]) {
                        *d = d.max_of(v);
                    }
                }
            }
        }
    }
}

multiversion! {
    /// `out[j]` = the max of `row[j·stride + k·dilation]` over the `taps`
    /// taps k; three taps per pass, and contiguous loops at stride 1.
    fn max_taps<T: MaxElem>(out: &mut [T], row: &[T], taps: usize, dilation: usize, stride: usize) {
        let n = out.len();
        if n == 0 {
            return;
        }
        let span = (n - 1) * stride + 1;
        let tap = |k: usize| &row[k * dilation..k * dilation + span];
        if stride == 1 && taps == 3 {
            let (a, b, c) = (tap(0), tap(1), tap(2));
            for j in 0..n {
                out[j] = T::LOWEST.max_of(a[j]).max_of(b[j]).max_of(c[j]);
            }
            return;
        }
        out.fill(T::LOWEST);
        for k in 0..taps {
            let src = tap(k);
            if stride == 1 {
                for (o, &v) in out.iter_mut().zip(src) {
                    *o = o.max_of(v);
                }
            } else {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = o.max_of(src[j * stride]);
                }
            }
        }
    }
}
