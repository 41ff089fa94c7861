//! MaxPool that keeps the plane's size (stride 1, no dilation, pads that add
//! up to the kernel's size less one: Inception's 3×3 pools), over whole
//! planes rather than row by row. On 24×24 planes the row-by-row kernel of
//! [`max2d`](super::max2d) spent most of its time on per-row set-up; here a
//! plane takes two long passes: the vertical max of the rows each output
//! row covers, written for all rows whose window lies inside the plane in
//! one pass over the flattened rows, then the horizontal max of that, in
//! one pass over the flattened plane, followed by a fix of the few columns
//! whose window reaches past a row's end (the flat pass read the
//! neighbouring row there). Every running max starts at the type's lowest
//! value, so a NaN never wins, as in the other max kernels.

use super::kernels::MaxElem;
use crate::ops::conv::geom::Window;
use crate::ops::gemm::simd::multiversion;
use crate::ops::util::par_rows;

/// Kernel taps fused into one pass (longer kernels take further passes).
const FUSED: usize = 3;

/// One plane's sizes and the window's.
struct Same {
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    /// Padding before the first row and column.
    pt: usize,
    pl: usize,
    /// The columns whose window reaches past either end of a row, each with
    /// the columns `first..last` of the row it covers.
    edges: Vec<(usize, usize, usize)>,
}

impl Same {
    /// The geometry of `win` when it is a 2-D size-keeping window.
    fn of(win: &Window) -> Option<Same> {
        let keeps = win.rank() == 2
            && win.strides == [1, 1]
            && win.dilations == [1, 1]
            && win.output == win.input;
        keeps.then(|| {
            let (w, kw, pl) = (win.input[1], win.kernel[1], win.pad_begin[1]);
            // Columns before `pl` start their window before the row; from
            // `right` on, it ends past the row.
            let left = pl.min(w);
            let right = (w + pl + 1).saturating_sub(kw).max(left);
            let edges = (0..left)
                .chain(right..w)
                .map(|ox| {
                    (
                        ox,
                        ox.saturating_sub(pl),
                        (ox + kw).saturating_sub(pl).min(w),
                    )
                })
                .collect();
            Same {
                h: win.input[0],
                w,
                kh: win.kernel[0],
                kw,
                pt: win.pad_begin[0],
                pl,
                edges,
            }
        })
    }

    /// Input rows `lo..hi` covered by the window of output row `oy`.
    fn rows(&self, oy: usize) -> (usize, usize) {
        let lo = oy.saturating_sub(self.pt);
        let hi = (oy + self.kh).saturating_sub(self.pt).min(self.h);
        (lo, hi)
    }
}

/// MaxPool of 2-D planes `x` into `y` when the window keeps the plane's
/// size; returns false (writing nothing) otherwise.
pub(super) fn try_max_same<T: MaxElem>(win: &Window, x: &[T], y: &mut [T]) -> bool {
    let Some(g) = Same::of(win) else {
        return false;
    };
    let plane = g.h * g.w;
    if plane == 0 {
        return true;
    }
    par_rows(y, plane, |first, chunk| {
        let xs = &x[first * plane..first * plane + chunk.len()];
        let mut v = vec![T::LOWEST; plane];
        same_planes(&g, xs, chunk, &mut v);
    });
    true
}

multiversion! {
    /// Every plane of `x` into the matching plane of `y`, through the
    /// vertical maxima `v` (one plane of scratch).
    fn same_planes<T: MaxElem>(g: &Same, x: &[T], y: &mut [T], v: &mut [T]) {
        let plane = g.h * g.w;
        for (xp, yp) in x.chunks_exact(plane).zip(y.chunks_exact_mut(plane)) {
            vertical(g, xp, v);
            horizontal(g, v, yp);
        }
    }
}

/// `v` row oy = the max of the input rows output row oy covers.
#[inline(always)]
fn vertical<T: MaxElem>(g: &Same, x: &[T], v: &mut [T]) {
    // Rows whose window lies inside the plane, all in one flat pass: row oy
    // reads rows oy − pt .. oy − pt + kh.
    let inner_lo = g.pt.min(g.h);
    let inner_hi = (g.h + g.pt + 1).saturating_sub(g.kh).max(inner_lo);
    if inner_hi > inner_lo {
        let dst = &mut v[inner_lo * g.w..inner_hi * g.w];
        let len = dst.len();
        fold_max(dst, g.kh, |ky| {
            let first = (inner_lo + ky - g.pt) * g.w;
            &x[first..first + len]
        });
    }
    for oy in (0..inner_lo).chain(inner_hi..g.h) {
        let (lo, hi) = g.rows(oy);
        fold_max(&mut v[oy * g.w..(oy + 1) * g.w], hi - lo, |i| {
            &x[(lo + i) * g.w..(lo + i + 1) * g.w]
        });
    }
}

/// `y` = the max of the `kw` columns each output column covers in `v`.
#[inline(always)]
fn horizontal<T: MaxElem>(g: &Same, v: &[T], y: &mut [T]) {
    let n = y.len();
    // Flat over the plane, from the first column whose window starts inside
    // its row to the last whose window ends inside it; the columns between
    // a row's end and the next row's start read across rows and are fixed
    // below.
    let lo = g.pl;
    let hi = (n + g.pl + 1).saturating_sub(g.kw);
    if hi > lo {
        fold_max(&mut y[lo..hi], g.kw, |kx| {
            &v[lo + kx - g.pl..hi + kx - g.pl]
        });
    }
    // Edge by edge down the rows: one window shape per loop (two columns
    // for a 3-wide window padded by one, the usual case).
    for &(ox, first, last) in &g.edges {
        let rows = v.chunks_exact(g.w).zip(y.chunks_exact_mut(g.w));
        match last - first {
            1 => rows.for_each(|(vr, yr)| yr[ox] = T::LOWEST.max_of(vr[first])),
            2 => rows.for_each(|(vr, yr)| {
                yr[ox] = T::LOWEST.max_of(vr[first]).max_of(vr[first + 1]);
            }),
            _ => rows.for_each(|(vr, yr)| {
                yr[ox] = vr[first..last].iter().fold(T::LOWEST, |m, &c| m.max_of(c));
            }),
        }
    }
}

/// `dst[j]` = the max of `src(i)[j]` over the `count` sources i, starting
/// from the lowest value (so NaN never wins), [`FUSED`] sources per pass.
#[inline(always)]
fn fold_max<'a, T: MaxElem + 'a>(dst: &mut [T], count: usize, src: impl Fn(usize) -> &'a [T]) {
    let n = dst.len();
    match count {
        0 => dst.fill(T::LOWEST),
        1 => {
            for (d, &a) in dst.iter_mut().zip(&src(0)[..n]) {
                *d = T::LOWEST.max_of(a);
            }
        }
        2 => {
            for ((d, &a), &b) in dst.iter_mut().zip(&src(0)[..n]).zip(&src(1)[..n]) {
                *d = T::LOWEST.max_of(a).max_of(b);
            }
        }
        _ => {
            let (a, b, c) = (&src(0)[..n], &src(1)[..n], &src(2)[..n]);
            for (((d, &a), &b), &c) in dst.iter_mut().zip(a).zip(b).zip(c) {
                *d = T::LOWEST.max_of(a).max_of(b).max_of(c);
            }
        }
    }
    for i in FUSED..count {
        for (d, &a) in dst.iter_mut().zip(&src(i)[..n]) {
            *d = d.max_of(a);
        }
    }
}
