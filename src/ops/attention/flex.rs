//! `FlexAttention` (domain `ai.onnx.preview`, version 1): scaled dot-product
//! attention over 4-D `[batch, heads, seq, head_size]` inputs with grouped
//! kv heads, whose scores and probabilities can be rewritten by the optional
//! `score_mod` and `prob_mod` subgraphs (one `[B, Hq, L, S]` tensor in, one of
//! the same shape out, in the softmax precision). As in the ONNX reference,
//! Q and K are pre-scaled by `sqrt(scale)` in the data type, scores are
//! rounded to the data type and then to the softmax precision (f32 unless
//! `softmax_precision` says otherwise, f64 for double data), and `P·V` is
//! computed in that precision. Without modifiers each query row is computed
//! in one pass; with them the score tensor is materialized for the bodies.

use super::support::{product, rt, same_type, slice, values, wrap, wrap_as};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator, Subgraph, Value};
use crate::ops::norm::Real;
use crate::ops::unary::kernel::Float;
use crate::ops::util::{fact, input, par_rows};
use crate::tensor::{budget, DType, Element, Tensor};
use half::{bf16, f16};
use std::sync::Arc;

const OP: &str = "FlexAttention";

/// A built FlexAttention node.
#[derive(Debug)]
struct Flex {
    scale: Option<f32>,
    score_mod: Option<Arc<dyn Subgraph>>,
    prob_mod: Option<Arc<dyn Subgraph>>,
    precision: Option<DType>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let body = |name: &str| -> Result<Option<Arc<dyn Subgraph>>> {
        if !a.has(name) {
            return Ok(None);
        }
        let b = a.body(name)?;
        if b.formal() != 1 || b.num_outputs() != 1 {
            return Err(a.error(
                name,
                format!(
                    "must take 1 input and give 1 output, found {} and {}",
                    b.formal(),
                    b.num_outputs()
                ),
            ));
        }
        Ok(Some(b))
    };
    let (score_mod, prob_mod) = (body("score_mod")?, body("prob_mod")?);
    // The bodies' outer-scope values follow Q, K and V.
    let implicit = score_mod
        .iter()
        .chain(&prob_mod)
        .map(|b| b.implicit())
        .max()
        .unwrap_or(0);
    if ctx.num_inputs != 3 + implicit || ctx.num_outputs != 1 {
        return Err(Error::op(
            OP,
            format!(
                "takes Q, K, V and 1 output, found {} inputs ({implicit} outer-scope) and {} outputs",
                ctx.num_inputs, ctx.num_outputs
            ),
        ));
    }
    let precision = match a.int_opt("softmax_precision")? {
        None => None,
        Some(c) => Some(
            i32::try_from(c)
                .ok()
                .and_then(|c| DType::from_onnx_code(c).ok())
                .filter(|d| matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::F64))
                .ok_or_else(|| {
                    a.error(
                        "softmax_precision",
                        format!("{c} is not float, float16, bfloat16 or double"),
                    )
                })?,
        ),
    };
    let scale = a.float_opt("scale")?;
    if scale.is_some_and(|s| !s.is_finite()) {
        return Err(a.error("scale", "must be finite"));
    }
    Ok(Box::new(Flex {
        scale,
        score_mod,
        prob_mod,
        precision,
    }))
}

/// The sizes of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geom {
    b: usize,
    hq: usize,
    hkv: usize,
    /// Query and key sequence lengths.
    l: usize,
    s: usize,
    /// Query/key and value head sizes.
    e: usize,
    ev: usize,
}

impl Geom {
    fn new(q: &[usize], k: &[usize], v: &[usize]) -> Result<Geom> {
        let (&[b, hq, l, e], &[kb, hkv, s, ke], &[vb, vh, vs, ev]) = (q, k, v) else {
            return Err(Error::op(
                OP,
                format!("Q, K and V must be 4-D, found {q:?}, {k:?}, {v:?}"),
            ));
        };
        if kb != b || vb != b {
            return Err(Error::op(
                OP,
                format!("batch sizes differ: Q {q:?}, K {k:?}, V {v:?}"),
            ));
        }
        if vh != hkv || vs != s {
            return Err(Error::op(
                OP,
                format!("K {k:?} and V {v:?} differ in heads or sequence length"),
            ));
        }
        if ke != e {
            return Err(Error::op(
                OP,
                format!("Q head size {e} and K head size {ke} differ"),
            ));
        }
        if hkv == 0 || !hq.is_multiple_of(hkv) {
            return Err(Error::op(
                OP,
                format!("q heads ({hq}) must be a multiple of kv heads ({hkv})"),
            ));
        }
        Ok(Geom {
            b,
            hq,
            hkv,
            l,
            s,
            e,
            ev,
        })
    }

    fn scores_shape(&self) -> [usize; 4] {
        [self.b, self.hq, self.l, self.s]
    }
}

fn check_types(q: DType, k: DType, v: DType) -> Result<()> {
    super::support::check_float(OP, q, true)?;
    same_type(OP, "K", k, q)?;
    same_type(OP, "V", v, q)
}

impl Operator for Flex {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let (q, k, v) = (
            fact(OP, inputs, 0)?,
            fact(OP, inputs, 1)?,
            fact(OP, inputs, 2)?,
        );
        check_types(q.dtype, k.dtype, v.dtype)?;
        Ok(vec![match (&q.shape, &k.shape, &v.shape) {
            (Some(qs), Some(ks), Some(vs)) => {
                let g = Geom::new(qs, ks, vs)?;
                Fact::new(q.dtype, vec![g.b, g.hq, g.l, g.ev])
            }
            _ => Fact::unknown_shape(q.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let shape = |i: usize| {
            inputs
                .get(i)
                .copied()
                .flatten()
                .and_then(|f| f.shape.as_deref())
        };
        let Some(Ok(g)) = shape(0)
            .zip(shape(1))
            .zip(shape(2))
            .map(|((q, k), v)| Geom::new(q, k, v))
        else {
            return outputs.first().and_then(|f| f.len()).unwrap_or(0) as u64;
        };
        let scores = g
            .scores_shape()
            .iter()
            .fold(1u64, |a, &d| a.saturating_mul(d as u64));
        let mods: u64 = [&self.score_mod, &self.prob_mod]
            .into_iter()
            .flatten()
            .map(|b| b.nominal_flops(scores))
            .fold(0, u64::saturating_add);
        // Q·Kᵀ, softmax (about 5 per score) and P·V, plus the modifiers.
        scores
            .saturating_mul(2 * g.e as u64 + 2 * g.ev as u64 + 5)
            .saturating_add(mods)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::MatMul
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (q, k, v) = (
            input(OP, inputs, 0)?,
            input(OP, inputs, 1)?,
            input(OP, inputs, 2)?,
        );
        check_types(q.dtype(), k.dtype(), v.dtype())?;
        let g = Geom::new(q.shape(), k.shape(), v.shape())?;
        // The modifier bodies take values; the outer-scope tensors they
        // read are shared with them once per run.
        let outer: Vec<Option<Value>> = inputs
            .get(3..)
            .unwrap_or(&[])
            .iter()
            .map(|t| t.map(|t| Value::from(t.clone())))
            .collect();
        let implicit: Vec<Option<&Value>> = outer.iter().map(Option::as_ref).collect();
        let run = Run {
            op: self,
            g,
            q,
            k,
            v,
            implicit: &implicit,
        };
        let t = q.dtype();
        let p = self.precision.unwrap_or(if t == DType::F64 {
            DType::F64
        } else {
            DType::F32
        });
        use DType::{BF16, F16, F32, F64};
        // f64 data or precision computes in f64; the precision itself is
        // a runtime choice (see `Prec`).
        let y = match (t, t == F64 || p == F64) {
            (F64, _) => run.go::<f64, f64>(p),
            (F32, true) => run.go::<f32, f64>(p),
            (F16, true) => run.go::<f16, f64>(p),
            (BF16, true) => run.go::<bf16, f64>(p),
            (F32, false) => run.go::<f32, f32>(p),
            (F16, false) => run.go::<f16, f32>(p),
            (BF16, false) => run.go::<bf16, f32>(p),
            (d, _) => Err(Error::op(OP, format!("unsupported data type {d}"))),
        }?;
        Ok(vec![y])
    }
}

/// The softmax precision: its type, and rounding a compute-type value to
/// it. A runtime choice (a function pointer called once per score, not
/// per multiply-add), so the kernels are compiled once per data and
/// compute type, not once more per precision.
#[derive(Clone, Copy)]
struct Prec<C> {
    dtype: DType,
    rt: fn(C) -> C,
}

impl<C: Real> Prec<C> {
    /// The precision `p` (f64, f32, f16; any other type: bf16).
    fn new(p: DType) -> Prec<C> {
        match p {
            DType::F64 => Prec {
                dtype: p,
                rt: rt::<f64, C>,
            },
            DType::F32 => Prec {
                dtype: p,
                rt: rt::<f32, C>,
            },
            DType::F16 => Prec {
                dtype: p,
                rt: rt::<f16, C>,
            },
            _ => Prec {
                dtype: DType::BF16,
                rt: rt::<bf16, C>,
            },
        }
    }
}

/// One run (the data type `T` and compute type `C` come with `go`).
struct Run<'a> {
    op: &'a Flex,
    g: Geom,
    q: &'a Tensor,
    k: &'a Tensor,
    v: &'a Tensor,
    implicit: &'a [Option<&'a Value>],
}

/// The pre-scaled Q and K and the values, in the compute type.
struct Data<C> {
    q: Vec<C>,
    k: Vec<C>,
    v: Vec<C>,
}

impl Run<'_> {
    fn go<T: Float + Element, C: Real>(&self, p: DType) -> Result<Tensor> {
        let g = self.g;
        let p = Prec::<C>::new(p);
        // The reference takes sqrt(scale) in f32, then converts it to T.
        let scale = self
            .op
            .scale
            .unwrap_or_else(|| (1.0 / (g.e as f64).sqrt()) as f32);
        let ss = rt::<T, C>(C::of(scale.sqrt() as f64));
        let scaled = |t: &Tensor, name: &str| -> Result<Vec<C>> {
            Ok(slice::<T>(OP, name, t)?
                .iter()
                .map(|&x| rt::<T, C>(C::from_elem(x) * ss))
                .collect())
        };
        let d = Data {
            q: scaled(self.q, "Q")?,
            k: scaled(self.k, "K")?,
            v: slice::<T>(OP, "V", self.v)?
                .iter()
                .map(|&x| (p.rt)(C::from_elem(x)))
                .collect(),
        };
        let out_shape = [g.b, g.hq, g.l, g.ev];
        let mut y = vec![T::default(); product(OP, "Y", &out_shape)?];
        if self.op.score_mod.is_none() && self.op.prob_mod.is_none() {
            par_rows(&mut y, g.ev, |first, chunk| {
                let mut sc = vec![C::zero(); g.s];
                for (r, out) in chunk.chunks_mut(g.ev.max(1)).enumerate() {
                    self.scores::<T, C>(p, &d, first + r, &mut sc);
                    softmax(p, &mut sc);
                    self.values::<T, C>(p, &d, first + r, &sc, out);
                }
            });
            return wrap(OP, &out_shape, y);
        }
        let shape = g.scores_shape();
        budget::check("FlexAttention scores", p.dtype, &shape)?;
        let mut sc = vec![C::zero(); product(OP, "scores", &shape)?];
        par_rows(&mut sc, g.s, |first, chunk| {
            for (r, row) in chunk.chunks_mut(g.s.max(1)).enumerate() {
                self.scores::<T, C>(p, &d, first + r, row);
            }
        });
        if let Some(body) = &self.op.score_mod {
            sc = self.modify(p, body, "score_mod", &sc)?;
        }
        par_rows(&mut sc, g.s, |_, chunk| {
            chunk.chunks_mut(g.s.max(1)).for_each(|row| softmax(p, row));
        });
        if let Some(body) = &self.op.prob_mod {
            sc = self.modify(p, body, "prob_mod", &sc)?;
        }
        par_rows(&mut y, g.ev, |first, chunk| {
            for (r, out) in chunk.chunks_mut(g.ev.max(1)).enumerate() {
                let row = first + r;
                self.values::<T, C>(p, &d, row, &sc[row * g.s..(row + 1) * g.s], out);
            }
        });
        wrap(OP, &out_shape, y)
    }

    /// The scores of query row `r` (over batch, head, position) in `out`.
    fn scores<T: Float, C: Real>(&self, p: Prec<C>, d: &Data<C>, r: usize, out: &mut [C]) {
        let g = self.g;
        let h = (r / g.l) % g.hq;
        let kv = (r / (g.l * g.hq)) * g.hkv + h / (g.hq / g.hkv);
        let qrow = &d.q[r * g.e..(r + 1) * g.e];
        for (j, o) in out.iter_mut().enumerate() {
            let krow = &d.k[(kv * g.s + j) * g.e..][..g.e];
            let mut acc = C::zero();
            for (&a, &b) in qrow.iter().zip(krow) {
                acc = acc + a * b;
            }
            *o = (p.rt)(rt::<T, C>(acc));
        }
    }

    /// `P·V` for query row `r` from its probabilities.
    fn values<T: Float, C: Real>(
        &self,
        p: Prec<C>,
        d: &Data<C>,
        r: usize,
        probs: &[C],
        out: &mut [T],
    ) {
        let g = self.g;
        let h = (r / g.l) % g.hq;
        let kv = (r / (g.l * g.hq)) * g.hkv + h / (g.hq / g.hkv);
        for (m, o) in out.iter_mut().enumerate() {
            let mut acc = C::zero();
            for (j, &p) in probs.iter().enumerate() {
                acc = acc + p * d.v[(kv * g.s + j) * g.ev + m];
            }
            *o = (p.rt)(acc).to_elem();
        }
    }

    /// Runs a modifier body on the score (or probability) tensor.
    fn modify<C: Real>(
        &self,
        p: Prec<C>,
        body: &Arc<dyn Subgraph>,
        name: &str,
        x: &[C],
    ) -> Result<Vec<C>> {
        let shape = self.g.scores_shape();
        let t = wrap_as(OP, p.dtype, &shape, x)?;
        let out = body.run(vec![t.into()], self.implicit)?;
        let out: Vec<_> = out
            .into_iter()
            .map(|v| v.into_tensor(name))
            .collect::<Result<_>>()?;
        if out.len() != 1 || out[0].shape() != shape {
            return Err(Error::op(
                OP,
                format!(
                    "{name} must give one tensor of shape {shape:?}, found {:?}",
                    out.iter().map(|t| t.shape().to_vec()).collect::<Vec<_>>()
                ),
            ));
        }
        let got = values::<C>(OP, name, &out[0])?;
        Ok(got.into_iter().map(p.rt).collect())
    }
}

/// The reference softmax in precision `p`: NaN (from a NaN score or a row
/// that is entirely `-inf`) propagates as in NumPy.
fn softmax<C: Real>(p: Prec<C>, x: &mut [C]) {
    let mut m = C::neg_infinity();
    for &v in x.iter() {
        if v.is_nan() || m.is_nan() {
            m = C::nan();
        } else if v > m {
            m = v;
        }
    }
    let mut sum = C::zero();
    for v in x.iter_mut() {
        *v = (p.rt)((p.rt)(*v - m).exp());
        sum = sum + *v;
    }
    let sum = (p.rt)(sum);
    for v in x.iter_mut() {
        *v = (p.rt)(*v / sum);
    }
}

#[cfg(test)]
#[path = "flex_tests.rs"]
mod tests;
