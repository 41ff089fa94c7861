//! The row engine of the layer-style normalizations: per-row mean and
//! variance accumulated in a fixed order by one thread, then
//! `(x - mean) · inv · scale + bias` with scale and bias indexed by row and
//! column block (one per column, as in LayerNormalization, in a
//! vectorised loop).

use super::Real;
use crate::ops::gemm::simd::multiversion;
use crate::ops::parallel::par_collect;
use crate::ops::unary::kernel::Float;
use crate::ops::util::{as_f32, as_f32_mut, op_threads, par_rows, MIN_PARALLEL_GRAIN};
use crate::tensor::recycle::take_or_default;

/// The sum of `f(x)` over a row in a fixed order: eight interleaved partial
/// sums (which also vectorise), combined pairwise.
#[inline]
fn sum<T: Float, C: Real>(row: &[T], f: impl Fn(C) -> C) -> C {
    let mut acc = [C::zero(); 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for k in 0..8 {
            acc[k] = acc[k] + f(C::from_elem(c[k]));
        }
    }
    for (k, &v) in chunks.remainder().iter().enumerate() {
        acc[k] = acc[k] + f(C::from_elem(v));
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

/// `(mean, variance)` of each of the `rows` rows of `len` elements of `x`.
/// With `center == false` the mean is taken as 0 and the variance is the
/// mean of squares (RMS normalization). Each row is reduced by one thread.
pub(crate) fn stats<T: Float, C: Real>(
    x: &[T],
    rows: usize,
    len: usize,
    center: bool,
) -> Vec<(C, C)> {
    let n = C::of(len as f64);
    let one = |r: usize| {
        let row = &x[r * len..(r + 1) * len];
        if center {
            let mean = sum(row, |v: C| v) / n;
            let var = sum(row, |v: C| (v - mean) * (v - mean)) / n;
            (mean, var)
        } else {
            (C::zero(), sum(row, |v: C| v * v) / n)
        }
    };
    if rows < 2 || rows.saturating_mul(len) < MIN_PARALLEL_GRAIN || op_threads() <= 1 {
        (0..rows).map(one).collect()
    } else {
        let min = (MIN_PARALLEL_GRAIN / len.max(1)).max(1);
        par_collect(rows, min, one)
    }
}

/// Per-element scale and bias: the parameter index of element `col` of row
/// `row` is `(row % period) · stride + col / block`.
#[derive(Debug, Clone)]
pub(crate) struct Affine<C> {
    /// Multipliers, or none (1).
    pub scale: Option<Vec<C>>,
    /// Offsets, or none (0).
    pub bias: Option<Vec<C>>,
    /// Rows repeat their parameters with this period.
    pub period: usize,
    /// Parameter stride between consecutive rows of one period.
    pub stride: usize,
    /// Consecutive columns sharing one parameter.
    pub block: usize,
}

impl<C: Real> Affine<C> {
    /// No scale, no bias.
    pub fn none() -> Self {
        Affine {
            scale: None,
            bias: None,
            period: 1,
            stride: 0,
            block: usize::MAX,
        }
    }
}

/// `y = (x - mean) · inv · scale + bias` for rows of `len` elements with
/// per-row `(mean, inv)`, split over whole rows.
pub(crate) fn normalize<T: Float, C: Real>(
    x: &[T],
    len: usize,
    stats: &[(C, C)],
    aff: &Affine<C>,
) -> Vec<T> {
    if x.is_empty() || len == 0 {
        return vec![T::default(); x.len()];
    }
    // Every element of every row is written below.
    let mut y = take_or_default::<T>(x.len());
    let block = aff.block.clamp(1, len);
    let period = aff.period.max(1);
    if let (1, 1, Some(scale)) = (block, period, aff.scale.as_deref()) {
        if scale.len() >= len && aff.bias.as_ref().is_none_or(|b| b.len() >= len) {
            per_column(x, &mut y, len, stats, scale, aff.bias.as_deref());
            return y;
        }
    }
    par_rows(&mut y, len, |first, chunk| {
        for (i, out) in chunk.chunks_mut(len).enumerate() {
            let r = first + i;
            let (mean, inv) = stats[r];
            let xr = &x[r * len..(r + 1) * len];
            let base = (r % period) * aff.stride;
            for (b, (ob, xb)) in out.chunks_mut(block).zip(xr.chunks(block)).enumerate() {
                let s = aff.scale.as_ref().map_or(C::one(), |s| s[base + b]);
                let add = aff.bias.as_ref().map_or(C::zero(), |v| v[base + b]);
                let a = inv * s;
                for (o, &v) in ob.iter_mut().zip(xb) {
                    *o = ((C::from_elem(v) - mean) * a + add).to_elem();
                }
            }
        }
    });
    y
}

/// [`normalize`] with one scale (and bias) per column, as in
/// LayerNormalization: the same arithmetic per element, in a loop over the
/// row that vectorises (float32 through [`affine_row_f32`]).
fn per_column<T: Float, C: Real>(
    x: &[T],
    y: &mut [T],
    len: usize,
    stats: &[(C, C)],
    scale: &[C],
    bias: Option<&[C]>,
) {
    par_rows(y, len, |first, chunk| {
        for i in 0..chunk.len() / len {
            let r = first + i;
            let (mean, inv) = stats[r];
            let xr = &x[r * len..(r + 1) * len];
            let out = &mut chunk[i * len..(i + 1) * len];
            if let (Some(xs), Some(s), Some(o)) = (as_f32(xr), as_f32(scale), as_f32_mut(out)) {
                // C is f32 too (the scale is), so these conversions are exact.
                let (m, iv) = (mean.to_elem::<f32>(), inv.to_elem::<f32>());
                match bias.map(as_f32) {
                    None => {
                        affine_row_f32(xs, o, m, iv, &s[..len], None);
                        continue;
                    }
                    Some(Some(b)) => {
                        affine_row_f32(xs, o, m, iv, &s[..len], Some(&b[..len]));
                        continue;
                    }
                    Some(None) => {}
                }
            }
            let out = &mut chunk[i * len..(i + 1) * len];
            for (j, (o, &v)) in out.iter_mut().zip(xr).enumerate() {
                let add = bias.map_or(C::zero(), |b| b[j]);
                *o = ((C::from_elem(v) - mean) * (inv * scale[j]) + add).to_elem();
            }
        }
    });
}

multiversion! {
    wide
    /// One float32 row: `o = (x − mean) · (inv · scale) + bias`.
    fn affine_row_f32(x: &[f32], o: &mut [f32], mean: f32, inv: f32, scale: &[f32], bias: Option<&[f32]>) {
        match bias {
            Some(b) => {
                for (((o, &v), &s), &b) in o.iter_mut().zip(x).zip(scale).zip(b) {
                    *o = (v - mean) * (inv * s) + b;
                }
            }
            None => {
                for ((o, &v), &s) in o.iter_mut().zip(x).zip(scale) {
                    *o = (v - mean) * (inv * s) + 0.0;
                }
            }
        }
    }
}
