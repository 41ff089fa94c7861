//! The vector operations the channel-blocked depthwise kernel needs, for
//! AVX2 + FMA (8 channels per vector) and AVX-512F (16): each lane holds
//! one channel. Every method is a thin wrapper over one or two intrinsics,
//! compiled with its instruction set's features so that it inlines into
//! the kernel built with the same features. Also the choice of the
//! activation applied in registers, shared with the rows kernel.

use crate::ops::conv::tap_kernel::clamp_bounds;
use crate::ops::gemm::fused::Activation;
use std::arch::x86_64::*;

/// The activation a depthwise kernel applies in registers (Relu and Clip
/// as bounds, hard-swish as a multiply, an add and the bounds), or after
/// its stores (any other).
#[derive(Clone, Copy)]
pub(super) enum Epilogue {
    None,
    Clamp(f32, f32),
    HardSwish,
    After(Activation),
}

impl Epilogue {
    pub(super) fn of(act: Option<Activation>) -> Epilogue {
        match (act, clamp_bounds(act)) {
            (_, Some((lo, hi))) => Epilogue::Clamp(lo, hi),
            (Some(Activation::HardSwish), _) => Epilogue::HardSwish,
            (Some(a), _) => Epilogue::After(a),
            (None, _) => Epilogue::None,
        }
    }
}

/// One instruction set's vectors of f32 lanes.
///
/// # Safety
/// Every method requires the CPU to support the instruction set of its
/// implementation; pointer arguments must be valid for the lanes read or
/// written.
pub(super) trait Lanes {
    /// Lanes (channels) per vector.
    const N: usize;
    /// A vector of `N` f32 lanes.
    type V: Copy;
    /// `N` lanes from `p`.
    unsafe fn load(p: *const f32) -> Self::V;
    /// `v` to `p .. p + N`.
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `a·b + c` rounded once.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `min(hi, max(lo, v))` lane by lane, NaN kept (Relu and Clip, as
    /// `Activation::eval` computes them).
    unsafe fn clamp(v: Self::V, lo: f32, hi: f32) -> Self::V;
    /// `v · min(1, max(0, v · (1/6) + 0.5))` lane by lane, rounded at each
    /// step as `Activation::eval` computes hard-swish.
    unsafe fn hard_swish(v: Self::V) -> Self::V;
}

/// AVX2 + FMA: 8 channels per vector.
pub(super) struct Avx2;

impl Lanes for Avx2 {
    const N: usize = 8;
    type V = __m256;
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: `p` has 8 readable lanes (the trait's contract).
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store(p: *mut f32, v: __m256) {
        // SAFETY: `p` has 8 writable lanes (the trait's contract).
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn clamp(v: __m256, lo: f32, hi: f32) -> __m256 {
        // The bound first: where v is NaN, max and min return it.
        let v = _mm256_max_ps(_mm256_set1_ps(lo), v);
        _mm256_min_ps(_mm256_set1_ps(hi), v)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn hard_swish(v: __m256) -> __m256 {
        let g = _mm256_mul_ps(v, _mm256_set1_ps(1.0 / 6.0));
        let g = _mm256_add_ps(g, _mm256_set1_ps(0.5));
        let g = _mm256_max_ps(_mm256_setzero_ps(), g);
        _mm256_mul_ps(v, _mm256_min_ps(_mm256_set1_ps(1.0), g))
    }
}

/// AVX-512F (with FMA): 16 channels per vector.
pub(super) struct Avx512;

impl Lanes for Avx512 {
    const N: usize = 16;
    type V = __m512;
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn load(p: *const f32) -> __m512 {
        // SAFETY: `p` has 16 readable lanes (the trait's contract).
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn store(p: *mut f32, v: __m512) {
        // SAFETY: `p` has 16 writable lanes (the trait's contract).
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn clamp(v: __m512, lo: f32, hi: f32) -> __m512 {
        // The bound first: where v is NaN, max and min return it.
        let v = _mm512_max_ps(_mm512_set1_ps(lo), v);
        _mm512_min_ps(_mm512_set1_ps(hi), v)
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn hard_swish(v: __m512) -> __m512 {
        let g = _mm512_mul_ps(v, _mm512_set1_ps(1.0 / 6.0));
        let g = _mm512_add_ps(g, _mm512_set1_ps(0.5));
        let g = _mm512_max_ps(_mm512_setzero_ps(), g);
        _mm512_mul_ps(v, _mm512_min_ps(_mm512_set1_ps(1.0), g))
    }
}
