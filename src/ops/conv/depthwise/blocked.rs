//! Channel-blocked 2-D depthwise convolution for f32 on small planes, and
//! on planes up to 64 wide for kernels of many taps (AVX2 + FMA: 8
//! channels per vector, AVX-512F: 16). A row of a 7×7 plane
//! fills only part of a vector in the per-plane kernel; here each lane is a
//! channel instead, so every lane works whatever the plane's width: a block
//! of channel planes is gathered into a zero-padded `[pixel][channel]`
//! scratch, the taps run on whole vectors (one broadcast-free weight vector
//! per tap, read in place from W transposed once per layer, one fused
//! multiply-add per output pixel), Relu, Clip or hard-swish in registers,
//! and the sums are gathered back into the channel planes. Each output is
//! the bias plus its
//! taps in kernel row-major order, padding taps adding w·0, with one
//! rounding per tap: the same bits as the per-plane kernel.

use super::lanes::{Avx2, Avx512, Epilogue, Lanes};
use super::transpose::{to_pixels, to_planes, Spread};
use crate::ops::conv::conv_op::ConvPlan;
use crate::ops::gemm::fused::Activation;

/// Widest output rows the blocked kernel takes: wider rows fill the
/// per-plane kernel's vectors.
const MAX_OW: usize = 16;

/// Widest output rows the blocked kernel takes for a stride-1 kernel of
/// at most [`FEW_TAPS`] taps without AVX-512: on rows of 9 to 16 the
/// per-plane kernel's vectors are nearly full and few taps did not pay for
/// the two transposes. With AVX-512 (16 channels a vector, each tap's
/// weights read in place) the blocked kernel takes them too: a 3×3 layer
/// of 480 channels on 14×14, alone, one thread, ran in 40 µs against the
/// per-plane kernel's 57 (AMD EPYC).
const MAX_OW_FEW_TAPS: usize = 8;

/// See [`MAX_OW_FEW_TAPS`].
const FEW_TAPS: usize = 9;

/// Widest output rows the blocked kernel takes for kernels of more than
/// [`FEW_TAPS`] taps with AVX-512: the two transposes are paid once for
/// 25 or 49 taps, and every load is a whole aligned vector, where the
/// per-plane kernels' loads slide along a row across cache lines (one
/// thread, AMD EPYC, per-node trace: a 7×7 layer of 96 channels on 56×56
/// 432 → 226 µs, 192 on 28×28 218 → 132; MobileNet v3's 5×5 layers on
/// 28×28 73 → 57–63, and at stride 2 from 56×56 94 → 66). The scratch of
/// a 64-wide plane (about 0.6 MB) still fits in L2. Kernels of 3×3 lose
/// on wide planes (112×112 and 56×56: 85 → 94, 89 → 100 µs).
const MAX_OW_MANY_TAPS: usize = 64;

/// Most taps the blocked kernel takes (a block's weights are gathered per
/// tap where its channels are not consecutive).
const MAX_TAPS: usize = 64;

/// Values the scratch has beyond its contents, so that they can start on
/// a 64-byte boundary.
const ALIGN_SLACK: usize = 16;

/// Output pixels of a row whose sums stay in registers together.
const PIXELS: usize = 8;

/// One layer's geometry for the blocked kernel, and its instruction set.
#[derive(Clone, Copy, Debug)]
pub(super) struct Blocked {
    /// 16 channels per vector (AVX-512F) rather than 8 (AVX2).
    wide: bool,
    /// Output channels, channels per group's outputs, input channels.
    m: usize,
    mg: usize,
    c: usize,
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
    /// Padded input rows and columns the taps read.
    hp: usize,
    wp: usize,
}

impl Blocked {
    /// The kernel for a 2-D depthwise layer on f32, where it runs: AVX2 +
    /// FMA, output rows at most [`MAX_OW`] wide (or [`MAX_OW_FEW_TAPS`]
    /// for a few taps at stride 1 without AVX-512, [`MAX_OW_MANY_TAPS`]
    /// for many with it), at most [`MAX_TAPS`] taps.
    pub(super) fn new(p: &ConvPlan) -> Option<Blocked> {
        use crate::ops::gemm::simd::{has_avx2_fma, has_avx512};
        let win = &p.win;
        let (oh, ow) = (win.output[0], win.output[1]);
        let (kh, kw) = (win.kernel[0], win.kernel[1]);
        let strided = win.strides.iter().any(|&s| s > 1);
        let widest = if kh * kw > FEW_TAPS && has_avx512() {
            MAX_OW_MANY_TAPS
        } else if strided || kh * kw > FEW_TAPS || has_avx512() {
            MAX_OW
        } else {
            MAX_OW_FEW_TAPS
        };
        let ok = win.rank() == 2
            && oh > 0
            && (1..=widest).contains(&ow)
            && kh * kw <= MAX_TAPS
            && has_avx2_fma();
        if !ok {
            return None;
        }
        let (sh, sw) = (win.strides[0].max(1), win.strides[1].max(1));
        let (dh, dw) = (win.dilations[0].max(1), win.dilations[1].max(1));
        Some(Blocked {
            wide: has_avx512(),
            m: p.m,
            mg: p.mg().max(1),
            c: p.c,
            h: win.input[0],
            wd: win.input[1],
            oh,
            ow,
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            pt: win.pad_begin[0],
            pl: win.pad_begin[1],
            hp: (oh - 1) * sh + (kh.max(1) - 1) * dh + 1,
            wp: (ow - 1) * sw + (kw.max(1) - 1) * dw + 1,
        })
    }

    /// Forces 8 channels per vector (AVX2) even where AVX-512 runs: the
    /// tests compare both widths.
    #[cfg(test)]
    pub(super) fn narrow(self) -> Blocked {
        Blocked {
            wide: false,
            ..self
        }
    }

    /// Channels per vector: the planes a block runs together.
    pub(super) fn lanes(&self) -> usize {
        if self.wide {
            Avx512::N
        } else {
            Avx2::N
        }
    }

    /// Scratch values [`Blocked::run`] needs: the pixels, sums and weights
    /// of a block, and room to start them at a cache line.
    pub(super) fn scratch_len(&self) -> usize {
        let n = self.lanes();
        (self.hp * self.wp + 1 + self.oh * self.ow + self.kh * self.kw) * n + ALIGN_SLACK
    }

    /// The output channel of output plane `row` and the start of its input
    /// plane in X.
    fn channel(&self, row: usize) -> (usize, usize) {
        let (ni, oc) = (row / self.m, row % self.m);
        (oc, (ni * self.c + oc / self.mg) * self.h * self.wd)
    }

    /// Output planes `first ..` into `out` (whole planes), with the weights
    /// `wt` in the form [`transpose_weights`] gives, the bias `b` and the
    /// activation `act`; `scratch` holds [`Blocked::scratch_len`] values.
    ///
    /// # Panics
    /// When X, W, B or the scratch are shorter than the layer needs (a bug
    /// in the caller).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        first: usize,
        out: &mut [f32],
        x: &[f32],
        wt: &[f32],
        b: Option<&[f32]>,
        act: Option<Activation>,
        scratch: &mut [f32],
    ) {
        let rows = out.len() / (self.oh * self.ow);
        self.run_to(
            first,
            rows,
            Sink::Planes(out.as_mut_ptr()),
            x,
            wt,
            b,
            act,
            scratch,
        );
    }

    /// Whether [`Blocked::run_pixels`] takes activation `act` (applied in
    /// registers).
    pub(super) fn takes_pixels(act: Option<Activation>) -> bool {
        !matches!(Epilogue::of(act), Epilogue::After(_))
    }

    /// As [`Blocked::run`], but the `rows` output planes `first ..` go to
    /// `out`, the whole output in `[image][pixel][channel]` order (NHWC),
    /// each pixel's `m` channels together: the sums are already in that
    /// order, so the planes are never formed. `act` must be one
    /// [`Blocked::takes_pixels`].
    ///
    /// # Safety
    /// `out` must be valid for writes of the whole output (`n·m·oh·ow`
    /// values for the images that planes `first .. first + rows` are of),
    /// and no other live reference may overlap the values of those planes.
    ///
    /// # Panics
    /// As [`Blocked::run`], and when `act` is not one the sums take.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn run_pixels(
        &self,
        first: usize,
        rows: usize,
        out: *mut f32,
        x: &[f32],
        wt: &[f32],
        b: Option<&[f32]>,
        act: Option<Activation>,
        scratch: &mut [f32],
    ) {
        assert!(Self::takes_pixels(act));
        self.run_to(first, rows, Sink::Pixels(out), x, wt, b, act, scratch);
    }

    /// Output planes `first .. first + rows` into `sink`.
    ///
    /// # Panics
    /// As [`Blocked::run`].
    #[allow(clippy::too_many_arguments)]
    fn run_to(
        &self,
        first: usize,
        rows: usize,
        sink: Sink,
        x: &[f32],
        wt: &[f32],
        b: Option<&[f32]>,
        act: Option<Activation>,
        scratch: &mut [f32],
    ) {
        if rows == 0 {
            return;
        }
        let taps = self.kh * self.kw;
        let (last_oc, last_in) = self.channel(first + rows - 1);
        // One check here covers the unchecked reads and writes below.
        assert!(
            scratch.len() >= self.scratch_len()
                && last_in + self.h * self.wd <= x.len()
                && taps * self.m <= wt.len()
                && last_oc < self.m
                && b.is_none_or(|b| b.len() >= self.m)
                && self.channel(first).0 < self.m
        );
        // SAFETY: the CPU has the instruction set (checked by `new`, and
        // `wide` only where AVX-512F runs), the assert above is the reach
        // `body` needs on its inputs, and `sink` is valid for the planes
        // (the callers' contracts).
        unsafe {
            if self.wide {
                self.run_avx512(first, rows, sink, x, wt, b, act, scratch);
            } else {
                self.run_avx2(first, rows, sink, x, wt, b, act, scratch);
            }
        }
    }

    /// # Safety
    /// As [`Blocked::body`], with AVX-512F.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn run_avx512(
        &self,
        first: usize,
        rows: usize,
        sink: Sink,
        x: &[f32],
        wt: &[f32],
        b: Option<&[f32]>,
        act: Option<Activation>,
        scratch: &mut [f32],
    ) {
        // SAFETY: passed on from the caller.
        unsafe { self.body::<Avx512>(first, rows, sink, x, wt, b, act, scratch) }
    }

    /// # Safety
    /// As [`Blocked::body`], with AVX2 and FMA.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(
        &self,
        first: usize,
        rows: usize,
        sink: Sink,
        x: &[f32],
        wt: &[f32],
        b: Option<&[f32]>,
        act: Option<Activation>,
        scratch: &mut [f32],
    ) {
        // SAFETY: passed on from the caller.
        unsafe { self.body::<Avx2>(first, rows, sink, x, wt, b, act, scratch) }
    }

    /// Blocks of `L::N` output planes (the last one fewer, its spare lanes
    /// repeating its last channel and never stored).
    ///
    /// # Safety
    /// The CPU must support `L`'s instruction set, the slices must be as
    /// long as [`Blocked::run_to`]'s assert requires, and `sink` valid for
    /// writes of planes `first .. first + rows`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn body<L: Lanes>(
        &self,
        first: usize,
        rows: usize,
        sink: Sink,
        x: &[f32],
        wt: &[f32],
        b: Option<&[f32]>,
        act: Option<Activation>,
        scratch: &mut [f32],
    ) {
        let n = L::N;
        // Relu, Clip and hard-swish in registers; any other activation on
        // each plane once it is stored (while it is in cache), as the
        // per-plane kernel does.
        let epi = Epilogue::of(act);
        let plane = self.oh * self.ow;
        let taps = self.kh * self.kw;
        let trash = self.hp * self.wp;
        let in_plane = self.h * self.wd;
        // Every pixel's vector on a cache line of its own: from an
        // allocator's 16-byte alignment nearly every load of a pixel
        // straddled two lines, and the taps' loop was bound by the loads
        // (a 7×7 layer of 384 channels on 14×14, one thread: 94 → 61 µs).
        let skip = scratch.as_ptr().align_offset(64).min(ALIGN_SLACK);
        let scratch = &mut scratch[skip..];
        let (input, rest) = scratch.split_at_mut((trash + 1) * n);
        let (sums, weights) = rest.split_at_mut(plane * n);
        // The padding stays zero: every block writes the same pixels.
        input.fill(0.0);
        let spread = Spread {
            h: self.h,
            wd: self.wd,
            y_end: self.h.min(self.hp.saturating_sub(self.pt)),
            x_end: self.wd.min(self.wp.saturating_sub(self.pl)),
            pt: self.pt,
            pl: self.pl,
            wp: self.wp,
            trash,
        };
        let mut starts = [0usize; 16];
        let mut bias = [0f32; 16];
        // SAFETY: the CPU supports L (the contract), which includes AVX2.
        // Every start is an input plane's inside X (≤ last_in, checked by
        // `run`); `input` holds pixels up to `trash`, `sums` `plane`
        // pixels, of n lanes each; block b0's planes are inside the sink
        // (for Pixels, values (ni·plane + p)·m + oc of the output); a
        // block's weights read in place are taps rows of `wt` at
        // `oc0 .. oc0 + n ≤ m` (checked by `run`: taps · m ≤ wt.len()).
        unsafe {
            for b0 in (0..rows).step_by(n) {
                let lanes = (rows - b0).min(n);
                let (oc0, start0) = self.channel(first + b0);
                // A whole block of consecutive output channels of one image
                // (always, but at an image's last block or the layer's):
                // its weights are read in place, n consecutive of each tap.
                let whole = lanes == n && oc0 + n <= self.m;
                let (wp, pitch) = if whole {
                    for (l, s) in starts.iter_mut().enumerate().take(n) {
                        *s = if self.mg == 1 {
                            start0 + l * in_plane
                        } else {
                            self.channel(first + b0 + l).1
                        };
                    }
                    match b {
                        Some(b) => bias[..n].copy_from_slice(&b[oc0..oc0 + n]),
                        None => bias.fill(0.0),
                    }
                    (wt.as_ptr().add(oc0), self.m)
                } else {
                    for l in 0..n {
                        let (oc, start) = self.channel(first + b0 + l.min(lanes - 1));
                        starts[l] = start;
                        bias[l] = b.map_or(0.0, |b| b[oc]);
                        for t in 0..taps {
                            weights[t * n + l] = wt[t * self.m + oc];
                        }
                    }
                    (weights.as_ptr(), n)
                };
                to_pixels(&spread, x.as_ptr(), &starts, n, input.as_mut_ptr());
                let bias = L::load(bias.as_ptr());
                self.taps::<L>(input, sums, (wp, pitch), bias, epi);
                match sink {
                    Sink::Planes(out) => {
                        let dst = out.add(b0 * plane);
                        to_planes(sums.as_ptr(), n, plane, lanes, dst);
                        if let Epilogue::After(a) = epi {
                            let o = std::slice::from_raw_parts_mut(dst, lanes * plane);
                            for o in o.chunks_exact_mut(plane) {
                                a.apply(o);
                            }
                        }
                    }
                    Sink::Pixels(out) => {
                        if whole {
                            // n consecutive channels of each pixel, of
                            // one image.
                            let ni = (first + b0) / self.m;
                            let mut to = out.add(ni * plane * self.m + oc0);
                            for p in 0..plane {
                                std::ptr::copy_nonoverlapping(sums.as_ptr().add(p * n), to, n);
                                to = to.add(self.m);
                            }
                        } else {
                            for l in 0..lanes {
                                let row = first + b0 + l;
                                let (ni, oc) = (row / self.m, row % self.m);
                                let to = out.add(ni * plane * self.m + oc);
                                for p in 0..plane {
                                    *to.add(p * self.m) = sums[p * n + l];
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The sums of one block: output pixel `(oy, ox)` at `(oy·ow + ox)·n`
    /// in `sums`, from the padded `[pixel][channel]` input, tap t's
    /// weights at `w.0 + t·w.1`.
    ///
    /// # Safety
    /// As [`Blocked::body`].
    #[inline(always)]
    unsafe fn taps<L: Lanes>(
        &self,
        input: &[f32],
        sums: &mut [f32],
        w: (*const f32, usize),
        bias: L::V,
        epi: Epilogue,
    ) {
        // SAFETY: passed on from the caller.
        unsafe {
            match self.ow {
                PIXELS.. => self.rows::<L, PIXELS>(input, sums, w, bias, epi),
                7 => self.rows::<L, 7>(input, sums, w, bias, epi),
                6 => self.rows::<L, 6>(input, sums, w, bias, epi),
                5 => self.rows::<L, 5>(input, sums, w, bias, epi),
                4 => self.rows::<L, 4>(input, sums, w, bias, epi),
                3 => self.rows::<L, 3>(input, sums, w, bias, epi),
                2 => self.rows::<L, 2>(input, sums, w, bias, epi),
                _ => self.rows::<L, 1>(input, sums, w, bias, epi),
            }
        }
    }

    /// Chunks of `P` (≤ ow) output pixels of a row, the last pulled back
    /// to end at the row's edge (recomputing a few sums, with the same
    /// bits).
    ///
    /// # Safety
    /// As [`Blocked::body`], and `P ≤ ow`.
    #[inline(always)]
    unsafe fn rows<L: Lanes, const P: usize>(
        &self,
        input: &[f32],
        sums: &mut [f32],
        (wp, pitch): (*const f32, usize),
        bias: L::V,
        epi: Epilogue,
    ) {
        let n = L::N;
        let (ow, sw, dw) = (self.ow, self.sw, self.dw);
        // SAFETY: the CPU supports L (the contract); input pixel
        // (oy·sh + ky·dh)·wp + (ox·sw + kx·dw) < hp·wp for every output
        // (oy, ox) and tap (ky, kx) by the definition of hp and wp, and
        // output pixel oy·ow + ox < oh·ow; tap t's n weights at
        // wp + t·pitch (the caller's).
        unsafe {
            for oy in 0..self.oh {
                let mut next = 0;
                while next < ow {
                    let x0 = next.min(ow - P);
                    let mut acc = [bias; P];
                    for ky in 0..self.kh {
                        let row = input
                            .as_ptr()
                            .add(((oy * self.sh + ky * self.dh) * self.wp + x0 * sw) * n);
                        for kx in 0..self.kw {
                            let wv = L::load(wp.add((ky * self.kw + kx) * pitch));
                            let p = row.add(kx * dw * n);
                            for (j, a) in acc.iter_mut().enumerate() {
                                *a = L::fmadd(wv, L::load(p.add(j * sw * n)), *a);
                            }
                        }
                    }
                    let to = sums.as_mut_ptr().add((oy * ow + x0) * n);
                    match epi {
                        Epilogue::Clamp(lo, hi) => {
                            for (j, &a) in acc.iter().enumerate() {
                                L::store(to.add(j * n), L::clamp(a, lo, hi));
                            }
                        }
                        Epilogue::HardSwish => {
                            for (j, &a) in acc.iter().enumerate() {
                                L::store(to.add(j * n), L::hard_swish(a));
                            }
                        }
                        Epilogue::None | Epilogue::After(_) => {
                            for (j, &a) in acc.iter().enumerate() {
                                L::store(to.add(j * n), a);
                            }
                        }
                    }
                    next += P;
                }
            }
        }
    }
}

/// Where [`Blocked::body`] stores a block's sums.
#[derive(Clone, Copy)]
enum Sink {
    /// Whole output planes (NCHW), the first plane's at the pointer.
    Planes(*mut f32),
    /// The whole output in `[image][pixel][channel]` order (NHWC).
    Pixels(*mut f32),
}

/// W (`m` rows of `taps` weights) transposed into the form the kernel
/// reads: tap t's weights of every output channel at `t·m ..`, so a block
/// of consecutive channels loads each tap's weights as one vector.
pub(in crate::ops::conv) fn transpose_weights(m: usize, taps: usize, w: &[f32]) -> Vec<f32> {
    let mut wt = vec![0f32; m * taps];
    for (oc, row) in w.chunks_exact(taps.max(1)).take(m).enumerate() {
        for (t, &v) in row.iter().enumerate() {
            wt[t * m + oc] = v;
        }
    }
    wt
}

#[cfg(test)]
#[path = "blocked_tests.rs"]
pub(super) mod tests;
