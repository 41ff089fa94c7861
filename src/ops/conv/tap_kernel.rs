//! What the two register-blocked f32 kernels over stride phases (the
//! few-channel [`super::direct`] kernel and the [`super::grouped`] one)
//! share: the instruction set a layer runs on, the run shell (the kernel,
//! then the residual), each tap's offset in the phases, Relu and Clip as
//! clamp bounds, and the masked stores of a vector's lanes.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use super::conv_op::{add_residual, ConvArgs, ConvPlan};
use super::phases::Phases;
use crate::ops::gemm::fused::Activation;

/// The instruction set a tap kernel runs on. It has no values off x86-64,
/// so there a layer can never be given to these kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Isa {
    /// AVX-512: 16-lane vectors.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// AVX2 with FMA: 8-lane vectors.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Isa {
    /// The best instruction set of this CPU for a tap kernel: AVX-512, else
    /// AVX2 with FMA where `avx2_pays` (its half-width blocks pay off).
    pub(super) fn detect(avx2_pays: bool) -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::ops::gemm::simd::has_avx512() {
                return Some(Isa::Avx512);
            } else if avx2_pays && crate::ops::gemm::simd::has_avx2_fma() {
                return Some(Isa::Avx2);
            }
        }
        let _ = avx2_pays;
        None
    }
}

/// A tap kernel: the convolution of `x` by `w` with bias `b` into `y`
/// (shapes from the plan), `act` applied to each sum, on a CPU with the
/// instruction set.
pub(super) type Kernel =
    fn(&ConvPlan, &[f32], &[f32], Option<&[f32]>, Option<Activation>, &mut [f32], Isa);

/// Runs `kernel` on the layer `a`, then adds the residual and applies the
/// activation after it (the kernel applies the activation itself when
/// there is no residual).
pub(super) fn run(kernel: Kernel, a: &ConvArgs<f32>, isa: Isa, y: &mut [f32]) {
    kernel(a.p, a.x, a.w, a.b, a.inner_act(), y, isa);
    add_residual(y, a.z, a.act);
}

/// The offset in the phases of tap `t` of `p`'s window, taps numbered in
/// (input channel, kernel row, kernel column) order over channels of
/// `per_channel` phase elements each.
pub(super) fn tap_offset(p: &ConvPlan, ph: &Phases, per_channel: usize, t: usize) -> usize {
    let win = &p.win;
    let (kw, klen) = (win.kernel[1], win.kernel_len());
    let (ci, k) = (t / klen, t % klen);
    ci * per_channel + ph.tap((k / kw) * win.dilations[0], (k % kw) * win.dilations[1])
}

/// Relu or Clip as the bounds each sum is clamped to before its store
/// (bit for bit [`Activation::eval`]); other activations run as a pass
/// over the stored planes.
pub(super) fn clamp_bounds(act: Option<Activation>) -> Option<(f32, f32)> {
    match act {
        Some(Activation::Relu) => Some((0.0, f32::INFINITY)),
        Some(Activation::Clip(lo, hi)) => Some((lo, hi)),
        _ => None,
    }
}

/// Writes lanes `lo..hi` (lo < hi ≤ 16) of `reg` to `p + lo .. p + hi`.
///
/// # Safety
/// The CPU must support AVX-512F; `p + lo .. p + hi` must be writable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn store_avx512(
    p: *mut f32,
    reg: std::arch::x86_64::__m512,
    lo: usize,
    hi: usize,
) {
    use std::arch::x86_64::*;
    let mask = (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as __mmask16;
    // SAFETY: the mask keeps lanes lo..hi (the contract); masked-off lanes
    // are not accessed.
    unsafe { _mm512_mask_storeu_ps(p, mask, reg) };
}

/// Writes lanes `lo..hi` (lo < hi ≤ 8) of `reg` to `p + lo .. p + hi`.
///
/// # Safety
/// The CPU must support AVX2; `p + lo .. p + hi` must be writable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn store_avx2(p: *mut f32, reg: std::arch::x86_64::__m256, lo: usize, hi: usize) {
    use std::arch::x86_64::*;
    if lo == 0 && hi == 8 {
        // SAFETY: 8 writable values (the contract).
        unsafe { _mm256_storeu_ps(p, reg) };
    } else {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let below = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi as i32), lanes);
        let above = _mm256_cmpgt_epi32(lanes, _mm256_set1_epi32(lo as i32 - 1));
        let mask = _mm256_and_si256(below, above);
        // SAFETY: the mask keeps lanes lo..hi (the contract); masked-off
        // lanes are not accessed.
        unsafe { _mm256_maskstore_ps(p, mask, reg) };
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Each masked store writes exactly lanes lo..hi and nothing else.
    #[test]
    fn stores_write_exactly_the_lanes_asked() {
        use std::arch::x86_64::*;
        let vals: Vec<f32> = (1..=16).map(|v| v as f32).collect();
        for (width, ok) in [
            (16, crate::ops::gemm::simd::has_avx512()),
            (8, crate::ops::gemm::simd::has_avx2_fma()),
        ] {
            if !ok {
                continue;
            }
            for lo in 0..width {
                for hi in lo + 1..=width {
                    let mut out = vec![-1.0f32; width];
                    // SAFETY: the CPU has the feature (checked); `out`
                    // holds `width` values.
                    unsafe {
                        if width == 16 {
                            store_avx512(out.as_mut_ptr(), _mm512_loadu_ps(vals.as_ptr()), lo, hi);
                        } else {
                            store_avx2(out.as_mut_ptr(), _mm256_loadu_ps(vals.as_ptr()), lo, hi);
                        }
                    }
                    for (l, &v) in out.iter().enumerate() {
                        let want = if (lo..hi).contains(&l) { vals[l] } else { -1.0 };
                        assert_eq!(v, want, "width {width}, lanes {lo}..{hi}, lane {l}");
                    }
                }
            }
        }
    }

    #[test]
    fn clamp_bounds_are_relu_and_clip_only() {
        assert_eq!(
            clamp_bounds(Some(Activation::Relu)),
            Some((0.0, f32::INFINITY))
        );
        assert_eq!(
            clamp_bounds(Some(Activation::Clip(-1.0, 6.0))),
            Some((-1.0, 6.0))
        );
        assert_eq!(clamp_bounds(Some(Activation::LeakyRelu(0.1))), None);
        assert_eq!(clamp_bounds(None), None);
    }
}
