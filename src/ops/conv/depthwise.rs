//! Depthwise convolution (one input channel per group): each output plane
//! is a direct sum over the kernel taps, never a GEMM. The 2-D case (almost
//! every mobile network) splits the plane once into zero-padded stride
//! phases so that every tap reads one contiguous span per output chunk; the
//! running sums of up to 32 outputs of a row stay in registers across all
//! the taps and get their activation there, before their one store; on
//! AVX-512 the rows kernel takes wide f32 planes of stride 2 instead,
//! splitting the input rows each chunk reads into even and odd columns in
//! an L1 scratch. Other ranks walk the window lines. Planes are split over
//! the current rayon pool; each output is summed in a fixed order.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod blocked;
#[cfg(target_arch = "x86_64")]
mod halves;
#[cfg(target_arch = "x86_64")]
mod lanes;
#[cfg(all(test, target_arch = "x86_64"))]
mod planes_tests;
#[cfg(target_arch = "x86_64")]
mod rows;
#[cfg(all(test, target_arch = "x86_64"))]
mod rows_tests;
#[cfg(test)]
mod tap_sums_tests;
#[cfg(target_arch = "x86_64")]
mod transpose;

use super::conv_op::{add_residual, ConvArgs, ConvPlan};
use super::lines::Lines;
use super::phases::{clear_phases, fill_phases, Phases, TAIL};
use crate::ops::gemm::engine::GemmFloat;
use crate::ops::gemm::fused::Activation;
use crate::ops::util::par_rows;

/// Depthwise convolution of X by W into `y`, then the residual and the
/// activation.
pub(super) fn depthwise<T: GemmFloat>(a: &ConvArgs<T>, y: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if pick_rows(a.p.win.strides.last().copied().unwrap_or(1)) && rows_2d(a, y) {
        return;
    }
    let (p, x, w, b, act) = (a.p, a.x, a.w, a.b, a.inner_act());
    #[cfg(target_arch = "x86_64")]
    if p.win.rank() == 2 && super::phases::strides_suit(p) && blocked_2d(a, act, y) {
        add_residual(y, a.z, a.act);
        return;
    }
    if p.win.rank() == 2 && super::phases::strides_suit(p) {
        depthwise_2d(p, x, w, b, act, y);
    } else {
        depthwise_nd(p, x, w, b, act, y);
    }
    add_residual(y, a.z, a.act);
}

/// Widest chunk of a row [`TapSums`] sums in registers; a short row's
/// chunk reads up to this many outputs past the row's end.
const MAX_LANES: usize = 32;
const _: () = assert!(
    MAX_LANES <= TAIL,
    "a chunk reads past a phase's last output"
);

/// Most taps one pass of [`TapSums`] adds (a 8×8 kernel); larger kernels
/// take several passes, each resuming from the sums the last one stored.
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
    if plane == 0 {
        return;
    }
    let ph = Phases::new(p);
    let phases_len = ph.sh * ph.sw * ph.len;
    let taps = kh * kw;
    let tap_at = |t: usize| ph.tap((t / kw) * dh, (t % kw) * dw);
    #[cfg(target_arch = "x86_64")]
    let fast = avx2_kernel::<T>(taps);
    // The input plane of output plane `row` (image, output channel), and
    // that output channel: the divisions matter on small planes.
    let channels = |row: usize| {
        let (ni, oc) = if row < m {
            (0, row)
        } else {
            (row / m, row % m)
        };
        let ch = ni * c + if mg == 1 { oc } else { oc / mg };
        (oc, &x[ch * in_plane..(ch + 1) * in_plane])
    };
    par_rows(y, plane, |first, chunk| {
        // Two phase buffers: plane r + 1 is split while plane r is summed,
        // so the sums never load what was stored a moment before (those
        // loads would wait for the stores to retire).
        T::with_scratch(2 * phases_len, |scratch| {
            clear_phases(scratch);
            let (mut now, mut next) = scratch.split_at_mut(phases_len);
            let planes = chunk.len() / plane;
            fill_phases(&ph, now, 0, channels(first).1, h, wd, pt, pl);
            let mut offsets = [0usize; MAX_TAPS];
            if taps <= MAX_TAPS {
                for (t, o) in offsets[..taps].iter_mut().enumerate() {
                    *o = tap_at(t);
                }
            }
            for (r, out) in chunk.chunks_mut(plane).enumerate() {
                let row = first + r;
                if r + 1 < planes {
                    fill_phases(&ph, next, 0, channels(row + 1).1, h, wd, pt, pl);
                }
                let (oc, phases) = (channels(row).0, &*now);
                let init = b.map_or(T::zero(), |b| b[oc]);
                let wk = &w[oc * taps..(oc + 1) * taps];
                #[cfg(target_arch = "x86_64")]
                let done = fast.map(|k| {
                    let plane = avx2::Plane::new(oh, ow, ph.cols, &offsets[..taps]);
                    k.run(&plane, init, wk, phases, act, out);
                });
                #[cfg(not(target_arch = "x86_64"))]
                let done: Option<()> = None;
                if done.is_none() {
                    for t0 in (0..taps).step_by(MAX_TAPS) {
                        let n = (taps - t0).min(MAX_TAPS);
                        for (j, o) in offsets[..n].iter_mut().enumerate() {
                            *o = tap_at(t0 + j);
                        }
                        let last = t0 + n == taps;
                        let sums = TapSums {
                            ow,
                            cols: ph.cols,
                            offsets: &offsets[..n],
                            resume: t0 > 0,
                            act: if last { act } else { None },
                        };
                        sums.run(out, init, &wk[t0..t0 + n], phases);
                    }
                }
                std::mem::swap(&mut now, &mut next);
            }
        });
    });
}

/// Small f32 planes on the channel-blocked kernel, where it runs, with
/// the activation `act` (the residual is the caller's): whether it did.
/// W is read transposed (see [`blocked::transpose_weights`]), kept in the
/// node's cache when W is constant.
#[cfg(target_arch = "x86_64")]
fn blocked_2d<T: GemmFloat>(a: &ConvArgs<T>, act: Option<Activation>, y: &mut [T]) -> bool {
    use crate::ops::util::as_f32_mut;
    let (Some(a), Some(y)) = (a.as_f32(), as_f32_mut(y)) else {
        return false;
    };
    let p = a.p;
    let Some(k) = blocked::Blocked::new(p) else {
        return false;
    };
    let plane = p.win.output[0] * p.win.output[1];
    let taps = p.win.kernel_len();
    a.weights.depthwise.with(
        a.weights.constant,
        || blocked::transpose_weights(p.m, taps, a.w),
        |wt| {
            crate::ops::parallel::par_row_blocks(y, plane, k.lanes(), |first, chunk| {
                f32::with_scratch(k.scratch_len(), |s| {
                    k.run(first, chunk, a.x, wt, a.b, act, s)
                });
            });
        },
    );
    true
}

/// Whether [`depthwise_pixels`] takes the layer of plan `p` with the
/// activation `act` and no residual: a 2-D f32 layer on the
/// channel-blocked kernel, its activation applied in registers.
pub(super) fn takes_pixels(p: &ConvPlan, act: Option<Activation>) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        p.win.rank() == 2
            && super::phases::strides_suit(p)
            && blocked::Blocked::takes_pixels(act)
            && blocked::Blocked::new(p).is_some()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (p, act);
        false
    }
}

/// Depthwise convolution of f32 X by W into `y` in `[image][pixel]
/// [channel]` order (NHWC: a Transpose(0, 2, 3, 1) of the output absorbed),
/// where [`takes_pixels`] holds and there is no residual: whether it did.
/// The channel-blocked kernel's sums are already in that order; each
/// output has the bits [`depthwise`] gives it.
pub(super) fn depthwise_pixels(a: &ConvArgs<f32>, y: &mut [f32]) -> bool {
    if a.z.is_some() || !takes_pixels(a.p, a.act) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use crate::ops::parallel::SendPtr;
        let p = a.p;
        let Some(k) = blocked::Blocked::new(p) else {
            return false;
        };
        let plane = p.win.output[0] * p.win.output[1];
        if y.len() != p.n * p.m * plane {
            return false;
        }
        let taps = p.win.kernel_len();
        let out = SendPtr(y.as_mut_ptr());
        // The planes split over the pool as `blocked_2d` splits them (a
        // slice of zero-sized values stands in for Y's planes).
        let mut planes = vec![(); y.len()];
        a.weights.depthwise.with(
            a.weights.constant,
            || blocked::transpose_weights(p.m, taps, a.w),
            |wt| {
                crate::ops::parallel::par_row_blocks(
                    &mut planes,
                    plane,
                    k.lanes(),
                    |first, chunk| {
                        let rows = chunk.len() / plane.max(1);
                        f32::with_scratch(k.scratch_len(), |s| {
                            // SAFETY: `out` holds the whole output (its
                            // length checked above), and the tasks' planes
                            // are disjoint, so are the values they write.
                            unsafe {
                                k.run_pixels(first, rows, out.offset(0).0, a.x, wt, a.b, a.act, s)
                            }
                        });
                    },
                );
            },
        );
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = y;
        false
    }
}

/// Whether wide f32 planes of horizontal stride `sw` take the AVX-512
/// rows kernel: stride 2 only for now. On the AVX-512 machine measured (an
/// AMD EPYC) it beat the phase path on every layer alone, but inside
/// MobileNet v3 only at stride 2 (features.2's 3×3 at 112²: ~167 against
/// ~216 µs); its stride-1 layers ran as fast or slower there, and so did
/// a stride-1 copy of its split-rows loop alone (3×3 at 112² and 56², 5×5
/// at 28²: 0.92 to 1.11 of the phase path's time).
#[cfg(target_arch = "x86_64")]
fn pick_rows(sw: usize) -> bool {
    sw == 2
}

/// Wide f32 planes on the AVX-512 kernel that reads X in place, with the
/// residual and the activation in its registers, where it runs (the
/// blocked kernel keeps the planes it takes): whether it did.
#[cfg(target_arch = "x86_64")]
fn rows_2d<T: GemmFloat>(a: &ConvArgs<T>, y: &mut [T]) -> bool {
    use crate::ops::util::as_f32_mut;
    let (Some(a), Some(y)) = (a.as_f32(), as_f32_mut(y)) else {
        return false;
    };
    let p = a.p;
    if p.win.rank() != 2 || !super::phases::strides_suit(p) || blocked::Blocked::new(p).is_some() {
        return false;
    }
    let Some(k) = rows::Rows::new(a.p) else {
        return false;
    };
    k.run(a.x, a.w, a.b, a.z, a.act, y);
    true
}

/// The intrinsics kernel for f32 planes on CPUs with AVX2 and FMA, taking
/// all the taps in one pass: `Some(kernel)` where it runs.
#[cfg(target_arch = "x86_64")]
fn avx2_kernel<T: 'static>(taps: usize) -> Option<Avx2Planes> {
    (taps <= MAX_TAPS
        && crate::ops::gemm::simd::has_avx2_fma()
        && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
    .then_some(Avx2Planes)
}

/// Proof that [`avx2_kernel`] found the kernel runnable here.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2Planes;

#[cfg(target_arch = "x86_64")]
impl Avx2Planes {
    /// One plane of `T` = f32 (checked by [`avx2_kernel`]).
    fn run<T: GemmFloat>(
        self,
        plane: &avx2::Plane,
        init: T,
        wk: &[T],
        phases: &[T],
        act: Option<Activation>,
        out: &mut [T],
    ) {
        use crate::ops::util::{as_f32, as_f32_mut};
        let (Some(wk), Some(phases), Some(out)) = (as_f32(wk), as_f32(phases), as_f32_mut(out))
        else {
            unreachable!("avx2_kernel checked that T is f32");
        };
        let init = init.to_f32().unwrap_or(0.0);
        let relu = act == Some(Activation::Relu);
        if avx2::wide_suits(plane.ow()) && crate::ops::gemm::simd::has_avx512() {
            // SAFETY: the CPU has AVX-512F (checked just above).
            unsafe { avx2::sum_plane_512(plane, out, init, wk, phases, relu) };
        } else {
            // SAFETY: the CPU has AVX2 and FMA (checked by avx2_kernel).
            unsafe { avx2::sum_plane(plane, out, init, wk, phases, relu) };
        }
        if let Some(a) = act.filter(|_| !relu) {
            a.apply(out);
        }
    }
}

/// One pass over an output plane laid out `oh` rows of `ow`:
/// `out[oy·ow + ox] = act(s + Σ_t w[t]·phases[offsets[t] + oy·cols + ox])`,
/// adding the taps in order, where `s` is the bias (or, when resuming, the
/// sum the last pass stored). A row is taken in chunks of L lanes whose
/// running sums stay in registers across all the taps; the last chunk of a
/// row overlaps the one before rather than running past the row, so every
/// store is whole and nothing is copied afterwards.
struct TapSums<'a> {
    ow: usize,
    cols: usize,
    offsets: &'a [usize],
    resume: bool,
    act: Option<Activation>,
}

impl TapSums<'_> {
    /// Fused multiply-adds on machines with AVX2 and FMA or AVX-512 (f32
    /// only; f64 stays on AVX2's), and on
    /// aarch64 (where they compile to NEON's FMLA on 4 lanes), a multiply
    /// then an add elsewhere; one machine always takes the same path, and
    /// every output sums its taps in the same order whichever chunk
    /// computes it.
    fn run<T: GemmFloat>(&self, out: &mut [T], init: T, w: &[T], phases: &[T]) {
        #[cfg(target_arch = "aarch64")]
        if crate::ops::gemm::simd::neon_kernels() {
            return self.rows(out, init, w, phases, |a, wv, x| wv.mul_add(x, a));
        }
        #[cfg(target_arch = "x86_64")]
        {
            use crate::ops::gemm::simd::{has_avx2_fma, has_avx512};
            // f64 takes the AVX2 copy on AVX-512 machines too: the same
            // fused multiply-adds, so the same bits, and one compiled copy
            // fewer of a rare type's kernel (a smaller library).
            let f32 = std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>();
            if f32 && has_avx512() {
                // SAFETY: the CPU has AVX-512F and FMA (checked just above).
                return unsafe { self.run_avx512(out, init, w, phases) };
            }
            if has_avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA (checked just above).
                return unsafe { self.run_avx2_fma(out, init, w, phases) };
            }
        }
        self.run_plain(out, init, w, phases)
    }

    /// # Safety
    /// The CPU must support AVX-512F and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn run_avx512<T: GemmFloat>(&self, out: &mut [T], init: T, w: &[T], phases: &[T]) {
        self.rows(out, init, w, phases, |a, wv, x| wv.mul_add(x, a))
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2_fma<T: GemmFloat>(&self, out: &mut [T], init: T, w: &[T], phases: &[T]) {
        self.rows(out, init, w, phases, |a, wv, x| wv.mul_add(x, a))
    }

    /// Without fused multiply-adds (x86-64 before AVX2 and FMA, 2013):
    /// one chunk shape, a row at a time, 8 lanes. Each output sums its
    /// taps in the same order in any chunk, so this is the bits the other
    /// shapes would give here; one compiled shape instead of five takes
    /// 62 KB off the stripped shipping library (f32 and f64 copies).
    fn run_plain<T: GemmFloat>(&self, out: &mut [T], init: T, w: &[T], phases: &[T]) {
        self.chunks::<T, 8, 1>(out, init, w, phases, |a, wv, x| a + wv * x)
    }

    /// Picks the chunk from the row length: 32 running sums in registers,
    /// as one row of 32 or as 2 rows of 16 or 4 of 8 on shorter rows. A
    /// resuming pass reads its start from `out`, so its chunks may not
    /// overlap: it takes one row at a time.
    #[inline(always)]
    fn rows<T: GemmFloat>(
        &self,
        out: &mut [T],
        init: T,
        w: &[T],
        phases: &[T],
        madd: impl Fn(T, T, T) -> T + Copy,
    ) {
        let oh = out.len() / self.ow;
        let single = self.resume;
        match self.ow {
            MAX_LANES.. => self.chunks::<T, MAX_LANES, 1>(out, init, w, phases, madd),
            16.. if !single && oh >= 2 => self.chunks::<T, 16, 2>(out, init, w, phases, madd),
            16.. => self.chunks::<T, 16, 1>(out, init, w, phases, madd),
            _ if !single && oh >= 4 => self.chunks::<T, 8, 4>(out, init, w, phases, madd),
            _ => self.chunks::<T, 8, 1>(out, init, w, phases, madd),
        }
    }

    /// Chunks of R rows × L columns. Unless resuming, the last chunk of a
    /// row (and the last rows) are pulled back to end at the plane's edge,
    /// recomputing a few outputs with the same bits rather than running
    /// past it, so every store is whole.
    #[inline(always)]
    fn chunks<T: GemmFloat, const L: usize, const R: usize>(
        &self,
        out: &mut [T],
        init: T,
        w: &[T],
        phases: &[T],
        madd: impl Fn(T, T, T) -> T,
    ) {
        let (ow, cols) = (self.ow, self.cols);
        let oh = out.len() / ow;
        let mut next_y = 0;
        while next_y < oh {
            let y0 = next_y.min(oh - R);
            let mut next_x = 0;
            while next_x < ow {
                let x0 = if self.resume {
                    next_x
                } else {
                    next_x.min(ow.saturating_sub(L))
                };
                let n = L.min(ow - x0);
                let mut acc = [[init; L]; R];
                if self.resume {
                    for (r, a) in acc.iter_mut().enumerate() {
                        let at = (y0 + r) * ow + x0;
                        a[..n].copy_from_slice(&out[at..at + n]);
                    }
                }
                for (&at, &wv) in self.offsets.iter().zip(w) {
                    for (r, a) in acc.iter_mut().enumerate() {
                        let from = at + (y0 + r) * cols + x0;
                        let src = &phases[from..from + L];
                        for l in 0..L {
                            a[l] = madd(a[l], wv, src[l]);
                        }
                    }
                }
                for (r, a) in acc.iter_mut().enumerate() {
                    if let Some(act) = self.act {
                        act.eval_all(a);
                    }
                    let at = (y0 + r) * ow + x0;
                    if n == L {
                        out[at..at + L].copy_from_slice(a);
                    } else {
                        for (d, &v) in out[at..at + n].iter_mut().zip(a.iter()) {
                            *d = v;
                        }
                    }
                }
                next_x += L;
            }
            next_y += R;
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
