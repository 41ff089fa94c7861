//! `Attention` (opset 23; `nonpad_kv_seqlen` from 24; the sliding-window
//! attributes `left_window_size`/`right_window_size` of opset 25 are honoured
//! when present): scaled dot-product attention over 3-D `[batch, seq,
//! hidden]` or 4-D `[batch, heads, seq, head_size]` inputs with grouped-query
//! heads, an optional boolean or additive mask, a past key/value cache, causal
//! masking, softcap and the optional `qk_matmul_output`. Semantics follow the
//! ONNX reference implementation, including its rounding points for
//! f16/bf16 and its zeroing of fully masked rows.
//!
//! The family's other operators live in their own modules: `rotary`
//! (RotaryEmbedding), `swiglu` (SwiGLU), `linear_attention`
//! (LinearAttention), `causal_conv` (CausalConvWithState) and `flex`
//! (FlexAttention of the `ai.onnx.preview` domain), with shared helpers in
//! `support`.

use super::norm::Real;
use super::unary::kernel::{contiguous, Float};
use super::util::{fact, input, opt_fact, opt_input};
use super::Registrar;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::tensor::{DType, Element, Tensor};
use geom::Geom;
use half::{bf16, f16};
use kernel::{attend, Bias, Inputs, Params, Softmax};

mod causal_conv;
mod flex;
mod geom;
mod kernel;
mod linear_attention;
mod rotary;
mod support;
mod swiglu;
#[cfg(test)]
mod tests;

const OP: &str = "Attention";

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Attention", 23, build);
    r.add("RotaryEmbedding", 23, rotary::build);
    r.add("SwiGLU", 28, swiglu::build);
    r.add("LinearAttention", 27, linear_attention::build);
    r.add("CausalConvWithState", 27, causal_conv::build);
    r.add_in(super::PREVIEW_DOMAIN, "FlexAttention", 1, flex::build);
}

/// A built Attention node.
#[derive(Debug)]
struct Attention {
    scale: Option<f32>,
    causal: bool,
    softcap: f32,
    qk_mode: i64,
    precision: Option<DType>,
    heads: (Option<i64>, Option<i64>),
    window: (i64, i64),
    num_outputs: usize,
}

fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    if ctx.num_outputs > 4 || ctx.num_inputs > 7 {
        return Err(Error::op(
            OP,
            format!(
                "takes at most 7 inputs and 4 outputs, found {} and {}",
                ctx.num_inputs, ctx.num_outputs
            ),
        ));
    }
    let qk_mode = a.int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&qk_mode) {
        return Err(a.error(
            "qk_matmul_output_mode",
            format!("must be 0 to 3, found {qk_mode}"),
        ));
    }
    let softcap = a.float("softcap", 0.0)?;
    if softcap.is_nan() || softcap < 0.0 {
        return Err(a.error("softcap", format!("must be ≥ 0, found {softcap}")));
    }
    let precision = match a.int_opt("softmax_precision")? {
        None => None,
        Some(c) => {
            let d = i32::try_from(c)
                .ok()
                .and_then(|c| DType::from_onnx_code(c).ok())
                .filter(|d| d.is_float());
            Some(d.ok_or_else(|| {
                a.error(
                    "softmax_precision",
                    format!("{c} is not a floating-point type"),
                )
            })?)
        }
    };
    let window = |name: &str| -> Result<i64> {
        let w = a.int(name, -1)?;
        if w < -1 {
            return Err(a.error(name, format!("must be -1 or ≥ 0, found {w}")));
        }
        Ok(w)
    };
    Ok(Box::new(Attention {
        scale: a.float_opt("scale")?,
        causal: a.int("is_causal", 0)? != 0,
        softcap,
        qk_mode,
        precision,
        heads: (a.int_opt("q_num_heads")?, a.int_opt("kv_num_heads")?),
        window: (window("left_window_size")?, window("right_window_size")?),
        num_outputs: ctx.num_outputs.max(1),
    }))
}

impl Attention {
    /// Geometry from the shapes of inputs 0..=6 (`None` = absent).
    fn geom(&self, s: &[Option<&[usize]>; 7], dtypes: &[Option<DType>; 7]) -> Result<Geom> {
        let t = dtypes[0].unwrap_or(DType::F32);
        if !t.is_float() {
            return Err(Error::op(
                OP,
                format!("Q must be floating point, found {t}"),
            ));
        }
        for (i, name) in [(1, "K"), (2, "V"), (4, "past_key"), (5, "past_value")] {
            if dtypes[i].is_some_and(|d| d != t) {
                return Err(Error::op(OP, format!("{name} type differs from Q's {t}")));
            }
        }
        let past = match (s[4], s[5]) {
            (Some(k), Some(v)) => Some((k, v)),
            (None, None) => None,
            _ => {
                return Err(Error::op(
                    OP,
                    "past_key and past_value must be given together",
                ))
            }
        };
        let (q, k, v) = (
            s[0].unwrap_or(&[]),
            s[1].unwrap_or(&[]),
            s[2].unwrap_or(&[]),
        );
        let g = Geom::new(q, k, v, past, self.heads)?;
        if let Some(m) = s[3] {
            g.mask_dims(m)?;
            let md = dtypes[3].unwrap_or(t);
            if md != DType::Bool && !md.is_float() {
                return Err(Error::op(
                    OP,
                    format!("attn_mask must be bool or float, found {md}"),
                ));
            }
        }
        if let Some(n) = s[6] {
            if past.is_some() {
                return Err(Error::op(
                    OP,
                    "nonpad_kv_seqlen cannot be combined with past_key",
                ));
            }
            if n != [g.b] || dtypes[6] != Some(DType::I64) {
                return Err(Error::op(
                    OP,
                    format!(
                        "nonpad_kv_seqlen must be int64 of shape [{}], found {n:?}",
                        g.b
                    ),
                ));
            }
        }
        Ok(g)
    }

    fn out_facts(&self, t: DType, g: Option<&Geom>) -> Vec<Fact> {
        let shapes = g.map(|g| {
            [
                g.y_shape(),
                g.present_key_shape(),
                g.present_value_shape(),
                g.qk_shape(),
            ]
        });
        (0..self.num_outputs)
            .map(|i| match &shapes {
                Some(s) => Fact::new(t, s[i].clone()),
                None => Fact::unknown_shape(t),
            })
            .collect()
    }
}

impl Operator for Attention {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let q = fact(OP, inputs, 0)?;
        fact(OP, inputs, 1)?;
        fact(OP, inputs, 2)?;
        let facts: [Option<&Fact>; 7] = std::array::from_fn(|i| opt_fact(inputs, i));
        if facts.iter().flatten().any(|f| f.shape.is_none()) {
            return Ok(self.out_facts(q.dtype, None));
        }
        let shapes = facts.map(|f| f.and_then(|f| f.shape.as_deref()));
        let g = self.geom(&shapes, &facts.map(|f| f.map(|f| f.dtype)))?;
        Ok(self.out_facts(q.dtype, Some(&g)))
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let shapes: [Option<&[usize]>; 7] = std::array::from_fn(|i| {
            inputs
                .get(i)
                .copied()
                .flatten()
                .and_then(|f| f.shape.as_deref())
        });
        let dtypes = std::array::from_fn(|i| inputs.get(i).copied().flatten().map(|f| f.dtype));
        match self.geom(&shapes, &dtypes) {
            // Q·Kᵀ, softmax (about 5 per score) and P·V.
            Ok(g) => {
                let scores = (g.b * g.hq * g.sq * g.total()) as u64;
                scores * (2 * g.dh as u64 + 2 * g.dv as u64 + 5)
            }
            Err(_) => outputs.first().and_then(|f| f.len()).unwrap_or(0) as u64,
        }
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let q = input(OP, inputs, 0)?;
        input(OP, inputs, 1)?;
        input(OP, inputs, 2)?;
        let ts: [Option<&Tensor>; 7] = std::array::from_fn(|i| opt_input(inputs, i));
        let g = self.geom(
            &ts.map(|t| t.map(|t| t.shape())),
            &ts.map(|t| t.map(|t| t.dtype())),
        )?;
        // The softmax precision: as `softmax_precision` asks, within what
        // each data type allows.
        let p = match (q.dtype(), self.precision) {
            (DType::F64, None | Some(DType::F64)) => DType::F64,
            (DType::F64, Some(DType::F32)) => DType::F32,
            (DType::F64, Some(DType::F16)) => DType::F16,
            (DType::F64, Some(_)) => DType::BF16,
            (DType::F32, None | Some(DType::F32) | Some(DType::F64)) => DType::F32,
            (DType::F32, Some(DType::F16)) => DType::F16,
            (DType::F32, Some(_)) => DType::BF16,
            (DType::F16, None | Some(DType::F16)) => DType::F16,
            (DType::F16, Some(DType::BF16)) => DType::BF16,
            (DType::BF16, None | Some(DType::BF16)) => DType::BF16,
            (DType::BF16, Some(DType::F16)) => DType::F16,
            _ => DType::F32,
        };
        match q.dtype() {
            DType::F64 => self.go::<f64, f64>(&g, &ts, p),
            DType::F32 => self.go::<f32, f32>(&g, &ts, p),
            DType::F16 => self.go::<f16, f32>(&g, &ts, p),
            DType::BF16 => self.go::<bf16, f32>(&g, &ts, p),
            d => Err(Error::op(
                OP,
                format!("Q must be floating point, found {d}"),
            )),
        }
    }
}

impl Attention {
    /// Runs the kernel for data type `T`, compute type `C`, softmax
    /// precision `p`.
    fn go<T: Float + Element, C: Real>(
        &self,
        g: &Geom,
        ts: &[Option<&Tensor>; 7],
        p: DType,
    ) -> Result<Vec<Tensor>> {
        let data = |i: usize| -> Result<Option<std::borrow::Cow<'_, [T]>>> {
            ts[i]
                .map(|t| {
                    t.array::<T>()
                        .map(contiguous)
                        .ok_or_else(|| Error::op(OP, format!("input {i} type differs from Q's")))
                })
                .transpose()
        };
        let (q, k, v) = (
            data(0)?.unwrap_or_default(),
            data(1)?.unwrap_or_default(),
            data(2)?.unwrap_or_default(),
        );
        let (pk, pv) = (data(4)?, data(5)?);
        let mask = match ts[3] {
            None => None,
            Some(m) => Some(mask_values::<C>(g, m)?),
        };
        let nonpad = ts[6].map(|t| t.to_i64_vec()).transpose()?;
        let bias = Bias {
            mask,
            causal: self.causal,
            window: self.window,
            nonpad,
        };
        let head = g.dh as f64;
        let scale = self.scale.map_or(1.0 / head.sqrt(), |s| s as f64);
        let prm = Params {
            scale_sqrt: scale.sqrt(),
            softcap: self.softcap,
            qk_mode: (self.num_outputs > 3).then_some(self.qk_mode),
        };
        let x = Inputs {
            q: &q,
            k: &k,
            v: &v,
            past: pk.as_deref().zip(pv.as_deref()),
        };
        let (y, pk, pv, qk) = attend::<T, C>(g, &prm, &x, &bias, Softmax::new(p));
        let wrap = |shape: Vec<usize>, d: Vec<T>| {
            Tensor::from_vec(&shape, d)
                .map_err(|e| Error::op(OP, format!("internal shape error: {e}")))
        };
        let mut out = vec![wrap(g.y_shape(), y)?];
        if self.num_outputs > 1 {
            out.push(wrap(g.present_key_shape(), pk)?);
        }
        if self.num_outputs > 2 {
            out.push(wrap(g.present_value_shape(), pv)?);
        }
        if self.num_outputs > 3 {
            out.push(wrap(g.qk_shape(), qk)?);
        }
        Ok(out)
    }
}

/// The mask as additive values (bool: 0 where true, `-inf` where false),
/// right-aligned to rank 4 with its last axis padded to the total length
/// with `-inf`.
fn mask_values<C: Real>(g: &Geom, m: &Tensor) -> Result<(Vec<C>, [usize; 4])> {
    let d = g.mask_dims(m.shape())?;
    let vals: Vec<C> = match m {
        Tensor::Bool(a) => a
            .iter()
            .map(|&b| if b { C::zero() } else { C::neg_infinity() })
            .collect(),
        _ => m.to_f64_vec()?.into_iter().map(C::of).collect(),
    };
    let total = g.total();
    let mut out = Vec::with_capacity(d[0] * d[1] * d[2] * total);
    if d[3] == 0 {
        out.resize(d[0] * d[1] * d[2] * total, C::neg_infinity());
    } else {
        for row in vals.chunks(d[3]) {
            out.extend_from_slice(row);
            out.resize(out.len() + total - d[3], C::neg_infinity());
        }
    }
    Ok((out, [d[0], d[1], d[2], total]))
}
