//! `SwiGLU` (opset 28): `Y = A · sigmoid(alpha · A) · B` for a gate `A` and a
//! value `B` of identical shape and type (no broadcasting). Computed in f32
//! (f64 for double), rounding to the data type after every step as the ONNX
//! reference does for f16/bf16.

use super::support::{dispatch, rt, same_type, slice, wrap, FloatKernel};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::norm::Real;
use crate::ops::unary::kernel::Float;
use crate::ops::util::{fact, input, out_len, par_rows};
use crate::tensor::{Element, Tensor};

const OP: &str = "SwiGLU";

/// A built SwiGLU node.
#[derive(Debug)]
struct SwiGlu {
    alpha: f32,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    if ctx.num_inputs != 2 || ctx.num_outputs != 1 {
        return Err(Error::op(
            OP,
            format!(
                "takes 2 inputs and 1 output, found {} and {}",
                ctx.num_inputs, ctx.num_outputs
            ),
        ));
    }
    let alpha = ctx.attrs.float("alpha", 1.0)?;
    if !alpha.is_finite() {
        return Err(ctx
            .attrs
            .error("alpha", format!("must be finite, found {alpha}")));
    }
    Ok(Box::new(SwiGlu { alpha }))
}

fn check(a: &Fact, b: &Fact) -> Result<()> {
    super::support::check_float(OP, a.dtype, true)?;
    same_type(OP, "B", b.dtype, a.dtype)?;
    if let (Some(sa), Some(sb)) = (&a.shape, &b.shape) {
        if sa != sb {
            return Err(Error::op(
                OP,
                format!("A {sa:?} and B {sb:?} must have the same shape (no broadcasting)"),
            ));
        }
    }
    Ok(())
}

impl Operator for SwiGlu {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let (a, b) = (fact(OP, inputs, 0)?, fact(OP, inputs, 1)?);
        check(a, b)?;
        Ok(vec![match &a.shape {
            Some(_) => a.clone(),
            None => b.clone(),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // Swish (about 14) and the product.
        15 * out_len(outputs, 0)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (a, b) = (input(OP, inputs, 0)?, input(OP, inputs, 1)?);
        check(&Fact::of(a), &Fact::of(b))?;
        dispatch(
            OP,
            a.dtype(),
            true,
            &Kernel {
                a,
                b,
                alpha: self.alpha,
            },
        )
    }
}

struct Kernel<'a> {
    a: &'a Tensor,
    b: &'a Tensor,
    alpha: f32,
}

impl FloatKernel for Kernel<'_> {
    fn go<T: Float + Element, C: Real>(&self) -> Result<Vec<Tensor>> {
        let a = slice::<T>(OP, "A", self.a)?;
        let b = slice::<T>(OP, "B", self.b)?;
        let mut out = vec![T::default(); a.len()];
        // The reference multiplies by `-alpha` converted to the data type.
        let neg = rt::<T, C>(C::of(-self.alpha as f64));
        let one = C::one();
        par_rows(&mut out, 1, |first, chunk| {
            let (a, b) = (&a[first..first + chunk.len()], &b[first..]);
            for ((o, &x), &y) in chunk.iter_mut().zip(a).zip(b) {
                let x = C::from_elem(x);
                let e = rt::<T, C>(rt::<T, C>(neg * x).exp());
                let sig = rt::<T, C>(one / rt::<T, C>(one + e));
                let swish = rt::<T, C>(x * sig);
                *o = (swish * C::from_elem(y)).to_elem();
            }
        });
        Ok(vec![wrap(OP, self.a.shape(), out)?])
    }
}

#[cfg(test)]
#[path = "swiglu_tests.rs"]
mod tests;
