//! QLinearAdd and QLinearMul: numpy-broadcast elementwise sum and product of
//! two quantized tensors (uint8 or int8; per-tensor scales, optional zero
//! points), computed as onnxruntime's reference kernel does in f32:
//! `a' = sa·(a−za)`, `b' = sb·(b−zb)`, `y = round_half_even((a' ∘ b') / sc) + zc`
//! saturated to the type.

use super::{fact8, range8, scalar_scale, scalar_zp, tensor8};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::quant::{to_i32, Bcast};
use crate::ops::util::{broadcast_shapes, input, out_len};
use crate::tensor::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Add,
    Mul,
}

#[derive(Debug)]
struct QLinearBinary {
    kind: Kind,
}

impl QLinearBinary {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Add => "QLinearAdd",
            Kind::Mul => "QLinearMul",
        }
    }
}

pub(super) fn build_add(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(QLinearBinary { kind: Kind::Add }))
}

pub(super) fn build_mul(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(QLinearBinary { kind: Kind::Mul }))
}

impl Operator for QLinearBinary {
    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let op = self.name();
        let a = fact8(op, inputs, 0, "A")?;
        let b = fact8(op, inputs, 3, "B")?;
        if a.dtype != b.dtype {
            return Err(Error::op(
                op,
                format!("A is {} but B is {}", a.dtype, b.dtype),
            ));
        }
        let shape = match (&a.shape, &b.shape) {
            (Some(sa), Some(sb)) => Some(broadcast_shapes(op, sa, sb)?),
            _ => None,
        };
        Ok(vec![Fact {
            dtype: a.dtype,
            shape,
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        (6 * out_len(outputs, 0)).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name();
        let a = input(op, inputs, 0)?;
        let b = input(op, inputs, 3)?;
        let t = a.dtype();
        let (lo, hi) = range8(op, t)?;
        if b.dtype() != t {
            return Err(Error::op(op, format!("A is {t} but B is {}", b.dtype())));
        }
        let sa = scalar_scale(op, inputs, 1, "A_scale")?;
        let za = scalar_zp(op, inputs, 2, t, "A_zero_point")?;
        let sb = scalar_scale(op, inputs, 4, "B_scale")?;
        let zb = scalar_zp(op, inputs, 5, t, "B_zero_point")?;
        let sc = scalar_scale(op, inputs, 6, "C_scale")?;
        let zc = scalar_zp(op, inputs, 7, t, "C_zero_point")?;
        let shape = broadcast_shapes(op, a.shape(), b.shape())?;
        let ma = Bcast::new(op, a.shape(), &shape)?;
        let mb = Bcast::new(op, b.shape(), &shape)?;
        let av = to_i32(op, a)?;
        let bv = to_i32(op, b)?;
        let n: usize = shape.iter().product();
        // The reference clamps before adding the zero point and rounding.
        let (min, max) = ((lo - zc) as f32, (hi - zc) as f32);
        let kind = self.kind;
        let out: Vec<i32> = (0..n)
            .map(|i| {
                let x = sa * (av[ma.index(i)] - za) as f32;
                let y = sb * (bv[mb.index(i)] - zb) as f32;
                let v = match kind {
                    Kind::Add => x + y,
                    Kind::Mul => x * y,
                } / sc;
                (v.clamp(min, max) + zc as f32).round_ties_even() as i32
            })
            .collect();
        Ok(vec![tensor8(op, t, &shape, out)?])
    }
}
