//! onnxruntime's contrib quantized operators (domain `com.microsoft`, opset
//! 1), as its quantizer writes them in QOperator format: QLinearAdd,
//! QLinearMul, QLinearConcat, QLinearGlobalAveragePool, QLinearAveragePool,
//! QLinearSigmoid, QLinearLeakyRelu, QGemm, MatMulIntegerToFloat and
//! DynamicQuantizeMatMul. Arithmetic follows onnxruntime's reference CPU
//! kernels: f32 scales, round half to even, saturation to the output type.

use super::quant::int_range;
use super::util::{input, opt_input};
use super::{Registrar, MS_DOMAIN};
use crate::error::{Error, Result};
use crate::ir::{Fact, InferInput};
use crate::tensor::{DType, Tensor};

mod avg_pool;
mod binary;
mod byte_map;
mod concat;
mod global_pool;
mod lookup;
mod matmul_float;
mod qgemm;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add_in(MS_DOMAIN, "QLinearAdd", 1, binary::build_add);
    r.add_in(MS_DOMAIN, "QLinearMul", 1, binary::build_mul);
    r.add_in(MS_DOMAIN, "QLinearConcat", 1, concat::build);
    r.add_in(MS_DOMAIN, "QLinearGlobalAveragePool", 1, global_pool::build);
    r.add_in(MS_DOMAIN, "QLinearAveragePool", 1, avg_pool::build);
    r.add_in(MS_DOMAIN, "QLinearSigmoid", 1, lookup::build_sigmoid);
    r.add_in(MS_DOMAIN, "QLinearLeakyRelu", 1, lookup::build_leaky_relu);
    r.add_in(MS_DOMAIN, "QGemm", 1, qgemm::build);
    r.add_in(
        MS_DOMAIN,
        "MatMulIntegerToFloat",
        1,
        matmul_float::build_integer,
    );
    r.add_in(
        MS_DOMAIN,
        "DynamicQuantizeMatMul",
        1,
        matmul_float::build_dynamic,
    );
}

/// Rejects types other than the 8-bit integers.
pub(super) fn check8(op: &str, what: &str, t: DType) -> Result<()> {
    if matches!(t, DType::U8 | DType::I8) {
        Ok(())
    } else {
        Err(Error::op(
            op,
            format!("{what} must be uint8 or int8, found {t}"),
        ))
    }
}

/// Rejects a quantization parameter with more than one element.
fn check_scalar(op: &str, what: &str, t: &Tensor) -> Result<()> {
    if t.len() != 1 || t.shape().len() > 1 {
        return Err(Error::op(
            op,
            format!(
                "{what} must be a scalar or a 1-D tensor of one element, found shape {:?}",
                t.shape()
            ),
        ));
    }
    Ok(())
}

/// The f32 values of a float32 scale tensor.
pub(super) fn scales(op: &str, what: &str, t: &Tensor) -> Result<Vec<f32>> {
    match t {
        Tensor::F32(a) => Ok(a
            .as_slice()
            .map_or_else(|| a.iter().copied().collect(), <[f32]>::to_vec)),
        other => Err(Error::op(
            op,
            format!("{what} must be float32, found {}", other.dtype()),
        )),
    }
}

/// Required per-tensor scale at input `i`.
pub(super) fn scalar_scale(
    op: &str,
    inputs: &[Option<&Tensor>],
    i: usize,
    what: &str,
) -> Result<f32> {
    let t = input(op, inputs, i)?;
    check_scalar(op, what, t)?;
    Ok(scales(op, what, t)?[0])
}

/// Optional per-tensor zero point at input `i` of type `t` (0 when absent).
pub(super) fn scalar_zp(
    op: &str,
    inputs: &[Option<&Tensor>],
    i: usize,
    t: DType,
    what: &str,
) -> Result<i32> {
    match opt_input(inputs, i) {
        None => Ok(0),
        Some(z) => {
            check_scalar(op, what, z)?;
            zero_points(op, what, z, t).map(|v| v[0])
        }
    }
}

/// The values of a zero-point tensor, which must be of type `t`.
pub(super) fn zero_points(op: &str, what: &str, z: &Tensor, t: DType) -> Result<Vec<i32>> {
    if z.dtype() != t {
        return Err(Error::op(
            op,
            format!("{what} has type {}, expected {t}", z.dtype()),
        ));
    }
    super::quant::to_i32(op, z)
}

/// The value range of an 8-bit output type.
pub(super) fn range8(op: &str, t: DType) -> Result<(i32, i32)> {
    check8(op, "the output", t)?;
    let (lo, hi) = int_range(op, t)?;
    Ok((lo as i32, hi as i32))
}

/// onnxruntime's `MlasQuantizeLinear`: `round_half_even(v / scale) + zp`,
/// saturated to `[lo, hi]` (all in f32).
#[inline]
pub(super) fn quantize(v: f32, scale: f32, zp: i32, lo: i32, hi: i32) -> i32 {
    let q = (v / scale).round_ties_even() + zp as f32;
    q.clamp(lo as f32, hi as f32) as i32
}

/// onnxruntime's `MlasRequantizeOutput`: `round_half_even(acc · scale) + zp`,
/// saturated to `[lo, hi]` (the product in f32).
#[inline]
pub(super) fn requantize(acc: i32, scale: f32, zp: i32, lo: i32, hi: i32) -> i32 {
    let v = (acc as f32 * scale).clamp((lo - zp) as f32, (hi - zp) as f32);
    v.round_ties_even() as i32 + zp
}

/// An 8-bit tensor of type `t` from values within its range.
pub(super) fn tensor8(op: &str, t: DType, shape: &[usize], v: Vec<i32>) -> Result<Tensor> {
    super::quant::int_tensor(op, t, shape, v.into_iter().map(i64::from).collect())
}

/// The 8-bit type of the fact of input `i` (required).
pub(super) fn fact8(op: &str, inputs: &[InferInput], i: usize, what: &str) -> Result<Fact> {
    let f = super::util::fact(op, inputs, i)?;
    check8(op, what, f.dtype)?;
    Ok(f.clone())
}
