//! Scan at opset 8: the batched form. Its first input is the optional
//! `sequence_lens` (int64, one per batch entry); then N initial states, each
//! of shape `[batch, ...]`, and M scan inputs, each `[batch, seq, ...]`.
//! Batch entry `b` runs the body over the first `sequence_lens[b]` slices of
//! its scan inputs along axis 1 (all `seq` of them without `sequence_lens`),
//! forward or in reverse per the `directions` attribute, threading its own
//! states. The final states are stacked to `[batch, ...]` and the scan
//! outputs to `[batch, seq, ...]`, a shorter sequence's outputs padded with
//! zeros (the spec leaves the padding undefined). Outer-scope values arrive
//! as the node's trailing implicit inputs.

use super::scan::run_steps;
use super::tensors::{stack, take};
use crate::error::{Error, Result};
use crate::ir::Subgraph;
use crate::ir::{run_via_values, tensor_args, BuildContext, Fact, InferInput, Operator, Value};
use crate::ops::util::out_len;
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

const OP: &str = "Scan";

#[derive(Debug)]
struct Scan8 {
    body: Arc<dyn Subgraph>,
    states: usize,
    scan_inputs: usize,
    /// Per scan input: run its slices in reverse.
    reverse: Vec<bool>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let body = ctx.attrs.body("body")?;
    let m = ctx.attrs.int_req("num_scan_inputs")?;
    // The explicit inputs: sequence_lens, the states, the scan inputs.
    let explicit = ctx.num_inputs.saturating_sub(body.implicit());
    let formal = explicit.saturating_sub(1);
    let m = usize::try_from(m)
        .ok()
        .filter(|&m| m >= 1 && m <= formal)
        .ok_or_else(|| ctx.attrs.error("num_scan_inputs", "out of range"))?;
    let states = formal - m;
    if body.formal() != formal || body.num_outputs() < states {
        return Err(Error::op(
            OP,
            format!(
                "the body takes {} inputs and gives {} outputs, for {states} states and {m} scan inputs",
                body.formal(),
                body.num_outputs()
            ),
        ));
    }
    let directions = ctx.attrs.ints_opt("directions")?.unwrap_or(vec![0; m]);
    if directions.len() != m {
        return Err(ctx.attrs.error(
            "directions",
            format!("has {} entries, expected {m}", directions.len()),
        ));
    }
    Ok(Box::new(Scan8 {
        body,
        states,
        scan_inputs: m,
        reverse: directions.into_iter().map(|d| d != 0).collect(),
    }))
}

/// `f`'s shape without its leading (batch) axis, or without axes 0 and 1.
fn inner(f: &Fact, drop: usize) -> Fact {
    match &f.shape {
        Some(s) if s.len() >= drop => Fact::new(f.dtype, s[drop..].to_vec()),
        _ => Fact::unknown_shape(f.dtype),
    }
}

impl Scan8 {
    /// The number of steps for each of `batch` entries.
    fn lengths(&self, lens: Option<&Tensor>, batch: usize, max: usize) -> Result<Vec<usize>> {
        let Some(lens) = lens else {
            return Ok(vec![max; batch]);
        };
        if lens.dtype() != DType::I64 || lens.shape() != [batch] {
            return Err(Error::op(
                OP,
                format!("sequence_lens is {lens}, expected int64[{batch}] (one per batch entry)"),
            ));
        }
        lens.to_i64_vec()?
            .into_iter()
            .map(|n| {
                usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= max)
                    .ok_or_else(|| {
                        Error::op(OP, format!("sequence length {n} is outside 0..={max}"))
                    })
            })
            .collect()
    }
}

impl Operator for Scan8 {
    fn is_random(&self) -> bool {
        self.body.is_random()
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let explicit = 1 + self.states + self.scan_inputs;
        let fact = |i: usize| inputs.get(i).and_then(|x| x.fact);
        let mut formal: Vec<Option<Fact>> = (0..self.states)
            .map(|i| fact(1 + i).map(|f| inner(f, 1)))
            .collect();
        for j in 0..self.scan_inputs {
            formal.push(fact(1 + self.states + j).map(|f| inner(f, 2)));
        }
        let outer: Vec<Option<&Fact>> = inputs.iter().skip(explicit).map(|i| i.fact).collect();
        let body = self.body.infer(&formal, &outer);
        body.into_iter()
            .map(|f| {
                let f = f.ok_or_else(|| Error::op(OP, "the type of a body output is unknown"))?;
                Ok(Fact::unknown_shape(f.dtype))
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
        let explicit = 1 + self.states + self.scan_inputs;
        let inputs = tensor_args(values.get(..explicit).unwrap_or(values))?;
        let get = |i: usize| -> Result<&Tensor> {
            inputs
                .get(i)
                .copied()
                .flatten()
                .ok_or_else(|| Error::op(OP, format!("required input {i} is missing")))
        };
        let states: Vec<&Tensor> = (1..=self.states).map(get).collect::<Result<_>>()?;
        let scans: Vec<&Tensor> = (0..self.scan_inputs)
            .map(|j| get(1 + self.states + j))
            .collect::<Result<_>>()?;
        let (batch, max) = match scans[0].shape() {
            [b, s, ..] => (*b, *s),
            other => {
                return Err(Error::op(
                    OP,
                    format!("scan input 0 has shape {other:?}, not [batch, sequence, ...]"),
                ))
            }
        };
        let seq_ok = scans.iter().all(|s| s.shape().get(1) == Some(&max));
        for t in scans.iter().chain(&states) {
            if !seq_ok || !matches!(t.shape(), [b, ..] if *b == batch) {
                return Err(Error::op(
                    OP,
                    format!(
                        "the states and scan inputs must share the batch size {batch} \
                         (and the scan inputs the sequence length {max}); found {:?}",
                        t.shape()
                    ),
                ));
            }
        }
        let lengths = self.lengths(inputs.first().copied().flatten(), batch, max)?;
        let outer = values.get(explicit..).unwrap_or(&[]);
        let k = self.body.num_outputs() - self.states;
        let mut final_states: Vec<Vec<Tensor>> = vec![Vec::with_capacity(batch); self.states];
        let mut outputs: Vec<Vec<Vec<Tensor>>> = vec![Vec::with_capacity(batch); k];
        for (b, &n) in lengths.iter().enumerate() {
            let state = states
                .iter()
                .map(|t| take(t, 0, b).map(Value::from))
                .collect::<Result<Vec<_>>>()?;
            let seq = scans
                .iter()
                .map(|t| take(t, 0, b))
                .collect::<Result<Vec<_>>>()?;
            let seq: Vec<(&Tensor, usize, bool)> = seq
                .iter()
                .zip(&self.reverse)
                .map(|(t, &r)| (t, 0, r))
                .collect();
            let (state, scans) = run_steps(self.body.as_ref(), state, &seq, n, k, outer)?;
            for (i, s) in state.into_iter().enumerate() {
                let s = s.into_tensor("a scan state")?;
                final_states[i].push(Arc::try_unwrap(s).unwrap_or_else(|s| (*s).clone()));
            }
            for (kk, p) in scans.into_iter().enumerate() {
                outputs[kk].push(p.parts);
            }
        }
        let mut result: Vec<Value> = Vec::with_capacity(self.states + k);
        for parts in final_states {
            result.push(stack(OP, &parts, 0)?.into());
        }
        for (kk, per_entry) in outputs.into_iter().enumerate() {
            // The padding takes the type and shape of any step's output.
            let like = per_entry
                .iter()
                .flatten()
                .next()
                .ok_or_else(|| {
                    Error::op(
                        OP,
                        format!("scan output {kk}: a scan over zero steps has no scan outputs"),
                    )
                })?
                .clone();
            let pad = Tensor::zeros(like.dtype(), like.shape());
            let mut entries = Vec::with_capacity(batch);
            for mut parts in per_entry {
                parts.resize(max, pad.clone());
                entries.push(stack(OP, &parts, 0)?);
            }
            result.push(stack(OP, &entries, 0)?.into());
        }
        Ok(result)
    }
}
