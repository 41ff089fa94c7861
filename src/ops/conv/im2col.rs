//! Convolution as im2col + GEMM: the input windows are unrolled into a
//! column matrix (one row per input channel and kernel offset, one column
//! per output position) that the GEMM engine multiplies by the weights.
//! Large output planes are processed in column chunks of a few MiB, so the
//! column matrix is never materialised whole (VGG's 3×3 layers would need
//! over 100 MB); the chunk width depends on the sizes alone, so results do
//! not depend on the thread count.

use super::conv_op::{epilogue, ConvPlan};
use super::finish_row;
use super::lines::Lines;
use crate::error::Result;
use crate::ops::gemm::checked_product;
use crate::ops::gemm::engine::{Batched, GemmFloat, Mat, SendPtr};
use crate::ops::gemm::fused::Activation;
use crate::ops::gemm::simd::multiversion;
use crate::ops::util::par_rows;

const OP: &str = "Conv";

/// Elements of the column matrix per chunk (4 MiB of f32: within the L3
/// cache, and enough work per chunk to keep a few threads busy).
const CHUNK_ELEMS: usize = 1 << 20;
/// Chunk widths are multiples of this many output positions.
const CHUNK_ALIGN: usize = 64;

/// im2col then one GEMM per group, image by image and chunk by chunk.
pub(super) fn im2col_gemm<T: GemmFloat>(
    p: &ConvPlan,
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    z: Option<&[T]>,
    act: Option<Activation>,
    y: &mut [T],
) -> Result<()> {
    let win = &p.win;
    let (mg, group, m) = (p.mg(), p.group, p.m);
    let (plane, in_plane, klen) = (win.out_len(), win.in_len(), win.kernel_len());
    let kk = checked_product(OP, &[p.cg(), klen])?;
    let rows = checked_product(OP, &[p.c, klen])?;
    let width = chunk_width(rows, plane);
    let chunked = width < plane;
    let col_len = checked_product(OP, &[rows, width])?;
    let buf_len = if chunked { m * width } else { 0 };
    let lines = Lines::new(win);
    let step = lines.step();
    // The input lines each kernel offset reads, the same for every channel
    // and image: (output start, input start, length), in increasing output
    // order.
    let segments: Vec<Vec<(usize, usize, usize)>> = (0..klen)
        .map(|k| {
            let mut v = Vec::new();
            lines.for_each(k, |oo, ii, len| v.push((oo, ii, len)));
            v
        })
        .collect();
    let yp = SendPtr(y.as_mut_ptr());
    // One scratch for the column chunk and (when chunked) the GEMM's output
    // chunk; every element is written before it is read.
    T::with_scratch(col_len + buf_len, |scratch| {
        let (col, buf) = scratch.split_at_mut(col_len);
        let bp = SendPtr(buf.as_mut_ptr());
        for ni in 0..p.n {
            let xi = &x[ni * p.c * in_plane..(ni + 1) * p.c * in_plane];
            for c0 in (0..plane).step_by(width) {
                let cw = width.min(plane - c0);
                let col = &mut col[..rows * cw];
                par_rows(col, cw, |first, chunk| {
                    for (r, row) in chunk.chunks_mut(cw).enumerate() {
                        let (ch, k) = ((first + r) / klen, (first + r) % klen);
                        let xc = &xi[ch * in_plane..(ch + 1) * in_plane];
                        fill_row(row, xc, &segments[k], c0, step);
                    }
                });
                // C is Y itself when the plane is one chunk, else the buffer.
                let c = if chunked {
                    bp
                } else {
                    yp.offset(ni * m * plane)
                };
                let a = |g: usize| Mat::row_major(w.as_ptr(), kk).offset(g * mg * kk);
                let bm = |g: usize| Mat::row_major(col.as_ptr(), cw).offset(g * kk * cw);
                let cm = |g: usize| c.offset(g * mg * cw);
                // Chunks take only the bias on the buffer; the residual and
                // activation follow on the copy into Y.
                let (zi, ep_act) = if chunked {
                    (None, None)
                } else {
                    (z.map(|z| &z[ni * m * plane..(ni + 1) * m * plane]), act)
                };
                let ep = epilogue(c, cw, m, b, zi, ep_act, |g| g * mg);
                let needs_ep = b.is_some() || zi.is_some() || ep_act.is_some();
                let job = Batched {
                    batches: group,
                    m: mg,
                    n: cw,
                    k: kk,
                    alpha: T::one(),
                    a: &a,
                    b: &bm,
                    c: &cm,
                    epilogue: if needs_ep { Some(&ep) } else { None },
                };
                // SAFETY: W is m×kk, the column chunk is group×kk×cw, and C
                // (Y's image ni, or the m×cw buffer) has m rows of cw
                // columns; the C of distinct groups are disjoint rows.
                unsafe { job.run() };
                if chunked {
                    let image = &mut y[ni * m * plane..(ni + 1) * m * plane];
                    for (oc, (dst, src)) in image.chunks_mut(plane).zip(buf.chunks(cw)).enumerate()
                    {
                        let dst = &mut dst[c0..c0 + cw];
                        dst.copy_from_slice(&src[..cw]);
                        let at = (ni * m + oc) * plane + c0;
                        let zr = z.map(|z| &z[at..at + cw]);
                        if zr.is_some() || act.is_some() {
                            finish_row(dst, None, zr, act);
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// Output positions per chunk: the whole plane when its column matrix is
/// small, else as many aligned positions as fit `CHUNK_ELEMS`.
fn chunk_width(rows: usize, plane: usize) -> usize {
    let fit = (CHUNK_ELEMS / rows.max(1)) / CHUNK_ALIGN * CHUNK_ALIGN;
    if fit >= plane {
        plane
    } else {
        fit.max(CHUNK_ALIGN)
    }
}

multiversion! {
/// Row of the column chunk starting at output position `c0`: the input each
/// position reads at one kernel offset (the `segments` of that offset), 0 in
/// the padding.
fn fill_row<T: GemmFloat>(
    row: &mut [T],
    xc: &[T],
    segments: &[(usize, usize, usize)],
    c0: usize,
    step: usize,
) {
    let end = c0 + row.len();
    let first = segments.partition_point(|&(oo, _, len)| oo + len <= c0);
    let mut pos = 0;
    for &(oo, ii, len) in &segments[first..] {
        if oo >= end {
            break;
        }
        let (s, e) = (oo.max(c0), (oo + len).min(end));
        row[pos..s - c0].fill(T::zero());
        let dst = &mut row[s - c0..e - c0];
        let src = ii + (s - oo) * step;
        if step == 1 {
            dst.copy_from_slice(&xc[src..src + dst.len()]);
        } else if step == 2 && src + 2 * dst.len() <= xc.len() {
            // Even elements of a contiguous span: vectorises as shuffles.
            let pairs = xc[src..src + 2 * dst.len()].chunks_exact(2);
            for (d, pair) in dst.iter_mut().zip(pairs) {
                *d = pair[0];
            }
        } else {
            for (j, d) in dst.iter_mut().enumerate() {
                *d = xc[src + j * step];
            }
        }
        pos = e - c0;
    }
    row[pos..].fill(T::zero());
}
}
