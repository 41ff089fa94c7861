//! QGemm: `Y = alpha · A' · B' + C` on 8-bit A and B (`transA`/`transB`),
//! accumulated exactly in i32 with the zero points taken out (B's scale and
//! zero point per tensor or per column), plus the optional int32 bias C
//! (broadcast to M×N). With `y_zero_point` the result is requantized with
//! `alpha · a_scale · b_scale / y_scale` (f32, round half to even,
//! saturated, as onnxruntime's requantizing output processor does);
//! without it Y is float32 `acc · alpha · a_scale · b_scale`.
//!
//! Where C is one value per column of Y (or absent), it joins the engine's
//! exact sums and the engine's sink writes Y directly, requantized or
//! scaled (a single row of Y tile by tile with vector code, more rows one
//! element at a time); a C of any other broadcastable shape is added to the
//! sums in a second pass.

use super::{check8, range8, requantize, scalar_scale, scales, zero_points};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::quant::engine::matrix::{self, pack_right, LeftOperand};
use crate::ops::quant::engine::{FloatSink, PackedS8, QuantSink, Sink, WideSink};
use crate::ops::quant::Bcast;
use crate::ops::util::{fact, input, opt_fact, opt_input};
use crate::tensor::{DType, Tensor};
use ndarray::ArrayD;

const OP: &str = "QGemm";

#[derive(Debug)]
struct QGemm {
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
    /// B packed for the int8 engine, when B and its zero point are constant.
    packed_b: Option<PackedS8>,
    /// A constant C as one value per column of Y (see [`column_bias`]).
    bias: Option<Vec<i32>>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let trans_b = a.int("transB", 0)? != 0;
    let packed_b = match (ctx.constant(3), ctx.constant(5)) {
        (Some(b), Some(bz)) => pack_b(b, bz, trans_b)?,
        _ => None,
    };
    let bias = match (&packed_b, ctx.constant(6)) {
        (Some(b), Some(c)) => column_bias(c, b.rows),
        _ => None,
    };
    Ok(Box::new(QGemm {
        trans_a: a.int("transA", 0)? != 0,
        trans_b,
        alpha: a.float("alpha", 1.0)?,
        packed_b,
        bias,
    }))
}

/// An int32 C that broadcasts along Y's rows (shape `[]`, `[1]`, `[n]`,
/// `[1, 1]` or `[1, n]`) as one value per column of Y's `n`; `None` for
/// any other C.
fn column_bias(c: &Tensor, n: usize) -> Option<Vec<i32>> {
    let Tensor::I32(arr) = c else {
        return None;
    };
    let s = c.shape();
    let last = s.last().copied().unwrap_or(1);
    if s.len() > 2 || s.iter().rev().skip(1).any(|&d| d != 1) || !(last == 1 || last == n) {
        return None;
    }
    let v: Vec<i32> = arr.iter().copied().collect();
    Some(if last == n { v } else { vec![v[0]; n] })
}

/// B (2-D, 8-bit, contiguous) packed with its zero points, else `None`.
fn pack_b(b: &Tensor, bz: &Tensor, trans: bool) -> Result<Option<PackedS8>> {
    let (s, Some(bytes)) = (b.shape(), b.as_bytes()) else {
        return Ok(None);
    };
    if s.len() != 2 || !matches!(b.dtype(), DType::U8 | DType::I8) {
        return Ok(None);
    }
    let (k, n) = if trans { (s[1], s[0]) } else { (s[0], s[1]) };
    let zero = zero_points(OP, "b_zero_point", bz, b.dtype())?;
    if zero.len() != 1 && zero.len() != n {
        return Ok(None);
    }
    Ok(Some(pack_right(
        bytes,
        k,
        n,
        trans,
        b.dtype() == DType::I8,
        &zero,
    )))
}

impl QGemm {
    /// (M, K, N) for A and B shapes.
    fn dims(&self, a: &[usize], b: &[usize]) -> Result<(usize, usize, usize)> {
        if a.len() != 2 || b.len() != 2 {
            return Err(Error::op(
                OP,
                format!("A and B must be 2-D, found {a:?} and {b:?}"),
            ));
        }
        let (m, k) = if self.trans_a {
            (a[1], a[0])
        } else {
            (a[0], a[1])
        };
        let (k2, n) = if self.trans_b {
            (b[1], b[0])
        } else {
            (b[0], b[1])
        };
        if k != k2 {
            return Err(Error::op(
                OP,
                format!("inner dimensions differ: A {a:?}, B {b:?}"),
            ));
        }
        Ok((m, k, n))
    }
}

impl Operator for QGemm {
    fn cost_class(&self) -> OpClass {
        OpClass::MatMul
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let a = fact(OP, inputs, 0)?;
        let b = fact(OP, inputs, 3)?;
        check8(OP, "A", a.dtype)?;
        check8(OP, "B", b.dtype)?;
        let dtype = match opt_fact(inputs, 8) {
            Some(z) => {
                check8(OP, "y_zero_point", z.dtype)?;
                z.dtype
            }
            None => DType::F32,
        };
        let shape = match (&a.shape, &b.shape) {
            (Some(sa), Some(sb)) => {
                let (m, _, n) = self.dims(sa, sb)?;
                Some(vec![m, n])
            }
            _ => None,
        };
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype,
            shape,
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // 2·M·N·K, K from A's shape.
        let a = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.shape.as_ref());
        let k = match a {
            Some(s) if s.len() == 2 => s[usize::from(!self.trans_a)],
            _ => 1,
        };
        (2 * k as u64 * crate::ops::util::out_len(outputs, 0)).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let a = input(OP, inputs, 0)?;
        let b = input(OP, inputs, 3)?;
        check8(OP, "A", a.dtype())?;
        check8(OP, "B", b.dtype())?;
        let (m, k, n) = self.dims(a.shape(), b.shape())?;
        let sa = scalar_scale(OP, inputs, 1, "a_scale")?;
        input(OP, inputs, 2)?;
        let za = super::scalar_zp(OP, inputs, 2, a.dtype(), "a_zero_point")?;
        // B's scale and zero point: per tensor or per column, same shape.
        let bs_t = input(OP, inputs, 4)?;
        let bz_t = input(OP, inputs, 5)?;
        let per_col = |t: &Tensor| t.shape().len() == 1 && t.len() == n;
        let one = |t: &Tensor| t.len() == 1 && t.shape().len() <= 1;
        if !(one(bs_t) || per_col(bs_t)) || bs_t.shape() != bz_t.shape() {
            return Err(Error::op(
                OP,
                format!(
                    "b_scale and b_zero_point must share one shape, a scalar or [{n}]; found {:?} and {:?}",
                    bs_t.shape(),
                    bz_t.shape()
                ),
            ));
        }
        let bs = scales(OP, "b_scale", bs_t)?;
        zero_points(OP, "b_zero_point", bz_t, b.dtype())?;
        let packed_now;
        let packed = match &self.packed_b {
            Some(p) => p,
            None => {
                packed_now = pack_b(b, bz_t, self.trans_b)?
                    .ok_or_else(|| Error::op(OP, "B must be a contiguous 2-D 8-bit matrix"))?;
                &packed_now
            }
        };
        let left = LeftOperand {
            a: a.as_bytes()
                .ok_or_else(|| Error::op(OP, "A must be contiguous"))?,
            m,
            k,
            trans: self.trans_a,
            signed: a.dtype() == DType::I8,
        };
        let y_scale = match opt_input(inputs, 7) {
            Some(_) => Some(scalar_scale(OP, inputs, 7, "y_scale")?),
            None => None,
        };
        // onnxruntime: alpha · a_scale · b_scale[j] (/ y_scale) in f32.
        let out_scales: Vec<f32> = bs
            .iter()
            .map(|&s| {
                let v = self.alpha * sa * s;
                y_scale.map_or(v, |ys| v / ys)
            })
            .collect();
        let c = match opt_input(inputs, 6) {
            Some(t @ Tensor::I32(values)) => Some((t, values, Bcast::new(OP, t.shape(), &[m, n])?)),
            Some(t) => {
                return Err(Error::op(
                    OP,
                    format!("C must be int32, found {}", t.dtype()),
                ))
            }
            None => None,
        };
        let bias_now;
        let bias = match (&self.bias, &c) {
            (Some(b), Some(_)) => Some(b.as_slice()),
            (_, Some((t, ..))) => {
                bias_now = column_bias(t, n);
                bias_now.as_deref()
            }
            (_, None) => None,
        };
        // Tensors other than a column bias join the sums in a second pass.
        let rest = c
            .filter(|_| bias.is_none())
            .map(|(_, values, map)| (values, map));
        let scale_at = |i: usize| out_scales[if out_scales.len() == 1 { 0 } else { i % n }];
        let product = |sink: &dyn Sink| matrix::product_to_sink(&left, za, packed, bias, sink);
        // The engine's C is Y transposed; one row of Y is contiguous either way.
        let strides = (1, if m == 1 { 1 } else { n });
        match opt_input(inputs, 8) {
            Some(yz) => {
                let t = yz.dtype();
                let (lo, hi) = range8(OP, t)?;
                if t != a.dtype() {
                    return Err(Error::op(
                        OP,
                        format!("y_zero_point is {t} but A is {}", a.dtype()),
                    ));
                }
                if y_scale.is_none() {
                    return Err(Error::op(OP, "y_zero_point is given without y_scale"));
                }
                let zy = super::scalar_zp(OP, inputs, 8, t, "y_zero_point")?;
                let mut out = vec![0u8; m * n];
                match rest {
                    None => product(&QuantSink::new(
                        &mut out,
                        strides,
                        &out_scales,
                        zy,
                        (lo, hi),
                    )),
                    Some((values, map)) => {
                        let acc = with_added(values, &map, m, n, &product);
                        for (i, (o, &v)) in out.iter_mut().zip(&acc).enumerate() {
                            *o = requantize(v, scale_at(i), zy, lo, hi) as u8;
                        }
                    }
                }
                Ok(vec![Tensor::from_bytes(&[m, n], out, t == DType::I8)?])
            }
            None => {
                let mut out = vec![0f32; m * n];
                match rest {
                    None => product(&FloatSink::new(&mut out, strides, &out_scales, None)),
                    Some((values, map)) => {
                        let acc = with_added(values, &map, m, n, &product);
                        for (i, (o, &v)) in out.iter_mut().zip(&acc).enumerate() {
                            *o = v as f32 * scale_at(i);
                        }
                    }
                }
                Ok(vec![Tensor::from_vec(&[m, n], out)?])
            }
        }
    }
}

/// The product's exact sums as `[m][n]` with C (its values and its
/// broadcast to `[m, n]`, both checked by the caller) added.
fn with_added(
    c: &ArrayD<i32>,
    map: &Bcast,
    m: usize,
    n: usize,
    product: &dyn Fn(&dyn Sink),
) -> Vec<i32> {
    let mut acc = vec![0i32; m * n];
    product(&WideSink::new(&mut acc, (1, n)));
    let c: Vec<i32> = c.iter().copied().collect();
    for (i, e) in acc.iter_mut().enumerate() {
        *e = e.wrapping_add(c[map.index(i)]);
    }
    acc
}
