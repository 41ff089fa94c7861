//! Non-overlapping 2-D convolution ("patchify": kernel equal to the
//! stride, no padding, no dilation, one group), the patch embedding of
//! vision transformers (ViT's 16×16/16, Swin's and ConvNeXt's 4×4/4 stems
//! and 2×2/2 downsampling). Each output position reads its own patch of
//! the input and no other position reads it, so im2col's column matrix
//! is a permutation of X; here it is built transposed, one row per
//! position holding that position's patch in (channel, row, column)
//! order: every kernel row is a contiguous run of the input row, copied
//! whole (im2col gathered each element at a stride of the kernel width).
//! The patches then multiply W's transpose, packed once into the panels
//! of the packed-weights GEMM ([`crate::ops::gemm::packed`]), giving Y
//! position-major; a blocked transpose writes it channel-major into Y,
//! adding the fused residual and activation on the way when there is a
//! residual (else the bias and activation are the GEMM's own epilogue).
//!
//! ViT's 16×16/16 stem (3→192 channels, 224×224, one thread): 435 µs on
//! im2col and the panel GEMM, whose column matrix was a stride-16 gather.
//!
//! Each output is one in-order chain of fused multiply-adds over the
//! patch, then the bias, then the residual, then the activation, whatever
//! the thread count. x86-64 with AVX2 and FMA (or AVX-512F), f32 only;
//! elsewhere these layers stay on im2col and the panel GEMM.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::conv_op::{ConvArgs, ConvPlan};
use super::finish_row;
use crate::ops::gemm::fused::Activation;
use std::sync::OnceLock;

/// W packed for this kernel, kept across runs when W is a constant.
#[derive(Debug, Default)]
pub(super) struct PatchCache {
    #[cfg(target_arch = "x86_64")]
    packed: OnceLock<Option<crate::ops::gemm::packed::PackedWeights>>,
    #[cfg(not(target_arch = "x86_64"))]
    packed: OnceLock<()>,
}

/// Whether `p` is a non-overlapping 2-D convolution this kernel takes:
/// kernel equal to the stride, no padding or dilation, one group, and a
/// window of at least two taps (1×1 stride-1 layers are the pointwise
/// path's).
pub(super) fn suits(p: &ConvPlan) -> bool {
    let w = &p.win;
    w.rank() == 2
        && p.group == 1
        && w.kernel == w.strides
        && w.kernel_len() > 1
        && w.dilations.iter().all(|&d| d == 1)
        && w.pad_begin.iter().chain(&w.pad_end).all(|&v| v == 0)
        && w.out_len() > 0
}

/// Whether this kernel takes `p` on this CPU: `p` [`suits`] it and the
/// packed-weights GEMM packs its W (x86-64 only).
pub(super) fn takes(p: &ConvPlan) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let k = p.c * p.win.kernel_len();
        suits(p) && crate::ops::gemm::packed::PackedWeights::packs(k, p.m)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = p;
        false
    }
}

/// Runs a layer this kernel [`takes`], with W packed once into the node's
/// patch cache when W is constant: Y channel-major (`[N, M, H, W]`).
pub(super) fn run(a: &ConvArgs<f32>, y: &mut [f32]) {
    run_into(a, Layout::Planes, y);
}

/// [`run`] writing Y position-major (`[N, H, W, M]`: the output's
/// Transpose to channels last absorbed), the product's own order, so Y is
/// written once, without the transpose into planes. Layers with a
/// residual (given in planes) are not taken: false, and nothing is
/// written.
pub(super) fn run_pixels(a: &ConvArgs<f32>, y: &mut [f32]) -> bool {
    if a.z.is_some() {
        return false;
    }
    run_into(a, Layout::Pixels, y);
    true
}

/// How Y is laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Channel-major planes.
    Planes,
    /// Position-major rows of channels (no residual).
    Pixels,
}

fn run_into(a: &ConvArgs<f32>, layout: Layout, y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::ops::gemm::packed::PackedWeights;
        let p = a.p;
        let k = p.c * p.win.kernel_len();
        let pack = || PackedWeights::new(a.w, k, p.m, true);
        let fresh;
        let packed = if a.weights.constant {
            a.weights.patches.packed.get_or_init(pack).as_ref()
        } else {
            fresh = pack();
            fresh.as_ref()
        };
        let packed = packed.expect("chosen only where W packs");
        patches(p, a.x, packed, (a.b, a.z, a.act), layout, y);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, layout, y);
        unreachable!("the patch kernel is chosen on x86-64 only");
    }
}

/// The whole layer: patches, their product by the packed W, and (for
/// planes) the transpose into Y.
#[cfg(target_arch = "x86_64")]
fn patches(
    p: &ConvPlan,
    x: &[f32],
    packed: &crate::ops::gemm::packed::PackedWeights,
    (b, z, act): (Option<&[f32]>, Option<&[f32]>, Option<Activation>),
    layout: Layout,
    y: &mut [f32],
) {
    use crate::ops::gemm::engine::GemmFloat;
    use crate::ops::gemm::packed::PackedEpilogue;
    let plane = p.win.out_len();
    let (k, m) = (packed.k(), packed.n());
    let rows = p.n * plane;
    // Without a residual the GEMM adds the bias and applies the
    // activation itself; with one, both wait for the transpose's pass
    // (after the bias, which the GEMM still adds).
    let epi = PackedEpilogue {
        bias: b,
        act: if z.is_some() { None } else { act },
    };
    let product = |a: &[f32], t: &mut [f32]| {
        packed
            .matmul("Conv", a, rows, epi, t)
            .expect("the patch matrices have the product's sizes")
    };
    if layout == Layout::Pixels {
        return f32::with_scratch(rows * k, |a| {
            gather(p, x, a);
            product(a, y);
        });
    }
    f32::with_scratch(rows * (k + m), |scratch| {
        let (a, t) = scratch.split_at_mut(rows * k);
        gather(p, x, a);
        product(a, t);
        scatter(p, t, m, y);
        if let Some(z) = z {
            crate::ops::util::par_spans(y, |start, span| {
                finish_row(span, None, Some(&z[start..start + span.len()]), act)
            });
        }
    });
}

/// Fills `a` (one row of `c·kh·kw` per output position, image by image)
/// with each position's patch of `x`.
fn gather(p: &ConvPlan, x: &[f32], a: &mut [f32]) {
    let win = &p.win;
    let (h, wd) = (win.input[0], win.input[1]);
    let (oh, ow) = (win.output[0], win.output[1]);
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let k = p.c * kh * kw;
    // One task per output row of an image: its `ow` patch rows.
    crate::ops::util::par_rows(a, ow * k, |first, chunk| {
        for (r, out) in chunk.chunks_exact_mut(ow * k).enumerate() {
            let (ni, oy) = ((first + r) / oh, (first + r) % oh);
            for c in 0..p.c {
                let plane = &x[(ni * p.c + c) * h * wd..(ni * p.c + c + 1) * h * wd];
                for dy in 0..kh {
                    let row = &plane[(oy * kh + dy) * wd..][..ow * kw];
                    let dst = &mut out[(c * kh + dy) * kw..];
                    copy_runs(row, kw, dst, k);
                }
            }
        }
    });
}

/// Copies the runs of `len` of `src` (end to end) to `dst` at a pitch of
/// `pitch`, with fixed-length copies for the usual kernel widths (a copy
/// of a runtime length is a call to `memmove`).
fn copy_runs(src: &[f32], len: usize, dst: &mut [f32], pitch: usize) {
    fn runs<const N: usize>(src: &[f32], dst: &mut [f32], pitch: usize) {
        for (i, run) in src.chunks_exact(N).enumerate() {
            let d: &mut [f32; N] = (&mut dst[i * pitch..i * pitch + N])
                .try_into()
                .expect("N floats");
            d.copy_from_slice(run);
        }
    }
    match len {
        2 => runs::<2>(src, dst, pitch),
        4 => runs::<4>(src, dst, pitch),
        8 => runs::<8>(src, dst, pitch),
        14 => runs::<14>(src, dst, pitch),
        16 => runs::<16>(src, dst, pitch),
        32 => runs::<32>(src, dst, pitch),
        _ => {
            for (i, run) in src.chunks_exact(len).enumerate() {
                dst[i * pitch..i * pitch + len].copy_from_slice(run);
            }
        }
    }
}

/// Channels (and positions) per block of the transpose: 8 × 8 floats,
/// one AVX register per row.
const BLOCK: usize = 8;

/// Writes the position-major product `t` (one row of `m` channels per
/// position, image by image) channel-major into `y`.
#[cfg(target_arch = "x86_64")]
fn scatter(p: &ConvPlan, t: &[f32], m: usize, y: &mut [f32]) {
    let plane = p.win.out_len();
    // Tasks over whole rows of Y (one channel of one image each).
    crate::ops::util::par_rows(y, plane, |first, chunk| {
        let rows = chunk.len() / plane;
        let mut r = 0;
        while r < rows {
            let (ni, c0) = ((first + r) / m, (first + r) % m);
            // A block of channels within one image.
            let cs = BLOCK.min(rows - r).min(m - c0);
            let src = &t[ni * plane * m..(ni + 1) * plane * m];
            let dst = &mut chunk[r * plane..(r + cs) * plane];
            let whole = if cs == BLOCK {
                plane / BLOCK * BLOCK
            } else {
                0
            };
            for p0 in (0..whole).step_by(BLOCK) {
                // SAFETY: the packed GEMM ran, so the CPU has AVX; the
                // block's 8 rows of 8 lie inside `src` (positions p0..p0+8
                // of this image, channels c0..c0+8 ≤ m) and `dst` (8 rows
                // of `plane`, columns p0..p0+8 ≤ plane).
                unsafe {
                    transpose8(
                        src.as_ptr().add(p0 * m + c0),
                        m,
                        dst.as_mut_ptr().add(p0),
                        plane,
                    )
                };
            }
            for pos in whole..plane {
                let from = &src[pos * m + c0..pos * m + c0 + cs];
                for (c, &v) in from.iter().enumerate() {
                    dst[c * plane + pos] = v;
                }
            }
            r += cs;
        }
    });
}

/// Writes the 8×8 block at `src` (rows at pitch `sp`) transposed to `dst`
/// (rows at pitch `dp`).
///
/// # Safety
/// The CPU must have AVX; `src` must hold 8 readable rows of 8 floats at
/// pitch `sp`, and `dst` 8 writable rows of 8 at pitch `dp`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose8(src: *const f32, sp: usize, dst: *mut f32, dp: usize) {
    use std::arch::x86_64::*;
    // SAFETY: row i < 8 of `src`, 8 readable floats (the contract).
    let r: [__m256; 8] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(src.add(i * sp)) });
    let out = crate::ops::conv::regs::transpose8(r);
    for (i, v) in out.into_iter().enumerate() {
        // SAFETY: row i < 8 of `dst`, 8 writable floats (the contract).
        unsafe { _mm256_storeu_ps(dst.add(i * dp), v) };
    }
}
