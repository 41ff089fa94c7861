//! Fast paths of QuantizeLinear and DequantizeLinear for what quantized
//! models use between their integer operators: f32 data, one f32 scale and
//! one 8-bit zero point. Same results as the general code (division in f32,
//! ties to even, NaN to the low end, saturation; `(x − zp) · s` in f32), in
//! loops the compiler vectorizes (16 lanes where the CPU has AVX-512: the
//! same f32 operations per element), split over the pool.

use super::engine::sink::{clamp_nan_low, round_small};
use crate::error::Result;
use crate::ops::gemm::simd::multiversion;
use crate::ops::util::par_spans;
use crate::tensor::recycle::take_or_default;
use crate::tensor::{DType, Tensor};

/// The one value of a one-element 8-bit zero point (0 when absent), if so.
fn zero_point(z: Option<&Tensor>) -> Option<i32> {
    match z {
        None => Some(0),
        Some(Tensor::U8(a)) if a.len() == 1 => a.iter().next().map(|&v| v as i32),
        Some(Tensor::I8(a)) if a.len() == 1 => a.iter().next().map(|&v| v as i32),
        _ => None,
    }
}

fn scale(s: &Tensor) -> Option<f32> {
    match s {
        Tensor::F32(a) if a.len() == 1 => a.iter().next().copied(),
        _ => None,
    }
}

multiversion! {
    wide
    fn quantize_span(x: &[f32], out: &mut [u8], inv: (f32, f32, f32, i32)) {
        let (s, lo, hi, zp) = inv;
        for (o, &v) in out.iter_mut().zip(x) {
            // NaN goes to the low end, as the general path's cast to
            // i32::MIN does.
            let q = clamp_nan_low(v / s, lo, hi);
            *o = (round_small(q) + zp) as u8;
        }
    }
}

multiversion! {
    wide
    /// `out = (x − zp) · s` in f32, x read as i8 when `signed`.
    pub(crate) fn dequantize_span(x: &[u8], out: &mut [f32], signed: bool, s: f32, zp: i32) {
        if signed {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = (v as i8 as i32 - zp) as f32 * s;
            }
        } else {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = (v as i32 - zp) as f32 * s;
            }
        }
    }
}

/// QuantizeLinear of f32 `x` to 8-bit `t`, when the fast path applies.
pub(super) fn quantize(
    x: &Tensor,
    s: &Tensor,
    z: Option<&Tensor>,
    t: DType,
) -> Option<Result<Tensor>> {
    let (Tensor::F32(xa), Some(s), Some(zp)) = (x, scale(s), zero_point(z)) else {
        return None;
    };
    let xs = xa.as_slice()?;
    let (lo, hi) = match t {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        _ => return None,
    };
    // Every element is written below: a recycled buffer needs no zero-fill.
    let mut out = take_or_default::<u8>(xs.len());
    let params = (s, (lo - zp) as f32, (hi - zp) as f32, zp);
    par_spans(&mut out, |start, span| {
        quantize_span(&xs[start..][..span.len()], span, params)
    });
    Some(Tensor::from_bytes(x.shape(), out, t == DType::I8))
}

/// DequantizeLinear of 8-bit `x` to f32, when the fast path applies.
pub(super) fn dequantize(
    x: &Tensor,
    s: &Tensor,
    z: Option<&Tensor>,
    t: DType,
) -> Option<Result<Tensor>> {
    let (Some(s), Some(zp), DType::F32) = (scale(s), zero_point(z), t) else {
        return None;
    };
    let signed = match x.dtype() {
        DType::U8 => false,
        DType::I8 => true,
        _ => return None,
    };
    if z.is_some_and(|z| z.dtype() != x.dtype()) {
        return None;
    }
    let bytes = x.as_bytes()?;
    let mut out = take_or_default::<f32>(bytes.len());
    par_spans(&mut out, |start, span| {
        dequantize_span(&bytes[start..][..span.len()], span, signed, s, zp)
    });
    Some(Tensor::from_vec(x.shape(), out))
}
