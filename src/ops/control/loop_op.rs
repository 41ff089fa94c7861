//! Loop: runs its body while the trip count `M` (optional) and the condition
//! (optional, updated by the body) allow. The body maps (iteration number,
//! condition, N loop-carried values) to (condition, N carried values, K scan
//! outputs); scan outputs are stacked along a new first axis. Outer-scope
//! values arrive as the node's trailing implicit inputs.

use super::tensors::{stack, truth, ScanParts};
use crate::error::{Error, Result};
use crate::ir::Subgraph;
use crate::ir::{
    run_via_values, tensor_args, BuildContext, Fact, InferInput, Kind, Operator, Value,
};
use crate::ops::interrupt;
use crate::ops::util::{opt_input, out_len};
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

const OP: &str = "Loop";

#[derive(Debug)]
struct Loop {
    body: Arc<dyn Subgraph>,
    /// Loop-carried values N.
    carried: usize,
    /// Scan outputs K.
    scans: usize,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let body = ctx.attrs.body("body")?;
    let explicit = ctx.num_inputs.saturating_sub(body.implicit());
    if explicit < 2 {
        return Err(Error::op(
            OP,
            "Loop needs the inputs M and cond (either may be empty)",
        ));
    }
    let carried = explicit - 2;
    if body.formal() != carried + 2 {
        return Err(Error::op(
            OP,
            format!(
                "the body takes {} inputs, expected {}",
                body.formal(),
                carried + 2
            ),
        ));
    }
    if body.num_outputs() < carried + 1 || ctx.num_outputs > body.num_outputs() - 1 {
        return Err(Error::op(
            OP,
            format!(
                "the body has {} outputs for {carried} loop-carried values and {} node outputs",
                body.num_outputs(),
                ctx.num_outputs
            ),
        ));
    }
    let scans = body.num_outputs() - 1 - carried;
    Ok(Box::new(Loop {
        body,
        carried,
        scans,
    }))
}

impl Operator for Loop {
    fn is_random(&self) -> bool {
        self.body.is_random()
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let n = self.carried;
        let mut formal = vec![
            Some(Fact::new(DType::I64, vec![])),
            Some(Fact::new(DType::Bool, vec![])),
        ];
        formal.extend((0..n).map(|i| inputs.get(2 + i).and_then(|x| x.fact).cloned()));
        let outer: Vec<Option<&Fact>> = inputs.iter().skip(2 + n).map(|i| i.fact).collect();
        let body = self.body.infer(&formal, &outer);
        let mut out = Vec::with_capacity(n + self.scans);
        for i in 0..n {
            let init = inputs.get(2 + i).and_then(|x| x.fact);
            let dtype = init
                .map(|f| f.dtype)
                .or_else(|| body.get(1 + i).cloned().flatten().map(|f| f.dtype))
                .ok_or_else(|| Error::op(OP, "the type of a loop-carried value is unknown"))?;
            let same = body.get(1 + i).cloned().flatten();
            out.push(match (init, same) {
                (Some(a), Some(b)) if *a == b => b,
                _ => Fact::unknown_shape(dtype),
            });
        }
        for k in 0..self.scans {
            let f = body
                .get(1 + n + k)
                .cloned()
                .flatten()
                .ok_or_else(|| Error::op(OP, "the type of a scan output is unknown"))?;
            out.push(Fact::unknown_shape(f.dtype));
        }
        Ok(out)
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // The trip count is known only when running: one trip is counted.
        let per_node: u64 = (0..outputs.len()).map(|i| out_len(outputs, i)).sum();
        self.body.nominal_flops(per_node)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        run_via_values(self, inputs)
    }

    /// Loop-carried and outer-scope values may be sequences or optionals;
    /// scan outputs are tensors.
    fn uses_values(&self) -> bool {
        true
    }

    fn run_values(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let n = self.carried;
        let control = tensor_args(inputs.get(..2).unwrap_or(inputs))?;
        let max_trips = match opt_input(&control, 0) {
            Some(m) => {
                let v = m.to_i64_vec()?;
                match v.as_slice() {
                    [x] => Some((*x).max(0)),
                    _ => return Err(Error::op(OP, "M must hold one integer")),
                }
            }
            None => None,
        };
        let mut cond = match opt_input(&control, 1) {
            Some(c) => truth(OP, c)?,
            None => true,
        };
        let mut state: Vec<Value> = (0..n)
            .map(|i| {
                inputs
                    .get(2 + i)
                    .copied()
                    .flatten()
                    .cloned()
                    .ok_or_else(|| Error::op(OP, format!("loop-carried input {i} is missing")))
            })
            .collect::<Result<_>>()?;
        let outer = inputs.get(2 + n..).unwrap_or(&[]);
        // An optional may become present or absent; its kind and element
        // type stay, so every trip is checked against the initial values.
        let types: Vec<(Kind, DType)> = state.iter().map(|s| (s.kind(), s.dtype())).collect();
        let mut scans = vec![ScanParts::default(); self.scans];
        let mut i: i64 = 0;
        while cond && max_trips.is_none_or(|m| i < m) {
            interrupt::check()?;
            let mut formal: Vec<Value> = Vec::with_capacity(2 + n);
            formal.push(Tensor::scalar(i).into());
            formal.push(Tensor::scalar(cond).into());
            // The carried values are handed to the body, which may reuse
            // their storage once it has read them.
            formal.append(&mut state);
            let mut outs = self.body.run(formal, outer)?.into_iter();
            let next = outs
                .next()
                .ok_or_else(|| Error::op(OP, "the body returned no condition"))?;
            cond = truth(OP, next.as_tensor("the condition")?)?;
            for (k, &(kind, dtype)) in types.iter().enumerate() {
                let v = outs
                    .next()
                    .ok_or_else(|| Error::op(OP, "the body returned too few outputs"))?;
                if v.dtype() != dtype || v.kind().unwrapped() != kind.unwrapped() {
                    return Err(Error::op(
                        OP,
                        format!(
                            "loop-carried value {k} changes type from {kind} of {dtype} to {} of {}",
                            v.kind(),
                            v.dtype()
                        ),
                    ));
                }
                state.push(v);
            }
            for (k, v) in outs.enumerate().take(self.scans) {
                let v = v.into_tensor("a scan output")?;
                scans[k].push(
                    k,
                    i as usize,
                    Arc::try_unwrap(v).unwrap_or_else(|v| (*v).clone()),
                )?;
            }
            i += 1;
        }
        let mut result = state;
        for (k, ScanParts { parts, .. }) in scans.into_iter().enumerate() {
            result.push(if parts.is_empty() {
                let dtype = self.body.declared_output(1 + n + k).unwrap_or(DType::F32);
                Tensor::zeros(dtype, &[0]).into()
            } else {
                stack(OP, &parts, 0)?.into()
            });
        }
        Ok(result)
    }
}
