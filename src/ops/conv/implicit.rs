//! Implicit-GEMM convolution for 2-D stride-1 layers on AVX2 and AVX-512
//! machines (f32).
//!
//! im2col materialises a K × positions matrix (K = channels × taps) before
//! its GEMM; on small planes that copy and the GEMM's packing of it cost as
//! much as the products (DenseNet's 3×3 layers on 14×14 ran at about 40 %
//! of this kernel's speed on Zen 3). Here the input is copied once into a
//! zero-padded plane per channel whose rows are `ow + (kw−1)·dw` wide. In
//! that layout output position (oy, ox), flattened as q = oy·wp + ox, reads
//! tap (c, ky, kx) at `c·plane + ky·dh·wp + kx·dw + q`: every tap is a
//! constant shift of q, whatever the window. A register block takes the
//! next [`NQ`] output positions in raster order, each read through its
//! own q, so the pad columns ox ≥ ow of the padded rows are never
//! computed (on 7×7 planes they were 22 % of the work).
//!
//! The weights are packed once per constant W into blocks of 16 output
//! channels × K, channel-minor: two vectors per tap. A register block holds
//! 16 channels × 6 consecutive positions in 12 accumulators; per tap it
//! broadcasts 6 inputs and does 12 fused multiply-adds. On AVX-512 a block
//! holds the 16 channels in one register at up to 16 positions of one row,
//! and each input's broadcast is folded into its multiply-add (Zen 4, two
//! threads: the example model's 128-channel 3×3 layers 310 → 252 µs; one
//! thread: about even). Each sum runs over
//! the taps in (channel, row, column) order from zero, and bias, residual
//! and activation follow in a pass over each output plane, so no split
//! across threads changes a bit.
#![cfg_attr(
    not(target_arch = "x86_64"),
    allow(dead_code, unused_variables, unused_mut)
)]

use super::conv_op::{ConvArgs, ConvPlan};
use super::finish_row;
use crate::ops::gemm::engine::GemmFloat;
use crate::ops::gemm::fused::Activation;
use crate::ops::parallel::par_for;
use crate::ops::parallel::SendPtr;
use std::sync::OnceLock;

mod blocks;
#[cfg(target_arch = "x86_64")]
use blocks::{avx2, avx512};

/// Positions per register block.
const NQ: usize = 6;
/// Output channels per register block (two vectors of 8).
const MB: usize = 16;
/// Most positions per AVX-512 register block (one row's, one vector of
/// [`MB`] channels each): 16 accumulators of the 32 registers, the
/// broadcasts folded into the multiply-adds. At 12, SqueezeNet's 13-wide
/// rows ran as a block of 12 and a block of one, whose single chain of
/// multiply-adds waited on its own latency (48→192 on 13×13, one thread:
/// see [`row_piece`]).
const NW: usize = 16;
/// Most taps (kernel positions) a window may have here.
const MAX_TAPS: usize = 64;
/// Fewest input channels: below this the products are too few per output
/// for the copy into padded planes to pay.
const MIN_CHANNELS: usize = 8;

/// Output channels from which Winograd, where it applies, stays ahead: on
/// Zen 3, DenseNet's 3×3 layers with 32 outputs took 44.6 ms here against
/// 59.4 ms on Winograd and im2col, while Inception's 192-output layer on
/// 55×55 took 14.1 ms here against 8.3 ms on Winograd F(4×4, 3×3). On Zen 4
/// (8 such layers + Relu on 24×24, 7 to 11 alternated rounds), F(4×4, 3×3)
/// took 48→48 from 231 to 195 µs per layer on one thread and tied on two
/// (129 µs), and 32→48 from 160 to 141 µs on one thread but 92 to 98 µs on
/// two; 32→32 was 8 % slower on one thread and 31 % on two. One thread is
/// what such layers mostly get: a sibling's pool, or a busy device.
const WINOGRAD_MIN_OUT: usize = 48;

/// Weights packed for a kernel, kept across runs when W is constant (here:
/// [`MB`]-channel blocks, then tap, then the block's channels, zero past M).
#[derive(Debug, Default)]
pub(super) struct PackCache(OnceLock<Vec<f32>>);

impl PackCache {
    /// The packed weights, once a run has packed them.
    pub(super) fn packed(&self) -> Option<&[f32]> {
        self.0.get().map(Vec::as_slice)
    }

    /// Runs `f` on the packed weights: those kept here when `cacheable`
    /// (packed by `pack` on the first call), else packed afresh.
    pub(super) fn with<R>(
        &self,
        cacheable: bool,
        pack: impl FnOnce() -> Vec<f32>,
        f: impl FnOnce(&[f32]) -> R,
    ) -> R {
        if cacheable {
            f(self.0.get_or_init(pack))
        } else {
            f(&pack())
        }
    }
}

/// Whether `p` is a layer this kernel takes (on any CPU).
pub(super) fn suits(p: &ConvPlan) -> bool {
    let w = &p.win;
    w.rank() == 2
        && p.group == 1
        && w.strides == [1, 1]
        && w.kernel_len() > 1
        && w.kernel_len() <= MAX_TAPS
        && p.cg() >= MIN_CHANNELS
}

/// Whether this CPU runs the kernel: AVX2 with FMA, AVX-512 machines
/// included. On a Zen 4 (AVX-512 executed as two 256-bit halves) these
/// kernels and the panel GEMM beat the `gemm` crate's 512-bit kernels or
/// tie with them (the example model: 5.54 -> 4.77 ms at 1 CPU).
pub(super) fn cpu_has_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::ops::gemm::simd::has_avx2_fma()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the AVX-512 register block runs (else the AVX2 one).
fn wide_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::ops::gemm::simd::has_avx512()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether this kernel should take `p` even where Winograd could: with few
/// output channels Winograd's input transform costs as much as its
/// products.
pub(super) fn preferred(p: &ConvPlan) -> bool {
    suits(p) && cpu_has_kernel() && p.mg() < WINOGRAD_MIN_OUT
}

/// Packs W (`[m, c, kh, kw]`, f32) into [`MB`]-channel blocks.
pub(super) fn pack(p: &ConvPlan, w: &[f32]) -> Vec<f32> {
    let k = p.cg() * p.win.kernel_len();
    let blocks = p.m.div_ceil(MB);
    let mut data = vec![0f32; blocks * k * MB];
    for (oc, wr) in w.chunks_exact(k).take(p.m).enumerate() {
        let block = &mut data[(oc / MB) * k * MB..(oc / MB + 1) * k * MB];
        for (t, &v) in wr.iter().enumerate() {
            block[t * MB + oc % MB] = v;
        }
    }
    data
}

/// The `[m, k]` row-major weights that [`pack`] packed into `packed` for
/// `m` output channels of `k` weights each: the inverse of `pack`, exact,
/// for a layer whose original weights were let go.
pub(super) fn unpack(m: usize, k: usize, packed: &[f32]) -> Vec<f32> {
    let mut w = vec![0f32; m * k];
    for (oc, wr) in w.chunks_exact_mut(k.max(1)).take(m).enumerate() {
        let block = &packed[(oc / MB) * k * MB..(oc / MB + 1) * k * MB];
        for (t, v) in wr.iter_mut().enumerate() {
            *v = block[t * MB + oc % MB];
        }
    }
    w
}

/// Runs a layer that [`suits`] this kernel on a CPU that has it, with W
/// packed once into the node's implicit-GEMM cache when W is constant.
pub(super) fn run(a: &ConvArgs<f32>, y: &mut [f32]) {
    let p = a.p;
    a.weights.implicit.with(
        a.weights.constant,
        || pack(p, a.w),
        |packed| implicit(p, a.x, packed, a.b, a.z, a.act, y, wide_kernel()),
    );
}

/// The padded layout of one band of output rows: input rows `row0 − pt ..`
/// copied into `hp` zero-padded rows of `wp` floats per channel.
#[derive(Debug, Clone, Copy)]
struct Layout {
    c: usize,
    /// Padded rows and their width.
    hp: usize,
    wp: usize,
    /// First output row of the band (and first padded row).
    row0: usize,
    ow: usize,
}

impl Layout {
    fn plane(&self) -> usize {
        self.hp * self.wp
    }
    /// Elements of the padded copy.
    fn len(&self) -> usize {
        self.c * self.plane()
    }
    /// Offset in a padded plane of output position `pos` (raster order
    /// over the whole output plane, inside this band).
    fn q_of(&self, pos: usize) -> usize {
        (pos / self.ow - self.row0) * self.wp + pos % self.ow
    }
}

/// How one image's sums are cut into tasks: `bands` runs of position
/// blocks times `groups` runs of channel blocks. Each task pads the input
/// rows of its band into its own thread's scratch, so no thread writes
/// lines another has just read; with the padded planes shared, stores into
/// lines the other core had read took 14 % of two threads' time on
/// 32-channel layers on 24×24.
#[derive(Debug, Clone, Copy)]
struct Split {
    q_blocks: usize,
    c_blocks: usize,
    bands: usize,
    groups: usize,
}

impl Split {
    /// Position blocks per task at least this many, so the halo rows each
    /// band pads stay a small part of its copy.
    const MIN_BAND_BLOCKS: usize = 4;

    fn new(positions: usize, m: usize, threads: usize) -> Self {
        let q_blocks = positions.div_ceil(NQ);
        let c_blocks = m.div_ceil(MB);
        // Two tasks per thread, not `TASKS_PER_THREAD`: every band copies
        // its halo rows again, so finer bands cost copies on an idle device.
        let target = if threads <= 1 { 1 } else { threads * 2 };
        let bands = target.min(q_blocks / Self::MIN_BAND_BLOCKS).max(1);
        let groups = target.div_ceil(bands).min(c_blocks).max(1);
        Split {
            q_blocks,
            c_blocks,
            bands,
            groups,
        }
    }

    fn tasks(&self) -> usize {
        self.bands * self.groups
    }

    /// Position blocks and channel blocks of task `t`.
    fn task(&self, t: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let (b, g) = (t / self.groups, t % self.groups);
        (
            even_part(self.q_blocks, self.bands, b),
            even_part(self.c_blocks, self.groups, g),
        )
    }
}

/// Part `i` of `n` near-equal parts of `0..len`.
fn even_part(len: usize, n: usize, i: usize) -> std::ops::Range<usize> {
    len * i / n..len * (i + 1) / n
}

/// The window's geometry for one layer.
struct Geometry<'a> {
    p: &'a ConvPlan,
    /// Output rows and columns.
    oh: usize,
    ow: usize,
    /// Padded rows a band adds below its output rows, and the padded width.
    halo: usize,
    wp: usize,
    /// Offset of each tap from the position, within a padded plane.
    taps: [usize; MAX_TAPS],
    /// Whether the AVX-512 block runs (the CPU has it).
    wide: bool,
}

/// The convolution of `x` by the packed weights into `y`, with the
/// AVX-512 register block where `wide` (and the CPU has it), else AVX2's.
#[allow(clippy::too_many_arguments)]
fn implicit(
    p: &ConvPlan,
    x: &[f32],
    packed: &[f32],
    b: Option<&[f32]>,
    z: Option<&[f32]>,
    act: Option<Activation>,
    y: &mut [f32],
    wide: bool,
) {
    let win = &p.win;
    let (oh, ow) = (win.output[0], win.output[1]);
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let (dh, dw) = (win.dilations[0], win.dilations[1]);
    let wp = ow + (kw - 1) * dw;
    let mut taps = [0usize; MAX_TAPS];
    for (t, o) in taps.iter_mut().enumerate().take(kh * kw) {
        *o = (t / kw) * dh * wp + (t % kw) * dw;
    }
    let geo = Geometry {
        p,
        oh,
        ow,
        halo: (kh - 1) * dh,
        wp,
        taps,
        wide: wide && wide_kernel(),
    };
    let (in_plane, out_plane) = (win.input[0] * win.input[1], oh * ow);
    let split = Split::new(out_plane, p.m, crate::ops::util::op_threads());
    for ni in 0..p.n {
        let xi = &x[ni * p.c * in_plane..(ni + 1) * p.c * in_plane];
        let yi = SendPtr(y[ni * p.m * out_plane..(ni + 1) * p.m * out_plane].as_mut_ptr());
        let zi = z.map(|z| &z[ni * p.m * out_plane..(ni + 1) * p.m * out_plane]);
        par_for(split.tasks(), |t| {
            let (qbs, cbs) = split.task(t);
            let yi = &yi;
            geo.band(xi, packed, qbs, cbs, yi, |oc, span, row| {
                let zr = zi.map(|z| &z[oc * out_plane..(oc + 1) * out_plane][span]);
                finish_row(row, b.map(|b| b[oc]), zr, act);
            });
        });
    }
}

impl Geometry<'_> {
    /// Sums of channel blocks `cbs` at position blocks `qbs` of one image
    /// (input `xi`, output at `y`), then `finish(channel, positions, sums)`
    /// on each channel's run of them.
    fn band(
        &self,
        xi: &[f32],
        packed: &[f32],
        qbs: std::ops::Range<usize>,
        cbs: std::ops::Range<usize>,
        y: &SendPtr<f32>,
        finish: impl Fn(usize, std::ops::Range<usize>, &mut [f32]),
    ) {
        let positions = self.oh * self.ow;
        let (first, end) = (qbs.start * NQ, (qbs.end * NQ).min(positions));
        if first >= end {
            return;
        }
        let (row0, last_row) = (first / self.ow, (end - 1) / self.ow);
        let lay = Layout {
            c: self.p.c,
            hp: last_row - row0 + 1 + self.halo,
            wp: self.wp,
            row0,
            ow: self.ow,
        };
        let m = self.p.m;
        f32::with_scratch(lay.len(), |xp| {
            pad_planes(self.p, &lay, xi, xp);
            let job = Job {
                lay,
                xp,
                taps: &self.taps[..self.p.win.kernel_len()],
                packed,
                m,
                plane: positions,
                y: SendPtr(y.0),
            };
            for cb in cbs.clone() {
                // Position blocks inner: a channel block's weights stay in
                // cache across them.
                if self.wide {
                    let mut p0 = first;
                    while p0 < end {
                        let row_end = (p0 / self.ow + 1) * self.ow;
                        let count = row_piece(row_end.min(end) - p0);
                        job.row_block(cb, p0, count);
                        p0 += count;
                    }
                } else {
                    for qb in qbs.clone() {
                        job.block(cb, qb * NQ, end);
                    }
                }
            }
        });
        for oc in cbs.start * MB..(cbs.end * MB).min(m) {
            // SAFETY: this task alone wrote these positions of channel oc
            // (above), and no one else touches them.
            let row = unsafe {
                std::slice::from_raw_parts_mut(y.0.add(oc * positions + first), end - first)
            };
            finish(oc, first..end, row);
        }
    }
}

/// How many of the `run` positions left in a row the next AVX-512 block
/// takes: the row cut into the fewest blocks of at most [`NW`], of near-equal
/// sizes (28 as 14 + 14, not 16 + 12; 20 as 10 + 10, not 16 + 4), so no
/// block is left with too few chains of multiply-adds to hide their latency.
fn row_piece(run: usize) -> usize {
    run.div_ceil(run.div_ceil(NW).max(1))
}

/// Copies the input rows of band `lay` from image `xi` into the zero-padded
/// planes of `xp`.
fn pad_planes(p: &ConvPlan, lay: &Layout, xi: &[f32], xp: &mut [f32]) {
    let win = &p.win;
    let (h, wd) = (win.input[0], win.input[1]);
    let (pt, pl) = (win.pad_begin[0], win.pad_begin[1]);
    let plane = lay.plane();
    for (ci, dst) in xp[..lay.len()].chunks_exact_mut(plane).enumerate() {
        let src = &xi[ci * h * wd..(ci + 1) * h * wd];
        for (r, row) in dst.chunks_exact_mut(lay.wp).enumerate() {
            // Padded row r holds input row row0 + r − pt, column j input
            // column j − pl.
            let Some(sr) = (lay.row0 + r).checked_sub(pt).filter(|&sr| sr < h) else {
                row.fill(0.0);
                continue;
            };
            let first_col = pl.min(lay.wp);
            let cols = wd.min(lay.wp - first_col);
            let (left, rest) = row.split_at_mut(first_col);
            let (data, right) = rest.split_at_mut(cols);
            zero_short(left);
            copy_short(data, &src[sr * wd..sr * wd + cols]);
            zero_short(right);
        }
    }
}

/// `dst.copy_from_slice(src)` for the short rows of small planes, in
/// 8-float moves: as a `memcpy` call per 24-float row (with a `memset`
/// call for each one-float pad) the copy took 22 % of two threads' time on
/// 32-channel 3×3 layers on 24×24.
#[inline(always)]
fn copy_short(dst: &mut [f32], src: &[f32]) {
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (a, b) in (&mut d).zip(&mut s) {
        let a: &mut [f32; 8] = a.try_into().expect("8 floats");
        *a = b.try_into().expect("8 floats");
    }
    for (a, b) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *a = *b;
    }
}

/// Zeroes `dst`: a few floats (a window's pad) one by one, without a
/// `memset` call; longer spans with one.
#[inline(always)]
fn zero_short(dst: &mut [f32]) {
    if dst.len() > 8 {
        dst.fill(0.0);
        return;
    }
    for v in dst {
        // SAFETY: `v` is a valid, exclusive reference. The volatile write
        // keeps the compiler from turning the loop back into a call.
        unsafe { std::ptr::write_volatile(v, 0.0) };
    }
}

/// One band's sums, over its padded copy of the input.
struct Job<'a> {
    lay: Layout,
    xp: &'a [f32],
    /// Offset of each tap from the position, within one channel's plane.
    taps: &'a [usize],
    packed: &'a [f32],
    m: usize,
    /// Positions per output plane.
    plane: usize,
    /// The image's output.
    y: SendPtr<f32>,
}

impl Job<'_> {
    /// Output channels `cb·MB ..` at positions `p0 .. (p0 + NQ).min(end)`
    /// (raster order over the output plane).
    fn block(&self, cb: usize, p0: usize, end: usize) {
        let k = self.lay.c * self.taps.len();
        let w = &self.packed[cb * k * MB..(cb + 1) * k * MB];
        // The last block repeats the band's last position past its end.
        let qs: [usize; NQ] = std::array::from_fn(|j| self.lay.q_of((p0 + j).min(end - 1)));
        let mut out = [[0f32; MB]; NQ];
        // SAFETY: the CPU has AVX2 and FMA (checked by `choose`);
        // every q is a position of this band, whose taps lie inside its
        // channel's padded plane.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            avx2::block(self, w, &qs, &mut out)
        };
        self.store(&out, p0, (end - p0).min(NQ), cb * MB);
    }

    /// Output channels `cb·MB ..` at the `count` (at most [`NW`])
    /// positions from `p0`, all in one output row, with the AVX-512 kernel.
    fn row_block(&self, cb: usize, p0: usize, count: usize) {
        let k = self.lay.c * self.taps.len();
        let w = &self.packed[cb * k * MB..(cb + 1) * k * MB];
        let q0 = self.lay.q_of(p0);
        let mut out = [[0f32; MB]; NW];
        #[cfg(target_arch = "x86_64")]
        {
            use avx512::row_block as rb;
            // SAFETY: the CPU has AVX-512F (`Geometry::wide` is set only
            // where `wide_kernel` found it); the
            // positions lie in one row of this band, whose taps lie inside
            // its channel's padded plane.
            unsafe {
                match count {
                    1 => rb::<1>(self, w, q0, &mut out),
                    2 => rb::<2>(self, w, q0, &mut out),
                    3 => rb::<3>(self, w, q0, &mut out),
                    4 => rb::<4>(self, w, q0, &mut out),
                    5 => rb::<5>(self, w, q0, &mut out),
                    6 => rb::<6>(self, w, q0, &mut out),
                    7 => rb::<7>(self, w, q0, &mut out),
                    8 => rb::<8>(self, w, q0, &mut out),
                    9 => rb::<9>(self, w, q0, &mut out),
                    10 => rb::<10>(self, w, q0, &mut out),
                    11 => rb::<11>(self, w, q0, &mut out),
                    12 => rb::<12>(self, w, q0, &mut out),
                    13 => rb::<13>(self, w, q0, &mut out),
                    14 => rb::<14>(self, w, q0, &mut out),
                    15 => rb::<15>(self, w, q0, &mut out),
                    _ => rb::<16>(self, w, q0, &mut out),
                }
            }
        }
        self.store(&out, p0, count, cb * MB);
    }

    /// Writes the first `count` position sums of a block (channels
    /// `oc0 ..`, positions `p0 ..`) into the output planes.
    fn store<const Q: usize>(&self, out: &[[f32; MB]; Q], p0: usize, count: usize, oc0: usize) {
        let channels = MB.min(self.m - oc0);
        for (j, sums) in out.iter().enumerate().take(count) {
            let at = oc0 * self.plane + p0 + j;
            for (r, &v) in sums.iter().enumerate().take(channels) {
                // SAFETY: (oc0 + r, p0 + j) lies in this image's output,
                // and only this block writes it.
                unsafe { *self.y.0.add(at + r * self.plane) = v };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::conv_op::{plan, Weights};
    use super::super::geom::WindowAttrs;
    use super::*;
    use crate::ops::testutil::rand_vec;

    /// Unpacking gives back every weight bit for bit, for channel counts
    /// that fill their last block and counts that do not.
    #[test]
    fn unpack_inverts_pack() {
        let attrs = crate::ir::attributes::Attributes::default();
        let window = WindowAttrs::parse(&attrs, true).unwrap();
        for (m, c) in [(16, 8), (21, 10), (5, 3), (33, 1)] {
            let ws = [m, c, 3, 3];
            let p = plan(&window, 1, &[1, c, 6, 6], &ws, None).unwrap();
            let w = rand_vec(ws.iter().product(), 7);
            let back = unpack(m, c * 9, &pack(&p, &w));
            assert_eq!(back.len(), w.len());
            assert!(back.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    /// On a CPU with the kernel it takes the layer and matches im2col's
    /// sums (to rounding: the order of the products differs).
    #[test]
    fn takes_suitable_layers_and_matches_im2col() {
        let attrs = crate::ir::attributes::Attributes::default();
        let mut window = WindowAttrs::parse(&attrs, true).unwrap();
        window.pads = Some(vec![1, 2, 1, 0]);
        let (xs, ws) = ([2, 10, 9, 12], [21, 10, 3, 3]);
        let p = plan(&window, 1, &xs, &ws, Some(&[21])).unwrap();
        assert!(suits(&p));
        let x = rand_vec(xs.iter().product(), 1);
        let w = rand_vec(ws.iter().product(), 2);
        let b = rand_vec(21, 3);
        let len = p.out_shape.iter().product();
        let mut want = vec![0f32; len];
        let (fresh, weights) = (Weights::new(false), Weights::new(true));
        let args = |weights| ConvArgs {
            p: &p,
            x: &x,
            w: &w,
            b: Some(&b),
            z: None,
            act: None,
            weights,
        };
        let on_panels = super::super::im2col::takes_panels(&p, true);
        super::super::im2col::im2col_gemm(&args(&fresh), on_panels, &mut want).unwrap();
        if cpu_has_kernel() {
            let mut got = vec![f32::NAN; len];
            run(&args(&weights), &mut got);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
            }
            assert!(weights.implicit.0.get().is_some(), "packed weights kept");
        }
        // Stride 2 and grouped layers are not its.
        window.strides = Some(vec![2, 2]);
        assert!(!suits(&plan(&window, 1, &xs, &ws, None).unwrap()));
    }

    /// Every (position block, channel block) pair of an image falls in
    /// exactly one task, whatever the pool; one thread, or too little
    /// work to share, makes one task.
    #[test]
    fn split_covers_every_block_once() {
        let cases = [
            (576, 32, 2, true),
            (144, 128, 2, true),
            (49, 64, 3, true),
            (7, 8, 4, false),
            (30, 200, 1, false),
        ];
        for (positions, m, threads, shared) in cases {
            let s = Split::new(positions, m, threads);
            let mut seen = vec![0u8; s.q_blocks * s.c_blocks];
            for t in 0..s.tasks() {
                let (qbs, cbs) = s.task(t);
                for cb in cbs {
                    for qb in qbs.clone() {
                        seen[cb * s.q_blocks + qb] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{positions} {m} {threads}");
            assert_eq!(s.tasks() > 1, shared, "{positions} {m} {threads}");
        }
    }

    /// Split into bands of rows (each padding its own copy, halo rows
    /// included), a dilated layer with a residual and an activation gives
    /// im2col's sums on any pool, and the same bits on every pool.
    #[test]
    fn bands_match_im2col_on_any_pool() {
        use crate::ops::testutil::with_threads;
        let attrs = crate::ir::attributes::Attributes::default();
        let mut window = WindowAttrs::parse(&attrs, true).unwrap();
        window.pads = Some(vec![2, 1, 2, 1]);
        window.dilations = Some(vec![2, 1]);
        let (xs, ws) = ([1, 9, 23, 17], [35, 9, 3, 3]);
        let p = plan(&window, 1, &xs, &ws, Some(&[35])).unwrap();
        assert!(suits(&p));
        let x = rand_vec(xs.iter().product(), 4);
        let w = rand_vec(ws.iter().product(), 5);
        let b = rand_vec(35, 6);
        let len: usize = p.out_shape.iter().product();
        let z = rand_vec(len, 7);
        let act = Some(Activation::Relu);
        let mut want = vec![0f32; len];
        let fresh = Weights::new(false);
        let a = ConvArgs {
            p: &p,
            x: &x,
            w: &w,
            b: Some(&b),
            z: Some(&z),
            act,
            weights: &fresh,
        };
        let on_panels = super::super::im2col::takes_panels(&p, true);
        super::super::im2col::im2col_gemm(&a, on_panels, &mut want).unwrap();
        let on_pool = |threads| {
            with_threads(threads, || {
                let mut got = vec![f32::NAN; len];
                run(&a, &mut got);
                got
            })
        };
        if !cpu_has_kernel() {
            return;
        }
        let one = on_pool(1);
        for (g, w) in one.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
        }
        for threads in [2, 3, 7] {
            let got = on_pool(threads);
            let same = got
                .iter()
                .zip(&one)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{threads} threads");
        }
    }

    /// Rows are cut into the fewest blocks of at most `NW`, of sizes that
    /// differ by at most one, and every position is taken once.
    #[test]
    fn row_pieces_are_even_and_cover_the_row() {
        assert_eq!(row_piece(13), 13);
        assert_eq!(row_piece(16), 16);
        assert_eq!(row_piece(17), 9);
        assert_eq!(row_piece(28), 14);
        assert_eq!(row_piece(1), 1);
        for len in 1..200 {
            let mut sizes = Vec::new();
            let mut left = len;
            while left > 0 {
                let n = row_piece(left);
                assert!((1..=NW).contains(&n), "{len}: {n}");
                sizes.push(n);
                left -= n;
            }
            assert_eq!(sizes.len(), len.div_ceil(NW), "{len}");
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "{len}: {sizes:?}");
        }
    }

    /// The AVX-512 block (positions of one row) and the AVX2 block
    /// (positions in raster order, across rows) do the same products in the
    /// same order: the same bits, on rows shorter and longer than a block
    /// and on bands that start inside a row.
    #[test]
    fn wide_and_narrow_blocks_give_the_same_bits() {
        use crate::ops::testutil::with_threads;
        if !wide_kernel() {
            return;
        }
        let attrs = crate::ir::attributes::Attributes::default();
        let mut window = WindowAttrs::parse(&attrs, true).unwrap();
        window.pads = Some(vec![1, 1, 1, 1]);
        for (h, wd, threads) in [
            (5, 5, 1),
            (7, 7, 2),
            (9, 13, 3),
            (13, 13, 1),
            (24, 24, 2),
            (6, 30, 4),
            (4, 40, 1),
        ] {
            let (xs, ws) = ([1, 8, h, wd], [20, 8, 3, 3]);
            let p = plan(&window, 1, &xs, &ws, None).unwrap();
            let x = rand_vec(xs.iter().product(), 8);
            let w = rand_vec(ws.iter().product(), 9);
            let packed = pack(&p, &w);
            let len: usize = p.out_shape.iter().product();
            let run = |wide| {
                with_threads(threads, || {
                    let mut y = vec![f32::NAN; len];
                    implicit(&p, &x, &packed, None, None, None, &mut y, wide);
                    y
                })
            };
            let (narrow, wide) = (run(false), run(true));
            let same = narrow
                .iter()
                .zip(&wide)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{h}×{wd} on {threads} threads");
        }
    }
}
