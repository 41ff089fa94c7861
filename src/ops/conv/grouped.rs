//! Direct 2-D grouped convolution (ResNeXt's 3×3 layers: 32 groups of 4
//! to 32 channels), with no column matrix. The input planes of one group
//! are split once into their zero-padded stride phases, whose rows have the
//! phases' pitch `cols`; an output position `(oy, ox)` is then the flat
//! index `q = oy·cols + ox`, every tap of every input channel reads from a
//! constant offset, and the positions of an output plane are contiguous
//! vectors (the `cols − ow` positions past each row are computed and never
//! stored). A register block holds up to four output channels × four
//! vectors of positions across all the taps (input channel, kernel row,
//! kernel column), each tap one unaligned load per vector and one
//! broadcast weight per channel, then gets the bias, Relu or Clip and its
//! masked stores. Work is split by blocks of output channels; each output
//! is the bias plus its taps in one fixed order, so the split never
//! changes a bit. The kernel is f32 code for AVX-512 (16 lanes) and for
//! AVX2 with FMA (8); elsewhere (and for f64) these layers stay on im2col
//! and a GEMM per group.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::conv_op::{ConvArgs, ConvPlan};
use super::phases::{clear_padding, fill_phases, Phases, TAIL};
use super::tap_kernel::{self, clamp_bounds, tap_offset, Isa};
use crate::ops::gemm::engine::GemmFloat;
use crate::ops::gemm::fused::Activation;
use crate::ops::parallel::{op_threads, par_for, task_count, SendPtr, MIN_PARALLEL_GRAIN};

/// Output channels summed together in one register block.
const CO: usize = 4;
/// Most vectors of positions in one register block.
const MAX_VECS: usize = 4;
/// Most taps (input channels per group × kernel positions) per output.
/// With many channels per group im2col's GEMM catches up: on Zen 5, 1
/// CPU, against im2col, 8 groups of 64 at stride 2 0.76×, 2 of 192 at
/// stride 2 0.99×, 2 of 48 with a 5×5 kernel (AlexNet) 0.83×.
const MAX_TAPS: usize = 2048;
/// Most input channels per group for which this kernel is preferred to
/// Winograd: with more, Winograd's fewer products win (Zen 5, 1 CPU,
/// grouped / Winograd: 16 groups of 32 at 28×28 0.94×, 4 of 16 at 28×28
/// 0.89×, but 8 of 64 at 14×14 1.0× and at 28×28 1.20×, 2 of 128 at
/// 28×28 1.87×).
const BEFORE_WINOGRAD_CHANNELS: usize = 32;
const _: () = assert!(
    16 <= TAIL,
    "a block reads up to a vector past the last position"
);

/// Whether `p` is a grouped 2-D convolution this kernel takes: several
/// groups of at least two input channels (one is depthwise), a kernel of
/// more than one position, strides the phase split takes.
pub(super) fn suits(p: &ConvPlan) -> bool {
    p.win.rank() == 2
        && p.group > 1
        && p.cg() >= 2
        && p.mg() >= 1
        && p.win.kernel_len() > 1
        && p.cg() * p.win.kernel_len() <= MAX_TAPS
        && super::phases::strides_suit(p)
}

/// Whether this kernel should take `p` (which [`suits`]) even where
/// Winograd could: groups of at most [`BEFORE_WINOGRAD_CHANNELS`].
pub(super) fn before_winograd(p: &ConvPlan) -> bool {
    p.cg() <= BEFORE_WINOGRAD_CHANNELS
}

/// The instruction set whose kernel takes `p` on this CPU, if `p` suits
/// this kernel and the CPU has AVX-512 or AVX2 with FMA (x86-64 only).
pub(super) fn isa(p: &ConvPlan) -> Option<Isa> {
    Isa::detect(true).filter(|_| suits(p))
}

/// Runs the grouped convolution of a layer whose [`isa`] is `isa`, then
/// the residual and the activation.
pub(super) fn run(a: &ConvArgs<f32>, isa: Isa, y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    tap_kernel::run(grouped, a, isa, y);
    #[cfg(not(target_arch = "x86_64"))]
    match (a, isa, y) {}
}

/// What every register block reads: the phases of one group's input
/// channels and the geometry.
struct Job<'a> {
    phases: &'a [f32],
    /// Offset in `phases` of each tap, in (channel, row, column) order.
    offsets: &'a [usize],
    /// Relu or Clip as the bounds each sum is clamped to before its store
    /// (bit for bit [`Activation::eval`]); other activations run as a pass
    /// over each block of planes.
    bounds: Option<(f32, f32)>,
    act: Option<Activation>,
    oh: usize,
    ow: usize,
    /// Row pitch of the phases (and of the flat positions).
    cols: usize,
}

/// Grouped convolution of `x` by `w` into `y` (shapes from `p`, which
/// [`suits`]), on a CPU with `isa` (a [`tap_kernel::Kernel`]).
#[cfg(target_arch = "x86_64")]
fn grouped(
    p: &ConvPlan,
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    act: Option<Activation>,
    y: &mut [f32],
    isa: Isa,
) {
    let win = &p.win;
    let (c, m, group, cg, mg) = (p.c, p.m, p.group, p.cg(), p.mg());
    let (h, wd) = (win.input[0], win.input[1]);
    let (oh, ow) = (win.output[0], win.output[1]);
    let klen = win.kernel_len();
    let (pt, pl) = (win.pad_begin[0], win.pad_begin[1]);
    let ph = Phases::new(p);
    let per_channel = ph.sh * ph.sw * ph.len;
    let (plane, in_plane) = (oh * ow, h * wd);
    if plane == 0 {
        return;
    }
    let taps = cg * klen;
    let offsets: Vec<usize> = (0..taps)
        .map(|t| tap_offset(p, &ph, per_channel, t))
        .collect();
    // A block reads whole vectors from every tap's offset up to the last
    // position's vector: at most 16 past the last position, inside the
    // phase's zero tail.
    let last = offsets.iter().max().copied().unwrap_or(0);
    let positions = oh * ph.cols;
    assert!(last + positions.next_multiple_of(16) <= cg * per_channel);
    let bounds = clamp_bounds(act);
    // Units of work: blocks of CO output channels of one group of one
    // image; a task takes a run of them and splits its group's planes
    // whenever the group changes.
    let blocks = mg.div_ceil(CO);
    let units = p.n * group * blocks;
    let tasks = if op_threads() <= 1 || y.len() < MIN_PARALLEL_GRAIN {
        1
    } else {
        task_count(units, op_threads())
    };
    let per_task = units.div_ceil(tasks);
    let yp = SendPtr(y.as_mut_ptr());
    par_for(units.div_ceil(per_task), |task| {
        f32::with_scratch(cg * per_channel, |phases| {
            let mut split: Option<usize> = None;
            let end = ((task + 1) * per_task).min(units);
            for u in task * per_task..end {
                let (image_group, blk) = (u / blocks, u % blocks);
                let (ni, g) = (image_group / group, image_group % group);
                if split != Some(image_group) {
                    for (ci, dst) in phases.chunks_exact_mut(per_channel).enumerate() {
                        if split.is_none() {
                            // Every plane fills the same spans.
                            clear_padding(&ph, dst, 0, h, wd, pt, pl);
                        }
                        let at = (ni * c + g * cg + ci) * in_plane;
                        fill_phases(&ph, dst, 0, &x[at..at + in_plane], h, wd, pt, pl);
                    }
                    split = Some(image_group);
                }
                let oc = g * mg + blk * CO;
                let n = CO.min(mg - blk * CO);
                let init: [f32; CO] = std::array::from_fn(|i| match b {
                    Some(b) if i < n => b[oc + i],
                    _ => 0.0,
                });
                let wb = &w[oc * taps..(oc + n) * taps];
                // SAFETY: unit u alone writes output channels oc..oc + n
                // of image ni, inside `y`.
                let out = unsafe { yp.slice((ni * m + oc) * plane, n * plane) };
                let job = Job {
                    phases: &*phases,
                    offsets: &offsets,
                    bounds,
                    act,
                    oh,
                    ow,
                    cols: ph.cols,
                };
                // SAFETY: the CPU has `isa` (checked by the caller) and
                // the phases' reach was asserted above.
                unsafe {
                    match isa {
                        Isa::Avx512 => avx512::planes(&job, wb, &init[..n], out),
                        Isa::Avx2 => avx2::planes(&job, wb, &init[..n], out),
                    }
                }
            }
        });
    });
}

/// A grouped kernel module for one instruction set: `$width` lanes per
/// vector, `$store` the masked store of a vector's lanes `lo..hi` at `p`.
macro_rules! grouped_kernel {
    (
        $(#[$meta:meta])*
        mod $name:ident, $feature:literal, $width:literal,
        $zero:ident, $set1:ident, $loadu:ident, $fma:ident, $max:ident, $min:ident,
        $store:path
    ) => {
        $(#[$meta])*
        #[cfg(target_arch = "x86_64")]
        mod $name {
            use std::arch::x86_64::*;

            use super::{Job, CO, MAX_VECS};
            use $store as store;

            /// Lanes of one vector.
            const WIDTH: usize = $width;

    /// Output planes of the channels whose weights are `w` (all the taps
    /// of each in turn) and whose biases are `init` (1 to [`CO`]), into
    /// `out` (one plane per channel).
    ///
    /// # Safety
    /// The CPU must support the module's features; `job.phases` must hold
    /// every tap offset plus the positions rounded up to whole vectors.
    #[target_feature(enable = $feature)]
    pub(super) unsafe fn planes(job: &Job<'_>, w: &[f32], init: &[f32], out: &mut [f32]) {
        let plane = job.oh * job.ow;
        assert!(w.len() >= init.len() * job.offsets.len() && out.len() >= init.len() * plane);
        // SAFETY: this function's contract is the block's, passed on.
        unsafe {
            match init.len() {
                4 => block::<4>(job, w, init, out),
                3 => block::<3>(job, w, init, out),
                2 => block::<2>(job, w, init, out),
                _ => block::<1>(job, w, init, out),
            }
        }
        if let (Some(a), None) = (job.act, job.bounds) {
            for p in out.chunks_exact_mut(plane.max(1)) {
                a.apply(p);
            }
        }
    }

    /// [`planes`] for N channels.
    ///
    /// # Safety
    /// As for [`planes`], whose assert holds.
    #[target_feature(enable = $feature)]
    #[inline]
    unsafe fn block<const N: usize>(job: &Job<'_>, w: &[f32], init: &[f32], out: &mut [f32]) {
        const { assert!(N <= CO) };
        let vecs = (job.oh * job.cols).div_ceil(WIDTH);
        let mut v = 0;
        while v < vecs {
            let n = (vecs - v).min(MAX_VECS);
            let q = v * WIDTH;
            // SAFETY: the contract, and the vectors v..v + n are inside
            // the positions rounded up to whole vectors.
            unsafe {
                match n {
                    4 => sums::<N, 4>(job, w, init, q, out),
                    3 => sums::<N, 3>(job, w, init, q, out),
                    2 => sums::<N, 2>(job, w, init, q, out),
                    _ => sums::<N, 1>(job, w, init, q, out),
                }
            }
            v += n;
        }
    }

    /// The positions `q .. q + WIDTH·V` of N channels: the bias, then every
    /// tap in order; the positions that are outputs are written to `out`.
    ///
    /// # Safety
    /// As for [`planes`]; `q + WIDTH·V` is at most the positions rounded
    /// up to whole vectors.
    #[target_feature(enable = $feature)]
    #[inline]
    unsafe fn sums<const N: usize, const V: usize>(
        job: &Job<'_>,
        w: &[f32],
        init: &[f32],
        q: usize,
        out: &mut [f32],
    ) {
        let taps = job.offsets.len();
        let mut acc = [[$zero(); V]; N];
        for (a, &i) in acc.iter_mut().zip(init) {
            *a = [$set1(i); V];
        }
        // SAFETY: q is a position inside the phases (the contract).
        let base = unsafe { job.phases.as_ptr().add(q) };
        let wp = w.as_ptr();
        for (t, &off) in job.offsets.iter().enumerate() {
            let mut xs = [$zero(); V];
            // SAFETY: every tap offset plus the positions rounded up to
            // whole vectors lies inside `job.phases` (the contract), and
            // the weights of N channels × taps inside `w` (asserted in
            // `planes`).
            unsafe {
                let p = base.add(off);
                for (v, x) in xs.iter_mut().enumerate() {
                    *x = $loadu(p.add(WIDTH * v));
                }
                for c in 0..N {
                    let wv = $set1(*wp.add(c * taps + t));
                    for v in 0..V {
                        acc[c][v] = $fma(wv, xs[v], acc[c][v]);
                    }
                }
            }
        }
        let (cols, ow, oh) = (job.cols, job.ow, job.oh);
        let plane = oh * ow;
        for c in 0..N {
            for v in 0..V {
                // max(lo, x) then min(hi, ·) keep a NaN and the sign of a
                // zero, as Activation::eval does.
                acc[c][v] = match job.bounds {
                    Some((l, h)) => $min($set1(h), $max($set1(l), acc[c][v])),
                    None => acc[c][v],
                };
            }
        }
        for v in 0..V {
            let first = q + WIDTH * v;
            let mut row = first / cols;
            // Each output row the vector reaches: its lanes lo..hi.
            while row < oh && row * cols < first + WIDTH {
                let start = row * cols;
                let lo = first.max(start) - first;
                let hi = (first + WIDTH).min(start + ow).saturating_sub(first);
                if lo < hi {
                    // Lane l of the vector is output (row, first + l − start).
                    let at = (row * ow + first) as isize - start as isize;
                    for c in 0..N {
                        // SAFETY: lanes lo..hi are outputs row·ow + (first
                        // + l − start) < (row + 1)·ow ≤ plane of channel c,
                        // inside `out` (asserted in `planes`); the other
                        // lanes are not written.
                        unsafe {
                            let p = out.as_mut_ptr().wrapping_offset((c * plane) as isize + at);
                            store(p, acc[c][v], lo, hi);
                        }
                    }
                }
                row += 1;
            }
        }
    }
        }
    };
}

grouped_kernel! {
    /// The f32 kernel for AVX-512: four output channels × four vectors of
    /// 16 positions in 16 registers, one fused multiply-add per tap and
    /// register.
    mod avx512, "avx512f", 16,
    _mm512_setzero_ps, _mm512_set1_ps, _mm512_loadu_ps, _mm512_fmadd_ps, _mm512_max_ps,
    _mm512_min_ps, crate::ops::conv::tap_kernel::store_avx512
}

grouped_kernel! {
    /// The f32 kernel for AVX2: four output channels × four vectors of 8
    /// positions in 16 registers, one fused multiply-add per tap and
    /// register.
    mod avx2, "avx2,fma", 8,
    _mm256_setzero_ps, _mm256_set1_ps, _mm256_loadu_ps, _mm256_fmadd_ps, _mm256_max_ps,
    _mm256_min_ps, crate::ops::conv::tap_kernel::store_avx2
}
