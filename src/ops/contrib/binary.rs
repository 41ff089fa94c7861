//! QLinearAdd and QLinearMul: numpy-broadcast elementwise sum and product of
//! two quantized tensors (uint8 or int8; per-tensor scales, optional zero
//! points), computed as onnxruntime's reference kernel does in f32:
//! `a' = sa·(a−za)`, `b' = sb·(b−zb)`, `y = round_half_even((a' ∘ b') / sc) + zc`
//! saturated to the type.

use super::{fact8, range8, scalar_scale, scalar_zp, tensor8};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::gemm::simd::multiversion;
use crate::ops::quant::engine::sink::{clamp_nan_low, round_small};
use crate::ops::quant::{to_i32, Bcast};
use crate::ops::util::{broadcast_shapes, input, out_len, par_spans};
use crate::tensor::{DType, Tensor};

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
            kind: crate::ir::Kind::Tensor,
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
        // The reference clamps before adding the zero point and rounding.
        let (min, max) = ((lo - zc) as f32, (hi - zc) as f32);
        if let (true, Some(ab), Some(bb)) = (a.shape() == b.shape(), a.as_bytes(), b.as_bytes()) {
            // Every byte is written below: a recycled buffer needs no zero-fill.
            let mut out = crate::tensor::recycle::take_or_default::<u8>(ab.len());
            let p = Params {
                signed: t == DType::I8,
                a: (sa, za),
                b: (sb, zb),
                c: (sc, zc),
                range: (min, max),
                kind: self.kind,
            };
            par_spans(&mut out, |start, span| {
                same_shape(
                    &ab[start..][..span.len()],
                    &bb[start..][..span.len()],
                    span,
                    &p,
                )
            });
            let y = Tensor::from_bytes(a.shape(), out, p.signed)?;
            return Ok(vec![y]);
        }
        let shape = broadcast_shapes(op, a.shape(), b.shape())?;
        let ma = Bcast::new(op, a.shape(), &shape)?;
        let mb = Bcast::new(op, b.shape(), &shape)?;
        let av = to_i32(op, a)?;
        let bv = to_i32(op, b)?;
        let n: usize = shape.iter().product();
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

/// Scales and zero points of one QLinearAdd/QLinearMul, for the fast path.
struct Params {
    signed: bool,
    a: (f32, i32),
    b: (f32, i32),
    c: (f32, i32),
    /// The clamp on the scaled result, before the zero point.
    range: (f32, f32),
    kind: Kind,
}

multiversion! {
    wide
    /// Operands of one shape, as raw bytes: the reference's arithmetic in a
    /// loop that vectorizes ([`round_small`] instead of a float-to-int cast;
    /// 16 lanes where the CPU has AVX-512: the same operations, the same
    /// bytes). The division stays a division: onnxruntime's results are
    /// those of `/ sc`, not of a precomputed ratio.
    fn same_shape(a: &[u8], b: &[u8], out: &mut [u8], p: &Params) {
        let value = |v: u8| if p.signed { v as i8 as i32 } else { v as i32 };
        let ((sa, za), (sb, zb), (sc, zc)) = (p.a, p.b, p.c);
        let add = p.kind == Kind::Add;
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            let x = sa * (value(x) - za) as f32;
            let y = sb * (value(y) - zb) as f32;
            let v = if add { x + y } else { x * y } / sc;
            *o = round_small(clamp_nan_low(v, p.range.0, p.range.1) + zc as f32) as u8;
        }
    }
}
