//! Matrix products: `Gemm` and `MatMul` (f32/f64 through the `gemm` crate,
//! f16/bf16 through f32, integers through a plain kernel), the deterministic
//! parallel GEMM engine that Conv shares, and the fused-activation epilogue.

use super::Registrar;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

pub(crate) mod engine;
pub(crate) mod fused;
mod gemm_op;
mod int;
mod matmul;
#[cfg(target_arch = "x86_64")]
pub(crate) mod packed;
#[cfg(all(test, target_arch = "x86_64"))]
mod packed_tests;
pub(crate) mod simd;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Gemm", 7, gemm_op::build);
    r.add("MatMul", 7, matmul::build);
}

/// A contiguous f32 copy of a half-precision tensor's data (f32 data is copied).
pub(crate) fn to_f32_vec(op: &str, t: &Tensor) -> Result<Vec<f32>> {
    Ok(match t {
        Tensor::F32(a) => a.iter().copied().collect(),
        Tensor::F16(a) => a.iter().map(|v| v.to_f32()).collect(),
        Tensor::BF16(a) => a.iter().map(|v| v.to_f32()).collect(),
        other => {
            return Err(Error::op(
                op,
                format!(
                    "expected float16, bfloat16 or float32 data, found {}",
                    other.dtype()
                ),
            ))
        }
    })
}

/// Wraps f32 results as a tensor of the half-precision type `like` has
/// (`F16`, `BF16`; anything else stays f32).
pub(crate) fn from_f32_vec(
    op: &str,
    like: &Tensor,
    shape: &[usize],
    v: Vec<f32>,
) -> Result<Tensor> {
    let n = v.len();
    let bad = |_| Error::op(op, format!("{n} results do not fill shape {shape:?}"));
    Ok(match like {
        Tensor::F16(_) => Tensor::F16(
            ArrayD::from_shape_vec(IxDyn(shape), v.iter().map(|&x| f16::from_f32(x)).collect())
                .map_err(bad)?,
        ),
        Tensor::BF16(_) => Tensor::BF16(
            ArrayD::from_shape_vec(IxDyn(shape), v.iter().map(|&x| bf16::from_f32(x)).collect())
                .map_err(bad)?,
        ),
        _ => Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v).map_err(bad)?),
    })
}

/// The data of a float tensor of type `T` as a contiguous slice (copied only
/// when not in standard layout).
pub(crate) fn contiguous<T: Clone>(a: &ArrayD<T>) -> std::borrow::Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(a.iter().cloned().collect()),
    }
}

/// Product of dimensions with overflow checking.
pub(crate) fn checked_product(op: &str, dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| Error::op(op, format!("shape {dims:?} is too large")))
    })
}
