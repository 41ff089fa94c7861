//! Normalizations: `BatchNormalization` (inference), `InstanceNormalization`,
//! `LayerNormalization`, `GroupNormalization`, `RMSNormalization`,
//! `MeanVarianceNormalization`, `LRN` and `LpNormalization`.
//!
//! f16/bf16 data is computed in f32, f64 in f64. Statistics of one row are
//! always accumulated by one thread in a fixed order, so results are
//! bit-identical at any thread count.

use super::unary::kernel::{contiguous, Float};
use super::Registrar;
use crate::error::{Error, Result};
use crate::tensor::{Element, Tensor};
use half::{bf16, f16};

mod batch;
mod batch_train;
mod layer;
mod lrn;
mod mvn;
mod rows;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("BatchNormalization", 1, batch::build);
    r.add("InstanceNormalization", 1, layer::build_instance);
    r.add("LayerNormalization", 17, layer::build_layer);
    r.add("RMSNormalization", 23, layer::build_rms);
    r.add("GroupNormalization", 18, layer::build_group);
    r.add("MeanVarianceNormalization", 1, mvn::build_mvn);
    r.add("LpNormalization", 1, mvn::build_lp);
    r.add("LRN", 1, lrn::build);
}

/// The type a kernel computes in: f32 (for f32, f16, bf16) or f64.
pub(crate) trait Real:
    num_traits::Float
    + crate::ops::gemm::fused::ActivationFloat
    + Element
    + Send
    + Sync
    + Default
    + std::fmt::Debug
    + 'static
{
    /// Widens a data element.
    fn from_elem<T: Float>(t: T) -> Self;
    /// Narrows to a data element, rounding to nearest.
    fn to_elem<T: Float>(self) -> T;
    /// From an f64 constant or parameter.
    fn of(v: f64) -> Self;
}

impl Real for f32 {
    #[inline(always)]
    fn from_elem<T: Float>(t: T) -> Self {
        t.to_f32()
    }
    #[inline(always)]
    fn to_elem<T: Float>(self) -> T {
        T::from_f32(self)
    }
    #[inline(always)]
    fn of(v: f64) -> Self {
        v as f32
    }
}

impl Real for f64 {
    #[inline(always)]
    fn from_elem<T: Float>(t: T) -> Self {
        t.to_f64()
    }
    #[inline(always)]
    fn to_elem<T: Float>(self) -> T {
        T::from_f64(self)
    }
    #[inline(always)]
    fn of(v: f64) -> Self {
        v
    }
}

/// What a kernel returns: Y (X's type and shape) and extra statistics
/// outputs in the compute type, each with its shape.
pub(crate) struct Out<T, C> {
    /// The normalized data, row-major in X's shape.
    pub y: Vec<T>,
    /// Extra outputs (`LayerNormalization`'s Mean and InvStdDev).
    pub stats: Vec<(Vec<usize>, Vec<C>)>,
}

impl<T, C> Out<T, C> {
    /// Just Y.
    pub fn y(y: Vec<T>) -> Self {
        Out { y, stats: vec![] }
    }
}

/// A normalization kernel generic over data type `T` and compute type `C`.
pub(crate) trait Kernel {
    /// Computes the outputs from X's row-major data.
    fn compute<T: Float, C: Real>(&self, x: &[T]) -> Result<Out<T, C>>;
}

/// Runs `k` on X (f32/f64/f16/bf16), returning Y of X's type and shape and
/// the kernel's statistics outputs.
pub(crate) fn dispatch<K: Kernel>(op: &str, x: &Tensor, k: &K) -> Result<Vec<Tensor>> {
    fn wrap<T: Float + Element, C: Real>(
        op: &str,
        shape: &[usize],
        o: Out<T, C>,
    ) -> Result<Vec<Tensor>> {
        let mut v = vec![tensor(op, shape, o.y)?];
        for (s, d) in o.stats {
            v.push(tensor(op, &s, d)?);
        }
        Ok(v)
    }
    let shape = x.shape();
    match x {
        Tensor::F32(a) => wrap(op, shape, k.compute::<f32, f32>(&contiguous(a))?),
        Tensor::F64(a) => wrap(op, shape, k.compute::<f64, f64>(&contiguous(a))?),
        Tensor::F16(a) => wrap(op, shape, k.compute::<f16, f32>(&contiguous(a))?),
        Tensor::BF16(a) => wrap(op, shape, k.compute::<bf16, f32>(&contiguous(a))?),
        other => Err(Error::op(
            op,
            format!("expected a floating-point input, found {}", other.dtype()),
        )),
    }
}

/// Wraps row-major data as a tensor.
pub(crate) fn tensor<T: Element>(op: &str, shape: &[usize], v: Vec<T>) -> Result<Tensor> {
    Tensor::from_vec(shape, v).map_err(|e| Error::op(op, format!("internal shape error: {e}")))
}

/// Reads a floating-point parameter input (scale, bias, mean...) as f64 values.
pub(crate) fn param(op: &str, name: &str, t: &Tensor) -> Result<Vec<f64>> {
    if !t.dtype().is_float() {
        return Err(Error::op(
            op,
            format!("{name} must be floating point, found {}", t.dtype()),
        ));
    }
    t.to_f64_vec()
}

/// Checks that a parameter has exactly `want` elements.
pub(crate) fn check_len(op: &str, name: &str, shape: &[usize], want: usize) -> Result<()> {
    let n: usize = shape.iter().product();
    if n != want {
        return Err(Error::op(
            op,
            format!("{name} has shape {shape:?} ({n} elements), expected {want}"),
        ));
    }
    Ok(())
}

/// Reads the `epsilon` attribute (default `default`), which must be ≥ 0.
pub(crate) fn epsilon(attrs: &crate::ir::attributes::Attributes, default: f32) -> Result<f64> {
    let e = attrs.float("epsilon", default)?;
    if e.is_nan() || e < 0.0 || e.is_infinite() {
        return Err(attrs.error("epsilon", format!("must be finite and ≥ 0, found {e}")));
    }
    Ok(e as f64)
}

/// Rejects X of a rank below `min`.
pub(crate) fn check_rank(op: &str, shape: &[usize], min: usize, what: &str) -> Result<()> {
    if shape.len() < min {
        return Err(Error::op(
            op,
            format!("X must have rank ≥ {min} ({what}), found shape {shape:?}"),
        ));
    }
    Ok(())
}

/// Rejects a non-float X type in shape inference.
pub(crate) fn check_float(op: &str, f: &crate::ir::Fact) -> Result<()> {
    if f.dtype.is_float() {
        Ok(())
    } else {
        Err(Error::op(
            op,
            format!("expected a floating-point input, found {}", f.dtype),
        ))
    }
}
