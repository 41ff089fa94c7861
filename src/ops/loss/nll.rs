//! `NegativeLogLikelihoodLoss`: the input already holds log-probabilities;
//! the loss of a position is minus the labelled class's value.

use super::{Geom, Kernel, Spec};
use crate::error::Result;
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::norm::Real;
use crate::ops::unary::kernel::Float;
use crate::ops::util::par_rows;
use crate::tensor::Tensor;

const OP: &str = "NegativeLogLikelihoodLoss";

/// A built `NegativeLogLikelihoodLoss` node.
#[derive(Debug)]
struct Nll {
    spec: Spec,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    if ctx.num_outputs > 1 {
        return Err(crate::Error::op(
            OP,
            format!("has {} outputs, at most 1 allowed", ctx.num_outputs),
        ));
    }
    Ok(Box::new(Nll {
        spec: Spec::from_ctx(OP, ctx)?,
    }))
}

impl Operator for Nll {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        self.spec.infer(inputs, false)
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // Only one score per label is read.
        self.spec.flops(inputs, outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        self.spec.run(&Gather, inputs, false)
    }
}

/// The kernel: gathers and negates the labelled class's value.
struct Gather;

impl Kernel for Gather {
    fn compute<T: Float, C: Real>(
        &self,
        x: &[T],
        g: Geom,
        labels: &[i64],
        ignore: Option<i64>,
        _log_prob: bool,
    ) -> (Vec<C>, Option<Vec<T>>) {
        let mut loss = vec![C::zero(); g.positions()];
        par_rows(&mut loss, 1, |first, chunk| {
            for (i, l) in chunk.iter_mut().enumerate() {
                let p = first + i;
                let t = labels[p];
                if Some(t) != ignore {
                    let (n, dd) = (p / g.d, p % g.d);
                    *l = -C::from_elem(x[(n * g.c + t as usize) * g.d + dd]);
                }
            }
        });
        (loss, None)
    }
}
