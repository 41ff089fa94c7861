//! The activations the AVX-512 pointwise kernels (columns and rows) apply
//! in registers after the bias and the residual, before the one store of
//! each output; the others run over the stored rows.

use crate::ops::gemm::fused::Activation;
use std::arch::x86_64::*;

/// An activation applied in registers.
#[derive(Clone, Copy)]
pub(in crate::ops::conv) enum Clamp {
    None,
    Relu,
    Clip(f32, f32),
    /// `x · min(max(x/6 + 1/2, 0), 1)`, a multiply then an add as
    /// `Activation::eval` computes it, so the same bits.
    HardSwish,
}

impl Clamp {
    /// The part of `act` applied in registers, and the activation left to
    /// run over the stored rows (none where the registers take it all).
    pub(super) fn of(act: Option<Activation>) -> (Clamp, Option<Activation>) {
        let clamp = match act {
            Some(Activation::Relu) => Clamp::Relu,
            Some(Activation::Clip(lo, hi)) => Clamp::Clip(lo, hi),
            Some(Activation::HardSwish) => Clamp::HardSwish,
            _ => Clamp::None,
        };
        (clamp, act.filter(|_| matches!(clamp, Clamp::None)))
    }

    /// `r` with the activation applied lane by lane. max/min take the
    /// bound first so NaN stays NaN, as the panel GEMM's epilogue does.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(in crate::ops::conv) fn apply(self, r: __m512) -> __m512 {
        match self {
            Clamp::None => r,
            Clamp::Relu => _mm512_max_ps(_mm512_setzero_ps(), r),
            Clamp::Clip(lo, hi) => {
                let r = _mm512_max_ps(_mm512_set1_ps(lo), r);
                _mm512_min_ps(_mm512_set1_ps(hi), r)
            }
            Clamp::HardSwish => {
                let g = _mm512_mul_ps(r, _mm512_set1_ps(1.0 / 6.0));
                let g = _mm512_add_ps(g, _mm512_set1_ps(0.5));
                let g = _mm512_max_ps(_mm512_setzero_ps(), g);
                let g = _mm512_min_ps(_mm512_set1_ps(1.0), g);
                _mm512_mul_ps(r, g)
            }
        }
    }
}
