//! Direct 2-D convolution for layers with few input channels (the RGB stems
//! of image networks: 3 channels, 7×7 or 3×3 windows, stride 2). Their
//! im2col matrix is tall and thin (147 × 12 544 for ResNet's stem) and the
//! GEMM on it is memory-bound; here each input plane is split once into its
//! stride phases, and the running sums of eight output channels (four on AVX2) × 32
//! outputs stay in registers across every tap of every input channel. Each
//! output is the bias plus its taps in (channel, row, column) order, so the
//! split across threads never changes a bit. The kernel is f32 code for
//! AVX-512 (32 outputs per block) and for AVX2 with FMA (16); elsewhere (and
//! for other types) these layers stay on im2col + GEMM, which measured
//! faster than a portable direct loop (5.3 against 3.8 ms on DenseNet's
//! stem).
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::conv_op::{ConvArgs, ConvPlan};
use super::phases::{clear_padding, fill_phases, Phases, TAIL};
use super::tap_kernel::{self, clamp_bounds, tap_offset, Isa};
use crate::ops::gemm::engine::GemmFloat;
use crate::ops::gemm::fused::Activation;
use crate::ops::parallel::par_for;
use crate::ops::parallel::SendPtr;
use crate::ops::util::par_rows;

/// Most input channels (per group) a layer may have to take this path.
const MAX_CHANNELS: usize = 4;
/// Most taps (input channels × kernel positions) summed per output.
const MAX_TAPS: usize = 256;
/// Fewest taps for the AVX2 kernel: with half the lanes of AVX-512 its
/// blocks pay off only on long sums. Zen 3, per-node trace: DenseNet's
/// 7×7 stem (147 taps) 5.3 → 3.3 ms, SqueezeNet's 3×3 stem (27 taps)
/// 0.91 → 1.11 ms, so the latter stays on im2col.
const MIN_TAPS_AVX2: usize = 64;
/// Output channels summed together by the kernel of `isa`: eight on
/// AVX-512 (16 accumulators of its 32 registers, so the multiply-adds of
/// one tap outnumber their latency; with four, SqueezeNet's 3×3 stem of 27
/// taps ran at about 150 GFLOPS), four on AVX2 (8 of its 16).
#[cfg(target_arch = "x86_64")]
fn channels_per_block(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => avx512::CO,
        Isa::Avx2 => avx2::CO,
    }
}

/// Whether `p` is a small-channel 2-D convolution this kernel takes.
fn suits(p: &ConvPlan) -> bool {
    p.win.rank() == 2
        && p.group == 1
        && p.cg() <= MAX_CHANNELS
        && p.cg() * p.win.kernel_len() <= MAX_TAPS
        && p.win.kernel_len() > 1
        && super::phases::strides_suit(p)
}

/// The instruction set whose kernel takes `p` on this CPU, if `p` suits
/// this kernel and one does: AVX-512, or AVX2 with FMA for layers of at
/// least [`MIN_TAPS_AVX2`] taps (x86-64 only).
pub(super) fn isa(p: &ConvPlan) -> Option<Isa> {
    Isa::detect(p.cg() * p.win.kernel_len() >= MIN_TAPS_AVX2).filter(|_| suits(p))
}

/// Runs the direct convolution of a layer whose [`isa`] is `isa`, then
/// the residual and the activation.
pub(super) fn run(a: &ConvArgs<f32>, isa: Isa, y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    tap_kernel::run(direct, a, isa, y);
    #[cfg(not(target_arch = "x86_64"))]
    match (a, isa, y) {}
}

/// What every output block needs: the phases of one image and the taps.
struct Job<'a> {
    phases: &'a [f32],
    /// Offset in `phases` of each tap, in (channel, row, column) order.
    offsets: &'a [usize],
    w: &'a [f32],
    b: Option<&'a [f32]>,
    /// Relu or Clip as the bounds each sum is clamped to before its store
    /// (bit for bit [`Activation::eval`]); other activations run as a pass
    /// over each block of planes.
    bounds: Option<(f32, f32)>,
    act: Option<Activation>,
    oh: usize,
    ow: usize,
    /// Row pitch of the phases.
    cols: usize,
}

/// Direct convolution of `x` by `w` into `y` (shapes from `p`, which
/// [`suits`]), on a CPU with `isa` (a [`tap_kernel::Kernel`]).
#[cfg(target_arch = "x86_64")]
fn direct(
    p: &ConvPlan,
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    act: Option<Activation>,
    y: &mut [f32],
    isa: Isa,
) {
    let win = &p.win;
    let (c, m) = (p.c, p.m);
    let (h, wd) = (win.input[0], win.input[1]);
    let (oh, ow) = (win.output[0], win.output[1]);
    let klen = win.kernel_len();
    let ph = Phases::new(p);
    let per_channel = ph.sh * ph.sw * ph.len;
    let (plane, in_plane) = (oh * ow, h * wd);
    let taps = c * klen;
    let mut offsets = [0usize; MAX_TAPS];
    for (t, o) in offsets.iter_mut().enumerate().take(taps) {
        *o = tap_offset(p, &ph, per_channel, t);
    }
    // Every block reads its LANES (at most TAIL) outputs from a tap's
    // offset at a row start: the phase's zero tail keeps that inside the
    // buffer.
    let last = offsets[..taps].iter().max().copied().unwrap_or(0);
    assert!(last + (oh.max(1) - 1) * ph.cols + ow.div_ceil(TAIL) * TAIL <= c * per_channel);
    f32::with_scratch(c * per_channel, |phases| {
        let (pt, pl) = (win.pad_begin[0], win.pad_begin[1]);
        let per_plane = ph.sh * ph.sw;
        for ni in 0..p.n {
            let pp = SendPtr(phases.as_mut_ptr());
            // One task per phase of each channel: done serially, zeroing
            // and filling the stem's 126 KB of phases took a tenth of the
            // layer's time on two threads.
            par_for(c * per_plane, |u| {
                let (ci, k) = (u / per_plane, u % per_plane);
                // SAFETY: each task writes its own phase, inside the buffer.
                let dst = unsafe { pp.slice(u * ph.len, ph.len) };
                if ni == 0 {
                    // Every image fills the same spans.
                    clear_padding(&ph, dst, k, h, wd, pt, pl);
                }
                let xc = &x[(ni * c + ci) * in_plane..(ni * c + ci + 1) * in_plane];
                fill_phases(&ph, dst, k, xc, h, wd, pt, pl);
            });
            let phases = &*phases;
            let job = Job {
                phases,
                offsets: &offsets[..taps],
                w,
                b,
                bounds: clamp_bounds(act),
                act,
                oh,
                ow,
                cols: ph.cols,
            };
            let yi = &mut y[ni * m * plane..(ni + 1) * m * plane];
            // Tasks take whole blocks of `co` channels: split by plane, 48
            // channels made 8 tasks of 6, each a full block and a half one.
            let co = channels_per_block(isa);
            par_rows(yi, co * plane, |first, chunk| {
                for (i, out) in chunk.chunks_mut(co * plane).enumerate() {
                    let oc = (first + i) * co;
                    // SAFETY: the CPU has `isa` (checked by the caller) and
                    // the phases' tails were checked above.
                    unsafe {
                        match isa {
                            Isa::Avx512 => avx512::planes(&job, oc, out),
                            Isa::Avx2 => avx2::planes(&job, oc, out),
                        }
                    }
                }
            });
        }
    });
}

/// A direct kernel module for one instruction set: `$width` lanes per
/// vector, two vectors (`LANES` outputs) of `$co` (4 or 8) channels per
/// register block, and `$store` the masked store of a vector's lanes
/// `lo..hi`.
macro_rules! direct_kernel {
    (
        $(#[$meta:meta])*
        mod $name:ident, $feature:literal, $width:literal, $co:literal,
        $zero:ident, $set1:ident, $loadu:ident, $fma:ident, $max:ident, $min:ident,
        $store:path
    ) => {
        $(#[$meta])*
        #[cfg(target_arch = "x86_64")]
        mod $name {
            use std::arch::x86_64::*;

            /// Lanes of one vector.
            const WIDTH: usize = $width;
            /// Output channels per register block.
            pub(super) const CO: usize = $co;
            const _: () = assert!(CO == 4 || CO == 8, "blocks of 4 or 8 channels");
            /// Outputs per register block; a row's last block may use half.
            pub(super) const LANES: usize = 2 * WIDTH;
            const _: () = assert!(
                LANES <= super::TAIL,
                "a block reads LANES past a row's last output"
            );

            use super::{Job, MAX_TAPS};
            use $store as store;

    /// Output planes `oc ..` (as many as `out` holds, at most [`CO`]).
    ///
    /// # Safety
    /// The CPU must support the module's features; `job.phases` must hold
    /// [`LANES`] readable elements past every row's last output at every
    /// tap offset.
    #[target_feature(enable = $feature)]
    pub(super) unsafe fn planes(job: &Job<'_>, oc: usize, out: &mut [f32]) {
        // SAFETY: this function's contract is the block's, passed on.
        unsafe {
            match out.len() / (job.oh * job.ow).max(1) {
                8 if CO == 8 => block::<8>(job, oc, out),
                7 if CO == 8 => block::<7>(job, oc, out),
                6 if CO == 8 => block::<6>(job, oc, out),
                5 if CO == 8 => block::<5>(job, oc, out),
                4 => block::<4>(job, oc, out),
                3 => block::<3>(job, oc, out),
                2 => block::<2>(job, oc, out),
                _ => block::<1>(job, oc, out),
            }
        }
    }

    /// [`planes`] for N channels.
    ///
    /// # Safety
    /// As for [`planes`].
    #[target_feature(enable = $feature)]
    #[inline]
    unsafe fn block<const N: usize>(job: &Job<'_>, oc: usize, out: &mut [f32]) {
        let taps = job.offsets.len();
        let plane = job.oh * job.ow;
        let mut wt = [[0f32; N]; MAX_TAPS];
        let w = &job.w[oc * taps..(oc + N) * taps];
        for (t, row) in wt.iter_mut().take(taps).enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v = w[c * taps + t];
            }
        }
        let mut init = [0f32; N];
        if let Some(b) = job.b {
            init.copy_from_slice(&b[oc..oc + N]);
        }
        let wt = &wt[..taps];
        assert!(out.len() >= N * plane);
        for r in 0..job.oh {
            let mut j = 0;
            while j < job.ow {
                let n = (job.ow - j).min(LANES);
                let (at, dst) = (r * job.cols + j, r * job.ow + j);
                // SAFETY: r < oh and j < ow, so `dst` is inside the first
                // plane of `out` (asserted ≥ N planes); `sums` writes the
                // n ≤ ow - j outputs from there in each of the N planes
                // and reads what the contract vouches for.
                unsafe {
                    let out = out.as_mut_ptr().add(dst);
                    if n > LANES / 2 {
                        sums::<N, 2>(job, wt, &init, at, out, plane, n);
                    } else {
                        sums::<N, 1>(job, wt, &init, at, out, plane, n);
                    }
                }
                j += n;
            }
        }
        if let (Some(a), None) = (job.act, job.bounds) {
            for p in out.chunks_exact_mut(plane.max(1)) {
                a.apply(p);
            }
        }
    }

    /// `n ≤ WIDTH·V` outputs from `at` of `N` channels: the bias, then every
    /// tap in order; written at `out + c·plane`.
    ///
    /// # Safety
    /// As for [`planes`]; `at` is a row's output position in the phases,
    /// and `out` must have `n` writable values at each `c·plane`.
    #[target_feature(enable = $feature)]
    #[inline]
    unsafe fn sums<const N: usize, const V: usize>(
        job: &Job<'_>,
        wt: &[[f32; N]],
        init: &[f32; N],
        at: usize,
        out: *mut f32,
        plane: usize,
        n: usize,
    ) {
        let mut acc = [[$zero(); V]; N];
        for (a, &i) in acc.iter_mut().zip(init) {
            *a = [$set1(i); V];
        }
        // SAFETY: `at` is an output's position in the phases.
        let base = unsafe { job.phases.as_ptr().add(at) };
        for (&off, wv) in job.offsets.iter().zip(wt) {
            let mut xs = [$zero(); V];
            // SAFETY: `job.phases` holds LANES ≥ WIDTH·V readable elements
            // past every row's last output at every tap offset (the
            // contract), and `at` is inside a row.
            unsafe {
                let p = base.add(off);
                for (v, x) in xs.iter_mut().enumerate() {
                    *x = $loadu(p.add(WIDTH * v));
                }
            }
            for c in 0..N {
                let w = $set1(wv[c]);
                for v in 0..V {
                    acc[c][v] = $fma(w, xs[v], acc[c][v]);
                }
            }
        }
        for (c, a) in acc.iter().enumerate() {
            for (v, &reg) in a.iter().enumerate() {
                let lo = WIDTH * v;
                if lo >= n {
                    break;
                }
                // max(lo, x) then min(hi, ·) keep a NaN and the sign of a
                // zero, as Activation::eval does.
                let reg = match job.bounds {
                    Some((l, h)) => $min($set1(h), $max($set1(l), reg)),
                    None => reg,
                };
                // SAFETY: lanes lo..min(n, lo + WIDTH) of the n writable
                // values at `c·plane` (the contract), lo < n.
                unsafe { store(out.add(c * plane + lo), reg, 0, (n - lo).min(WIDTH)) };
            }
        }
    }
        }
    };
}

direct_kernel! {
    /// The f32 kernel for AVX-512: eight output channels × two vectors of
    /// 16 outputs in 16 registers, one fused multiply-add per tap and
    /// register.
    mod avx512, "avx512f", 16, 8,
    _mm512_setzero_ps, _mm512_set1_ps, _mm512_loadu_ps, _mm512_fmadd_ps, _mm512_max_ps,
    _mm512_min_ps, crate::ops::conv::tap_kernel::store_avx512
}

direct_kernel! {
    /// The f32 kernel for AVX2: four output channels × two vectors of 8
    /// outputs in 8 registers, one fused multiply-add per tap and register.
    mod avx2, "avx2,fma", 8, 4,
    _mm256_setzero_ps, _mm256_set1_ps, _mm256_loadu_ps, _mm256_fmadd_ps, _mm256_max_ps,
    _mm256_min_ps, crate::ops::conv::tap_kernel::store_avx2
}
