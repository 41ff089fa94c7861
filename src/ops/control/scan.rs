//! Scan (opset 9+): runs its body once per slice of the M scan inputs along
//! their scan axes (forward or reverse), threading N state values; the K scan
//! outputs are stacked along their output axes (forward or reverse).
//! Outer-scope values arrive as the node's trailing implicit inputs.

use super::tensors::{stack, take, ScanParts};
use crate::error::{Error, Result};
use crate::ir::Subgraph;
use crate::ir::{run_via_values, tensor_args, BuildContext, Fact, InferInput, Operator, Value};
use crate::ops::interrupt;
use crate::ops::util::{input, out_len};
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

const OP: &str = "Scan";

#[derive(Debug)]
struct Scan {
    body: Arc<dyn Subgraph>,
    states: usize,
    scan_inputs: usize,
    in_axes: Vec<i64>,
    in_reverse: Vec<bool>,
    out_axes: Vec<i64>,
    out_reverse: Vec<bool>,
}

fn list(ctx: &BuildContext, name: &str, len: usize) -> Result<Vec<i64>> {
    let v = ctx.attrs.ints_opt(name)?.unwrap_or_else(|| vec![0; len]);
    if v.len() != len {
        return Err(ctx
            .attrs
            .error(name, format!("has {} entries, expected {len}", v.len())));
    }
    Ok(v)
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let body = ctx.attrs.body("body")?;
    let m = ctx.attrs.int_req("num_scan_inputs")?;
    let explicit = ctx.num_inputs.saturating_sub(body.implicit());
    let m = usize::try_from(m)
        .ok()
        .filter(|&m| m >= 1 && m <= explicit)
        .ok_or_else(|| ctx.attrs.error("num_scan_inputs", "out of range"))?;
    let states = explicit - m;
    if body.formal() != explicit || body.num_outputs() < states {
        return Err(Error::op(
            OP,
            format!(
                "the body takes {} inputs and gives {} outputs, for {states} states and {m} scan inputs",
                body.formal(),
                body.num_outputs()
            ),
        ));
    }
    let k = body.num_outputs() - states;
    let rev = |v: Vec<i64>| v.into_iter().map(|d| d != 0).collect();
    Ok(Box::new(Scan {
        in_axes: list(ctx, "scan_input_axes", m)?,
        in_reverse: rev(list(ctx, "scan_input_directions", m)?),
        out_axes: list(ctx, "scan_output_axes", k)?,
        out_reverse: rev(list(ctx, "scan_output_directions", k)?),
        body,
        states,
        scan_inputs: m,
    }))
}

fn axis(a: i64, rank: usize) -> Result<usize> {
    crate::ops::util::axis(OP, a, rank)
}

impl Operator for Scan {
    fn is_random(&self) -> bool {
        self.body.is_random()
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let explicit = self.states + self.scan_inputs;
        let mut formal: Vec<Option<Fact>> = (0..self.states)
            .map(|i| inputs.get(i).and_then(|x| x.fact).cloned())
            .collect();
        for j in 0..self.scan_inputs {
            let f = inputs.get(self.states + j).and_then(|x| x.fact);
            formal.push(f.map(|f| match &f.shape {
                Some(s) => match axis(self.in_axes[j], s.len()) {
                    Ok(a) => {
                        let mut s = s.clone();
                        s.remove(a);
                        Fact::new(f.dtype, s)
                    }
                    Err(_) => Fact::unknown_shape(f.dtype),
                },
                None => Fact::unknown_shape(f.dtype),
            }));
        }
        let outer: Vec<Option<&Fact>> = inputs.iter().skip(explicit).map(|i| i.fact).collect();
        let body = self.body.infer(&formal, &outer);
        body.into_iter()
            .enumerate()
            .map(|(i, f)| {
                let f = f.ok_or_else(|| Error::op(OP, "the type of a body output is unknown"))?;
                Ok(if i < self.states {
                    f
                } else {
                    Fact::unknown_shape(f.dtype)
                })
            })
            .collect()
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let per_node: u64 = (0..outputs.len()).map(|i| out_len(outputs, i)).sum();
        self.body.nominal_flops(per_node)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        run_via_values(self, inputs)
    }

    /// The body reads outer-scope values of any kind; the state and scan
    /// inputs and outputs are tensors.
    fn uses_values(&self) -> bool {
        true
    }

    fn run_values(&self, values: &[Option<&Value>]) -> Result<Vec<Value>> {
        let explicit = self.states + self.scan_inputs;
        let inputs = tensor_args(values.get(..explicit).unwrap_or(values))?;
        let state: Vec<Value> = (0..self.states)
            .map(|i| input(OP, &inputs, i).map(|t| Value::from(t.clone())))
            .collect::<Result<_>>()?;
        let mut seq: Vec<(&Tensor, usize)> = Vec::with_capacity(self.scan_inputs);
        let mut len = None;
        for j in 0..self.scan_inputs {
            let t = input(OP, &inputs, self.states + j)?;
            let a = axis(self.in_axes[j], t.shape().len())?;
            let n = t.shape()[a];
            if len.is_some_and(|l| l != n) {
                return Err(Error::op(
                    OP,
                    "the scan inputs have different sequence lengths",
                ));
            }
            len = Some(n);
            seq.push((t, a));
        }
        let len = len.unwrap_or(0);
        let outer = values.get(explicit..).unwrap_or(&[]);
        let k = self.out_axes.len();
        let seq: Vec<(&Tensor, usize, bool)> = seq
            .iter()
            .zip(&self.in_reverse)
            .map(|(&(t, a), &r)| (t, a, r))
            .collect();
        let (state, scans) = run_steps(self.body.as_ref(), state, &seq, len, k, outer)?;
        let mut result = state;
        for (kk, ScanParts { mut parts, .. }) in scans.into_iter().enumerate() {
            if parts.is_empty() {
                return Err(Error::op(OP, "a scan over zero steps has no scan outputs"));
            }
            if self.out_reverse[kk] {
                parts.reverse();
            }
            let rank = parts[0].shape().len() + 1;
            let a = axis(self.out_axes[kk], rank)?;
            result.push(stack(OP, &parts, a)?.into());
        }
        Ok(result)
    }
}

/// The step loop of both Scan forms: runs `body` `len` times, threading the
/// states and feeding it step `i` of each scan input (`(tensor, axis,
/// reverse)`: from the end when reversed); returns the final states and the
/// `k` scan outputs' per-step parts.
pub(super) fn run_steps(
    body: &dyn Subgraph,
    mut state: Vec<Value>,
    seq: &[(&Tensor, usize, bool)],
    len: usize,
    k: usize,
    outer: &[Option<&Value>],
) -> Result<(Vec<Value>, Vec<ScanParts>)> {
    let mut scans = vec![ScanParts::default(); k];
    if len == 0 {
        return Ok((state, scans));
    }
    // The states are handed to the body, which may reuse their storage once
    // it has read them; every step must keep their types and shapes.
    let types: Vec<(DType, Vec<usize>)> = state
        .iter()
        .map(|s| Ok((s.dtype(), s.as_tensor("a scan state")?.shape().to_vec())))
        .collect::<Result<_>>()?;
    for step in 0..len {
        interrupt::check()?;
        let mut formal: Vec<Value> = std::mem::take(&mut state);
        for &(t, a, r) in seq {
            formal.push(take(t, a, if r { len - 1 - step } else { step })?.into());
        }
        let mut outs = body.run(formal, outer)?.into_iter();
        for (i, (dtype, shape)) in types.iter().enumerate() {
            let v = outs
                .next()
                .ok_or_else(|| Error::op(OP, "the body returned too few outputs"))?;
            let v = v.into_tensor("a scan state")?;
            if v.dtype() != *dtype || v.shape() != shape.as_slice() {
                return Err(Error::op(
                    OP,
                    format!(
                        "state {i} changes from {dtype} {shape:?} to {} {:?}",
                        v.dtype(),
                        v.shape()
                    ),
                ));
            }
            state.push(Value::Tensor(v));
        }
        for (kk, v) in outs.enumerate().take(k) {
            let v = v.into_tensor("a scan output")?;
            scans[kk].push(
                kk,
                step,
                Arc::try_unwrap(v).unwrap_or_else(|v| (*v).clone()),
            )?;
        }
    }
    Ok((state, scans))
}
