//! `Gemm`: `Y = alpha·A'·B' + beta·C`, with A' and B' optionally transposed,
//! C unidirectionally broadcast to (M, N) and optional from opset 11, and an
//! optional fused activation applied to each output block.

use super::engine::{Batched, Block, GemmFloat, Mat};
use super::fused::Activation;
use super::int::{int_matmul, IntElem};
use super::{contiguous, from_f32_vec, to_f32_vec};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, FusionKind, InferInput, OpClass, Operator};
use crate::ops::parallel::SendPtr;
use crate::ops::util::{fact, input, opt_fact, opt_input, out_len, takes_weighted_activation};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const OP: &str = "Gemm";

/// A built Gemm node.
#[derive(Debug)]
struct GemmOp {
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
    act: Option<Activation>,
    /// A constant half-precision B, converted to f32 once at build.
    b_f32: Option<Vec<f32>>,
    /// A constant float32 B (with alpha = 1) packed for the
    /// register-blocked kernel.
    #[cfg(target_arch = "x86_64")]
    packed: Option<super::packed::PackedWeights>,
}

/// Sizes of one Gemm: A' is m×k, B' is k×n; C's (row, column) strides when
/// broadcast to m×n.
#[derive(Debug, Clone, Copy)]
struct Dims {
    m: usize,
    k: usize,
    n: usize,
    c: Option<(usize, usize)>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let at = ctx.attrs;
    let b_f32 = match ctx.constant(1) {
        Some(t @ (Tensor::F16(_) | Tensor::BF16(_))) => Some(to_f32_vec(OP, t)?),
        _ => None,
    };
    let (alpha, trans_b) = (at.float("alpha", 1.0)?, at.int("transB", 0)? != 0);
    #[cfg(target_arch = "x86_64")]
    let packed = match ctx.constant(1) {
        Some(Tensor::F32(w)) if w.ndim() == 2 && alpha == 1.0 => {
            let (rows, cols) = (w.shape()[0], w.shape()[1]);
            let (k, n) = if trans_b { (cols, rows) } else { (rows, cols) };
            super::packed::PackedWeights::new(&contiguous(w), k, n, trans_b)
        }
        _ => None,
    };
    Ok(Box::new(GemmOp {
        alpha,
        beta: at.float("beta", 1.0)?,
        trans_a: at.int("transA", 0)? != 0,
        trans_b,
        act: ctx.fusion.activation,
        b_f32,
        #[cfg(target_arch = "x86_64")]
        packed,
    }))
}

fn supported(t: DType) -> bool {
    matches!(
        t,
        DType::F32
            | DType::F64
            | DType::F16
            | DType::BF16
            | DType::I32
            | DType::I64
            | DType::U32
            | DType::U64
    )
}

impl GemmOp {
    fn dims(&self, a: &[usize], b: &[usize], c: Option<&[usize]>) -> Result<Dims> {
        if a.len() != 2 || b.len() != 2 {
            return Err(Error::op(
                OP,
                format!("A and B must be 2-D, found shapes {a:?} and {b:?}"),
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
                format!(
                    "inner dimensions differ: A{} is {a:?}, B{} is {b:?}",
                    if self.trans_a { "ᵀ" } else { "" },
                    if self.trans_b { "ᵀ" } else { "" }
                ),
            ));
        }
        let c = match c {
            None => None,
            Some(cs) => {
                if cs.len() > 2 {
                    return Err(Error::op(
                        OP,
                        format!("C must have rank ≤ 2, found shape {cs:?}"),
                    ));
                }
                let cm = if cs.len() == 2 { cs[0] } else { 1 };
                let cn = cs.last().copied().unwrap_or(1);
                if (cm != 1 && cm != m) || (cn != 1 && cn != n) {
                    return Err(Error::op(
                        OP,
                        format!("C of shape {cs:?} does not broadcast to [{m}, {n}]"),
                    ));
                }
                Some((if cm == 1 { 0 } else { cn }, usize::from(cn != 1)))
            }
        };
        Ok(Dims { m, k, n, c })
    }

    fn check_types(&self, a: DType, b: DType, c: Option<DType>) -> Result<()> {
        if !supported(a) {
            return Err(Error::op(OP, format!("unsupported element type {a}")));
        }
        if b != a || c.is_some_and(|c| c != a) {
            return Err(Error::op(
                OP,
                format!(
                    "inputs must share one element type, found {a}, {b}{}",
                    c.map(|c| format!(", {c}")).unwrap_or_default()
                ),
            ));
        }
        if self.act.is_some() && !a.is_float() {
            return Err(Error::op(
                OP,
                format!("a fused activation needs floating-point data, found {a}"),
            ));
        }
        Ok(())
    }

    /// The product through the packed constant B, when there is one and
    /// this call fits it: A not transposed, alpha = 1 and C (if any)
    /// broadcast along rows, which then adds `beta·C` as a bias per column
    /// (the same bits as the general path's epilogue). None otherwise.
    #[cfg(target_arch = "x86_64")]
    fn run_packed(
        &self,
        a: &ArrayD<f32>,
        b: Option<&Tensor>,
        c: Option<&Tensor>,
        d: Dims,
    ) -> Option<Result<Tensor>> {
        let packed = self.packed.as_ref()?;
        let b_shape = if self.trans_b { [d.n, d.k] } else { [d.k, d.n] };
        // No B: the graph handed it over (`adopt_constant`), as packed.
        if self.trans_a
            || self.alpha != 1.0
            || (d.k, d.n) != (packed.k(), packed.n())
            || b.is_some_and(|b| b.shape() != b_shape || b.dtype() != DType::F32)
        {
            return None;
        }
        let bias: Option<Vec<f32>> = match (c, d.c) {
            (Some(_), Some(_)) if self.beta == 0.0 => None,
            (Some(Tensor::F32(c)), Some((0, cs))) => {
                let c = contiguous(c);
                Some((0..d.n).map(|j| self.beta * c[j * cs]).collect())
            }
            (None, _) | (_, None) => None,
            _ => return None,
        };
        let mut out = super::matmul::fresh_output::<f32>(d.m * d.n, d.k);
        let epi = super::packed::PackedEpilogue {
            bias: bias.as_deref(),
            act: self.act,
        };
        Some(
            packed
                .matmul(OP, &contiguous(a), d.m, epi, &mut out)
                .and_then(|()| wrap(&[d.m, d.n], out)),
        )
    }

    fn float_gemm<T: GemmFloat>(&self, a: &[T], b: &[T], c: Option<&[T]>, d: Dims) -> Vec<T> {
        let Dims { m, k, n, .. } = d;
        let mut out = super::matmul::fresh_output::<T>(m * n, k);
        let am = if self.trans_a {
            Mat {
                ptr: a.as_ptr(),
                rs: 1,
                cs: m as isize,
            }
        } else {
            Mat::row_major(a.as_ptr(), k)
        };
        let bm = if self.trans_b {
            Mat {
                ptr: b.as_ptr(),
                rs: 1,
                cs: k as isize,
            }
        } else {
            Mat::row_major(b.as_ptr(), n)
        };
        let outp = SendPtr(out.as_mut_ptr());
        let cast = |v: f32| T::from(v).unwrap_or_else(T::nan);
        let (alpha, beta) = (cast(self.alpha), cast(self.beta));
        let c = match (c, d.c) {
            (Some(c), Some(strides)) if self.beta != 0.0 => Some((c, strides)),
            _ => None,
        };
        let act = self.act;
        let epi = |blk: Block| {
            for i in blk.r0..blk.r1 {
                // SAFETY: the block's rows and columns belong to this task alone.
                let row = unsafe { outp.slice(i * n + blk.c0, blk.c1 - blk.c0) };
                if let Some((c, (rs, cs))) = c {
                    for (j, v) in (blk.c0..blk.c1).zip(row.iter_mut()) {
                        *v = *v + beta * c[i * rs + j * cs];
                    }
                }
                if let Some(act) = act {
                    act.apply(row);
                }
            }
        };
        let job = Batched {
            batches: 1,
            m,
            n,
            k,
            alpha,
            a: &|_| am,
            b: &|_| bm,
            c: &|_| outp,
            epilogue: (c.is_some() || act.is_some()).then_some(&epi as &(dyn Fn(Block) + Sync)),
        };
        // SAFETY: A, B and the output buffer match the sizes checked in `dims`.
        unsafe { job.run() };
        out
    }

    fn int_gemm<T: IntElem>(
        &self,
        a: &ArrayD<T>,
        b: &ArrayD<T>,
        c: Option<&ArrayD<T>>,
        d: Dims,
    ) -> Vec<T> {
        let Dims { m, k, n, .. } = d;
        let row_major = |x: &ArrayD<T>, t: bool| -> Vec<T> {
            if t {
                x.t().iter().copied().collect()
            } else {
                x.iter().copied().collect()
            }
        };
        let (a, b) = (row_major(a, self.trans_a), row_major(b, self.trans_b));
        let mut out = vec![T::zero(); m * n];
        int_matmul(&a, &b, m, k, n, &[0], &[0], &mut out);
        let c = match (c, d.c) {
            (Some(c), Some(s)) if self.beta != 0.0 => Some((contiguous(c), s)),
            _ => None,
        };
        let exact = self.alpha == 1.0 && (c.is_none() || self.beta == 1.0);
        for i in 0..m {
            for j in 0..n {
                let v = &mut out[i * n + j];
                let cv = c.as_ref().map(|(c, (rs, cs))| c[i * rs + j * cs]);
                *v = if exact {
                    cv.map_or(*v, |cv| v.wrapping_add(&cv))
                } else {
                    T::from_f64(
                        self.alpha as f64 * v.to_f64()
                            + cv.map_or(0.0, |cv| self.beta as f64 * cv.to_f64()),
                    )
                };
            }
        }
        out
    }
}

fn wrap<T: crate::tensor::Element>(shape: &[usize], v: Vec<T>) -> Result<Tensor> {
    ArrayD::from_shape_vec(IxDyn(shape), v)
        .map(T::into_tensor)
        .map_err(|e| Error::op(OP, e.to_string()))
}

/// A run without a B input, B being held packed.
#[cfg(target_arch = "x86_64")]
enum Adopted {
    /// The packed kernel took the call.
    Ran(Tensor),
    /// B unpacked for a call the packed kernel does not take.
    Unpacked(Tensor),
}

#[cfg(target_arch = "x86_64")]
impl GemmOp {
    /// The run without a B input: B was adopted from the graph and is held
    /// only packed.
    fn adopted_b(&self, a: &Tensor, c: Option<&Tensor>) -> Result<Adopted> {
        if let Some(packed) = &self.packed {
            let (k, n) = (packed.k(), packed.n());
            let b_shape = if self.trans_b { [n, k] } else { [k, n] };
            if let Tensor::F32(x) = a {
                let d = self.dims(a.shape(), &b_shape, c.map(|c| c.shape()))?;
                if let Some(out) = self.run_packed(x, None, c, d) {
                    return out.map(Adopted::Ran);
                }
            }
            let b = Tensor::from_vec(&b_shape, packed.unpack(self.trans_b))?;
            return Ok(Adopted::Unpacked(b));
        }
        Err(Error::op(OP, "input 1 (B) is missing"))
    }
}

impl Operator for GemmOp {
    /// B, when it is packed (float32, alpha = 1): the packed copy is then
    /// the only one.
    fn adopt_constant(&self, slot: usize, value: &std::sync::Arc<Tensor>, _fixed: bool) -> bool {
        #[cfg(target_arch = "x86_64")]
        if let (1, Some(packed), Tensor::F32(b)) = (slot, &self.packed, &**value) {
            let (k, n) = (packed.k(), packed.n());
            let shape = if self.trans_b { [n, k] } else { [k, n] };
            return b.shape() == shape;
        }
        let _ = (slot, value);
        false
    }

    /// An activation, with a float32 constant B.
    fn accepts_fusion(&self, kind: FusionKind, inputs: &[InferInput]) -> bool {
        takes_weighted_activation(kind, self.act, inputs)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::MatMul
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let (a, b) = (fact(OP, inputs, 0)?, fact(OP, inputs, 1)?);
        let c = opt_fact(inputs, 2);
        self.check_types(a.dtype, b.dtype, c.map(|c| c.dtype))?;
        match (&a.shape, &b.shape) {
            (Some(sa), Some(sb)) => {
                let cs = match c {
                    Some(Fact { shape: None, .. }) => {
                        return Ok(vec![Fact::unknown_shape(a.dtype)])
                    }
                    Some(Fact { shape: Some(s), .. }) => Some(s.as_slice()),
                    None => None,
                };
                let d = self.dims(sa, sb, cs)?;
                Ok(vec![Fact::new(a.dtype, vec![d.m, d.n])])
            }
            _ => Ok(vec![Fact::unknown_shape(a.dtype)]),
        }
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let mn = out_len(outputs, 0);
        let k = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|a| a.shape.as_ref())
            .and_then(|s| if self.trans_a { s.first() } else { s.get(1) })
            .copied()
            .unwrap_or(1) as u64;
        let extra = if inputs.get(2).copied().flatten().is_some() {
            2
        } else {
            0
        } + u64::from(self.act.is_some());
        (2 * mn * k.max(1) + extra * mn).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let a = input(OP, inputs, 0)?;
        let c = opt_input(inputs, 2);
        #[cfg(target_arch = "x86_64")]
        let adopted;
        let b = match opt_input(inputs, 1) {
            Some(b) => b,
            #[cfg(target_arch = "x86_64")]
            None => {
                adopted = self.adopted_b(a, c)?;
                match adopted {
                    Adopted::Ran(y) => return Ok(vec![y]),
                    Adopted::Unpacked(ref b) => b,
                }
            }
            // Only the packed kernel's B is adopted, and it is x86-64's.
            #[cfg(not(target_arch = "x86_64"))]
            None => return Err(Error::op(OP, "input 1 (B) is missing")),
        };
        self.check_types(a.dtype(), b.dtype(), c.map(|c| c.dtype()))?;
        let d = self.dims(a.shape(), b.shape(), c.map(|c| c.shape()))?;
        let shape = [d.m, d.n];
        let out = match (a, b) {
            (Tensor::F32(x), Tensor::F32(y)) => {
                #[cfg(target_arch = "x86_64")]
                if let Some(out) = self.run_packed(x, Some(b), c, d) {
                    return out.map(|t| vec![t]);
                }
                let cv = c.and_then(|c| c.array::<f32>()).map(contiguous);
                wrap(
                    &shape,
                    self.float_gemm(&contiguous(x), &contiguous(y), cv.as_deref(), d),
                )?
            }
            (Tensor::F64(x), Tensor::F64(y)) => {
                let cv = c.and_then(|c| c.array::<f64>()).map(contiguous);
                wrap(
                    &shape,
                    self.float_gemm(&contiguous(x), &contiguous(y), cv.as_deref(), d),
                )?
            }
            (Tensor::F16(_), _) | (Tensor::BF16(_), _) => {
                let av = to_f32_vec(OP, a)?;
                let bv = match &self.b_f32 {
                    Some(v) if v.len() == b.len() => std::borrow::Cow::Borrowed(v.as_slice()),
                    _ => std::borrow::Cow::Owned(to_f32_vec(OP, b)?),
                };
                let cv = c.map(|c| to_f32_vec(OP, c)).transpose()?;
                from_f32_vec(OP, a, &shape, self.float_gemm(&av, &bv, cv.as_deref(), d))?
            }
            (Tensor::I32(x), Tensor::I32(y)) => {
                wrap(&shape, self.int_gemm(x, y, c.and_then(|c| c.array()), d))?
            }
            (Tensor::I64(x), Tensor::I64(y)) => {
                wrap(&shape, self.int_gemm(x, y, c.and_then(|c| c.array()), d))?
            }
            (Tensor::U32(x), Tensor::U32(y)) => {
                wrap(&shape, self.int_gemm(x, y, c.and_then(|c| c.array()), d))?
            }
            (Tensor::U64(x), Tensor::U64(y)) => {
                wrap(&shape, self.int_gemm(x, y, c.and_then(|c| c.array()), d))?
            }
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
