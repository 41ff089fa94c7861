//! Depthwise convolution (one input channel per group): each output plane
//! is a direct sum over the kernel taps, never a GEMM. The 2-D case (almost
//! every mobile network) splits the plane once into zero-padded stride
//! phases so that every tap reads one contiguous span per output chunk; the
//! running sums of 32 outputs stay in registers across all the taps. Other
//! ranks walk the window lines. Planes are split over the
//! current rayon pool; each output is summed in a fixed order.

use super::conv_op::ConvPlan;
use super::lines::Lines;
use super::phases::{fill_phases, Phases, TAIL};
use crate::ops::gemm::engine::GemmFloat;
use crate::ops::gemm::fused::Activation;
use crate::ops::gemm::simd::multiversion;
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

/// Outputs summed together in registers by [`sum_taps`].
const LANES: usize = 32;
const _: () = assert!(
    LANES <= TAIL,
    "sum_taps reads LANES past a phase's last output"
);
/// Most taps [`sum_taps`] takes (a 8×8 kernel); larger kernels add one tap
/// at a time over the whole plane.
const MAX_TAPS: usize = 64;

/// 2-D: split the plane into its stride phases, then add the taps in
/// kernel row-major order (padding taps add w·0, as the definition does).
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
    let (dh, dw) = (win.dilations[0], win.dilations[1]);
    let (pt, pl) = (win.pad_begin[0], win.pad_begin[1]);
    let (plane, in_plane) = (oh * ow, h * wd);
    let ph = Phases::new(p);
    let phases_len = ph.sh * ph.sw * ph.len;
    let flat_len = (oh * ph.cols).div_ceil(LANES) * LANES;
    let taps = kh * kw;
    let mut offsets = [0usize; MAX_TAPS];
    for (t, o) in offsets.iter_mut().enumerate().take(taps) {
        *o = ph.tap((t / kw) * dh, (t % kw) * dw);
    }
    par_rows(y, plane, |first, chunk| {
        T::with_scratch(phases_len + flat_len, |scratch| {
            let (phases, flat) = scratch.split_at_mut(phases_len);
            for (r, out) in chunk.chunks_mut(plane).enumerate() {
                let row = first + r;
                let (ni, oc) = (row / m, row % m);
                let ch = oc / mg;
                let xc = &x[(ni * c + ch) * in_plane..(ni * c + ch + 1) * in_plane];
                fill_phases(&ph, phases, xc, h, wd, pt, pl);
                let init = b.map_or(T::zero(), |b| b[oc]);
                let wk = &w[oc * taps..(oc + 1) * taps];
                if taps <= MAX_TAPS {
                    sum_taps(flat, init, &offsets[..taps], wk, phases);
                } else {
                    flat.fill(init);
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let at = ph.tap(ky * dh, kx * dw);
                            axpy(flat, wk[ky * kw + kx], &phases[at..at + flat_len]);
                        }
                    }
                }
                for (dst, src) in out.chunks_exact_mut(ow.max(1)).zip(flat.chunks(ph.cols)) {
                    dst.copy_from_slice(&src[..ow]);
                }
                if let Some(a) = act {
                    a.apply(out);
                }
            }
        });
    });
}

/// `flat[j] = init + Σ_t w[t]·phases[offsets[t] + j]`, adding the taps in
/// order, with the running sums of LANES outputs held in registers: one
/// pass over the plane instead of one per tap. `flat.len()` is a multiple
/// of LANES. Fused multiply-adds on AVX-512 machines, a multiply then an
/// add elsewhere; one machine always takes the same path.
fn sum_taps<T: GemmFloat>(flat: &mut [T], init: T, offsets: &[usize], w: &[T], phases: &[T]) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::gemm::simd::has_avx512() {
        // SAFETY: the CPU has AVX-512F and FMA (checked just above).
        return unsafe { sum_taps_fused(flat, init, offsets, w, phases) };
    }
    sum_taps_plain(flat, init, offsets, w, phases)
}

/// [`sum_taps`] with a multiply-add per tap given by `madd(acc, w, x)`.
#[inline(always)]
fn sum_taps_with<T: GemmFloat>(
    flat: &mut [T],
    init: T,
    offsets: &[usize],
    w: &[T],
    phases: &[T],
    madd: impl Fn(T, T, T) -> T,
) {
    for (c, dst) in flat.chunks_exact_mut(LANES).enumerate() {
        let j = c * LANES;
        let mut acc = [init; LANES];
        for (&at, &wv) in offsets.iter().zip(w) {
            let src = &phases[at + j..at + j + LANES];
            for l in 0..LANES {
                acc[l] = madd(acc[l], wv, src[l]);
            }
        }
        dst.copy_from_slice(&acc);
    }
}

/// [`sum_taps`] compiled for AVX-512 with fused multiply-adds.
///
/// # Safety
/// The CPU must support AVX-512F and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn sum_taps_fused<T: GemmFloat>(
    flat: &mut [T],
    init: T,
    offsets: &[usize],
    w: &[T],
    phases: &[T],
) {
    sum_taps_with(flat, init, offsets, w, phases, |a, wv, x| wv.mul_add(x, a))
}

multiversion! {
    /// [`sum_taps`] with a multiply then an add per tap.
    fn sum_taps_plain<T: GemmFloat>(flat: &mut [T], init: T, offsets: &[usize], w: &[T], phases: &[T]) {
        sum_taps_with(flat, init, offsets, w, phases, |a, wv, x| a + wv * x)
    }
}

multiversion! {
    /// `out[j] += wv · src[j]` (a multiply then an add: the same bits on
    /// every build).
    fn axpy<T: GemmFloat>(out: &mut [T], wv: T, src: &[T]) {
        for (d, &s) in out.iter_mut().zip(src) {
            *d = *d + wv * s;
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
