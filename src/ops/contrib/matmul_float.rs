//! MatMulIntegerToFloat and DynamicQuantizeMatMul: numpy-style (batched,
//! broadcast) products of 8-bit matrices accumulated exactly in i32, then
//! scaled to float32 as onnxruntime's scale-and-bias output processor does:
//! `y = f32(acc) · (a_scale · b_scale[j]) + bias[j]`. B's scale and zero
//! point are per tensor or per column (`[N]`, or `[..., 1, N]` per batch
//! matrix of B). DynamicQuantizeMatMul first quantizes its float A to uint8
//! with a scale and zero point from A's range (which always includes 0).
//!
//! The product runs on the int8 engine, B packed at build when it is a
//! constant matrix, and the scale and bias are applied as each tile is
//! stored; a per-batch B scale or zero point takes the plain i32 product.
//! The graph's fusion pass turns quantize_dynamic's written-out
//! `MatMulInteger → Cast → Mul [→ Add]` into MatMulIntegerToFloat.

use super::{check8, quantize, scales, zero_points};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::quant::engine::PackedS8;
use crate::ops::quant::matmul::{
    constant_or_absent, engine_product_scaled, matmul_flops, matmul_i32, plan, prepack_b, Plan,
};
use crate::ops::quant::to_i32;
use crate::ops::util::{fact, input, opt_input};
use crate::tensor::{DType, Tensor};

/// Which operator: MatMulIntegerToFloat (A is 8-bit) or DynamicQuantizeMatMul
/// (A is float32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Dynamic,
}

#[derive(Debug)]
struct MatMulToFloat {
    kind: Kind,
    /// B packed for the engine at build, when B (and its zero point) are
    /// constants the engine takes.
    packed_b: Option<PackedS8>,
}

pub(super) fn build_integer(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(MatMulToFloat::built(Kind::Integer, ctx))
}

pub(super) fn build_dynamic(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(MatMulToFloat::built(Kind::Dynamic, ctx))
}

/// Input positions of one operator's signature.
struct Slots {
    b_scale: usize,
    b_zp: usize,
    bias: usize,
}

impl MatMulToFloat {
    fn built(kind: Kind, ctx: &BuildContext) -> Box<dyn Operator> {
        let mut op = MatMulToFloat {
            kind,
            packed_b: None,
        };
        op.packed_b = prepack_b(ctx.constant(1), constant_or_absent(ctx, op.slots().b_zp));
        Box::new(op)
    }

    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Integer => "MatMulIntegerToFloat",
            Kind::Dynamic => "DynamicQuantizeMatMul",
        }
    }

    fn slots(&self) -> Slots {
        match self.kind {
            Kind::Integer => Slots {
                b_scale: 3,
                b_zp: 5,
                bias: 6,
            },
            Kind::Dynamic => Slots {
                b_scale: 2,
                b_zp: 3,
                bias: 4,
            },
        }
    }

    fn check_a(&self, t: DType) -> Result<()> {
        match self.kind {
            Kind::Integer => check8(self.name(), "A", t),
            Kind::Dynamic if t == DType::F32 => Ok(()),
            Kind::Dynamic => Err(Error::op(
                self.name(),
                format!("A must be float32, found {t}"),
            )),
        }
    }
}

/// How one of B's quantization parameters maps onto B's elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Granularity {
    Tensor,
    Column,
    BatchColumn,
}

impl Granularity {
    fn of(op: &str, what: &str, p: &[usize], b: &[usize]) -> Result<Granularity> {
        let n = b.last().copied().unwrap_or(1);
        let len: usize = p.iter().product();
        if len == 1 && p.len() <= 1 {
            return Ok(Granularity::Tensor);
        }
        if p.len() == 1 && p[0] == n && b.len() == 2 {
            return Ok(Granularity::Column);
        }
        let r = b.len();
        if r >= 2 && p.len() == r && p[r - 2] == 1 && p[r - 1] == n && p[..r - 2] == b[..r - 2] {
            return Ok(if r == 2 {
                Granularity::Column
            } else {
                Granularity::BatchColumn
            });
        }
        Err(Error::op(
            op,
            format!("{what} of shape {p:?} is neither per tensor nor per column of B {b:?}"),
        ))
    }

    /// The parameter index for B's batch matrix `batch` and column `j`.
    #[inline]
    fn index(self, batch: usize, j: usize, n: usize) -> usize {
        match self {
            Granularity::Tensor => 0,
            Granularity::Column => j,
            Granularity::BatchColumn => batch * n + j,
        }
    }
}

/// onnxruntime's dynamic uint8 parameters of `x`: range widened to include 0,
/// `scale = (max − min) / 255` (1 for an empty range), zero point
/// `round_half_even(clamp(−min / scale, 0, 255))`.
pub(super) fn dynamic_params(x: &[f32]) -> (f32, i32) {
    let (mut lo, mut hi) = (0f32, 0f32);
    for &v in x {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zp as i32)
}

impl Operator for MatMulToFloat {
    fn cost_class(&self) -> OpClass {
        OpClass::MatMul
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let op = self.name();
        let a = fact(op, inputs, 0)?;
        let b = fact(op, inputs, 1)?;
        self.check_a(a.dtype)?;
        check8(op, "B", b.dtype)?;
        let shape = match (&a.shape, &b.shape) {
            (Some(sa), Some(sb)) => Some(plan(op, sa, sb)?.out),
            _ => None,
        };
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: DType::F32,
            shape,
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let extra = match self.kind {
            Kind::Integer => 0,
            Kind::Dynamic => {
                inputs
                    .first()
                    .copied()
                    .flatten()
                    .and_then(|f| f.len())
                    .unwrap_or(0) as u64
                    * 4
            }
        };
        matmul_flops(inputs, 0, 1) + 2 * crate::ops::util::out_len(outputs, 0) + extra
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name();
        let slots = self.slots();
        let a = input(op, inputs, 0)?;
        let b = input(op, inputs, 1)?;
        self.check_a(a.dtype())?;
        check8(op, "B", b.dtype())?;
        let p = plan(op, a.shape(), b.shape())?;
        // A as 8-bit data, with its scale and zero point.
        let quantized: Tensor;
        let (a8, sa, za) = match self.kind {
            Kind::Integer => {
                let sa = super::scalar_scale(op, inputs, 2, "a_scale")?;
                let za = super::scalar_zp(op, inputs, 4, a.dtype(), "a_zero_point")?;
                (a, sa, za)
            }
            Kind::Dynamic => {
                let (q, sa, za) = quantize_a(op, a)?;
                quantized = q;
                (&quantized, sa, za)
            }
        };
        let bs_t = input(op, inputs, slots.b_scale)?;
        let bs = scales(op, "b_scale", bs_t)?;
        let gs = Granularity::of(op, "b_scale", bs_t.shape(), b.shape())?;
        let n = p.n;
        let zb = opt_input(inputs, slots.b_zp);
        let zb_params = match zb {
            None => None,
            Some(z) => Some((
                Granularity::of(op, "b_zero_point", z.shape(), b.shape())?,
                zero_points(op, "b_zero_point", z, b.dtype())?,
            )),
        };
        let bias = match opt_input(inputs, slots.bias) {
            None => None,
            Some(t) => {
                let v = scales(op, "bias", t)?;
                if t.shape() != [n] {
                    return Err(Error::op(
                        op,
                        format!("bias must have shape [{n}], found {:?}", t.shape()),
                    ));
                }
                Some(v)
            }
        };
        let per_batch = |g: Granularity| g == Granularity::BatchColumn;
        if !per_batch(gs) && !zb_params.as_ref().is_some_and(|(g, _)| per_batch(*g)) {
            // One scale per column (or one for all): a_scale · b_scale[j]
            // in f32, as the per-element product below computes it.
            let scale: Vec<f32> = match gs {
                Granularity::Tensor => vec![sa * bs[0]],
                _ => bs.iter().map(|&s| sa * s).collect(),
            };
            let za_t = match a8.dtype() {
                DType::I8 => Tensor::scalar(za as i8),
                _ => Tensor::scalar(za as u8),
            };
            let prepacked = self.packed_b.as_ref();
            let scaled = (scale.as_slice(), bias.as_deref());
            if let Some(out) =
                engine_product_scaled(&p, (a8, Some(&za_t)), (b, zb), prepacked, scaled)?
            {
                return Ok(vec![Tensor::from_vec(&p.out, out)?]);
            }
        }
        let av: Vec<i32> = to_i32(op, a8)?.into_iter().map(|x| x - za).collect();
        let kn = p.k * n;
        let mut bv = to_i32(op, b)?;
        if let Some((g, zv)) = &zb_params {
            for (e, v) in bv.iter_mut().enumerate() {
                *v -= zv[g.index(e / kn.max(1), e % n.max(1), n)];
            }
        }
        let acc = matmul_i32(&p, &av, &bv);
        let out = scale_out(
            &p,
            &acc,
            |batch, j| sa * bs[gs.index(batch, j, n)],
            bias.as_deref(),
        );
        Ok(vec![Tensor::from_vec(&p.out, out)?])
    }
}

/// DynamicQuantizeMatMul's A quantized to uint8 with [`dynamic_params`]:
/// (the codes, A's scale, its zero point).
fn quantize_a(op: &str, a: &Tensor) -> Result<(Tensor, f32, i32)> {
    let x: Vec<f32> = match a {
        Tensor::F32(arr) => arr.iter().copied().collect(),
        other => {
            return Err(Error::op(
                op,
                format!("A must be float32, found {}", other.dtype()),
            ))
        }
    };
    let (sa, za) = dynamic_params(&x);
    let q: Vec<u8> = x
        .iter()
        .map(|&f| quantize(f, sa, za, 0, 255) as u8)
        .collect();
    Ok((Tensor::from_vec(a.shape(), q)?, sa, za))
}

/// `f32(acc) · scale(b_batch, j) + bias[j]` for every output element.
fn scale_out(
    p: &Plan,
    acc: &[i32],
    scale: impl Fn(usize, usize) -> f32,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let (m, n, kn) = (p.m.max(1), p.n.max(1), (p.k * p.n).max(1));
    acc.iter()
        .enumerate()
        .map(|(i, &v)| {
            let bi = i / (m * n);
            let j = i % n;
            let y = v as f32 * scale(p.b_offs[bi] / kn, j);
            bias.map_or(y, |b| y + b[j])
        })
        .collect()
}
