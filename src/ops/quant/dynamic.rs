//! DynamicQuantizeLinear: quantizes a float tensor to uint8 with a scale and
//! zero point computed from its range (which always includes 0), in f32 as
//! the ONNX reference does.

use super::engine::sink::{clamp_nan_low, round_small};
use crate::error::Result;
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::gemm::simd::multiversion;
use crate::ops::util::{fact, input, out_len, par_rows};
use crate::tensor::recycle::take_or_default;
use crate::tensor::{DType, Tensor};

const OP: &str = "DynamicQuantizeLinear";

#[derive(Debug)]
struct DynamicQuantize;

pub(super) fn build(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(DynamicQuantize))
}

/// The scale and zero point for values in `[min(0, lo), max(0, hi)]`.
pub(super) fn params(x: &[f32]) -> (f32, f32) {
    let (lo, hi) = range(x);
    let scale = if hi == lo { 1.0 } else { hi - lo } / 255.0;
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zp)
}

/// `x` quantized to uint8 into `out` (as long as `x`) as
/// DynamicQuantizeLinear does, on the calling thread; returns the scale and
/// the zero point.
pub(crate) fn quantize_u8(x: &[f32], out: &mut [u8]) -> (f32, u8) {
    let (scale, zp) = params(x);
    quantize(x, out, scale, zp);
    (scale, zp as u8)
}

/// The smallest and the largest element of `x` and 0 (NaN skipped): on
/// AVX-512 in four independent 16-lane accumulators, else [`range_lanes`].
/// Exact, so every path and order gives the same pair.
fn range(x: &[f32]) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::gemm::simd::has_avx512_wide() {
        // SAFETY: the CPU has AVX-512F (checked).
        return unsafe { range_avx512(x) };
    }
    range_lanes(x)
}

multiversion! {
    /// [`range`] in 16 interleaved lanes.
    fn range_lanes(x: &[f32]) -> (f32, f32) {
        let (mut lo, mut hi) = ([0f32; 16], [0f32; 16]);
        let mut chunks = x.chunks_exact(16);
        for c in &mut chunks {
            for k in 0..16 {
                lo[k] = if c[k] < lo[k] { c[k] } else { lo[k] };
                hi[k] = if c[k] > hi[k] { c[k] } else { hi[k] };
            }
        }
        fold_range(&lo, &hi, chunks.remainder())
    }
}

/// The lanes' extremes folded with 0 and the elements of `tail`.
#[inline(always)]
fn fold_range(lo: &[f32], hi: &[f32], tail: &[f32]) -> (f32, f32) {
    let lo = lo
        .iter()
        .chain(tail)
        .fold(0f32, |m, &v| if v < m { v } else { m });
    let hi = hi
        .iter()
        .chain(tail)
        .fold(0f32, |m, &v| if v > m { v } else { m });
    (lo, hi)
}

/// [`range`] with AVX-512: `min(v, lo)` keeps `lo` when `v` is NaN (the
/// instruction returns its second operand when either is NaN), as the
/// scalar comparison does.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn range_avx512(x: &[f32]) -> (f32, f32) {
    use std::arch::x86_64::*;
    let mut lo = [_mm512_setzero_ps(); 4];
    let mut hi = [_mm512_setzero_ps(); 4];
    let mut chunks = x.chunks_exact(64);
    for c in &mut chunks {
        for j in 0..4 {
            // SAFETY: the chunk holds 64 floats, so 16 from 16·j.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr().add(16 * j)) };
            lo[j] = _mm512_min_ps(v, lo[j]);
            hi[j] = _mm512_max_ps(v, hi[j]);
        }
    }
    let (mut l, mut h) = ([0f32; 64], [0f32; 64]);
    for j in 0..4 {
        // SAFETY: each store writes 16 floats at 16·j of a 64-float array.
        unsafe {
            _mm512_storeu_ps(l.as_mut_ptr().add(16 * j), lo[j]);
            _mm512_storeu_ps(h.as_mut_ptr().add(16 * j), hi[j]);
        }
    }
    fold_range(&l, &h, chunks.remainder())
}

multiversion! {
    wide
    /// `out = saturate(round(x / scale) + zp)`, rounding half to even (one
    /// instruction where the CPU rounds in vectors, not a libm call); NaN
    /// becomes 0. The value is integral once clamped, so it is read back
    /// with integer operations ([`round_small`]), which vectorize (a float
    /// to u8 cast does not).
    fn quantize(x: &[f32], out: &mut [u8], scale: f32, zp: f32) {
        for (o, &v) in out.iter_mut().zip(x) {
            let q = (v / scale).round_ties_even() + zp;
            *o = round_small(clamp_nan_low(q, 0.0, 255.0)) as u8;
        }
    }
}

impl Operator for DynamicQuantize {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        if !x.dtype.is_float() {
            return Err(crate::Error::op(
                OP,
                format!("expected a floating-point input, found {}", x.dtype),
            ));
        }
        Ok(vec![
            Fact {
                kind: crate::ir::Kind::Tensor,
                dtype: DType::U8,
                shape: x.shape.clone(),
            },
            Fact::new(x.dtype, vec![]),
            Fact::new(DType::U8, vec![]),
        ])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        5 * out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        // float32 as it lies; the other float types through a copy.
        let contiguous = match x {
            Tensor::F32(a) => a.as_slice(),
            _ => None,
        };
        let copied: Vec<f32>;
        let xv: &[f32] = match contiguous {
            Some(v) => v,
            None => {
                copied = super::float_values(OP, x)?
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                &copied
            }
        };
        let (scale, zp) = params(xv);
        // Every byte is written below: a recycled buffer needs no zero-fill.
        let mut out = take_or_default::<u8>(xv.len());
        par_rows(&mut out, 1, |first, chunk| {
            quantize(&xv[first..first + chunk.len()], chunk, scale, zp);
        });
        Ok(vec![
            Tensor::from_vec(x.shape(), out)?,
            super::float_tensor(OP, x.dtype(), &[], vec![scale as f64])?,
            Tensor::scalar(zp as u8),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectorised range and quantization equal the scalar definitions
    /// on every element: ties, values past the ends, NaN, and tails.
    #[test]
    fn vector_paths_match_the_scalar_definition() {
        for n in [1usize, 7, 16, 17, 64, 100, 130, 1000] {
            let mut x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 613) as f32 - 300.0) * 0.37)
                .collect();
            x[n / 2] = 2.5 * 0.1;
            if n > 10 {
                x[3] = f32::NAN;
                x[9] = 1e30;
                x[7] = -f32::NAN;
            }
            let (mut lo, mut hi) = (0f32, 0f32);
            for &v in &x {
                lo = lo.min(v);
                hi = hi.max(v);
            }
            assert_eq!(range(&x), (lo, hi), "n {n}");
            assert_eq!(range_lanes(&x), (lo, hi), "n {n}");
            for (scale, zp) in [(0.1f32, 0.0f32), (0.37, 128.0), (3.0, 255.0)] {
                let mut got = vec![0u8; n];
                quantize(&x, &mut got, scale, zp);
                for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                    let want = ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8;
                    assert_eq!(g, want, "n {n}, element {i} ({v}), scale {scale}");
                }
            }
        }
        // Halves round to even.
        let mut got = [0u8; 4];
        quantize(&[0.5, 1.5, 2.5, -0.5], &mut got, 1.0, 10.0);
        assert_eq!(got, [10, 12, 12, 10]);
    }
}
