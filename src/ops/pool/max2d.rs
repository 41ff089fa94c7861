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
    oh: usize,
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
            oh: win.output[0],
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

/// Bytes of padded rows a block of output rows gathers before its taps.
const BLOCK_BYTES: usize = 8 << 10;

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
    let block = (BLOCK_BYTES / std::mem::size_of::<T>() / g.padded).clamp(1, g.oh);
    par_rows(y, out_len, |first, chunk| {
        let mut pad = vec![T::LOWEST; g.padded * block];
        let xs = &x[first * in_len..(first * in_len + chunk.len() / out_len * in_len)];
        max_planes(&g, lead, cols, xs, chunk, &mut pad);
    });
}

multiversion! {
    /// Every plane of `x` into the matching plane of `y`, in blocks of
    /// output rows: first the vertical maxima of every row of the block,
    /// each into its own padded row of `pad`, then the taps of each: the
    /// taps read their row at offsets its stores did not start at, and
    /// read back at once such loads wait for the stores to complete
    /// (Inception's 3×3 stride-2 pool on 24×24: 49 → 42 µs on Zen 4).
    fn max_planes<T: MaxElem>(g: &Geometry, lead: usize, cols: usize, x: &[T], y: &mut [T], pad: &mut [T]) {
        let (in_len, out_len) = (g.h * g.wd, g.ow * g.oh);
        let block = pad.len() / g.padded;
        // Indexed by output plane, so that every output is written even
        // when the input planes are empty (all padding).
        for (p, out) in y.chunks_exact_mut(out_len).enumerate() {
            let xp = &x[p * in_len..(p + 1) * in_len];
            for (b, orows) in out.chunks_mut(g.ow * block).enumerate() {
                let oy0 = b * block;
                for (i, prow) in pad.chunks_exact_mut(g.padded).take(orows.len() / g.ow).enumerate() {
                    vertical(g, xp, oy0 + i, &mut prow[lead..lead + cols]);
                }
                for (orow, prow) in orows.chunks_exact_mut(g.ow).zip(pad.chunks_exact(g.padded)) {
                    max_taps(orow, prow, g.kw, g.dw, g.sw);
                }
            }
        }
    }
}

/// `dst` = the element-wise max of the input rows of plane `xp` that output
/// row `oy`'s window covers (the type's lowest value where it covers none).
#[inline(always)]
fn vertical<T: MaxElem>(g: &Geometry, xp: &[T], oy: usize, dst: &mut [T]) {
    let cols = dst.len();
    let row = |ky: usize| {
        let r = (oy * g.sh + ky * g.dh)
            .checked_sub(g.pt)
            .filter(|&r| r < g.h)?;
        Some(&xp[r * g.wd..r * g.wd + cols])
    };
    if g.kh == 3 {
        if let (Some(a), Some(b), Some(c)) = (row(0), row(1), row(2)) {
            // Inside the plane: the three rows' max, written without a
            // fill first (twice as fast on small planes). It starts at the
            // lowest value all the same, so that a NaN never wins.
            let (a, b, c) = (&a[..cols], &b[..cols], &c[..cols]);
            for (((d, &a), &b), &c) in dst.iter_mut().zip(a).zip(b).zip(c) {
                *d = T::LOWEST.max_of(a).max_of(b).max_of(c);
            }
            return;
        }
    }
    dst.fill(T::LOWEST);
    let mut ky = 0;
    while ky < g.kh {
        match (row(ky), ky + 1 < g.kh, ky + 2 < g.kh) {
            (a, true, true) => {
                max3(dst, a, row(ky + 1), row(ky + 2));
                ky += 3;
            }
            (a, true, false) => {
                max3(dst, a, row(ky + 1), None);
                ky += 2;
            }
            (a, _, _) => {
                max3(dst, a, None, None);
                ky += 1;
            }
        }
    }
}

/// `dst[j] = max(dst[j], a[j], b[j], c[j])` over the rows present, in one
/// pass.
#[inline(always)]
fn max3<T: MaxElem>(dst: &mut [T], a: Option<&[T]>, b: Option<&[T]>, c: Option<&[T]>) {
    let n = dst.len();
    match (a, b, c) {
        (Some(a), Some(b), Some(c)) => {
            let (a, b, c) = (&a[..n], &b[..n], &c[..n]);
            for j in 0..n {
                dst[j] = dst[j].max_of(a[j]).max_of(b[j]).max_of(c[j]);
            }
        }
        (Some(a), Some(b), None) | (Some(a), None, Some(b)) | (None, Some(a), Some(b)) => {
            let (a, b) = (&a[..n], &b[..n]);
            for j in 0..n {
                dst[j] = dst[j].max_of(a[j]).max_of(b[j]);
            }
        }
        (Some(a), None, None) | (None, Some(a), None) | (None, None, Some(a)) => {
            for (d, &v) in dst.iter_mut().zip(&a[..n]) {
                *d = d.max_of(v);
            }
        }
        (None, None, None) => {}
    }
}

/// `out[j]` = the max of `row[j·stride + k·dilation]` over the `taps` taps
/// k; three taps in one pass at stride 1 and 2.
#[inline(always)]
fn max_taps<T: MaxElem>(out: &mut [T], row: &[T], taps: usize, dilation: usize, stride: usize) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let span = (n - 1) * stride + 1;
    let tap = |k: usize| &row[k * dilation..k * dilation + span];
    // The padded row holds no NaN (it starts at the lowest value), so the
    // taps need no lowest value of their own.
    if stride == 1 && taps == 3 {
        // Slices of exactly n elements, zipped: the loop vectorises (with
        // indexing, the bounds checks kept it scalar).
        let (a, b, c) = (&tap(0)[..n], &tap(1)[..n], &tap(2)[..n]);
        for (((o, &a), &b), &c) in out.iter_mut().zip(a).zip(b).zip(c) {
            *o = a.max_of(b).max_of(c);
        }
        return;
    }
    if stride == 2 && taps == 3 && dilation == 1 {
        let r = &row[..2 * n + 1];
        for j in 0..n {
            out[j] = r[2 * j].max_of(r[2 * j + 1]).max_of(r[2 * j + 2]);
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
