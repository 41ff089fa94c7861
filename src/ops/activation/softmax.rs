//! Softmax, LogSoftmax and Hardmax along one axis. From opset 13 the axis is
//! a single dimension (default -1); before, the input is coerced to 2-D at
//! `axis` (default 1) and the operator runs over the flattened trailing
//! part. Either way the input is viewed as `[outer, n, inner]`; blocks of
//! `n·inner` are independent and split over the rayon pool, and every sum
//! runs in a fixed order, so results do not depend on the thread count.
//! Float32 rows along the last axis run the vectorised `softmax_row`.
//!
//! Attention's `Softmax(MatMul / √d + mask)` fused at load (see
//! `graph::fuse`) is a Softmax whose `Fusion::scale` multiplies (or, as
//! the Div node did, divides) its input by a constant, and with
//! `Fusion::mask` the mask as a second input: float32 only, normalising along the last axis,
//! the mask's last dimension that axis's length and its shape broadcasting
//! to the input's.

use super::softmax_row::{softmax_row, Pre};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, FusionKind, InferInput, OpClass, Operator};
use crate::ops::unary::kernel::{array_from, contiguous, exp_f32};
use crate::ops::util::{axis, fact, input, out_len, par_rows};
use crate::ops::Registrar;
use crate::tensor::recycle::take_or_default;
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
    /// A fused `x · scale` (or `x / scale`) before normalising.
    scale: Option<f32>,
    /// Whether the fused scale divides.
    divide: bool,
    /// Whether a fused additive mask comes as input 1.
    masked: bool,
}

/// The offset in a row-major mask of shape `m` of each row (all axes but
/// the last) of an input of shape `x`, the mask broadcasting to `x` and its
/// last dimension equal to `x`'s.
fn mask_rows(op: &str, x: &[usize], m: &[usize]) -> Result<Vec<usize>> {
    let bad = || {
        Error::op(
            op,
            format!("the fused mask of shape {m:?} does not fit the input {x:?}"),
        )
    };
    let rank = x.len();
    if rank == 0 || m.len() > rank || m.last() != x.last() {
        return Err(bad());
    }
    let lead = rank - m.len();
    let mut strides = vec![0usize; rank];
    let mut s = 1;
    for k in (lead..rank).rev() {
        let d = m[k - lead];
        if d != x[k] && d != 1 {
            return Err(bad());
        }
        strides[k] = if d == 1 { 0 } else { s };
        s *= d;
    }
    let rows: usize = x[..rank - 1].iter().product();
    let mut out = Vec::with_capacity(rows);
    let mut idx = vec![0usize; rank - 1];
    for _ in 0..rows {
        out.push(idx.iter().zip(&strides).map(|(i, s)| i * s).sum());
        for k in (0..rank - 1).rev() {
            idx[k] += 1;
            if idx[k] < x[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    Ok(out)
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

    fn compute<T: Float + Default + Send + Sync + 'static>(
        &self,
        x: &ArrayD<T>,
        exp: impl Fn(T) -> T + Sync,
    ) -> Result<ArrayD<T>> {
        let (_, n, inner) = self.split(x.shape())?;
        let src = contiguous(x);
        // Every lane of every block is written below.
        let mut out = take_or_default::<T>(src.len());
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

    /// Whether this node is a fused attention Softmax.
    fn fused(&self) -> bool {
        self.scale.is_some() || self.masked
    }

    /// Float32 rows along the last axis, with the fused scale and mask.
    fn compute_rows(&self, x: &ArrayD<f32>, mask: Option<&Tensor>) -> Result<ArrayD<f32>> {
        // rows of n elements: the last axis, or (opset < 13) all from `axis` on
        let (_, n, _) = self.split(x.shape())?;
        let src = contiguous(x);
        let mask = match mask {
            None => None,
            Some(Tensor::F32(m)) => {
                Some((contiguous(m), mask_rows(self.name, x.shape(), m.shape())?))
            }
            Some(other) => {
                return Err(Error::op(
                    self.name,
                    format!("the fused mask of type {} is not float32", other.dtype()),
                ))
            }
        };
        let log = self.kind == Kind::LogSoftmax;
        let mut out = crate::tensor::recycle::take_or_default::<f32>(src.len());
        if n > 0 {
            par_rows(&mut out, n, |first, chunk| {
                for (b, dst) in chunk.chunks_mut(n).enumerate() {
                    let r = first + b;
                    let pre = Pre {
                        scale: self.scale,
                        divide: self.divide,
                        mask: mask.as_ref().map(|(m, rows)| &m[rows[r]..rows[r] + n]),
                    };
                    softmax_row(&src[r * n..(r + 1) * n], dst, log, pre);
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
    /// A constant scale and an additive mask of the input, on a Softmax
    /// (opset 13 on) over the last axis of its one input.
    fn accepts_fusion(&self, kind: FusionKind, inputs: &[InferInput]) -> bool {
        let last_axis = |shape: &Vec<usize>| {
            !shape.is_empty() && (self.axis == -1 || self.axis == shape.len() as i64 - 1)
        };
        matches!(kind, FusionKind::Scale | FusionKind::Mask)
            && matches!(self.kind, Kind::Softmax)
            && !self.coerce_2d
            && self.scale.is_none()
            && !self.masked
            && inputs.len() == 1
            && inputs[0]
                .fact
                .and_then(|f| f.shape.as_ref())
                .is_some_and(last_axis)
    }

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
        if self.fused() {
            if f.dtype != crate::tensor::DType::F32 || self.coerce_2d || self.kind == Kind::Hardmax
            {
                return Err(Error::op(self.name, "the fused form takes float32 only"));
            }
            let m = inputs.get(1).and_then(|i| i.fact);
            if self.masked && m.is_some_and(|m| m.dtype != crate::tensor::DType::F32) {
                return Err(Error::op(self.name, "the fused mask must be float32"));
            }
            if let (Some(x), Some(m)) = (&f.shape, m.and_then(|m| m.shape.as_ref())) {
                mask_rows(self.name, x, m)?;
            }
        }
        Ok(vec![f.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let per = if self.kind == Kind::Hardmax { 2 } else { 14 };
        per * out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.name, inputs, 0)?;
        let mask = if self.masked {
            Some(input(self.name, inputs, 1)?)
        } else {
            None
        };
        if let Tensor::F32(a) = x {
            let last = self.split(a.shape())?.2 == 1 && a.ndim() > 0;
            if self.kind != Kind::Hardmax && last {
                return Ok(vec![Tensor::F32(self.compute_rows(a, mask)?)]);
            }
        }
        if self.fused() {
            return Err(Error::op(
                self.name,
                "the fused form takes float32 along the last axis only",
            ));
        }
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
        scale: ctx.fusion.scale.map(|s| s.factor),
        divide: ctx.fusion.scale.is_some_and(|s| s.divide),
        masked: ctx.fusion.mask,
    }))
}

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Softmax", 1, |ctx| build("Softmax", Kind::Softmax, ctx));
    r.add("LogSoftmax", 1, |ctx| {
        build("LogSoftmax", Kind::LogSoftmax, ctx)
    });
    r.add("Hardmax", 1, |ctx| build("Hardmax", Kind::Hardmax, ctx));
}
