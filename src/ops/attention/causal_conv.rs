//! `CausalConvWithState` (opset 27): a depthwise causal 1-D convolution over
//! `[batch, channels, length]` with kernel `[channels, 1, k]`, left-padded by
//! the carried state `past_state` `[batch, channels, k-1]` (zeros when
//! absent), an optional per-channel bias and a fused SiLU (`silu`/`swish`).
//! `present_state` is the last `k-1` positions of the padded sequence. Sums
//! are accumulated in f32 and rounded to the data type once, then the bias is
//! added and the activation applied, as in the ONNX reference.

use super::support::{check_float, dispatch, product, rt, same_type, slice, wrap, FloatKernel};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::norm::Real;
use crate::ops::unary::kernel::Float;
use crate::ops::util::{fact, input, opt_fact, opt_input, par_rows};
use crate::tensor::{Element, Tensor};

const OP: &str = "CausalConvWithState";

/// A built CausalConvWithState node.
#[derive(Debug)]
struct CausalConv {
    silu: bool,
    num_outputs: usize,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    if !(2..=4).contains(&ctx.num_inputs) || !(1..=2).contains(&ctx.num_outputs) {
        return Err(Error::op(
            OP,
            format!(
                "takes 2 to 4 inputs and 1 or 2 outputs, found {} and {}",
                ctx.num_inputs, ctx.num_outputs
            ),
        ));
    }
    let silu = match ctx.attrs.string("activation", "none")?.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return Err(ctx.attrs.error(
                "activation",
                format!("must be 'none', 'silu' or 'swish', found {other:?}"),
            ))
        }
    };
    Ok(Box::new(CausalConv {
        silu,
        num_outputs: ctx.num_outputs,
    }))
}

/// The sizes of one node: batch, channels, length and kernel size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geom {
    b: usize,
    c: usize,
    l: usize,
    k: usize,
}

impl Geom {
    fn state_shape(&self) -> Vec<usize> {
        vec![self.b, self.c, self.k - 1]
    }
}

/// Checks the shapes of input, weight, bias and past_state.
fn geom(x: &[usize], w: &[usize], bias: Option<&[usize]>, past: Option<&[usize]>) -> Result<Geom> {
    let [b, c, l] = *x else {
        return Err(Error::op(
            OP,
            format!("input must be 3-D [batch, channels, length], found {x:?}"),
        ));
    };
    let k = match *w {
        [wc, 1, k] if wc == c && k >= 1 => k,
        _ => {
            return Err(Error::op(
                OP,
                format!("weight must be [{c}, 1, k] with k ≥ 1, found {w:?}"),
            ))
        }
    };
    if let Some(bs) = bias {
        if bs != [c] {
            return Err(Error::op(OP, format!("bias must be [{c}], found {bs:?}")));
        }
    }
    let g = Geom { b, c, l, k };
    if let Some(p) = past {
        if p != g.state_shape() {
            return Err(Error::op(
                OP,
                format!("past_state must be {:?}, found {p:?}", g.state_shape()),
            ));
        }
    }
    Ok(g)
}

impl Operator for CausalConv {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let w = fact(OP, inputs, 1)?;
        let (bias, past) = (opt_fact(inputs, 2), opt_fact(inputs, 3));
        check_float(OP, x.dtype, false)?;
        same_type(OP, "weight", w.dtype, x.dtype)?;
        for (name, f) in [("bias", bias), ("past_state", past)] {
            if let Some(f) = f {
                same_type(OP, name, f.dtype, x.dtype)?;
            }
        }
        let known = |f: Option<&Fact>| f.is_none_or(|f| f.shape.is_some());
        let state = match (&x.shape, &w.shape) {
            (Some(xs), Some(ws)) if known(bias) && known(past) => {
                let shape = |f: Option<&'_ Fact>| f.and_then(|f| f.shape.clone());
                let (bs, ps) = (shape(bias), shape(past));
                let g = geom(xs, ws, bs.as_deref(), ps.as_deref())?;
                Fact::new(x.dtype, g.state_shape())
            }
            _ => Fact::unknown_shape(x.dtype),
        };
        let mut out = vec![x.clone(), state];
        out.truncate(self.num_outputs);
        Ok(out)
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let out = outputs.first().and_then(|f| f.len()).unwrap_or(0) as u64;
        let k = inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|f| f.shape.as_ref())
            .and_then(|s| s.last().copied())
            .unwrap_or(1) as u64;
        // The state copy counts too: an empty input still moves it.
        let state = outputs.get(1).and_then(|f| f.len()).unwrap_or(0) as u64;
        out.saturating_mul(2 * k + 1 + if self.silu { 14 } else { 0 })
            .saturating_add(state)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Conv
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let w = input(OP, inputs, 1)?;
        let (bias, past) = (opt_input(inputs, 2), opt_input(inputs, 3));
        let facts: Vec<Option<Fact>> = (0..4).map(|i| opt_input(inputs, i).map(Fact::of)).collect();
        let ins: Vec<InferInput> = facts
            .iter()
            .map(|f| InferInput {
                fact: f.as_ref(),
                value: None,
            })
            .collect();
        self.infer(&ins)?;
        let g = geom(
            x.shape(),
            w.shape(),
            bias.map(|t| t.shape()),
            past.map(|t| t.shape()),
        )?;
        let k = Kernel {
            g,
            x,
            w,
            bias,
            past,
            silu: self.silu,
        };
        let mut out = dispatch(OP, x.dtype(), false, &k)?;
        out.truncate(self.num_outputs);
        Ok(out)
    }
}

struct Kernel<'a> {
    g: Geom,
    x: &'a Tensor,
    w: &'a Tensor,
    bias: Option<&'a Tensor>,
    past: Option<&'a Tensor>,
    silu: bool,
}

impl FloatKernel for Kernel<'_> {
    fn go<T: Float + Element, C: Real>(&self) -> Result<Vec<Tensor>> {
        let g = self.g;
        let x = slice::<T>(OP, "input", self.x)?;
        let w = slice::<T>(OP, "weight", self.w)?;
        let bias = self.bias.map(|t| slice::<T>(OP, "bias", t)).transpose()?;
        let past = self
            .past
            .map(|t| slice::<T>(OP, "past_state", t))
            .transpose()?;
        let pad = g.k - 1;
        let padded_len =
            g.l.checked_add(pad)
                .ok_or_else(|| Error::op(OP, "the padded sequence length overflows"))?;
        let state_len = product(OP, "present_state", &g.state_shape())?;
        let mut y = vec![T::default(); x.len()];
        let mut state = vec![T::default(); state_len];
        // One row per (batch, channel): its output and its new state.
        let row = g.l + pad;
        let mut buf = vec![T::default(); product(OP, "output", &[g.b, g.c, padded_len])?];
        par_rows(&mut buf, row, |first, chunk| {
            let mut seq = vec![T::default(); padded_len];
            for (r, out) in chunk.chunks_mut(row.max(1)).enumerate() {
                let r = first + r;
                let ch = r % g.c;
                if let Some(p) = &past {
                    seq[..pad].copy_from_slice(&p[r * pad..(r + 1) * pad]);
                }
                seq[pad..].copy_from_slice(&x[r * g.l..(r + 1) * g.l]);
                let wk = &w[ch * g.k..(ch + 1) * g.k];
                let b = bias.as_ref().map(|b| C::from_elem(b[ch]));
                let (yo, so) = out.split_at_mut(g.l);
                for (t, o) in yo.iter_mut().enumerate() {
                    let mut acc = C::zero();
                    for (&wv, &xv) in wk.iter().zip(&seq[t..t + g.k]) {
                        acc = acc + C::from_elem(wv) * C::from_elem(xv);
                    }
                    let mut v = rt::<T, C>(acc);
                    if let Some(b) = b {
                        v = rt::<T, C>(v + b);
                    }
                    if self.silu {
                        v = v * (C::one() / (C::one() + (-v).exp()));
                    }
                    *o = v.to_elem();
                }
                so.copy_from_slice(&seq[g.l..]);
            }
        });
        for (r, src) in buf.chunks(row.max(1)).enumerate().take(g.b * g.c) {
            y[r * g.l..(r + 1) * g.l].copy_from_slice(&src[..g.l]);
            state[r * pad..(r + 1) * pad].copy_from_slice(&src[g.l..]);
        }
        Ok(vec![
            wrap(OP, self.x.shape(), y)?,
            wrap(OP, &g.state_shape(), state)?,
        ])
    }
}

#[cfg(test)]
#[path = "causal_conv_tests.rs"]
mod tests;
