//! Depthwise convolution (one input channel per group): each output plane
//! is a direct sum over the kernel taps, never a GEMM. The 2-D case (almost
//! every mobile network) copies the plane once into a zero-padded scratch
//! so that the tap loops have no bounds logic and vectorise over output
//! columns; other ranks walk the window lines. Planes are split over the
//! current rayon pool; each output is summed in a fixed order.

use super::conv_op::ConvPlan;
use super::lines::Lines;
use crate::ops::gemm::engine::GemmFloat;
use crate::ops::gemm::fused::Activation;
use crate::ops::util::par_rows;

/// Depthwise convolution of `x` by `w` into `y` (shapes from `p`).
pub(super) fn depthwise<T: GemmFloat>(
    p: &ConvPlan,
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    act: Option<Activation>,
    y: &mut [T],
) {
    if p.win.rank() == 2 {
        depthwise_2d(p, x, w, b, act, y);
    } else {
        depthwise_nd(p, x, w, b, act, y);
    }
}

/// 2-D: pad the input plane once, then sum the taps row by row in kernel
/// row-major order (padding taps add w·0, as the definition does).
fn depthwise_2d<T: GemmFloat>(
    p: &ConvPlan,
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    act: Option<Activation>,
    y: &mut [T],
) {
    let win = &p.win;
    let (mg, m, c) = (p.mg(), p.m, p.c);
    let (h, wd) = (win.input[0], win.input[1]);
    let (oh, ow) = (win.output[0], win.output[1]);
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let (sh, sw) = (win.strides[0], win.strides[1]);
    let (dh, dw) = (win.dilations[0], win.dilations[1]);
    let (pt, pl) = (win.pad_begin[0], win.pad_begin[1]);
    let ph = h + pt + win.pad_end[0];
    let pw = wd + pl + win.pad_end[1];
    let (plane, in_plane) = (oh * ow, h * wd);
    par_rows(y, plane, |first, chunk| {
        T::with_scratch(ph * pw, |padded| {
            for (r, out) in chunk.chunks_mut(plane).enumerate() {
                let row = first + r;
                let (ni, oc) = (row / m, row % m);
                let ch = oc / mg;
                let xc = &x[(ni * c + ch) * in_plane..(ni * c + ch + 1) * in_plane];
                padded.fill(T::zero());
                for (iy, src) in xc.chunks_exact(wd.max(1)).enumerate().take(h) {
                    let at = (iy + pt) * pw + pl;
                    padded[at..at + wd].copy_from_slice(src);
                }
                let wk = &w[oc * kh * kw..(oc + 1) * kh * kw];
                let bias = b.map_or(T::zero(), |b| b[oc]);
                for (oy, orow) in out.chunks_exact_mut(ow.max(1)).enumerate() {
                    orow.fill(bias);
                    for ky in 0..kh {
                        let base = (oy * sh + ky * dh) * pw;
                        for kx in 0..kw {
                            let wv = wk[ky * kw + kx];
                            let start = base + kx * dw;
                            tap_row(orow, wv, &padded[start..], sw);
                        }
                    }
                }
                if let Some(a) = act {
                    a.apply(out);
                }
            }
        });
    });
}

/// `out[j] += wv · src[j·step]` for every output column.
#[inline(always)]
fn tap_row<T: GemmFloat>(out: &mut [T], wv: T, src: &[T], step: usize) {
    let Some(last) = out.len().checked_sub(1) else {
        return;
    };
    if step == 1 {
        for (d, &s) in out.iter_mut().zip(&src[..=last]) {
            *d = *d + wv * s;
        }
    } else {
        let src = &src[..=last * step];
        for (j, d) in out.iter_mut().enumerate() {
            *d = *d + wv * src[j * step];
        }
    }
}

/// Any rank: each output plane is a direct sum over the kernel offsets,
/// computed in kernel row-major order, skipping taps in the padding.
fn depthwise_nd<T: GemmFloat>(
    p: &ConvPlan,
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    act: Option<Activation>,
    y: &mut [T],
) {
    let win = &p.win;
    let (mg, m, c) = (p.mg(), p.m, p.c);
    let (plane, in_plane, klen) = (win.out_len(), win.in_len(), win.kernel_len());
    let lines = Lines::new(win);
    let step = lines.step();
    par_rows(y, plane, |first, chunk| {
        for (r, out) in chunk.chunks_mut(plane).enumerate() {
            let row = first + r;
            let (ni, oc) = (row / m, row % m);
            let ch = oc / mg;
            let xc = &x[(ni * c + ch) * in_plane..(ni * c + ch + 1) * in_plane];
            let wk = &w[oc * klen..(oc + 1) * klen];
            out.fill(b.map_or(T::zero(), |b| b[oc]));
            for (k, &wv) in wk.iter().enumerate() {
                lines.for_each(k, |oo, ii, len| {
                    let dst = &mut out[oo..oo + len];
                    if step == 1 {
                        for (d, &s) in dst.iter_mut().zip(&xc[ii..ii + len]) {
                            *d = *d + wv * s;
                        }
                    } else {
                        for (j, d) in dst.iter_mut().enumerate() {
                            *d = *d + wv * xc[ii + j * step];
                        }
                    }
                });
            }
            if let Some(a) = act {
                a.apply(out);
            }
        }
    });
}
