//! Softmax, LogSoftmax and Hardmax along one axis. From opset 13 the axis is
//! a single dimension (default -1); before, the input is coerced to 2-D at
//! `axis` (default 1) and the operator runs over the flattened trailing
//! part. Either way the input is viewed as `[outer, n, inner]`; blocks of
//! `n·inner` are independent and split over the rayon pool, and every sum
//! runs in a fixed order, so results do not depend on the thread count.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::unary::kernel::{array_from, contiguous, exp_f32};
use crate::ops::util::{axis, fact, input, out_len, par_rows};
use crate::ops::Registrar;
use crate::tensor::Tensor;
use half::{bf16, f16};
use ndarray::ArrayD;
use num_traits::Float;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

#[derive(Debug)]
struct Normalise {
    name: &'static str,
    kind: Kind,
    axis: i64,
    /// Opset < 13: coerce to 2-D at `axis`.
    coerce_2d: bool,
}

impl Normalise {
    /// `(outer, n, inner)` for an input shape.
    fn split(&self, shape: &[usize]) -> Result<(usize, usize, usize)> {
        let rank = shape.len();
        if rank == 0 {
            return Ok((1, 1, 1));
        }
        let a = axis(self.name, self.axis, rank)?;
        let outer = shape[..a].iter().product();
        if self.coerce_2d {
            Ok((outer, shape[a..].iter().product(), 1))
        } else {
            Ok((outer, shape[a], shape[a + 1..].iter().product()))
        }
    }

    fn compute<T: Float + Default + Send + Sync>(
        &self,
        x: &ArrayD<T>,
        exp: impl Fn(T) -> T + Sync,
    ) -> Result<ArrayD<T>> {
        let (_, n, inner) = self.split(x.shape())?;
        let src = contiguous(x);
        let mut out = vec![T::zero(); src.len()];
        let block = n * inner;
        if block > 0 {
            par_rows(&mut out, block, |first, chunk| {
                for (b, dst) in chunk.chunks_mut(block).enumerate() {
                    let start = (first + b) * block;
                    let s = &src[start..start + block];
                    for j in 0..inner {
                        self.lane(s, dst, j, n, inner, &exp);
                    }
                }
            });
        }
        array_from(self.name, x.shape(), out)
    }

    /// One lane: elements `j, j + inner, …` of a block.
    fn lane<T: Float>(
        &self,
        s: &[T],
        d: &mut [T],
        j: usize,
        n: usize,
        inner: usize,
        exp: &impl Fn(T) -> T,
    ) {
        let idx = |i: usize| j + i * inner;
        if self.kind == Kind::Hardmax {
            let mut best = 0;
            for i in 1..n {
                if s[idx(i)] > s[idx(best)] {
                    best = i;
                }
            }
            for i in 0..n {
                d[idx(i)] = if i == best { T::one() } else { T::zero() };
            }
            return;
        }
        let mut max = T::neg_infinity();
        for i in 0..n {
            let v = s[idx(i)];
            if v > max || v.is_nan() {
                max = v;
            }
        }
        let mut sum = T::zero();
        for i in 0..n {
            let e = exp(s[idx(i)] - max);
            d[idx(i)] = e;
            sum = sum + e;
        }
        if self.kind == Kind::Softmax {
            let r = T::one() / sum;
            for i in 0..n {
                d[idx(i)] = d[idx(i)] * r;
            }
        } else {
            let l = sum.ln();
            for i in 0..n {
                d[idx(i)] = s[idx(i)] - max - l;
            }
        }
    }
}

impl Operator for Normalise {
    fn cost_class(&self) -> OpClass {
        OpClass::Window
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name, inputs, 0)?;
        if !f.dtype.is_float() {
            return Err(Error::op(
                self.name,
                format!("input of type {} is not supported", f.dtype),
            ));
        }
        if let Some(s) = &f.shape {
            self.split(s)?;
        }
        Ok(vec![f.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let per = if self.kind == Kind::Hardmax { 2 } else { 14 };
        per * out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.name, inputs, 0)?;
        let via_f32 = |a: &ArrayD<f32>| self.compute(a, exp_f32);
        Ok(vec![match x {
            Tensor::F32(a) => Tensor::F32(via_f32(a)?),
            Tensor::F64(a) => Tensor::F64(self.compute(a, f64::exp)?),
            Tensor::F16(a) => Tensor::F16(via_f32(&a.mapv(f16::to_f32))?.mapv(f16::from_f32)),
            Tensor::BF16(a) => Tensor::BF16(via_f32(&a.mapv(bf16::to_f32))?.mapv(bf16::from_f32)),
            other => {
                return Err(Error::op(
                    self.name,
                    format!("input of type {} is not supported", other.dtype()),
                ))
            }
        }])
    }
}

fn build(name: &'static str, kind: Kind, ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let coerce_2d = ctx.opset < 13;
    let axis = ctx.attrs.int("axis", if coerce_2d { 1 } else { -1 })?;
    Ok(Box::new(Normalise {
        name,
        kind,
        axis,
        coerce_2d,
    }))
}

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Softmax", 1, |ctx| build("Softmax", Kind::Softmax, ctx));
    r.add("LogSoftmax", 1, |ctx| {
        build("LogSoftmax", Kind::LogSoftmax, ctx)
    });
    r.add("Hardmax", 1, |ctx| build("Hardmax", Kind::Hardmax, ctx));
}
