//! Helpers shared by the sequence-model operators of this family (rotary
//! embedding, SwiGLU, linear attention, causal convolution, FlexAttention):
//! float-type dispatch to a kernel generic over data and compute types,
//! checked size arithmetic for shapes read from hostile models, reading
//! inputs as contiguous slices and wrapping results back into tensors.

use crate::error::{Error, Result};
use crate::ops::norm::Real;
use crate::ops::unary::kernel::{contiguous, Float};
use crate::tensor::{DType, Element, Tensor};
use half::{bf16, f16};
use std::borrow::Cow;

/// A kernel generic over its data type `T` and compute type `C` (f32 for
/// f32/f16/bf16 data, f64 for f64).
pub(crate) trait FloatKernel {
    /// Runs for data type `T` computed in `C`.
    fn go<T: Float + Element, C: Real>(&self) -> Result<Vec<Tensor>>;
}

/// Runs `k` for element type `dtype`: f32, f16 and bf16 always, f64 when
/// `f64_ok` (the operator's schema allows double).
pub(crate) fn dispatch(
    op: &str,
    dtype: DType,
    f64_ok: bool,
    k: &impl FloatKernel,
) -> Result<Vec<Tensor>> {
    match dtype {
        DType::F32 => k.go::<f32, f32>(),
        DType::F16 => k.go::<f16, f32>(),
        DType::BF16 => k.go::<bf16, f32>(),
        DType::F64 if f64_ok => k.go::<f64, f64>(),
        d => Err(type_error(op, d, f64_ok)),
    }
}

/// Checks that `dtype` is one of the float types [`dispatch`] accepts.
pub(crate) fn check_float(op: &str, dtype: DType, f64_ok: bool) -> Result<()> {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => Ok(()),
        DType::F64 if f64_ok => Ok(()),
        d => Err(type_error(op, d, f64_ok)),
    }
}

fn type_error(op: &str, d: DType, f64_ok: bool) -> Error {
    let allowed = if f64_ok {
        "float, float16, bfloat16 or double"
    } else {
        "float, float16 or bfloat16"
    };
    Error::op(op, format!("expected {allowed} data, found {d}"))
}

/// Checks that input `name` has the element type `want`.
pub(crate) fn same_type(op: &str, name: &str, got: DType, want: DType) -> Result<()> {
    if got != want {
        return Err(Error::op(
            op,
            format!("{name} has type {got}, expected {want} like the first input"),
        ));
    }
    Ok(())
}

/// The product of `dims`, or an error naming `what` when it overflows.
pub(crate) fn product(op: &str, what: &str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::op(op, format!("{what} {dims:?} has too many elements")))
}

/// The elements of `t` as a contiguous slice of `T`.
pub(crate) fn slice<'a, T: Element + Clone>(
    op: &str,
    name: &str,
    t: &'a Tensor,
) -> Result<Cow<'a, [T]>> {
    t.array::<T>().map(contiguous).ok_or_else(|| {
        Error::op(
            op,
            format!("{name} has type {}, expected {}", t.dtype(), T::DTYPE),
        )
    })
}

/// Rounds `x` to the data type `T` and back: the rounding points where the
/// ONNX reference computes in `T`.
#[inline(always)]
pub(crate) fn rt<T: Float, C: Real>(x: C) -> C {
    C::from_elem(x.to_elem::<T>())
}

/// Wraps row-major `data` into a tensor of `shape`.
pub(crate) fn wrap<T: Element>(op: &str, shape: &[usize], data: Vec<T>) -> Result<Tensor> {
    Tensor::from_vec(shape, data).map_err(|e| Error::op(op, format!("internal shape error: {e}")))
}

/// Wraps compute-type values into a tensor of the float type `dtype`,
/// rounding to nearest.
pub(crate) fn wrap_as<C: Real>(
    op: &str,
    dtype: DType,
    shape: &[usize],
    data: &[C],
) -> Result<Tensor> {
    fn conv<T: Float, C: Real>(d: &[C]) -> Vec<T> {
        d.iter().map(|&x| x.to_elem::<T>()).collect()
    }
    match dtype {
        DType::F32 => wrap(op, shape, conv::<f32, C>(data)),
        DType::F16 => wrap(op, shape, conv::<f16, C>(data)),
        DType::BF16 => wrap(op, shape, conv::<bf16, C>(data)),
        DType::F64 => wrap(op, shape, conv::<f64, C>(data)),
        d => Err(Error::op(op, format!("cannot produce {d} values"))),
    }
}

/// The values of a float tensor in the compute type `C`.
pub(crate) fn values<C: Real>(op: &str, name: &str, t: &Tensor) -> Result<Vec<C>> {
    if !t.dtype().is_float() {
        return Err(Error::op(
            op,
            format!("{name} must be floating point, found {}", t.dtype()),
        ));
    }
    Ok(t.to_f64_vec()?.into_iter().map(C::of).collect())
}

/// A size attribute that must be ≥ 0 (or ≥ 1 when `min` is 1), as usize.
pub(crate) fn count_attr(
    a: &crate::ir::attributes::Attributes,
    name: &str,
    value: i64,
    min: i64,
) -> Result<usize> {
    if value < min {
        return Err(a.error(name, format!("must be ≥ {min}, found {value}")));
    }
    usize::try_from(value).map_err(|_| a.error(name, format!("{value} is too large")))
}

/// Helpers for this family's unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::error::Result;
    use crate::ir::attributes::{Attribute, Attributes};
    use crate::ir::{BuildContext, Fact, InferInput, Operator};
    use crate::tensor::Tensor;

    /// Builds `op` of `domain` at `opset` for a node of `inputs` inputs and
    /// `outputs` outputs.
    pub(crate) fn build(
        domain: &str,
        op: &str,
        opset: i64,
        attrs: Vec<(&str, Attribute)>,
        inputs: usize,
        outputs: usize,
    ) -> Result<Box<dyn Operator>> {
        let map = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let attrs = Attributes::new("node", op, map);
        let ctx = BuildContext {
            attrs: &attrs,
            opset,
            consts: &[],
            num_inputs: inputs,
            num_outputs: outputs,
            fusion: &crate::ir::Fusion::NONE,
        };
        crate::ops::build(domain, op, &ctx)
    }

    /// Runs `o` after checking that shape inference predicts every output's
    /// fact and that the FLOP estimate is positive for non-empty outputs.
    pub(crate) fn run(o: &dyn Operator, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let facts: Vec<Option<Fact>> = inputs.iter().map(|t| t.map(Fact::of)).collect();
        let inf: Vec<InferInput> = facts
            .iter()
            .map(|f| InferInput {
                fact: f.as_ref(),
                value: None,
            })
            .collect();
        let predicted = o.infer(&inf)?;
        let out = o.run(inputs)?;
        let got: Vec<Fact> = out.iter().map(Fact::of).collect();
        assert_eq!(predicted, got, "inferred facts differ from the outputs");
        let flops = o.flops(&facts.iter().map(|f| f.as_ref()).collect::<Vec<_>>(), &got);
        assert!(flops > 0 || out.iter().all(|t| t.is_empty()));
        Ok(out)
    }

    /// Deterministic pseudo-random values in [-2, 2).
    pub(crate) fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    /// An f32 tensor.
    pub(crate) fn t(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(shape, v).unwrap()
    }

    /// Asserts `got` is within `tol` (relative, with an absolute floor of
    /// `tol`) of `want`.
    pub(crate) fn close(got: &Tensor, want: &[f64], tol: f64) {
        let got = got.to_f64_vec().unwrap();
        assert_eq!(got.len(), want.len(), "element counts differ");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "element {i}: got {g}, want {w}"
            );
        }
    }

    /// The message of an error, for asserting on it.
    pub(crate) fn message<T: std::fmt::Debug>(r: Result<T>) -> String {
        r.expect_err("expected an error").to_string()
    }
}
