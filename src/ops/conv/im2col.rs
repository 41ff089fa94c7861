//! Convolution as im2col + GEMM: the input windows are unrolled into a
//! column matrix (one row per input channel and kernel offset, one column
//! per output position) that the GEMM engine multiplies by the weights.
//! Large output planes are processed in column chunks of a few MiB, so the
//! column matrix is never materialised whole (VGG's 3×3 layers would need
//! over 100 MB); the chunk width depends on the sizes alone, so results do
//! not depend on the thread count.

use super::conv_op::{epilogue, ConvArgs, ConvPlan};
use super::finish_row;
use super::lines::Lines;
use super::panels::{self, NR};
use crate::error::Result;
use crate::ops::gemm::checked_product;
use crate::ops::gemm::engine::{Batched, GemmFloat, Mat};
use crate::ops::gemm::fused::Activation;
use crate::ops::gemm::simd::multiversion;
use crate::ops::parallel::SendPtr;
use crate::ops::util::par_rows;
use crate::ops::util::{as_f32, as_f32_mut};

const OP: &str = "Conv";

/// Elements of the column matrix per chunk (4 MiB of f32: within the L3
/// cache, and enough work per chunk to keep a few threads busy).
const CHUNK_ELEMS: usize = 1 << 20;
/// Chunk widths are multiples of this many output positions.
const CHUNK_ALIGN: usize = 64;

/// Whether im2col's products run on the panel GEMM for `p`, computed in
/// f32 (`f32`) or f64: f32 on a CPU with the kernel, and a plane at least
/// a strip wide.
pub(super) fn takes_panels(p: &ConvPlan, f32: bool) -> bool {
    f32 && panels::available() && p.win.out_len() >= NR
}

/// im2col then one GEMM per group, image by image and chunk by chunk: on
/// the panel GEMM where `on_panels` ([`takes_panels`]; W packed for it,
/// kept in the node's panel cache when W is constant), for every chunk at
/// least a strip wide.
pub(super) fn im2col_gemm<T: GemmFloat>(
    a: &ConvArgs<T>,
    on_panels: bool,
    y: &mut [T],
) -> Result<()> {
    let p = a.p;
    let kk = checked_product(OP, &[p.cg(), p.win.kernel_len()])?;
    if on_panels {
        let w32 = as_f32(a.w).expect("the panel GEMM is chosen for f32 only");
        let pack = || panels::pack(p.group, p.mg(), kk, w32);
        return a.weights.panels.with(a.weights.constant, pack, |packed| {
            columns(a, y, Some(packed))
        });
    }
    columns(a, y, None)
}

/// [`im2col_gemm`], with W packed for the panel GEMM or not.
fn columns<T: GemmFloat>(a: &ConvArgs<T>, y: &mut [T], packed: Option<&[f32]>) -> Result<()> {
    let ConvArgs {
        p, x, w, b, z, act, ..
    } = *a;
    let win = &p.win;
    let (mg, group, m) = (p.mg(), p.group, p.m);
    let (plane, in_plane, klen) = (win.out_len(), win.in_len(), win.kernel_len());
    let rows = checked_product(OP, &[p.c, klen])?;
    let width = chunk_width(rows, plane);
    let chunked = width < plane;
    let col_len = checked_product(OP, &[rows, width])?;
    let kk = checked_product(OP, &[p.cg(), klen])?;
    let buf_len = if chunked { m * width } else { 0 };
    let segments = Segments::of(win);
    // One scratch for the column chunk and (when chunked) the GEMM's output
    // chunk; every element is written before it is read.
    T::with_scratch(col_len + buf_len, |scratch| {
        let (col, buf) = scratch.split_at_mut(col_len);
        for ni in 0..p.n {
            let xi = &x[ni * p.c * in_plane..(ni + 1) * p.c * in_plane];
            for c0 in (0..plane).step_by(width) {
                let cw = width.min(plane - c0);
                let col = &mut col[..rows * cw];
                segments.fill(col, xi, in_plane, c0, cw);
                // Chunks take only the bias on the buffer; the residual and
                // activation follow on the copy into Y.
                let (zi, ep_act) = if chunked {
                    (None, None)
                } else {
                    (z.map(|z| &z[ni * m * plane..(ni + 1) * m * plane]), act)
                };
                // C is Y itself when the plane is one chunk, else the buffer.
                let c = if chunked {
                    &mut buf[..m * cw]
                } else {
                    &mut y[ni * m * plane..(ni + 1) * m * plane]
                };
                let pitch = if chunked { cw } else { plane };
                let dims = (mg, kk, cw, pitch);
                match packed.filter(|_| cw >= NR) {
                    Some(packed) => on_panels(dims, group, packed, col, b, zi, ep_act, c),
                    None => on_engine(dims, group, w, col, b, zi, ep_act, c),
                }
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

/// The input lines each kernel offset of a window reads, the same for
/// every channel and image: (output start, input start, length), in
/// increasing output order; and the input step between output positions.
pub(super) struct Segments {
    per_offset: Vec<Vec<(usize, usize, usize)>>,
    step: usize,
}

impl Segments {
    pub(super) fn of(win: &super::geom::Window) -> Segments {
        let lines = Lines::new(win);
        let per_offset = (0..win.kernel_len())
            .map(|k| {
                let mut v = Vec::new();
                lines.for_each(k, |oo, ii, len| v.push((oo, ii, len)));
                v
            })
            .collect();
        Segments {
            per_offset,
            step: lines.step(),
        }
    }

    /// The column chunk of output positions `c0..c0 + cw` (`col`: one row
    /// of `cw` per input channel and kernel offset) from one image's input
    /// planes `xi` (`in_plane` values each), rows split over the pool.
    pub(super) fn fill<T: GemmFloat>(
        &self,
        col: &mut [T],
        xi: &[T],
        in_plane: usize,
        c0: usize,
        cw: usize,
    ) {
        let klen = self.per_offset.len();
        par_rows(col, cw, |first, chunk| {
            for (r, row) in chunk.chunks_mut(cw).enumerate() {
                let (ch, k) = ((first + r) / klen, (first + r) % klen);
                let xc = &xi[ch * in_plane..(ch + 1) * in_plane];
                fill_row(row, xc, &self.per_offset[k], c0, self.step);
            }
        });
    }
}

/// One column chunk's products `C = W·col` per group, with bias, residual
/// and activation, on the `gemm` crate: `dims` are output channels per
/// group, rows of each group's column matrix, chunk width and C's pitch.
#[allow(clippy::too_many_arguments)]
fn on_engine<T: GemmFloat>(
    (mg, kk, cw, pitch): (usize, usize, usize, usize),
    group: usize,
    w: &[T],
    col: &[T],
    b: Option<&[T]>,
    z: Option<&[T]>,
    act: Option<Activation>,
    c: &mut [T],
) {
    let cp = SendPtr(c.as_mut_ptr());
    let a = |g: usize| Mat::row_major(w.as_ptr(), kk).offset(g * mg * kk);
    let bm = |g: usize| Mat::row_major(col.as_ptr(), cw).offset(g * kk * cw);
    let cm = |g: usize| cp.offset(g * mg * pitch);
    let m = mg * group;
    let ep = epilogue(cp, pitch, m, b, z, act, |g| g * mg);
    let needs_ep = b.is_some() || z.is_some() || act.is_some();
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
    assert!(w.len() >= m * kk && col.len() >= group * kk * cw && c.len() >= m * pitch);
    // SAFETY: W is m×kk, the column chunk group×kk×cw and C m rows of
    // `pitch` (checked above); the C of distinct groups are disjoint rows.
    unsafe { job.run() };
}

/// [`on_engine`] on the panel GEMM, with W packed for it (f32 only; `T`
/// is f32 whenever W was packed).
#[allow(clippy::too_many_arguments)]
fn on_panels<T: GemmFloat>(
    (mg, kk, cw, pitch): (usize, usize, usize, usize),
    group: usize,
    packed: &[f32],
    col: &[T],
    b: Option<&[T]>,
    z: Option<&[T]>,
    act: Option<Activation>,
    c: &mut [T],
) {
    let (Some(col), Some(c)) = (as_f32(col), as_f32_mut(c)) else {
        unreachable!("W is packed for the panel GEMM only for f32");
    };
    let at = |g: usize| panels::At {
        x: g * kk * cw,
        w: g,
        y: g * mg * pitch,
        bias: g * mg,
    };
    let job = panels::Products {
        count: group,
        rows: mg,
        k: kk,
        n: cw,
        x_pitch: cw,
        y_pitch: pitch,
        at: &at,
        x: col,
        packed,
        bias: b.and_then(as_f32),
        z: z.and_then(as_f32),
        act,
    };
    // SAFETY: W was packed only where the CPU has the kernel; the groups
    // write disjoint rows of C.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    unsafe {
        job.run(c)
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    unreachable!(
        "W is packed for the panel GEMM only on x86-64 and aarch64: {}",
        job.count
    );
}

/// Output positions per chunk: the whole plane when its column matrix is
/// small, else as many aligned positions as fit `CHUNK_ELEMS`.
/// Whether a run of `p` that packed W for the panel GEMM reads only the
/// packed W: every chunk of the plane is at least a strip wide (a narrower
/// last chunk runs on the plain engine, which reads W as it is).
pub(super) fn reads_only_packed(p: &ConvPlan) -> bool {
    let plane = p.win.out_len();
    let width = chunk_width(p.c.saturating_mul(p.win.kernel_len()), plane);
    let last = plane % width.max(1);
    last == 0 || last >= NR
}

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
    // A chunk from the plane's start (every unchunked plane) starts at the
    // first segment; only later chunks search for theirs.
    let first = if c0 == 0 {
        0
    } else {
        segments.partition_point(|&(oo, _, len)| oo + len <= c0)
    };
    let mut pos = 0;
    for &(oo, ii, len) in &segments[first..] {
        if oo >= end {
            break;
        }
        let (s, e) = (oo.max(c0), (oo + len).min(end));
        let (d0, d1) = (s - c0, e - c0);
        let src = ii + (s - oo) * step;
        // Short spans are zeroed and copied as whole blocks of `SHORT`
        // (no library call), running past their end into positions that
        // the next spans, or the final zeroing, then write.
        if d0 - pos <= SHORT && pos + SHORT <= row.len() {
            block_zero(&mut row[pos..pos + SHORT]);
        } else {
            row[pos..d0].fill(T::zero());
        }
        if step == 1 && d1 - d0 <= SHORT && d0 + SHORT <= row.len() && src + SHORT <= xc.len() {
            block_copy(&mut row[d0..d0 + SHORT], &xc[src..src + SHORT]);
            pos = d1;
            continue;
        }
        let dst = &mut row[d0..d1];
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
        pos = d1;
    }
    row[pos..].fill(T::zero());
}
}

/// The block length of [`fill_row`]'s short spans: a small plane's rows
/// are many spans of a few elements (a 7×7 plane's 3×3 window gives seven
/// of six or seven, with a zero at each edge), where a `memcpy` or
/// `memset` call costs more than the copy.
const SHORT: usize = 8;

/// Copies `SHORT` elements (both slices are that long).
#[inline(always)]
fn block_copy<T: Copy>(dst: &mut [T], src: &[T]) {
    if let (Ok(d), Ok(s)) = (
        <&mut [T; SHORT]>::try_from(dst),
        <&[T; SHORT]>::try_from(src),
    ) {
        *d = *s;
    }
}

/// Zeroes `SHORT` elements (`dst` is that long).
#[inline(always)]
fn block_zero<T: GemmFloat>(dst: &mut [T]) {
    if let Ok(d) = <&mut [T; SHORT]>::try_from(dst) {
        *d = [T::zero(); SHORT];
    }
}
