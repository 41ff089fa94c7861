//! Depthwise int8 convolution (one input channel per group): per output
//! channel, the input plane shifted by its zero point into a zero-padded
//! i16 scratch (padding then contributes nothing), split into stride
//! phases so that every tap is one contiguous multiply-add over the whole
//! plane, accumulated in i32 (exact: |x − zx|, |w − zw| ≤ 255), then
//! requantized like the engine's tiles. Where the CPU and the weights
//! allow, [`dot`] computes the same sums with 4-byte dot products.

use crate::ops::conv::geom::Window;
use crate::ops::gemm::simd::multiversion;
use crate::ops::quant::engine::sink::requantize_row;
use crate::ops::util::par_rows;
use std::cell::RefCell;

mod dot;

/// Depthwise weights: `w − zw` as i16, `[m][kh·kw]`.
#[derive(Debug)]
pub(crate) struct Weights {
    taps: Vec<i16>,
    m: usize,
    kernel: [usize; 2],
    /// The same weights for [`dot`], when every `w − zw` fits in i8.
    dot: Option<dot::Quads>,
}

impl Weights {
    pub(super) fn new(
        bytes: &[u8],
        signed: bool,
        zero: &[i32],
        m: usize,
        kernel: [usize; 2],
    ) -> Self {
        let per = kernel[0] * kernel[1];
        let taps: Vec<i16> = (0..m * per)
            .map(|i| {
                let v = if signed {
                    bytes[i] as i8 as i32
                } else {
                    bytes[i] as i32
                };
                (v - zero[if zero.len() == 1 { 0 } else { i / per }]) as i16
            })
            .collect();
        let dot = dot::Quads::new(&taps, m, kernel);
        Weights {
            taps,
            m,
            kernel,
            dot,
        }
    }
}

/// Where results go.
pub(super) enum Dest<'a> {
    Wide(&'a mut [i32]),
    Quant {
        out: &'a mut [u8],
        scale: &'a [f32],
        zero: i32,
        range: (i32, i32),
    },
}

/// One depthwise convolution over a batch.
pub(super) struct Job<'a> {
    pub win: &'a Window,
    pub zero_x: i32,
    pub x_signed: bool,
    pub bias: Option<&'a [i32]>,
    pub channels: usize,
}

thread_local! {
    /// Per-thread padded planes (one per column phase) and an accumulator row.
    static SCRATCH: RefCell<(Vec<i16>, Vec<i32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// Per-thread padded u8 plane and sums for [`dot`].
    static DOT_SCRATCH: RefCell<dot::Scratch> = const { RefCell::new(dot::Scratch::EMPTY) };
}

impl Job<'_> {
    pub(super) fn run(&self, w: &Weights, x: &[u8], mut dest: Dest) {
        if self.run_in_windows(w, x, &mut dest) {
            return;
        }
        let plane_out = self.win.out_len();
        let ow = self.win.output[1];
        let plan = w.dot.as_ref().and_then(|q| q.plan(self.win));
        let dot = plan.as_ref();
        match dest {
            Dest::Wide(out) => par_rows(out, plane_out, |first, chunk| {
                for (i, o) in chunk.chunks_mut(plane_out.max(1)).enumerate() {
                    self.plane(w, dot, x, first + i, &mut |wide, stride| {
                        for (oy, dst) in o.chunks_mut(ow).enumerate() {
                            dst.copy_from_slice(&wide[oy * stride..][..ow]);
                        }
                    });
                }
            }),
            Dest::Quant {
                out,
                scale,
                zero,
                range,
            } => {
                let (lo, hi) = ((range.0 - zero) as f32, (range.1 - zero) as f32);
                par_rows(out, plane_out, |first, chunk| {
                    let mut bytes = Vec::new();
                    for (i, o) in chunk.chunks_mut(plane_out.max(1)).enumerate() {
                        let oc = (first + i) % w.m;
                        let s = scale[if scale.len() == 1 { 0 } else { oc }];
                        if let (Some(quads), Some(plan)) = (&w.dot, dot) {
                            let out = dot::Out::Bytes {
                                out: o,
                                scale: s,
                                zero,
                                lo,
                                hi,
                            };
                            self.dot_plane(quads, plan, x, first + i, out);
                            continue;
                        }
                        self.plane(w, dot, x, first + i, &mut |wide, stride| {
                            if stride == ow {
                                // Contiguous rows: straight into the output.
                                requantize_row(&wide[..o.len()], o, s, zero, lo, hi);
                                return;
                            }
                            bytes.resize(wide.len(), 0);
                            requantize_row(wide, &mut bytes, s, zero, lo, hi);
                            for (oy, dst) in o.chunks_mut(ow).enumerate() {
                                dst.copy_from_slice(&bytes[oy * stride..][..ow]);
                            }
                        });
                    }
                });
            }
        }
    }

    /// Requantized small planes on the dot-product kernel's window form,
    /// whole chunks of planes per call; false (`dest` untouched) where
    /// that does not apply.
    fn run_in_windows(&self, w: &Weights, x: &[u8], dest: &mut Dest) -> bool {
        let Dest::Quant {
            out,
            scale,
            zero,
            range,
        } = dest
        else {
            return false;
        };
        let window = w
            .dot
            .as_ref()
            .and_then(|q| Some((q, q.window_tables(self.win, self.zero_x, self.x_signed)?)));
        let Some((quads, tables)) = window else {
            return false;
        };
        let planes = dot::Planes {
            x,
            channels: self.channels,
            signed: self.x_signed,
            bias: self.bias,
            scale,
            zero: *zero,
            lo: (range.0 - *zero) as f32,
            hi: (range.1 - *zero) as f32,
        };
        par_rows(out, self.win.out_len(), |first, chunk| {
            planes.run(quads, &tables, first, chunk)
        });
        true
    }

    /// Output plane `p` (image p / m, channel p % m): hands `emit` the
    /// sums of output row `oy` at `wide[oy · stride ..][..ow]`.
    fn plane(
        &self,
        w: &Weights,
        dot: Option<&dot::Plan>,
        x: &[u8],
        p: usize,
        emit: &mut dyn FnMut(&[i32], usize),
    ) {
        if let (Some(quads), Some(plan)) = (&w.dot, dot) {
            let ow = self.win.output[1];
            self.dot_plane(quads, plan, x, p, dot::Out::Sums);
            DOT_SCRATCH.with(|s| emit(&s.borrow().acc, ow));
            return;
        }
        let win = self.win;
        let (img, oc) = (p / w.m, p % w.m);
        let ic = oc / (w.m / self.channels).max(1);
        let (ih, iw) = (win.input[0], win.input[1]);
        let (oh, ow) = (win.output[0], win.output[1]);
        let [kh, kw] = w.kernel;
        let (sh, sw) = (win.strides[0], win.strides[1]);
        let (dh, dw) = (win.dilations[0], win.dilations[1]);
        let (pt, pl) = (win.pad_begin[0], win.pad_begin[1]);
        // Padded extent: every row and column any tap reaches.
        let ph = ((oh - 1) * sh + (kh - 1) * dh + 1).max(pt + ih);
        let pw = ((ow - 1) * sw + (kw - 1) * dw + 1).max(pl + iw);
        // Phase (a, b) holds padded rows a, a + sh, ... and columns b,
        // b + sw, ...: in it every tap reads output row oy from row oy + a
        // constant, so with rows `phase_w` apart a tap is one contiguous
        // run over the whole plane (`wide`, the extra columns discarded).
        let (phase_h, phase_w) = (ph.div_ceil(sh), pw.div_ceil(sw));
        let phase_len = phase_h * phase_w;
        let wide_len = (oh - 1) * phase_w + ow;
        let src = &x[(img * self.channels + ic) * ih * iw..][..ih * iw];
        let taps = &w.taps[oc * kh * kw..][..kh * kw];
        let bias = self.bias.map_or(0, |b| b[oc]);
        SCRATCH.with(|s| {
            let (pad, acc) = &mut *s.borrow_mut();
            pad.clear();
            pad.resize(sh * sw * phase_len, 0);
            // Per column phase b: the first input column in it, where it
            // lands, and how many columns (the same for every row).
            let columns: Vec<(usize, usize, usize)> = (0..sw)
                .filter_map(|b| {
                    let first = (b + sw - pl % sw) % sw;
                    (first < iw).then(|| {
                        (
                            first,
                            b * phase_len + (first + pl) / sw,
                            (iw - first).div_ceil(sw),
                        )
                    })
                })
                .collect();
            let (mut a, mut py) = (pt % sh, pt / sh);
            for y in 0..ih {
                let row = &src[y * iw..][..iw];
                for &(first, at, len) in &columns {
                    let at = a * sw * phase_len + at + py * phase_w;
                    shift_strided(
                        &row[first..],
                        sw,
                        &mut pad[at..][..len],
                        self.x_signed,
                        self.zero_x,
                    );
                }
                a += 1;
                if a == sh {
                    a = 0;
                    py += 1;
                }
            }
            let mut bases = Vec::with_capacity(kh * kw);
            for ky in 0..kh {
                let (a, dy) = ((ky * dh) % sh, (ky * dh) / sh);
                for kx in 0..kw {
                    let (b, dx) = ((kx * dw) % sw, (kx * dw) / sw);
                    bases.push((a * sw + b) * phase_len + dy * phase_w + dx);
                }
            }
            acc.clear();
            acc.resize(wide_len, 0);
            accumulate_taps(acc, pad, &bases, taps, bias);
            emit(acc, phase_w);
        });
    }
}

impl Job<'_> {
    /// Output plane `p` (image p / m, channel p % m) on the dot-product
    /// kernel, delivered as `out` says (sums in this thread's
    /// `DOT_SCRATCH`).
    fn dot_plane(&self, quads: &dot::Quads, plan: &dot::Plan, x: &[u8], p: usize, out: dot::Out) {
        let m = quads.channels();
        let (img, oc) = (p / m, p % m);
        let ic = oc / (m / self.channels).max(1);
        let plane_in = self.win.input[0] * self.win.input[1];
        let src = &x[(img * self.channels + ic) * plane_in..][..plane_in];
        let bias = self.bias.map_or(0, |b| b[oc]);
        DOT_SCRATCH.with(|s| {
            let scratch = &mut *s.borrow_mut();
            plan.plane(
                quads,
                oc,
                src,
                self.x_signed,
                self.zero_x,
                bias,
                scratch,
                out,
            );
        });
    }
}

multiversion! {
    /// `acc[j] = bias + Σ_t pad[bases[t] + j] · taps[t]`, a block of
    /// outputs at a time held in registers across all taps (one pass over
    /// the output instead of one per tap): blocks of 64, then of 16, then
    /// single outputs. Both factors are i16 widened in the product, which
    /// NEON does in one widening multiply-add (`smlal`; exact: |product| ≤
    /// 255²), and the wide blocks spread each tap's loads and bounds checks
    /// over 64 products (on aarch64 a block of 16 spent 18 instructions a
    /// tap on 4 multiply-adds).
    fn accumulate_taps(acc: &mut [i32], pad: &[i16], bases: &[usize], taps: &[i16], bias: i32) {
        let j = tap_blocks::<64>(acc, pad, bases, taps, bias, 0);
        let j = tap_blocks::<16>(acc, pad, bases, taps, bias, j);
        for (o, a) in acc[j..].iter_mut().enumerate() {
            *a = bias;
            for (&base, &t) in bases.iter().zip(taps) {
                *a += pad[base + j + o] as i32 * t as i32;
            }
        }
    }
}

/// Blocks of `B` outputs of [`accumulate_taps`] from output `j` on, while
/// a whole block fits; returns where they stopped.
#[inline(always)]
fn tap_blocks<const B: usize>(
    acc: &mut [i32],
    pad: &[i16],
    bases: &[usize],
    taps: &[i16],
    bias: i32,
    mut j: usize,
) -> usize {
    while j + B <= acc.len() {
        let mut block = [bias; B];
        for (&base, &t) in bases.iter().zip(taps) {
            let line = &pad[base + j..][..B];
            for (a, &v) in block.iter_mut().zip(line) {
                *a += v as i32 * t as i32;
            }
        }
        acc[j..j + B].copy_from_slice(&block);
        j += B;
    }
    j
}

multiversion! {
    /// `dst[j] = src[j·step] − zp` (8-bit values read as u8 or s8).
    fn shift_strided(src: &[u8], step: usize, dst: &mut [i16], signed: bool, zp: i32) {
        match (step, signed) {
            (1, false) => shift::<1, false>(src, dst, zp),
            (1, true) => shift::<1, true>(src, dst, zp),
            (2, false) => shift::<2, false>(src, dst, zp),
            (2, true) => shift::<2, true>(src, dst, zp),
            (_, false) => dst.iter_mut().zip(src.iter().step_by(step)).for_each(|(d, &b)| *d = (b as i32 - zp) as i16),
            (_, true) => dst.iter_mut().zip(src.iter().step_by(step)).for_each(|(d, &b)| *d = (b as i8 as i32 - zp) as i16),
        }
    }
}

/// [`shift_strided`] with the step and signedness known at compile time,
/// so strided reads vectorize as interleaved loads.
#[inline(always)]
fn shift<const STEP: usize, const SIGNED: bool>(src: &[u8], dst: &mut [i16], zp: i32) {
    let n = dst.len();
    if n == 0 {
        return;
    }
    let src = &src[..(n - 1) * STEP + 1];
    for (j, d) in dst.iter_mut().enumerate() {
        let b = src[j * STEP];
        let v = if SIGNED { b as i8 as i32 } else { b as i32 };
        *d = (v - zp) as i16;
    }
}

#[cfg(test)]
impl Weights {
    /// True when the dot-product kernel has its form of these weights.
    pub(super) fn has_dot_weights(&self) -> bool {
        self.dot.is_some()
    }
}
