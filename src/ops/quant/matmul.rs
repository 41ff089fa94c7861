//! MatMulInteger and QLinearMatMul: numpy-style batched matrix products of
//! 8-bit (or 16-bit) integers with zero points subtracted, accumulated
//! exactly in wrapping i32; QLinearMatMul then requantizes with
//! `a_scale · b_scale / y_scale` (in the scales' type, as the reference does).

use super::engine::PackedS8;
use super::{int_range, int_tensor, to_i32, Bcast};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::util::{broadcast_shapes, fact, input, opt_input, par_rows};
use crate::tensor::recycle::take_or_default;
use crate::tensor::{DType, Tensor};

const MMI: &str = "MatMulInteger";
const QLM: &str = "QLinearMatMul";

/// Shapes and batch offsets of one numpy `matmul`.
pub(crate) struct Plan {
    pub out: Vec<usize>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a_offs: Vec<usize>,
    pub b_offs: Vec<usize>,
}

pub(crate) fn plan(op: &str, a: &[usize], b: &[usize]) -> Result<Plan> {
    if a.is_empty() || b.is_empty() {
        return Err(Error::op(op, "matmul inputs must have rank ≥ 1"));
    }
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(Error::op(
            op,
            format!("inner dimensions differ: A {a:?}, B {b:?}"),
        ));
    }
    let ab = &a2[..a2.len() - 2];
    let bb = &b2[..b2.len() - 2];
    let batch = broadcast_shapes(op, ab, bb)?;
    let nb: usize = batch.iter().product();
    let ma = Bcast::new(op, ab, &batch)?;
    let mb = Bcast::new(op, bb, &batch)?;
    let a_offs = (0..nb).map(|i| ma.index(i) * m * k).collect();
    let b_offs = (0..nb).map(|i| mb.index(i) * k * n).collect();
    let mut out = batch;
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(Plan {
        out,
        m,
        k,
        n,
        a_offs,
        b_offs,
    })
}

/// The i32 product of the planned matrices (wrapping), parallel over rows.
pub(crate) fn matmul_i32(p: &Plan, a: &[i32], b: &[i32]) -> Vec<i32> {
    let (m, k, n) = (p.m, p.k, p.n);
    let mut out = vec![0i32; p.a_offs.len() * m * n];
    par_rows(&mut out, n, |first, chunk| {
        for (j, row) in chunk.chunks_mut(n.max(1)).enumerate() {
            let r = first + j;
            let (bi, i) = (r / m.max(1), r % m.max(1));
            let ar = &a[p.a_offs[bi] + i * k..][..k];
            let bm = &b[p.b_offs[bi]..][..k * n];
            for (kk, &av) in ar.iter().enumerate() {
                if av == 0 {
                    continue;
                }
                for (o, &bv) in row.iter_mut().zip(&bm[kk * n..(kk + 1) * n]) {
                    *o = o.wrapping_add(av.wrapping_mul(bv));
                }
            }
        }
    });
    out
}

/// The i32 product `(A − za)(B − zb)` of the planned matrices: on the int8
/// engine when both are contiguous 8-bit data with a scalar `za` and a
/// scalar or per-column `zb` (B packed at build when it is a constant
/// matrix, else per batch and run), else by [`matmul_i32`] over shifted
/// values. Both are exact and wrap alike.
fn product(
    op: &str,
    p: &Plan,
    (a, za): (&Tensor, Option<&Tensor>),
    (b, zb): (&Tensor, Option<&Tensor>),
    prepacked: Option<&PackedS8>,
) -> Result<Vec<i32>> {
    if let Some(out) = engine_product(p, (a, za), (b, zb), prepacked)? {
        return Ok(out);
    }
    let av = sub_zero_point(op, a, za)?;
    let bv = sub_zero_point(op, b, zb)?;
    Ok(matmul_i32(p, &av, &bv))
}

/// Whether the engine takes an 8-bit operand `x` with zero point `z`.
fn engine_operand(x: &Tensor, z: Option<&Tensor>) -> bool {
    matches!(x.dtype(), DType::U8 | DType::I8) && z.is_none_or(|z| z.dtype() == x.dtype())
}

/// B's zero point for the engine: one, or one per column of its `n`.
fn engine_zero_b(b: &Tensor, zb: Option<&Tensor>, n: usize) -> Result<Option<Vec<i32>>> {
    Ok(match zb {
        None => Some(vec![0]),
        Some(z) if z.len() == 1 || (z.shape() == [n] && b.shape().len() >= 2) => {
            Some(to_i32("", z)?)
        }
        Some(_) => None,
    })
}

/// A constant 2-D B (with a constant or no zero point) packed once for
/// the engine, where the engine takes it.
pub(crate) fn prepack_b(b: Option<&Tensor>, zb: Option<Option<&Tensor>>) -> Option<PackedS8> {
    let (b, zb) = (b?, zb?);
    let [k, n] = <[usize; 2]>::try_from(b.shape()).ok()?;
    if !engine_operand(b, zb) {
        return None;
    }
    let zero_b = engine_zero_b(b, zb, n).ok()??;
    let bytes = b.as_bytes()?;
    Some(super::engine::matrix::pack_right(
        bytes,
        k,
        n,
        false,
        b.dtype() == DType::I8,
        &zero_b,
    ))
}

/// [`product`] on the engine, or `None` where it does not apply.
pub(super) fn engine_product(
    p: &Plan,
    a: (&Tensor, Option<&Tensor>),
    b: (&Tensor, Option<&Tensor>),
    prepacked: Option<&PackedS8>,
) -> Result<Option<Vec<i32>>> {
    // Every element is written by its batch's product.
    let mut out = take_or_default::<i32>(p.a_offs.len() * p.m * p.n);
    let done = engine_batches(p, a, b, prepacked, &mut |row0, left, zero_a, w| {
        let chunk = &mut out[row0 * p.n..][..left.m * p.n];
        super::engine::matrix::product_into(left, zero_a, w, chunk);
    })?;
    Ok(done.then_some(out))
}

/// `f32((A − za)(B − zb)) · scale[j] + bias[j]` on the engine (see
/// [`product_scaled_into`](super::engine::matrix::product_scaled_into)),
/// with the operands as [`engine_product`] takes them; `None` where it
/// does not apply.
pub(crate) fn engine_product_scaled(
    p: &Plan,
    a: (&Tensor, Option<&Tensor>),
    b: (&Tensor, Option<&Tensor>),
    prepacked: Option<&PackedS8>,
    (scale, bias): (&[f32], Option<&[f32]>),
) -> Result<Option<Vec<f32>>> {
    let mut out = take_or_default::<f32>(p.a_offs.len() * p.m * p.n);
    let done = engine_batches(p, a, b, prepacked, &mut |row0, left, zero_a, w| {
        let chunk = &mut out[row0 * p.n..][..left.m * p.n];
        super::engine::matrix::product_scaled_into(left, zero_a, w, chunk, (scale, bias));
    })?;
    Ok(done.then_some(out))
}

/// One product of the batches: (its first row in the output's rows, A's
/// operand, A's zero point, packed B).
type BatchFn<'f> = dyn FnMut(usize, &super::engine::matrix::LeftOperand, i32, &PackedS8) + 'f;

/// Hands each batch of the planned product to `each` with its operands on
/// the engine (B packed at build when shared, else per batch); `false`
/// (nothing run) where the engine does not take the operands. Batches of a
/// contiguous A sharing one B are one product of all their rows (a linear
/// layer on `[L, 1, k]` is one `[L, k]` product, not L vector products).
fn engine_batches(
    p: &Plan,
    (a, za): (&Tensor, Option<&Tensor>),
    (b, zb): (&Tensor, Option<&Tensor>),
    prepacked: Option<&PackedS8>,
    each: &mut BatchFn,
) -> Result<bool> {
    use super::engine::matrix::{pack_right, LeftOperand};
    let (Some(ab), Some(bb)) = (a.as_bytes(), b.as_bytes()) else {
        return Ok(false);
    };
    if !engine_operand(a, za) || !engine_operand(b, zb) {
        return Ok(false);
    }
    let (m, k, n) = (p.m, p.k, p.n);
    let zero_a = match za.map(|z| to_i32("", z)).transpose()? {
        None => 0,
        Some(v) if v.len() == 1 => v[0],
        Some(_) => return Ok(false),
    };
    let Some(zero_b) = engine_zero_b(b, zb, n)? else {
        return Ok(false);
    };
    let one_b = p.b_offs.iter().all(|&o| o == 0);
    // One B for every batch, packed at build.
    let shared = prepacked.filter(|w| (w.rows, w.k) == (n, k) && one_b);
    let nb = p.a_offs.len();
    let a_whole = p.a_offs.iter().enumerate().all(|(i, &o)| o == i * m * k);
    // (batches per product, rows per product)
    let (step, rows) = if one_b && a_whole && nb > 1 {
        (nb, nb * m)
    } else {
        (1, m)
    };
    for bi in (0..nb).step_by(step) {
        let left = LeftOperand {
            a: &ab[p.a_offs[bi]..][..rows * k],
            m: rows,
            k,
            trans: false,
            signed: a.dtype() == DType::I8,
        };
        match shared {
            Some(w) => each(bi * m, &left, zero_a, w),
            None => {
                let right = pack_right(
                    &bb[p.b_offs[bi]..][..k * n],
                    k,
                    n,
                    false,
                    b.dtype() == DType::I8,
                    &zero_b,
                );
                each(bi * m, &left, zero_a, &right);
            }
        }
    }
    Ok(true)
}

/// `x - zp` with the zero point broadcast numpy-style against `x`.
pub(super) fn sub_zero_point(op: &str, x: &Tensor, zp: Option<&Tensor>) -> Result<Vec<i32>> {
    let mut v = to_i32(op, x)?;
    if let Some(z) = zp {
        if z.dtype() != x.dtype() {
            return Err(Error::op(
                op,
                format!(
                    "zero point type {} differs from input type {}",
                    z.dtype(),
                    x.dtype()
                ),
            ));
        }
        let zv = to_i32(op, z)?;
        let map = Bcast::new(op, z.shape(), x.shape())?;
        for (i, e) in v.iter_mut().enumerate() {
            *e = e.wrapping_sub(zv[map.index(i)]);
        }
    }
    Ok(v)
}

fn check_int8(op: &str, t: DType) -> Result<()> {
    if matches!(t, DType::U8 | DType::I8) {
        Ok(())
    } else {
        Err(Error::op(
            op,
            format!("expected uint8 or int8 data, found {t}"),
        ))
    }
}

pub(crate) fn matmul_flops(inputs: &[Option<&Fact>], a: usize, b: usize) -> u64 {
    let shape = |i: usize| {
        inputs
            .get(i)
            .copied()
            .flatten()
            .and_then(|f| f.shape.clone())
    };
    match (shape(a), shape(b)) {
        (Some(sa), Some(sb)) => plan("", &sa, &sb)
            .map(|p| 2 * (p.a_offs.len() * p.m * p.k * p.n) as u64)
            .unwrap_or(0)
            .max(1),
        _ => 1,
    }
}

fn infer_shape(op: &str, inputs: &[InferInput], a: usize, b: usize) -> Result<Option<Vec<usize>>> {
    let fa = fact(op, inputs, a)?;
    let fb = fact(op, inputs, b)?;
    check_int8(op, fa.dtype)?;
    check_int8(op, fb.dtype)?;
    Ok(match (&fa.shape, &fb.shape) {
        (Some(sa), Some(sb)) => Some(plan(op, sa, sb)?.out),
        _ => None,
    })
}

/// A built MatMulInteger: B packed at build when constant.
#[derive(Debug)]
struct MatMulInteger {
    packed_b: Option<PackedS8>,
}

/// Input `i` of a node being built: its constant value (outer `None`: a
/// present input that is not constant; inner `None`: absent).
pub(crate) fn constant_or_absent<'a>(
    ctx: &BuildContext<'a>,
    i: usize,
) -> Option<Option<&'a Tensor>> {
    match ctx.consts.get(i).copied().flatten() {
        Some(t) => Some(Some(t)),
        None if i >= ctx.num_inputs => Some(None),
        None => None,
    }
}

pub(super) fn build_matmul_integer(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(MatMulInteger {
        packed_b: prepack_b(ctx.constant(1), constant_or_absent(ctx, 3)),
    }))
}

impl Operator for MatMulInteger {
    fn cost_class(&self) -> OpClass {
        OpClass::MatMul
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let shape = infer_shape(MMI, inputs, 0, 1)?;
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: DType::I32,
            shape,
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        matmul_flops(inputs, 0, 1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let a = input(MMI, inputs, 0)?;
        let b = input(MMI, inputs, 1)?;
        check_int8(MMI, a.dtype())?;
        check_int8(MMI, b.dtype())?;
        let p = plan(MMI, a.shape(), b.shape())?;
        let out = product(
            MMI,
            &p,
            (a, opt_input(inputs, 2)),
            (b, opt_input(inputs, 3)),
            self.packed_b.as_ref(),
        )?;
        Ok(vec![Tensor::from_vec(&p.out, out)?])
    }
}

/// A built QLinearMatMul: B packed at build when constant.
#[derive(Debug)]
struct QLinearMatMul {
    packed_b: Option<PackedS8>,
}

pub(super) fn build_qlinear_matmul(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(QLinearMatMul {
        packed_b: prepack_b(ctx.constant(3), ctx.constant(5).map(Some)),
    }))
}

/// Requantizes i32 accumulators: `round(acc · s) + zp`, saturated to `t`,
/// where `s` (per output element through `scale`) is already in f64.
pub(super) fn requantize(
    op: &str,
    acc: &[i32],
    scale: impl Fn(usize) -> f64 + Sync,
    zp: impl Fn(usize) -> f64 + Sync,
    t: DType,
    shape: &[usize],
) -> Result<Tensor> {
    let (lo, hi) = int_range(op, t)?;
    let mut out = vec![0i64; acc.len()];
    par_rows(&mut out, 1, |first, chunk| {
        for (j, o) in chunk.iter_mut().enumerate() {
            let i = first + j;
            let d = acc[i] as f64 * scale(i) + zp(i);
            *o = d.round_ties_even().clamp(lo as f64, hi as f64) as i64;
        }
    });
    int_tensor(op, t, shape, out)
}

impl Operator for QLinearMatMul {
    fn cost_class(&self) -> OpClass {
        OpClass::MatMul
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let shape = infer_shape(QLM, inputs, 0, 3)?;
        let t = fact(QLM, inputs, 7)?.dtype;
        check_int8(QLM, t)?;
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: t,
            shape,
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        matmul_flops(inputs, 0, 3) + 3 * crate::ops::util::out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let get = |i| input(QLM, inputs, i);
        let (a, b) = (get(0)?, get(3)?);
        check_int8(QLM, a.dtype())?;
        check_int8(QLM, b.dtype())?;
        let yz = get(7)?;
        check_int8(QLM, yz.dtype())?;
        let p = plan(QLM, a.shape(), b.shape())?;
        let acc = product(
            QLM,
            &p,
            (a, Some(get(2)?)),
            (b, Some(get(5)?)),
            self.packed_b.as_ref(),
        )?;
        let scales = [get(1)?, get(4)?, get(6)?];
        let st = scales[0].dtype();
        if scales.iter().any(|s| s.dtype() != st) || !st.is_float() {
            return Err(Error::op(QLM, "scales must share one floating-point type"));
        }
        let sv: Vec<Vec<f64>> = scales
            .iter()
            .map(|s| super::float_values(QLM, s))
            .collect::<Result<_>>()?;
        let maps: Vec<Bcast> = scales
            .iter()
            .map(|s| Bcast::new(QLM, s.shape(), &p.out))
            .collect::<Result<_>>()?;
        let zv = to_i32(QLM, yz)?;
        let zm = Bcast::new(QLM, yz.shape(), &p.out)?;
        // numpy: a_scale * b_scale / y_scale in the scale type, then f64.
        let scale = |i: usize| {
            let ab = super::round_to(st, sv[0][maps[0].index(i)] * sv[1][maps[1].index(i)]);
            super::round_to(st, ab / sv[2][maps[2].index(i)])
        };
        let out = requantize(
            QLM,
            &acc,
            scale,
            |i| zv[zm.index(i)] as f64,
            yz.dtype(),
            &p.out,
        )?;
        Ok(vec![out])
    }
}
