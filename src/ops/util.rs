//! Helpers shared by operator implementations: input access, axis and
//! broadcast rules, float-type dispatch, and deterministic work splitting.

use crate::error::{Error, Result};
use crate::ir::{Activation, Fact, FusionKind, InferInput};
use crate::tensor::Tensor;

// Work splitting lives in `ops::parallel`; operators import it from here
// with the rest of their helpers.
pub use super::parallel::{
    op_threads, par_rows, par_spans, task_count, with_thread_cap, MIN_PARALLEL_GRAIN,
    TASKS_PER_THREAD,
};

/// Input `i`, which the operator requires.
pub fn input<'a>(op: &str, inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| Error::op(op, format!("required input {i} is missing")))
}

/// Input `i` if present (optional inputs).
pub fn opt_input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

/// The fact of input `i`, which the operator requires.
pub fn fact<'a>(op: &str, inputs: &[InferInput<'a>], i: usize) -> Result<&'a Fact> {
    inputs
        .get(i)
        .and_then(|x| x.fact)
        .ok_or_else(|| Error::op(op, format!("required input {i} is missing")))
}

/// The fact of input `i` if present.
pub fn opt_fact<'a>(inputs: &[InferInput<'a>], i: usize) -> Option<&'a Fact> {
    inputs.get(i).and_then(|x| x.fact)
}

/// The constant value of input `i`, if it is a constant.
pub fn const_value<'a>(inputs: &[InferInput<'a>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).and_then(|x| x.value)
}

/// Normalizes a possibly negative axis against `rank`.
pub fn axis(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) {
        return Err(Error::op(
            op,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(a as usize)
}

/// Normalizes a list of possibly negative axes against `rank`.
pub fn axes(op: &str, list: &[i64], rank: usize) -> Result<Vec<usize>> {
    list.iter().map(|&a| axis(op, a, rank)).collect()
}

/// The numpy-style broadcast of two shapes.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        *o = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::op(
                op,
                format!("shapes {a:?} and {b:?} do not broadcast"),
            ));
        };
    }
    Ok(out)
}

/// The broadcast of several shapes.
pub fn broadcast_all(op: &str, shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = Vec::new();
    for s in shapes {
        out = broadcast_shapes(op, &out, s)?;
    }
    Ok(out)
}

/// Broadcasts the facts of all present inputs; the type is input 0's.
pub fn infer_broadcast(op: &str, inputs: &[InferInput]) -> Result<Fact> {
    let first = fact(op, inputs, 0)?;
    let mut shapes = Vec::new();
    for f in inputs.iter().filter_map(|x| x.fact) {
        match &f.shape {
            Some(s) => shapes.push(s.as_slice()),
            None => return Ok(Fact::unknown_shape(first.dtype)),
        }
    }
    Ok(Fact::new(first.dtype, broadcast_all(op, &shapes)?))
}

/// Output 0 has input 0's fact (elementwise unary operators).
pub fn infer_same(op: &str, inputs: &[InferInput]) -> Result<Vec<Fact>> {
    Ok(vec![fact(op, inputs, 0)?.clone()])
}

/// The element count of output `i`, 0 when unknown.
pub fn out_len(outputs: &[Fact], i: usize) -> u64 {
    outputs.get(i).and_then(|f| f.len()).unwrap_or(0) as u64
}

/// Rejects an input whose type is not floating point.
pub fn require_float(op: &str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(Error::op(
            op,
            format!("expected a floating-point input, found {}", t.dtype()),
        ))
    }
}

/// Runs `$body` with `$a` bound to the array of a floating-point tensor
/// (generic over f32, f64, f16, bf16) and wraps the resulting array back
/// into a tensor of the same type; other types are an error.
#[macro_export]
#[doc(hidden)]
macro_rules! float_map {
    ($op:expr, $t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::Tensor::F32($a) => Ok($crate::Tensor::F32($body)),
            $crate::Tensor::F64($a) => Ok($crate::Tensor::F64($body)),
            $crate::Tensor::F16($a) => Ok($crate::Tensor::F16($body)),
            $crate::Tensor::BF16($a) => Ok($crate::Tensor::BF16($body)),
            other => Err($crate::Error::op(
                $op,
                format!("expected a floating-point input, found {}", other.dtype()),
            )),
        }
    };
}

/// Like [`float_map!`] for numeric types: floats and all integer types.
#[macro_export]
#[doc(hidden)]
macro_rules! numeric_map {
    ($op:expr, $t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::Tensor::F32($a) => Ok($crate::Tensor::F32($body)),
            $crate::Tensor::F64($a) => Ok($crate::Tensor::F64($body)),
            $crate::Tensor::F16($a) => Ok($crate::Tensor::F16($body)),
            $crate::Tensor::BF16($a) => Ok($crate::Tensor::BF16($body)),
            $crate::Tensor::I8($a) => Ok($crate::Tensor::I8($body)),
            $crate::Tensor::I16($a) => Ok($crate::Tensor::I16($body)),
            $crate::Tensor::I32($a) => Ok($crate::Tensor::I32($body)),
            $crate::Tensor::I64($a) => Ok($crate::Tensor::I64($body)),
            $crate::Tensor::U8($a) => Ok($crate::Tensor::U8($body)),
            $crate::Tensor::U16($a) => Ok($crate::Tensor::U16($body)),
            $crate::Tensor::U32($a) => Ok($crate::Tensor::U32($body)),
            $crate::Tensor::U64($a) => Ok($crate::Tensor::U64($body)),
            other => Err($crate::Error::op(
                $op,
                format!("expected a numeric input, found {}", other.dtype()),
            )),
        }
    };
}

/// `s` as the f32 slice it is, when `T` is f32.
pub(crate) fn as_f32<T: 'static>(s: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: T is f32: same layout and length.
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// `out` as the f32 slice it is, when `T` is f32.
pub(crate) fn as_f32_mut<T: 'static>(out: &mut [T]) -> Option<&mut [f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: T is f32: same layout and length.
        .then(|| unsafe {
            std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len())
        })
}

/// Whether input `i` is a float32 constant.
pub(crate) fn is_f32_constant(inputs: &[InferInput], i: usize) -> bool {
    matches!(
        inputs.get(i),
        Some(InferInput {
            value: Some(Tensor::F32(_)),
            ..
        })
    )
}

/// The fusion rule of the weighted operators (Conv, Gemm,
/// BatchNormalization): one activation, with float32 constant weights as
/// input 1.
pub(crate) fn takes_weighted_activation(
    kind: FusionKind,
    act: Option<Activation>,
    inputs: &[InferInput],
) -> bool {
    kind == FusionKind::Activation && act.is_none() && is_f32_constant(inputs, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(
            broadcast_shapes("t", &[2, 1, 3], &[4, 1]).unwrap(),
            vec![2, 4, 3]
        );
        assert_eq!(broadcast_shapes("t", &[], &[5]).unwrap(), vec![5]);
        assert!(broadcast_shapes("t", &[2, 3], &[4, 3]).is_err());
    }

    #[test]
    fn axis_rules() {
        assert_eq!(axis("t", -1, 4).unwrap(), 3);
        assert_eq!(axis("t", 0, 1).unwrap(), 0);
        assert!(axis("t", 4, 4).is_err());
        assert!(axis("t", -5, 4).is_err());
    }
}
