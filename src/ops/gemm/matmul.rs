//! `MatMul`: numpy-style matrix product with broadcast batch dimensions and
//! 1-D operands promoted (and their unit dimension removed from the result).
//! A batch that shares one B is folded into a single taller product.
//!
//! A load-time fusion (`graph::fuse`) may give a float32 MatMul a bias
//! along the last axis (`Fusion::bias`, the bias as input 2:
//! the `Add` after a linear layer) and an activation (see `fused`), both
//! applied to each output block right after it is computed, with the same
//! roundings as the separate nodes.

use super::engine::{Batched, Block, GemmFloat, Mat};
use super::fused::Activation;
use super::int::{int_matmul, IntElem};
use super::{checked_product, contiguous, from_f32_vec, to_f32_vec};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, FusionKind, InferInput, OpClass, Operator};
use crate::ops::parallel::SendPtr;
use crate::ops::util::{broadcast_shapes, fact, input};
use crate::tensor::{DType, Element, Tensor};
use ndarray::{ArrayD, IxDyn};

const OP: &str = "MatMul";

/// A built MatMul node.
#[derive(Debug)]
struct MatMulOp {
    /// A constant half-precision B, converted to f32 once at build.
    b_f32: Option<Vec<f32>>,
    /// A constant float32 2-D B packed for the register-blocked kernel.
    #[cfg(target_arch = "x86_64")]
    packed: Option<super::packed::PackedWeights>,
    /// Whether a fused bias comes as input 2.
    bias: bool,
    /// A fused activation.
    act: Option<Activation>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let b_f32 = match ctx.constant(1) {
        Some(t @ (Tensor::F16(_) | Tensor::BF16(_))) => Some(to_f32_vec(OP, t)?),
        _ => None,
    };
    Ok(Box::new(MatMulOp {
        b_f32,
        #[cfg(target_arch = "x86_64")]
        packed: match ctx.constant(1) {
            Some(Tensor::F32(w)) if w.ndim() == 2 => {
                super::packed::PackedWeights::new(&contiguous(w), w.shape()[0], w.shape()[1], false)
            }
            _ => None,
        },
        bias: ctx.fusion.bias,
        act: ctx.fusion.activation,
    }))
}

/// What a fused MatMul applies to each output block: `+ bias` along the
/// last axis, then the activation.
#[derive(Clone, Copy)]
pub(crate) struct Epilogue<'a> {
    /// One value per output column.
    pub bias: Option<&'a [f32]>,
    /// The activation after the bias.
    pub act: Option<Activation>,
}

impl Epilogue<'_> {
    fn is_empty(&self) -> bool {
        self.bias.is_none() && self.act.is_none()
    }
}

/// The product's layout: `batches` products of m×k by k×n, with the element
/// offsets of each batch's A and B, and the output shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// Output shape.
    pub out: Vec<usize>,
    /// Rows of each product (batches of A sharing one B are folded in).
    pub m: usize,
    /// Inner dimension.
    pub k: usize,
    /// Columns of each product.
    pub n: usize,
    /// Offset of each batch's A.
    pub a_offs: Vec<usize>,
    /// Offset of each batch's B.
    pub b_offs: Vec<usize>,
}

/// The output shape of a MatMul, checking the operands.
pub(crate) fn out_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    Ok(shapes(a, b)?.0)
}

type Shapes = (
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    usize,
    usize,
    usize,
);

/// (output shape, batch shape, A's batch, B's batch, m, k, n).
fn shapes(a: &[usize], b: &[usize]) -> Result<Shapes> {
    if a.is_empty() || b.is_empty() {
        return Err(Error::op(
            OP,
            format!("operands must have rank ≥ 1, found shapes {a:?} and {b:?}"),
        ));
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
    let (ra, rb) = (a2.len(), b2.len());
    let (m, k, k2, n) = (a2[ra - 2], a2[ra - 1], b2[rb - 2], b2[rb - 1]);
    if k != k2 {
        return Err(Error::op(
            OP,
            format!("inner dimensions differ: shapes {a:?} and {b:?}"),
        ));
    }
    let (ba, bb) = (a2[..ra - 2].to_vec(), b2[..rb - 2].to_vec());
    let batch = broadcast_shapes(OP, &ba, &bb)?;
    let mut out = batch.clone();
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok((out, batch, ba, bb, m, k, n))
}

/// Offsets (in matrices) of each output batch into an operand with batch
/// shape `own`, right-aligned and broadcast against `batch`.
fn batch_offsets(batch: &[usize], own: &[usize]) -> Vec<usize> {
    let total: usize = batch.iter().product();
    let r = batch.len();
    let pad = r - own.len();
    // Row-major strides of the operand's own batch dims, 0 where broadcast.
    let mut strides = vec![0usize; r];
    let mut s = 1;
    for i in (0..own.len()).rev() {
        strides[pad + i] = if own[i] == 1 { 0 } else { s };
        s *= own[i];
    }
    let mut offs = Vec::with_capacity(total);
    let mut idx = vec![0usize; r];
    for _ in 0..total {
        offs.push(idx.iter().zip(&strides).map(|(i, s)| i * s).sum());
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < batch[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    offs
}

/// The full plan for operands of these shapes.
pub(crate) fn plan(a: &[usize], b: &[usize]) -> Result<Plan> {
    let (out, batch, ba, bb, m, k, n) = shapes(a, b)?;
    checked_product(OP, &out)?;
    checked_product(OP, &batch)?;
    let b_count: usize = bb.iter().product();
    if b_count == 1 {
        // One B for every batch: A's batches (contiguous) form one tall A.
        let rows = checked_product(OP, &ba)? * m;
        return Ok(Plan {
            out,
            m: rows,
            k,
            n,
            a_offs: vec![0],
            b_offs: vec![0],
        });
    }
    let a_offs = batch_offsets(&batch, &ba)
        .into_iter()
        .map(|o| o * m * k)
        .collect();
    let b_offs = batch_offsets(&batch, &bb)
        .into_iter()
        .map(|o| o * k * n)
        .collect();
    Ok(Plan {
        out,
        m,
        k,
        n,
        a_offs,
        b_offs,
    })
}

/// Runs a float plan: returns the row-major output data.
pub(crate) fn float_matmul<T: GemmFloat>(p: &Plan, a: &[T], b: &[T]) -> Vec<T> {
    float_matmul_fused(
        p,
        a,
        b,
        Epilogue {
            bias: None,
            act: None,
        },
    )
}

/// Runs an f32 plan with a fused epilogue (the bias has `p.n` values).
fn float_matmul_fused<T: GemmFloat>(p: &Plan, a: &[T], b: &[T], fused: Epilogue<'_>) -> Vec<T> {
    let batches = p.a_offs.len();
    let (m, k, n) = (p.m, p.k, p.n);
    let mut out = fresh_output::<T>(batches * m * n, k);
    let outp = SendPtr(out.as_mut_ptr());
    let (ap, bp) = (Mat::row_major(a.as_ptr(), k), Mat::row_major(b.as_ptr(), n));
    let bias: Option<Vec<T>> = fused
        .bias
        .map(|v| v.iter().map(|&x| T::cast_f32(x)).collect());
    let epi = |blk: Block| {
        for i in blk.r0..blk.r1 {
            let start = blk.batch * m * n + i * n + blk.c0;
            // SAFETY: the block's rows and columns belong to this task alone.
            let row = unsafe { outp.slice(start, blk.c1 - blk.c0) };
            if let Some(bias) = &bias {
                for (v, &b) in row.iter_mut().zip(&bias[blk.c0..blk.c1]) {
                    *v = *v + b;
                }
            }
            if let Some(act) = fused.act {
                act.apply(row);
            }
        }
    };
    let job = Batched {
        batches,
        m,
        n,
        k,
        alpha: T::one(),
        // SAFETY (offsets): computed from the operands' own shapes.
        a: &|i| ap.offset(p.a_offs[i]),
        b: &|i| bp.offset(p.b_offs[i]),
        c: &|i| outp.offset(i * m * n),
        epilogue: (!fused.is_empty()).then_some(&epi as &(dyn Fn(Block) + Sync)),
    };
    // SAFETY: the plan's sizes and offsets lie inside `a`, `b` and `out`.
    unsafe { job.run() };
    out
}

/// An output buffer the product overwrites: recycled (no zero-fill, no
/// fresh pages to fault in on every run), zeroed only when the inner
/// dimension is empty and the product writes nothing.
pub(crate) fn fresh_output<T: GemmFloat>(len: usize, k: usize) -> Vec<T> {
    let mut out = T::take_buffer(len);
    if k == 0 {
        out.fill(T::zero());
    }
    out
}

fn int_run<T: IntElem + Element>(p: &Plan, a: &ArrayD<T>, b: &ArrayD<T>) -> Result<Tensor> {
    let mut out = vec![T::zero(); p.a_offs.len() * p.m * p.n];
    int_matmul(
        &contiguous(a),
        &contiguous(b),
        p.m,
        p.k,
        p.n,
        &p.a_offs,
        &p.b_offs,
        &mut out,
    );
    wrap(&p.out, out)
}

fn wrap<T: Element>(shape: &[usize], v: Vec<T>) -> Result<Tensor> {
    ArrayD::from_shape_vec(IxDyn(shape), v)
        .map(T::into_tensor)
        .map_err(|e| Error::op(OP, e.to_string()))
}

fn check_types(a: DType, b: DType) -> Result<()> {
    if !matches!(
        a,
        DType::F32
            | DType::F64
            | DType::F16
            | DType::BF16
            | DType::I32
            | DType::I64
            | DType::U32
            | DType::U64
    ) {
        return Err(Error::op(OP, format!("unsupported element type {a}")));
    }
    if a != b {
        return Err(Error::op(
            OP,
            format!("operands must share one element type, found {a} and {b}"),
        ));
    }
    Ok(())
}

impl MatMulOp {
    /// The product through the packed constant B, when there is one and
    /// this call multiplies f32 activations by that B (a batch of A folded
    /// into one tall A); None otherwise.
    #[cfg(target_arch = "x86_64")]
    fn run_packed(
        &self,
        p: &Plan,
        a: &Tensor,
        b: &Tensor,
        fused: Epilogue<'_>,
    ) -> Option<Result<Tensor>> {
        let packed = self.packed.as_ref()?;
        let (Tensor::F32(x), Tensor::F32(_)) = (a, b) else {
            return None;
        };
        let single = p.a_offs == [0] && p.b_offs == [0];
        if !single
            || b.shape() != [packed.k(), packed.n()]
            || (p.k, p.n) != (packed.k(), packed.n())
        {
            return None;
        }
        let mut out = fresh_output::<f32>(p.m * p.n, p.k);
        let epi = super::packed::PackedEpilogue {
            bias: fused.bias,
            act: fused.act,
        };
        Some(
            packed
                .matmul(OP, &contiguous(x), p.m, epi, &mut out)
                .and_then(|()| wrap(&p.out, out)),
        )
    }

    /// A float32 product with the fused bias and activation.
    fn run_fused(
        &self,
        p: &Plan,
        a: &Tensor,
        b: &Tensor,
        inputs: &[Option<&Tensor>],
    ) -> Result<Tensor> {
        let (Tensor::F32(x), Tensor::F32(y)) = (a, b) else {
            return Err(Error::op(
                OP,
                format!(
                    "a fused bias or activation needs float32 operands, found {}",
                    a.dtype()
                ),
            ));
        };
        let bias = if self.bias {
            match input(OP, inputs, 2)? {
                Tensor::F32(v) if v.len() == p.n => Some(contiguous(v)),
                t => {
                    return Err(Error::op(
                        OP,
                        format!(
                            "the fused bias must be float32 with {} values (one per column), found {} of shape {:?}",
                            p.n,
                            t.dtype(),
                            t.shape()
                        ),
                    ))
                }
            }
        } else {
            None
        };
        let fused = Epilogue {
            bias: bias.as_deref(),
            act: self.act,
        };
        #[cfg(target_arch = "x86_64")]
        if let Some(out) = self.run_packed(p, a, b, fused) {
            return out;
        }
        wrap(
            &p.out,
            float_matmul_fused(p, &contiguous(x), &contiguous(y), fused),
        )
    }
}

impl Operator for MatMulOp {
    /// A bias (input 2, before any activation) and an activation, on a
    /// float32 product.
    fn accepts_fusion(&self, kind: FusionKind, inputs: &[InferInput]) -> bool {
        let f32_data = inputs
            .first()
            .and_then(|i| i.fact)
            .is_some_and(|f| f.dtype == DType::F32);
        f32_data
            && self.act.is_none()
            && match kind {
                FusionKind::Bias => inputs.len() == 2 && !self.bias,
                FusionKind::Activation => true,
                _ => false,
            }
    }

    fn cost_class(&self) -> OpClass {
        OpClass::MatMul
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let (a, b) = (fact(OP, inputs, 0)?, fact(OP, inputs, 1)?);
        check_types(a.dtype, b.dtype)?;
        if (self.bias || self.act.is_some()) && a.dtype != DType::F32 {
            return Err(Error::op(
                OP,
                format!(
                    "a fused bias or activation needs float32 operands, found {}",
                    a.dtype
                ),
            ));
        }
        Ok(vec![match (&a.shape, &b.shape) {
            (Some(sa), Some(sb)) => Fact::new(a.dtype, out_shape(sa, sb)?),
            _ => Fact::unknown_shape(a.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        let shape = |i: usize| {
            inputs
                .get(i)
                .copied()
                .flatten()
                .and_then(|f| f.shape.clone())
        };
        match (shape(0), shape(1)) {
            (Some(a), Some(b)) => match plan(&a, &b) {
                Ok(p) => {
                    (2 * p.a_offs.len() as u64 * p.m as u64 * p.n as u64 * p.k.max(1) as u64).max(1)
                }
                Err(_) => 1,
            },
            _ => 1,
        }
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (a, b) = (input(OP, inputs, 0)?, input(OP, inputs, 1)?);
        check_types(a.dtype(), b.dtype())?;
        let p = plan(a.shape(), b.shape())?;
        if self.bias || self.act.is_some() {
            return self.run_fused(&p, a, b, inputs).map(|t| vec![t]);
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(out) = self.run_packed(
            &p,
            a,
            b,
            Epilogue {
                bias: None,
                act: None,
            },
        ) {
            return out.map(|t| vec![t]);
        }
        let out = match (a, b) {
            (Tensor::F32(x), Tensor::F32(y)) => {
                wrap(&p.out, float_matmul(&p, &contiguous(x), &contiguous(y)))?
            }
            (Tensor::F64(x), Tensor::F64(y)) => {
                wrap(&p.out, float_matmul(&p, &contiguous(x), &contiguous(y)))?
            }
            (Tensor::F16(_), _) | (Tensor::BF16(_), _) => {
                let av = to_f32_vec(OP, a)?;
                let bv = match &self.b_f32 {
                    Some(v) if v.len() == b.len() => std::borrow::Cow::Borrowed(v.as_slice()),
                    _ => std::borrow::Cow::Owned(to_f32_vec(OP, b)?),
                };
                from_f32_vec(OP, a, &p.out, float_matmul(&p, &av, &bv))?
            }
            (Tensor::I32(x), Tensor::I32(y)) => int_run(&p, x, y)?,
            (Tensor::I64(x), Tensor::I64(y)) => int_run(&p, x, y)?,
            (Tensor::U32(x), Tensor::U32(y)) => int_run(&p, x, y)?,
            (Tensor::U64(x), Tensor::U64(y)) => int_run(&p, x, y)?,
            _ => {
                return Err(Error::op(
                    OP,
                    format!("unsupported element type {}", a.dtype()),
                ))
            }
        };
        Ok(vec![out])
    }
}
