//! SequenceMap: runs its body once per element of the input sequence. The
//! body's k-th input is the k-th node input's element at that position (a
//! sequence input must have the first one's length) or, for a tensor input,
//! the tensor itself; each body output is collected into an output sequence.
//! Outer-scope values arrive as the node's trailing implicit inputs.

use super::{sequence, value};
use crate::error::{Error, Result};
use crate::ir::{
    run_via_values, BuildContext, Fact, InferInput, Kind, Operator, Sequence, Subgraph, Value,
};
use crate::ops::interrupt;
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

const OP: &str = "SequenceMap";

#[derive(Debug)]
struct SequenceMap {
    body: Arc<dyn Subgraph>,
    /// The node's explicit inputs (the input sequence and the additional ones).
    explicit: usize,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let body = ctx.attrs.body("body")?;
    let explicit = ctx.num_inputs.saturating_sub(body.implicit());
    if explicit == 0 || body.formal() != explicit {
        return Err(Error::op(
            OP,
            format!(
                "the body takes {} inputs for {explicit} node inputs",
                body.formal()
            ),
        ));
    }
    if body.num_outputs() != ctx.num_outputs {
        return Err(Error::op(
            OP,
            format!(
                "the body has {} outputs but the node has {}",
                body.num_outputs(),
                ctx.num_outputs
            ),
        ));
    }
    Ok(Box::new(SequenceMap { body, explicit }))
}

impl Operator for SequenceMap {
    fn is_random(&self) -> bool {
        self.body.is_random()
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let formal: Vec<Option<Fact>> = inputs
            .iter()
            .take(self.explicit)
            .map(|x| {
                x.fact.map(|f| match f.kind {
                    Kind::Sequence => Fact::unknown_shape(f.dtype),
                    _ => f.clone(),
                })
            })
            .collect();
        let outer: Vec<Option<&Fact>> = inputs.iter().skip(self.explicit).map(|x| x.fact).collect();
        self.body
            .infer(&formal, &outer)
            .into_iter()
            .map(|f| {
                f.map(|f| Fact::of_kind(Kind::Sequence, f.dtype))
                    .ok_or_else(|| Error::op(OP, "the type of a body output is unknown"))
            })
            .collect()
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // The length is known only when running: one element is counted.
        self.body.nominal_flops(outputs.len() as u64)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        run_via_values(self, inputs)
    }

    fn uses_values(&self) -> bool {
        true
    }

    fn run_values(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let len = sequence(OP, inputs, 0)?.len();
        let explicit: Vec<&Value> = (0..self.explicit)
            .map(|i| value(OP, inputs, i))
            .collect::<Result<_>>()?;
        for (i, v) in explicit.iter().enumerate() {
            if let Value::Sequence(s) = v {
                if s.len() != len {
                    return Err(Error::op(
                        OP,
                        format!("input {i} holds {} tensors, input 0 holds {len}", s.len()),
                    ));
                }
            } else if !matches!(v, Value::Tensor(_)) {
                return Err(v.not(&format!("{OP} input {i}"), Kind::Tensor));
            }
        }
        let outer = inputs.get(self.explicit..).unwrap_or(&[]);
        let n = self.body.num_outputs();
        let mut outs: Vec<Option<Sequence>> = (0..n)
            .map(|k| self.body.declared_output(k).map(Sequence::empty))
            .collect();
        for pos in 0..len {
            interrupt::check()?;
            let formal: Vec<Value> = explicit
                .iter()
                .map(|v| match v {
                    Value::Sequence(s) => s
                        .items()
                        .get(pos)
                        .cloned()
                        .map(Value::Tensor)
                        .ok_or_else(|| Error::op(OP, "a sequence is too short")),
                    v => Ok((*v).clone()),
                })
                .collect::<Result<_>>()?;
            let results = self.body.run(formal, outer)?;
            if results.len() != n {
                return Err(Error::op(OP, "the body returned too few outputs"));
            }
            for (k, r) in results.into_iter().enumerate() {
                let t = r.into_tensor(&format!("body output {k}"))?;
                let s = outs[k].get_or_insert_with(|| Sequence::empty(t.dtype()));
                s.push(t)?;
            }
        }
        Ok(outs
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Sequence::empty(DType::F32)).into())
            .collect())
    }
}
