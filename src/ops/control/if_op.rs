//! If: runs `then_branch` or `else_branch` by a one-element condition; the
//! branches take no formal inputs and read outer-scope values (the node's
//! implicit inputs, after the condition).

use super::tensors::truth;
use crate::error::{Error, Result};
use crate::ir::Subgraph;
use crate::ir::{run_via_values, BuildContext, Fact, InferInput, Operator, Value};
use crate::ops::util::out_len;
use crate::tensor::Tensor;
use std::sync::Arc;

const OP: &str = "If";

#[derive(Debug)]
struct If {
    then_branch: Arc<dyn Subgraph>,
    else_branch: Arc<dyn Subgraph>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let then_branch = ctx.attrs.body("then_branch")?;
    let else_branch = ctx.attrs.body("else_branch")?;
    for b in [&then_branch, &else_branch] {
        if b.formal() != 0 {
            return Err(Error::op(
                OP,
                "a branch declares inputs; If branches take none",
            ));
        }
        if b.num_outputs() != ctx.num_outputs {
            return Err(Error::op(
                OP,
                format!(
                    "a branch has {} outputs but the node has {}",
                    b.num_outputs(),
                    ctx.num_outputs
                ),
            ));
        }
    }
    Ok(Box::new(If {
        then_branch,
        else_branch,
    }))
}

impl If {
    fn implicit<'a, T: Copy>(&self, all: &'a [Option<T>]) -> &'a [Option<T>] {
        all.get(1..).unwrap_or(&[])
    }
}

impl Operator for If {
    fn is_random(&self) -> bool {
        self.then_branch.is_random() || self.else_branch.is_random()
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let outer: Vec<Option<&Fact>> = inputs.iter().skip(1).map(|i| i.fact).collect();
        let chosen = inputs
            .first()
            .and_then(|i| i.value)
            .and_then(|c| truth(OP, c).ok());
        let a = self.then_branch.infer(&[], &outer);
        let b = self.else_branch.infer(&[], &outer);
        a.into_iter()
            .zip(b)
            .map(|(a, b)| {
                let f = match chosen {
                    Some(true) => a,
                    Some(false) => b,
                    None if a == b => a,
                    None => a.or(b).map(|f| Fact::of_kind(f.kind, f.dtype)),
                };
                f.ok_or_else(|| Error::op(OP, "the type of a branch output is unknown"))
            })
            .collect()
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let per_node = (0..outputs.len()).map(|i| out_len(outputs, i)).sum::<u64>();
        self.then_branch
            .nominal_flops(per_node)
            .max(self.else_branch.nominal_flops(per_node))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        run_via_values(self, inputs)
    }

    /// The branches read and return values of any kind.
    fn uses_values(&self) -> bool {
        true
    }

    fn run_values(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let cond = match inputs.first().copied().flatten() {
            Some(c) => truth(OP, c.as_tensor("the condition")?)?,
            None => return Err(Error::op(OP, "the condition is missing")),
        };
        let branch = if cond {
            &self.then_branch
        } else {
            &self.else_branch
        };
        branch.run(Vec::new(), self.implicit(inputs))
    }
}
