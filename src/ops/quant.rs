//! Quantization operators: QuantizeLinear / DequantizeLinear (per-tensor,
//! per-axis and blocked scales), DynamicQuantizeLinear, and the integer
//! products MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv, which
//! accumulate exactly in i32. QuantizeLinear / DequantizeLinear also take the
//! 4/2-bit integer, float8 and float4 types; the integer products take 8-bit
//! integers only.

use super::Registrar;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

mod conv;
mod conv_int8;
mod dynamic;
pub(crate) mod engine;
mod linear;
pub(crate) mod matmul;
mod narrow;
mod per_tensor;

pub(crate) use per_tensor::dequantize_span;

pub(crate) use dynamic::quantize_u8;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("QuantizeLinear", 10, linear::build_quantize);
    r.add("DequantizeLinear", 10, linear::build_dequantize);
    r.add("DynamicQuantizeLinear", 11, dynamic::build);
    r.add("MatMulInteger", 10, matmul::build_matmul_integer);
    r.add("QLinearMatMul", 10, matmul::build_qlinear_matmul);
    r.add("ConvInteger", 10, conv::build_conv_integer);
    r.add("QLinearConv", 10, conv::build_qlinear_conv);
}

/// The inclusive value range of a quantized integer type.
pub(crate) fn int_range(op: &str, t: DType) -> Result<(i64, i64)> {
    Ok(match t {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::U16 => (0, 65535),
        DType::I16 => (-32768, 32767),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        other => {
            return Err(Error::op(
                op,
                format!(
                    "{other} is not a supported quantized type (uint8, int8, uint16, int16, int32)"
                ),
            ))
        }
    })
}

/// The values of a quantized integer tensor (8/16/32-bit) as i32, row-major.
pub(crate) fn to_i32(op: &str, t: &Tensor) -> Result<Vec<i32>> {
    // Contiguous data (the rule: scales and zero points are initializers)
    // is read as a slice, without ndarray's per-element index walk.
    fn widen<T: Copy + Into<i32>, D: ndarray::Dimension>(a: &ndarray::Array<T, D>) -> Vec<i32> {
        match a.as_slice() {
            Some(s) => s.iter().map(|&v| v.into()).collect(),
            None => a.iter().map(|&v| v.into()).collect(),
        }
    }
    Ok(match t {
        Tensor::U8(a) => widen(a),
        Tensor::I8(a) => widen(a),
        Tensor::U16(a) => widen(a),
        Tensor::I16(a) => widen(a),
        Tensor::I32(a) => widen(a),
        other => {
            return Err(Error::op(
                op,
                format!(
                    "expected uint8, int8, uint16, int16 or int32 data, found {}",
                    other.dtype()
                ),
            ))
        }
    })
}

/// The values of a floating-point tensor as f64 (exact), row-major.
pub(crate) fn float_values(op: &str, t: &Tensor) -> Result<Vec<f64>> {
    if !t.dtype().is_float() {
        return Err(Error::op(
            op,
            format!("expected floating-point data, found {}", t.dtype()),
        ));
    }
    t.to_f64_vec()
}

/// Rounds `v` to the precision of the float type `t` (f32 for f32, f16 and
/// bf16 through f32 as numpy computes them; f64 unchanged).
pub(crate) fn round_to(t: DType, v: f64) -> f64 {
    match t {
        DType::F64 => v,
        DType::F16 => half::f16::from_f32(v as f32).to_f64(),
        DType::BF16 => half::bf16::from_f32(v as f32).to_f64(),
        _ => v as f32 as f64,
    }
}

/// A tensor of integer type `t` from values already within its range.
pub(crate) fn int_tensor(op: &str, t: DType, shape: &[usize], v: Vec<i64>) -> Result<Tensor> {
    fn mk<T>(op: &str, shape: &[usize], v: Vec<T>) -> Result<ArrayD<T>> {
        ArrayD::from_shape_vec(IxDyn(shape), v)
            .map_err(|e| Error::op(op, format!("internal shape error: {e}")))
    }
    Ok(match t {
        DType::U8 => Tensor::U8(mk(op, shape, v.into_iter().map(|x| x as u8).collect())?),
        DType::I8 => Tensor::I8(mk(op, shape, v.into_iter().map(|x| x as i8).collect())?),
        DType::U16 => Tensor::U16(mk(op, shape, v.into_iter().map(|x| x as u16).collect())?),
        DType::I16 => Tensor::I16(mk(op, shape, v.into_iter().map(|x| x as i16).collect())?),
        DType::I32 => Tensor::I32(mk(op, shape, v.into_iter().map(|x| x as i32).collect())?),
        other => return Err(Error::op(op, format!("cannot produce {other} output"))),
    })
}

/// A tensor of float type `t` from f64 values, rounded once to `t`.
pub(crate) fn float_tensor(op: &str, t: DType, shape: &[usize], v: Vec<f64>) -> Result<Tensor> {
    let r = match t {
        DType::F32 => Tensor::from_vec(shape, v.into_iter().map(|x| x as f32).collect()),
        DType::F64 => Tensor::from_vec(shape, v),
        DType::F16 => Tensor::from_vec(shape, v.into_iter().map(half::f16::from_f64).collect()),
        DType::BF16 => Tensor::from_vec(shape, v.into_iter().map(half::bf16::from_f64).collect()),
        other => return Err(Error::op(op, format!("cannot produce {other} output"))),
    };
    r.map_err(|e| Error::op(op, format!("internal shape error: {e}")))
}

/// Maps each element of a tensor of shape `to` to the element of a tensor of
/// shape `from` that numpy broadcasting pairs with it.
#[derive(Debug, Clone)]
pub(crate) struct Bcast {
    /// Per output axis: (output stride, source stride or 0 when broadcast).
    axes: Vec<(usize, usize, usize)>,
}

impl Bcast {
    /// Checks that `from` broadcasts to `to` (without changing `to`).
    pub(crate) fn new(op: &str, from: &[usize], to: &[usize]) -> Result<Bcast> {
        if from.len() > to.len() {
            return Err(Error::op(
                op,
                format!("shape {from:?} does not broadcast to {to:?}"),
            ));
        }
        let off = to.len() - from.len();
        let mut axes = Vec::new();
        let mut src_stride = 1usize;
        let mut out_stride = 1usize;
        for d in (0..to.len()).rev() {
            let f = if d >= off { from[d - off] } else { 1 };
            if f != to[d] && f != 1 {
                return Err(Error::op(
                    op,
                    format!("shape {from:?} does not broadcast to {to:?}"),
                ));
            }
            if f != 1 {
                axes.push((out_stride, to[d], src_stride));
            }
            src_stride *= f;
            out_stride *= to[d];
        }
        Ok(Bcast { axes })
    }

    /// The source index for output flat index `i`.
    #[inline]
    pub(crate) fn index(&self, i: usize) -> usize {
        self.axes
            .iter()
            .map(|&(os, dim, ss)| (i / os) % dim * ss)
            .sum()
    }
}
