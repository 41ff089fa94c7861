//! `LinearAttention` (opset 27): the recurrent linear-attention family over
//! packed `[batch, time, heads·dim]` inputs with a `[batch, kv_heads, d_k,
//! d_v]` state, one token at a time as the ONNX reference runs it:
//! `linear` (S += k⊗v), `gated` (S = exp(g)·S + k⊗v), `delta` and
//! `gated_delta` (v ← β·(v − Sᵀk) before the write); each output is
//! `scale · qᵀS`. Query heads share kv heads in groups (GQA/MQA). The decay
//! is per key dimension `[B, T, H_kv·d_k]` or per head `[B, T, H_kv]`; beta
//! is per head `[B, T, H_kv]` or shared `[B, T, 1]`. Everything is computed
//! in f32; `present_state` takes `past_state`'s type (else the query's).

use super::support::{check_float, dispatch, product, same_type, slice, values, wrap, wrap_as};
use super::support::{count_attr, FloatKernel};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::norm::Real;
use crate::ops::unary::kernel::Float;
use crate::ops::util::{fact, input, opt_fact, opt_input, par_rows};
use crate::tensor::{DType, Element, Tensor};

const OP: &str = "LinearAttention";

/// A built LinearAttention node.
#[derive(Debug)]
struct LinearAttention {
    hq: usize,
    hkv: usize,
    /// The `scale` attribute (0: 1/sqrt(d_k)).
    scale: f32,
    gated: bool,
    delta: bool,
    num_outputs: usize,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    if !(3..=6).contains(&ctx.num_inputs) || !(1..=2).contains(&ctx.num_outputs) {
        return Err(Error::op(
            OP,
            format!(
                "takes 3 to 6 inputs and 1 or 2 outputs, found {} and {}",
                ctx.num_inputs, ctx.num_outputs
            ),
        ));
    }
    let hq = count_attr(a, "q_num_heads", a.int_req("q_num_heads")?, 1)?;
    let hkv = count_attr(a, "kv_num_heads", a.int_req("kv_num_heads")?, 1)?;
    if !hq.is_multiple_of(hkv) {
        return Err(a.error(
            "q_num_heads",
            format!("{hq} is not a multiple of kv_num_heads {hkv}"),
        ));
    }
    let (gated, delta) = match a.string("update_rule", "gated_delta")?.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(a.error(
                "update_rule",
                format!("must be linear, gated, delta or gated_delta, found {other:?}"),
            ))
        }
    };
    let scale = a.float("scale", 0.0)?;
    if !scale.is_finite() {
        return Err(a.error("scale", format!("must be finite, found {scale}")));
    }
    // `chunk_size` is a tuning hint that does not change the result.
    a.int("chunk_size", 0)?;
    Ok(Box::new(LinearAttention {
        hq,
        hkv,
        scale,
        gated,
        delta,
        num_outputs: ctx.num_outputs,
    }))
}

/// The sizes of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geom {
    b: usize,
    t: usize,
    hq: usize,
    hkv: usize,
    dk: usize,
    dv: usize,
    /// Decay per key dimension (else per head).
    decay_per_key: bool,
    /// Beta per kv head (else one shared value).
    beta_per_head: bool,
}

impl Geom {
    fn out_shape(&self) -> Result<Vec<usize>> {
        let last = product(OP, "output heads", &[self.hq, self.dv])?;
        Ok(vec![self.b, self.t, last])
    }

    fn state_shape(&self) -> Vec<usize> {
        vec![self.b, self.hkv, self.dk, self.dv]
    }
}

/// Input names, by position.
const NAMES: [&str; 6] = ["query", "key", "value", "past_state", "decay", "beta"];

impl LinearAttention {
    /// Checks presence and element types; returns the present_state type.
    fn types(&self, d: &[Option<DType>; 6]) -> Result<DType> {
        let rule = |name: &str, needed: bool, given: bool| -> Result<()> {
            match (needed, given) {
                (true, false) => Err(Error::op(OP, format!("the update rule requires {name}"))),
                (false, true) => Err(Error::op(OP, format!("the update rule forbids {name}"))),
                _ => Ok(()),
            }
        };
        rule("decay", self.gated, d[4].is_some())?;
        rule("beta", self.delta, d[5].is_some())?;
        let t = d[0].ok_or_else(|| Error::op(OP, "query is missing"))?;
        check_float(OP, t, false)?;
        for i in [1, 2, 4, 5] {
            if let Some(x) = d[i] {
                same_type(OP, NAMES[i], x, t)?;
            }
        }
        match d[3] {
            Some(s) => {
                check_float(OP, s, false)?;
                Ok(s)
            }
            None => Ok(t),
        }
    }

    fn geom(&self, s: &[Option<&[usize]>; 6]) -> Result<Geom> {
        let rank3 = |i: usize| -> Result<[usize; 3]> {
            match s[i] {
                Some(&[a, b, c]) => Ok([a, b, c]),
                Some(other) => Err(Error::op(
                    OP,
                    format!(
                        "{} must be 3-D [batch, time, heads·dim], found {other:?}",
                        NAMES[i]
                    ),
                )),
                None => Err(Error::op(OP, format!("{} is missing", NAMES[i]))),
            }
        };
        let (q, k, v) = (rank3(0)?, rank3(1)?, rank3(2)?);
        let (b, t) = (q[0], q[1]);
        let split = |i: usize, last: usize, h: usize| -> Result<usize> {
            if !last.is_multiple_of(h) {
                return Err(Error::op(
                    OP,
                    format!(
                        "{} last dimension {last} is not a multiple of {h} heads",
                        NAMES[i]
                    ),
                ));
            }
            Ok(last / h)
        };
        let dk = split(0, q[2], self.hq)?;
        let dv = split(2, v[2], self.hkv)?;
        let key_last = product(OP, "key heads", &[self.hkv, dk])?;
        for (i, x) in [(1, k), (2, v)] {
            if x[..2] != [b, t] {
                return Err(Error::op(
                    OP,
                    format!(
                        "{} {x:?} does not match query's batch and time [{b}, {t}]",
                        NAMES[i]
                    ),
                ));
            }
        }
        if k[2] != key_last {
            return Err(Error::op(
                OP,
                format!(
                    "key last dimension {} must be kv_num_heads·d_k = {key_last}",
                    k[2]
                ),
            ));
        }
        let mut g = Geom {
            b,
            t,
            hq: self.hq,
            hkv: self.hkv,
            dk,
            dv,
            decay_per_key: false,
            beta_per_head: false,
        };
        if let Some(p) = s[3] {
            if p != g.state_shape() {
                return Err(Error::op(
                    OP,
                    format!("past_state must be {:?}, found {p:?}", g.state_shape()),
                ));
            }
        }
        if s[4].is_some() {
            let d = rank3(4)?;
            g.decay_per_key = d[2] != self.hkv;
            if d[..2] != [b, t] || (d[2] != self.hkv && d[2] != key_last) {
                return Err(Error::op(
                    OP,
                    format!(
                        "decay must be [{b}, {t}, {}] or [{b}, {t}, {key_last}], found {d:?}",
                        self.hkv
                    ),
                ));
            }
        }
        if s[5].is_some() {
            let e = rank3(5)?;
            g.beta_per_head = e[2] != 1;
            if e[..2] != [b, t] || (e[2] != self.hkv && e[2] != 1) {
                return Err(Error::op(
                    OP,
                    format!(
                        "beta must be [{b}, {t}, {}] or [{b}, {t}, 1], found {e:?}",
                        self.hkv
                    ),
                ));
            }
        }
        Ok(g)
    }
}

impl Operator for LinearAttention {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let q = fact(OP, inputs, 0)?;
        fact(OP, inputs, 1)?;
        fact(OP, inputs, 2)?;
        let facts: [Option<&Fact>; 6] = std::array::from_fn(|i| opt_fact(inputs, i));
        let s = self.types(&facts.map(|f| f.map(|f| f.dtype)))?;
        let mut out = if facts.iter().flatten().any(|f| f.shape.is_none()) {
            vec![Fact::unknown_shape(q.dtype), Fact::unknown_shape(s)]
        } else {
            let g = self.geom(&facts.map(|f| f.and_then(|f| f.shape.as_deref())))?;
            vec![
                Fact::new(q.dtype, g.out_shape()?),
                Fact::new(s, g.state_shape()),
            ]
        };
        out.truncate(self.num_outputs);
        Ok(out)
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        let shapes: [Option<&[usize]>; 6] = std::array::from_fn(|i| {
            inputs
                .get(i)
                .copied()
                .flatten()
                .and_then(|f| f.shape.as_deref())
        });
        let Ok(g) = self.geom(&shapes) else {
            return 0;
        };
        // Per token and kv head: the write (2), decay (1) and retrieval (2)
        // over the state; per query head the read (2).
        let per_kv = 2 + u64::from(self.gated) + 2 * u64::from(self.delta);
        let state = (g.dk as u64).saturating_mul(g.dv as u64);
        let heads = (g.hkv as u64 * per_kv).saturating_add(2 * g.hq as u64);
        // Plus loading and storing the state, which happens for T = 0 too.
        let states = (g.b as u64)
            .saturating_mul(g.hkv as u64)
            .saturating_mul(state);
        (g.b as u64)
            .saturating_mul(g.t as u64)
            .saturating_mul(state)
            .saturating_mul(heads)
            .saturating_add(states)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::MatMul
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let q = input(OP, inputs, 0)?;
        input(OP, inputs, 1)?;
        input(OP, inputs, 2)?;
        let ts: [Option<&Tensor>; 6] = std::array::from_fn(|i| opt_input(inputs, i));
        let state_type = self.types(&ts.map(|t| t.map(|t| t.dtype())))?;
        let g = self.geom(&ts.map(|t| t.map(|t| t.shape())))?;
        let k = Kernel {
            g,
            ts,
            state_type,
            scale: if self.scale == 0.0 {
                1.0 / (g.dk as f64).sqrt()
            } else {
                self.scale as f64
            },
            gated: self.gated,
            delta: self.delta,
        };
        let mut out = dispatch(OP, q.dtype(), false, &k)?;
        out.truncate(self.num_outputs);
        Ok(out)
    }
}

struct Kernel<'a> {
    g: Geom,
    ts: [Option<&'a Tensor>; 6],
    state_type: DType,
    scale: f64,
    gated: bool,
    delta: bool,
}

impl FloatKernel for Kernel<'_> {
    fn go<T: Float + Element, C: Real>(&self) -> Result<Vec<Tensor>> {
        let g = self.g;
        let data = |i: usize| -> Result<Vec<C>> {
            match self.ts[i] {
                Some(t) => Ok(slice::<T>(OP, NAMES[i], t)?
                    .iter()
                    .map(|&x| C::from_elem(x))
                    .collect()),
                None => Ok(Vec::new()),
            }
        };
        let (q, k, v) = (data(0)?, data(1)?, data(2)?);
        let (decay, beta) = (data(4)?, data(5)?);
        let past: Option<Vec<C>> = self.ts[3]
            .map(|t| values::<C>(OP, "past_state", t))
            .transpose()?;
        let group = g.hq / g.hkv;
        let state_len = product(OP, "state", &[g.dk, g.dv])?;
        let outs_len = product(OP, "output", &[group, g.t, g.dv])?;
        let row = state_len
            .checked_add(outs_len)
            .ok_or_else(|| Error::op(OP, "the state and outputs are too large"))?;
        let mut buf = vec![C::zero(); product(OP, "work", &[g.b, g.hkv, row])?];
        let scale = C::of(self.scale);
        let (hq_dk, hkv_dk, hkv_dv) = (g.hq * g.dk, g.hkv * g.dk, g.hkv * g.dv);
        let decay_w = if g.decay_per_key { hkv_dk } else { g.hkv };
        let beta_w = if g.beta_per_head { g.hkv } else { 1 };
        par_rows(&mut buf, row, |first, chunk| {
            let mut vt = vec![C::zero(); g.dv];
            let mut factor = vec![C::one(); g.dk];
            for (r, out) in chunk.chunks_mut(row.max(1)).enumerate() {
                let r = first + r;
                let (b, hk) = (r / g.hkv, r % g.hkv);
                let (s, o) = out.split_at_mut(state_len);
                if let Some(p) = &past {
                    s.copy_from_slice(&p[r * state_len..(r + 1) * state_len]);
                }
                for ti in 0..g.t {
                    let bt = b * g.t + ti;
                    let kr = &k[bt * hkv_dk + hk * g.dk..][..g.dk];
                    vt.copy_from_slice(&v[bt * hkv_dv + hk * g.dv..][..g.dv]);
                    if self.gated {
                        let dr = &decay[bt * decay_w..(bt + 1) * decay_w];
                        for (d, f) in factor.iter_mut().enumerate() {
                            *f = if g.decay_per_key {
                                dr[hk * g.dk + d].exp()
                            } else {
                                dr[hk].exp()
                            };
                        }
                        for (srow, &f) in s.chunks_mut(g.dv.max(1)).zip(&factor) {
                            srow.iter_mut().for_each(|x| *x = *x * f);
                        }
                    }
                    if self.delta {
                        let bb = beta[bt * beta_w + if g.beta_per_head { hk } else { 0 }];
                        for (m, x) in vt.iter_mut().enumerate() {
                            let mut got = C::zero();
                            for (d, &kd) in kr.iter().enumerate() {
                                got = got + s[d * g.dv + m] * kd;
                            }
                            *x = bb * (*x - got);
                        }
                    }
                    for (srow, &kd) in s.chunks_mut(g.dv.max(1)).zip(kr) {
                        for (x, &vm) in srow.iter_mut().zip(&vt) {
                            *x = *x + kd * vm;
                        }
                    }
                    for gi in 0..group {
                        let h = hk * group + gi;
                        let qr = &q[bt * hq_dk + h * g.dk..][..g.dk];
                        let orow = &mut o[(gi * g.t + ti) * g.dv..][..g.dv];
                        for (m, y) in orow.iter_mut().enumerate() {
                            let mut acc = C::zero();
                            for (d, &qd) in qr.iter().enumerate() {
                                acc = acc + qd * s[d * g.dv + m];
                            }
                            *y = scale * acc;
                        }
                    }
                }
            }
        });
        let out_shape = g.out_shape()?;
        let mut y = vec![T::default(); product(OP, "output", &out_shape)?];
        let mut state = Vec::with_capacity(product(OP, "present_state", &g.state_shape())?);
        for (r, src) in buf.chunks(row.max(1)).enumerate().take(g.b * g.hkv) {
            let (b, hk) = (r / g.hkv, r % g.hkv);
            state.extend_from_slice(&src[..state_len]);
            for gi in 0..group {
                let h = hk * group + gi;
                for ti in 0..g.t {
                    let from = &src[state_len + (gi * g.t + ti) * g.dv..][..g.dv];
                    let to = &mut y[((b * g.t + ti) * g.hq + h) * g.dv..][..g.dv];
                    for (o, &x) in to.iter_mut().zip(from) {
                        *o = x.to_elem();
                    }
                }
            }
        }
        Ok(vec![
            wrap(OP, &out_shape, y)?,
            wrap_as(OP, self.state_type, &g.state_shape(), &state)?,
        ])
    }
}

#[cfg(test)]
#[path = "linear_attention_tests.rs"]
mod tests;
