//! CumProd: the cumulative product along an axis (given as an input), with
//! `exclusive` and `reverse`, multiplying in the element type step by step as
//! numpy's `cumprod` does (wrapping for integers).

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::shape::num::Num;
use crate::ops::util::{fact, input, out_len, par_rows};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const OP: &str = "CumProd";

#[derive(Debug)]
struct CumProd {
    exclusive: bool,
    reverse: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(CumProd {
        exclusive: ctx.attrs.int("exclusive", 0)? != 0,
        reverse: ctx.attrs.int("reverse", 0)? != 0,
    }))
}

fn cumprod<T: Num>(
    a: &ArrayD<T>,
    axis: usize,
    exclusive: bool,
    reverse: bool,
) -> Result<ArrayD<T>> {
    let s = a.shape().to_vec();
    let src = crate::ops::unary::kernel::contiguous(a);
    let len = s[axis];
    let inner: usize = s[axis + 1..].iter().product();
    let block = len * inner;
    let one = T::from_acc(T::one());
    let mut out = vec![one; src.len()];
    if block > 0 {
        par_rows(&mut out, block, |first, chunk| {
            for (b, dst) in chunk.chunks_mut(block).enumerate() {
                let base = (first + b) * block;
                for i in 0..inner {
                    let mut acc = one;
                    for step in 0..len {
                        let k = if reverse { len - 1 - step } else { step };
                        let at = k * inner + i;
                        let v = src[base + at];
                        if exclusive {
                            dst[at] = acc;
                            acc = T::times(acc, v);
                        } else {
                            acc = T::times(acc, v);
                            dst[at] = acc;
                        }
                    }
                }
            }
        });
    }
    ArrayD::from_shape_vec(IxDyn(&s), out).map_err(|e| Error::op(OP, format!("internal: {e}")))
}

fn axis_value(t: &Tensor) -> Result<i64> {
    if !matches!(t.dtype(), DType::I32 | DType::I64) || t.len() != 1 || t.shape().len() > 1 {
        return Err(Error::op(
            OP,
            format!("axis must be an int32 or int64 scalar, found {t}"),
        ));
    }
    Ok(t.to_i64_vec()?[0])
}

impl Operator for CumProd {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(OP, inputs, 0)?;
        let a = fact(OP, inputs, 1)?;
        if !matches!(a.dtype, DType::I32 | DType::I64) {
            return Err(Error::op(
                OP,
                format!("axis must be int32 or int64, found {}", a.dtype),
            ));
        }
        if matches!(f.dtype, DType::Bool | DType::String) {
            return Err(Error::op(
                OP,
                format!("expected a numeric input, found {}", f.dtype),
            ));
        }
        Ok(vec![f.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let axis = axis_value(input(OP, inputs, 1)?)?;
        let axis = crate::ops::util::axis(OP, axis, x.shape().len())?;
        if x.shape().is_empty() {
            return Err(Error::op(OP, "input must have rank ≥ 1"));
        }
        Ok(vec![crate::numeric_map!(
            OP,
            x,
            a => cumprod(a, axis, self.exclusive, self.reverse)?
        )?])
    }
}
