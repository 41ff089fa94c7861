//! The narrow quantized types of QuantizeLinear / DequantizeLinear: 4- and
//! 2-bit integers (saturated to their range like the 8-bit ones) and float8 /
//! float4 (the scaled value encoded once, ties to even; float8 honours
//! `saturate`, float4 always saturates; float8 ignores the zero point, which
//! must be zero, and float4 adds its zero point before encoding).

use super::{int_range, to_i32};
use crate::error::{Error, Result};
use crate::ops::unary::cast::cast_sat;
use crate::tensor::{DType, Tensor};

/// True for the types QuantizeLinear can produce.
pub(super) fn is_quant_output(t: DType) -> bool {
    matches!(t, DType::U8 | DType::I8 | DType::U16 | DType::I16) || t.is_narrow()
}

/// The inclusive range of an integer quantized type, narrow ones included.
pub(super) fn range(op: &str, t: DType) -> Result<(i64, i64)> {
    Ok(match t {
        DType::U4 => (0, 15),
        DType::I4 => (-8, 7),
        DType::U2 => (0, 3),
        DType::I2 => (-2, 1),
        other => int_range(op, other)?,
    })
}

/// The values of an integer quantized tensor, narrow ones included.
pub(super) fn ints(op: &str, t: &Tensor) -> Result<Vec<i32>> {
    if matches!(t.dtype(), DType::U4 | DType::I4 | DType::U2 | DType::I2) {
        return Ok(t.to_i64_vec()?.into_iter().map(|v| v as i32).collect());
    }
    to_i32(op, t)
}

/// A tensor of type `t` from values already in its range (narrow integers,
/// or floats to encode when `t` is float8 / float4).
pub(super) fn narrow_tensor(
    op: &str,
    t: DType,
    shape: &[usize],
    v: Vec<f64>,
    saturate: bool,
) -> Result<Tensor> {
    let wide = Tensor::from_vec(shape, v)
        .map_err(|e| Error::op(op, format!("internal shape error: {e}")))?;
    cast_sat(&wide, t, saturate)
}

/// The zero point of a float8 input or output: ONNX requires it to be zero.
pub(super) fn check_float8_zero(op: &str, z: Option<&Tensor>) -> Result<()> {
    if let Some(z) = z {
        if z.to_f64_vec()?.iter().any(|&v| v != 0.0) {
            return Err(Error::op(
                op,
                format!("the zero point of a {} tensor must be zero", z.dtype()),
            ));
        }
    }
    Ok(())
}
