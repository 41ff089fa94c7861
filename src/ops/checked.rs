//! Running an operator within the memory budget: before a kernel runs, its
//! outputs' shapes are inferred from the actual inputs (their values too, so
//! a shape or count read from data counts) and checked against the budget in
//! force, so a hostile shape is a typed error and never an aborting
//! allocation.

use crate::error::Result;
use crate::ir::{Fact, InferInput, Operator};
use crate::tensor::{budget, Tensor};

/// Checks that the outputs `op` would produce from `args` fit the memory
/// budget in force. Outputs whose shape cannot be inferred ahead are left to
/// the kernel's own checks; an inference error is left to the kernel too,
/// which reports it with its own message.
pub fn check_outputs(op: &dyn Operator, args: &[Option<&Tensor>]) -> Result<()> {
    let facts: Vec<Option<Fact>> = args.iter().map(|a| a.map(Fact::of)).collect();
    let inputs: Vec<InferInput> = facts
        .iter()
        .zip(args)
        .map(|(fact, value)| InferInput {
            fact: fact.as_ref(),
            value: *value,
        })
        .collect();
    if let Ok(outputs) = op.infer(&inputs) {
        check_facts(&outputs)?;
    }
    Ok(())
}

/// Checks known output facts against the memory budget in force.
pub fn check_facts(outputs: &[Fact]) -> Result<()> {
    for (i, fact) in outputs.iter().enumerate() {
        if let Some(shape) = &fact.shape {
            budget::check(&format!("output {i}"), fact.dtype, shape)?;
        }
    }
    Ok(())
}

/// Runs `op` on `args` after [`check_outputs`].
pub fn run_checked(op: &dyn Operator, args: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    check_outputs(op, args)?;
    op.run(args)
}
