//! The u8 operand of an int8 convolution, packed panel by panel. K runs
//! over (kernel row, kernel column, input channel), the channels padded to
//! a multiple of four ([`k_order`]), so that one panel group of four k is
//! four channels at one tap: one 4-byte word per output pixel.
//!
//! Before the product, the input is staged once per image and group
//! ([`stage`]): channels in groups of four interleaved into words
//! (`[c/4][h][w]` words), the borders padded with the zero point, s8 data
//! moved to u8. A panel group is then one run of words per output row
//! segment: a plain copy at stride 1, every `stride`-th word otherwise.
//!
//! At stride 1 the engine can read the staged words in place instead
//! ([`InPlacePlan`]): one offset per panel group, no panels.
//!
//! A 1×1, stride-1, unpadded convolution whose channel count is a multiple
//! of four reads its input directly: its K order is the channel order. At
//! a larger stride it reads the pixels it needs, copied out once per image
//! and group ([`subsample`]), the same way.

use crate::ops::conv::geom::Window;
use crate::ops::parallel::par_rows;
use crate::ops::quant::engine::panel::{flip_mask, interleave_rows, pack_k_rows, RunCopier};
use crate::ops::quant::engine::{InPlace, PanelSource, NR};

/// Where k of the packed weights comes from: `(channel, kernel tap)` of
/// the `[m][c][kh·kw]` weights for each of `taps · c4 · 4` values of K,
/// `None` for the padding channels.
pub(super) fn k_order(
    channels: usize,
    taps: usize,
) -> impl Iterator<Item = Option<(usize, usize)>> {
    let c4 = channels.div_ceil(4) * 4;
    (0..taps).flat_map(move |t| (0..c4).map(move |c| (c < channels).then_some((c, t))))
}

/// True when the input itself is the u8 operand (see the module header).
pub(super) fn is_direct(win: &Window, channels: usize) -> bool {
    win.kernel.iter().all(|&k| k == 1)
        && win.strides.iter().all(|&s| s == 1)
        && win.pad_begin.iter().chain(&win.pad_end).all(|&p| p == 0)
        && channels.is_multiple_of(4)
}

/// True for a 1×1, unpadded convolution with a stride above one whose
/// channel count is a multiple of four: the input pixels it reads,
/// gathered by [`subsample`], are its u8 operand as for a direct one.
pub(super) fn is_strided_pointwise(win: &Window, channels: usize) -> bool {
    win.kernel.iter().all(|&k| k == 1)
        && win.strides.iter().any(|&s| s > 1)
        && win.pad_begin.iter().chain(&win.pad_end).all(|&p| p == 0)
        && channels.is_multiple_of(4)
}

/// Copies the pixels a 1×1 unpadded convolution reads from `x`
/// (`[channels][h·w]`) into `out` as `[channels][oh·ow]`: pixel (oy, ox)
/// of each plane is input pixel (oy·sh, ox·sw).
pub(super) fn subsample(x: &[u8], channels: usize, win: &Window, out: &mut Vec<u8>) {
    let (ih, iw) = (win.input[0], win.input[1]);
    let (oh, ow) = (win.output[0], win.output[1]);
    let (sh, sw) = (win.strides[0], win.strides[1]);
    out.clear();
    out.resize(channels * oh * ow, 0);
    if oh * ow == 0 {
        return;
    }
    par_rows(out, oh * ow, |c0, chunk| {
        for (ci, plane) in chunk.chunks_mut(oh * ow).enumerate() {
            let src = &x[(c0 + ci) * ih * iw..][..ih * iw];
            for (oy, dst) in plane.chunks_mut(ow).enumerate() {
                let row = &src[oy * sh * iw..][..iw];
                if !(sw == 2 && evens_fast(row, dst)) {
                    for (d, &v) in dst.iter_mut().zip(row.iter().step_by(sw)) {
                        *d = v;
                    }
                }
            }
        }
    });
}

/// `dst[i] = src[2i]` for every i < `dst.len()`, where the CPU has AVX-512
/// BW and VL; returns whether it did.
fn evens_fast(src: &[u8], dst: &mut [u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if !dst.is_empty()
        && 2 * dst.len() - 1 <= src.len()
        && crate::ops::gemm::simd::has_avx512_wide()
    {
        // SAFETY: the features were just checked, and `src` holds every
        // byte read (2·(len − 1) < src.len(), the loads masked to it).
        unsafe { evens_avx512(src, dst) };
        return true;
    }
    let _ = (src, dst);
    false
}

/// [`evens_fast`]'s loop: 64 bytes in, their 32 even bytes out.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn evens_avx512(src: &[u8], dst: &mut [u8]) {
    use std::arch::x86_64::*;
    let n = dst.len();
    for i in (0..n).step_by(32) {
        let avail = (src.len() - 2 * i).min(64);
        let load = if avail == 64 {
            u64::MAX
        } else {
            (1u64 << avail) - 1
        };
        let store = if n - i >= 32 {
            u32::MAX
        } else {
            (1u32 << (n - i)) - 1
        };
        // SAFETY: the load is masked to the bytes of `src` from 2i on, the
        // store to the bytes of `dst` from i on.
        unsafe {
            let v = _mm512_maskz_loadu_epi8(load, src.as_ptr().add(2 * i).cast());
            _mm256_mask_storeu_epi8(
                dst.as_mut_ptr().add(i).cast(),
                store,
                _mm512_cvtepi16_epi8(v),
            );
        }
    }
}

/// The padded extent of the staged planes: every row and column a tap reaches.
fn padded(win: &Window) -> (usize, usize) {
    let ext = |d: usize| {
        ((win.output[d] - 1) * win.strides[d] + (win.kernel[d] - 1) * win.dilations[d] + 1)
            .max(win.pad_begin[d] + win.input[d])
    };
    (ext(0), ext(1))
}

/// Stages one image-group's input `x` (`[channels][h·w]`, zero point
/// `zero_x`) into `out` (see the module header).
pub(super) fn stage(
    x: &[u8],
    channels: usize,
    win: &Window,
    zero_x: i32,
    x_signed: bool,
    out: &mut Vec<u8>,
) {
    let (ph, pw) = padded(win);
    let (ih, iw) = (win.input[0], win.input[1]);
    let (pt, pl) = (win.pad_begin[0], win.pad_begin[1]);
    let flip = flip_mask(x_signed);
    let pad = (zero_x as u8) ^ flip;
    let groups = channels.div_ceil(4);
    // Every word inside the borders is written below; the borders are
    // filled with `pad` plane by plane.
    out.resize(groups * ph * pw * 4, pad);
    // The rows of a last group's missing channels: the zero point, which
    // the flip turns into `pad`; only a channel count not a multiple of
    // four has them (other runs allocate nothing here).
    let missing = if channels.is_multiple_of(4) {
        Vec::new()
    } else {
        vec![zero_x as u8; iw]
    };
    par_rows(out, ph * pw * 4, |g0, chunk| {
        for (gi, plane) in chunk.chunks_mut(ph * pw * 4).enumerate() {
            let g = g0 + gi;
            let lanes = (channels - 4 * g).min(4);
            plane[..pt * pw * 4].fill(pad);
            plane[(pt + ih) * pw * 4..].fill(pad);
            for y in pt..pt + ih {
                let row = &mut plane[y * pw * 4..][..pw * 4];
                row[..pl * 4].fill(pad);
                row[(pl + iw) * 4..].fill(pad);
            }
            for y in 0..ih {
                let dst = &mut plane[((y + pt) * pw + pl) * 4..][..iw * 4];
                let row = |j: usize| {
                    if j < lanes {
                        &x[((4 * g + j) * ih + y) * iw..][..iw]
                    } else {
                        &missing[..]
                    }
                };
                interleave_rows([row(0), row(1), row(2), row(3)], dst, flip);
            }
        }
    });
}

/// A stride-1 convolution's staged input read in place by the engine
/// (`engine::in_place`): output pixel (y, x) is column `y·pw + x` of the
/// staged planes' width `pw`, and K group (tap, channel group) one offset
/// from it, in [`k_order`]'s order.
pub(super) struct InPlacePlan {
    offsets: Vec<usize>,
    row: usize,
    width: usize,
    cols: usize,
}

impl InPlacePlan {
    /// For a 2-D stride-1 convolution that stages its input, on planes
    /// wide enough that the unstored columns cost little; `None` for
    /// others.
    pub(super) fn new(win: &Window, channels: usize) -> Option<InPlacePlan> {
        let (oh, ow) = (*win.output.first()?, *win.output.get(1)?);
        if win.input.len() != 2
            || win.strides.iter().any(|&s| s != 1)
            || is_direct(win, channels)
            || oh == 0
            || ow == 0
        {
            return None;
        }
        let (ph, pw) = padded(win);
        let cols = (oh - 1) * pw + ow;
        // The unstored columns cost their share of the product: in place
        // only where its panels' columns exceed the output pixels by a
        // sixteenth at most (the packed path computes a last partial panel
        // at little more than its own columns). 56 × 56 planes padded by
        // one: 3264 columns for 3136 pixels; on 28 × 28 the 10 % more is
        // about what the packing saves, on smaller planes more than it.
        if cols.div_ceil(NR) * NR * 16 > oh * ow * 17 {
            return None;
        }
        let (kh, kw) = (win.kernel[0], win.kernel[1]);
        let (dh, dw) = (win.dilations[0], win.dilations[1]);
        let groups = channels.div_ceil(4);
        let mut offsets = Vec::with_capacity(kh * kw * groups);
        for ky in 0..kh {
            for kx in 0..kw {
                offsets.extend((0..groups).map(|g| ((g * ph + ky * dh) * pw + kx * dw) * 4));
            }
        }
        Some(InPlacePlan {
            offsets,
            row: pw,
            width: ow,
            cols,
        })
    }

    /// The product's columns: every output row at the staged width, the
    /// last one cut at the output width.
    pub(super) fn cols(&self) -> usize {
        self.cols
    }

    /// The operand over `staged` (one image-group's, from [`stage`]),
    /// grown where needed to hold the unstored columns the last panel
    /// reads (their values do not matter).
    pub(super) fn operand<'a>(&'a self, staged: &'a mut Vec<u8>) -> InPlace<'a> {
        let need = InPlace::bytes_read(&self.offsets, self.cols);
        if staged.len() < need {
            staged.resize(need, 0);
        }
        InPlace {
            words: staged,
            offsets: &self.offsets,
            row: self.row,
            width: self.width,
        }
    }
}

/// One image-group's u8 operand.
pub(super) enum Source<'a> {
    /// The input itself, `[channels][h·w]` (a direct 1×1 convolution).
    Direct {
        x: &'a [u8],
        channels: usize,
        pixels: usize,
        flip: u8,
    },
    /// The staged input and the window over it.
    Staged {
        words: &'a [u8],
        channels: usize,
        win: &'a Window,
    },
}

impl Source<'_> {
    /// Fills the panel groups of output pixels `c0 .. c0 + n`.
    fn gather(words: &[u8], channels: usize, win: &Window, panel: &mut [u8], c0: usize, n: usize) {
        let (ph, pw) = padded(win);
        let (kh, kw) = (win.kernel[0], win.kernel[1]);
        let ow = win.output[1];
        let (sh, sw) = (win.strides[0], win.strides[1]);
        let (dh, dw) = (win.dilations[0], win.dilations[1]);
        let groups = channels.div_ceil(4);
        let runs = RunCopier::new();
        // The panel's output row segments: (first column, first word, length).
        let mut segments = [(0usize, 0usize, 0usize); NR];
        let mut count = 0;
        let (mut p, mut j) = (c0, 0);
        while p < c0 + n {
            let (oy, ox) = (p / ow, p % ow);
            let run = (ow - ox).min(c0 + n - p);
            segments[count] = (j, oy * sh * pw + ox * sw, run);
            count += 1;
            p += run;
            j += run;
        }
        let mut k4 = 0;
        for ky in 0..kh {
            for kx in 0..kw {
                let tap = ky * dh * pw + kx * dw;
                for g in 0..groups {
                    let dst = &mut panel[k4 * NR * 4..][..NR * 4];
                    k4 += 1;
                    let base = g * ph * pw + tap;
                    for &(j0, at, run) in &segments[..count] {
                        let from = base + at;
                        let out = &mut dst[j0 * 4..][..run * 4];
                        match sw {
                            1 => runs.copy(out, &words[from * 4..][..run * 4]),
                            2 => runs.copy_evens(out, &words[from * 4..][..(2 * run - 1) * 4]),
                            _ => {
                                for (t, d) in out.chunks_exact_mut(4).enumerate() {
                                    let w = (from + t * sw) * 4;
                                    d.copy_from_slice(&words[w..w + 4]);
                                }
                            }
                        }
                    }
                    if n < NR {
                        dst[n * 4..].fill(0);
                    }
                }
            }
        }
    }
}

impl PanelSource for Source<'_> {
    fn pack(&self, panel: &mut [u8], c0: usize, n: usize) {
        match *self {
            Source::Direct {
                x,
                channels,
                pixels,
                flip,
            } => pack_k_rows(panel, x, channels, pixels, (c0, n), flip),
            Source::Staged {
                words,
                channels,
                win,
            } => Self::gather(words, channels, win, panel, c0, n),
        }
    }
}
