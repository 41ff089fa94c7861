//! LabelEncoder's lookup keys and value lists: the element types it maps
//! (string, int64, int32, int16, float, double), elements as hashable keys
//! (floats by value, every NaN one key, -0 equal to +0), and gathering the
//! looked-up values into an output tensor.

use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};
use ndarray::{Array1, ArrayD, IxDyn};

pub(super) const OP: &str = "LabelEncoder";

/// One element as a lookup key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Key {
    Int(i64),
    /// The bits of the value as f64 (exact for f32), NaN and zero canonical.
    Float(u64),
    Str(String),
}

impl Key {
    fn float(v: f64) -> Key {
        let v = if v.is_nan() {
            f64::NAN
        } else if v == 0.0 {
            0.0
        } else {
            v
        };
        Key::Float(v.to_bits())
    }
}

/// Whether LabelEncoder maps elements of type `t`.
pub(super) fn is_label_type(t: DType) -> bool {
    matches!(
        t,
        DType::String | DType::I64 | DType::I32 | DType::I16 | DType::F32 | DType::F64
    )
}

/// The elements of `t` as keys, in row-major order.
pub(super) fn keys_of(t: &Tensor) -> Result<Vec<Key>> {
    Ok(match t {
        Tensor::String(a) => a.iter().map(|s| Key::Str(s.clone())).collect(),
        Tensor::I64(a) => a.iter().map(|&v| Key::Int(v)).collect(),
        Tensor::I32(a) => a.iter().map(|&v| Key::Int(v.into())).collect(),
        Tensor::I16(a) => a.iter().map(|&v| Key::Int(v.into())).collect(),
        Tensor::F32(a) => a.iter().map(|&v| Key::float(v.into())).collect(),
        Tensor::F64(a) => a.iter().map(|&v| Key::float(v)).collect(),
        other => return Err(type_error("keys", other.dtype())),
    })
}

pub(super) fn type_error(what: &str, t: DType) -> Error {
    Error::op(
        OP,
        format!("{what} must be string, int64, int32, int16, float or double, found {t}"),
    )
}

fn pick<T: Clone>(v: &ArrayD<T>, idx: &[usize], shape: &[usize]) -> Result<ArrayD<T>> {
    let v = v.as_standard_layout();
    let data = v.as_slice().unwrap_or(&[]);
    let out = idx
        .iter()
        .map(|&i| data.get(i).cloned())
        .collect::<Option<Vec<T>>>()
        .ok_or_else(|| Error::op(OP, "internal: value index out of range"))?;
    ArrayD::from_shape_vec(IxDyn(shape), out).map_err(|e| Error::op(OP, format!("internal: {e}")))
}

/// The elements of the 1-D `values` at `idx`, shaped `shape`.
pub(super) fn take(values: &Tensor, idx: &[usize], shape: &[usize]) -> Result<Tensor> {
    Ok(match values {
        Tensor::String(a) => Tensor::String(pick(a, idx, shape)?),
        Tensor::I64(a) => Tensor::I64(pick(a, idx, shape)?),
        Tensor::I32(a) => Tensor::I32(pick(a, idx, shape)?),
        Tensor::I16(a) => Tensor::I16(pick(a, idx, shape)?),
        Tensor::F32(a) => Tensor::F32(pick(a, idx, shape)?),
        Tensor::F64(a) => Tensor::F64(pick(a, idx, shape)?),
        other => return Err(type_error("values", other.dtype())),
    })
}

/// `values` (flattened) with `default` (one element of the same type)
/// appended: the table a lookup miss indexes at its end.
pub(super) fn with_default(values: &Tensor, default: &Tensor) -> Result<Tensor> {
    fn join<T: Clone>(a: &ArrayD<T>, d: &ArrayD<T>) -> ArrayD<T> {
        Array1::from_iter(a.iter().chain(d.iter()).cloned()).into_dyn()
    }
    if default.len() != 1 || default.dtype() != values.dtype() {
        return Err(Error::op(
            OP,
            format!(
                "the default must be one {} value, found {} of shape {:?}",
                values.dtype(),
                default.dtype(),
                default.shape()
            ),
        ));
    }
    Ok(match (values, default) {
        (Tensor::String(a), Tensor::String(d)) => Tensor::String(join(a, d)),
        (Tensor::I64(a), Tensor::I64(d)) => Tensor::I64(join(a, d)),
        (Tensor::I32(a), Tensor::I32(d)) => Tensor::I32(join(a, d)),
        (Tensor::I16(a), Tensor::I16(d)) => Tensor::I16(join(a, d)),
        (Tensor::F32(a), Tensor::F32(d)) => Tensor::F32(join(a, d)),
        (Tensor::F64(a), Tensor::F64(d)) => Tensor::F64(join(a, d)),
        (other, _) => return Err(type_error("values", other.dtype())),
    })
}
