//! `SoftmaxCrossEntropyLoss`: log-softmax over the class axis, then the
//! negative log-likelihood of the labelled class; the optional second
//! output is the log-probabilities.

use super::{Geom, Kernel, Spec};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::norm::Real;
use crate::ops::unary::kernel::Float;
use crate::ops::util::par_rows;
use crate::tensor::Tensor;

const OP: &str = "SoftmaxCrossEntropyLoss";

/// A built `SoftmaxCrossEntropyLoss` node.
#[derive(Debug)]
struct Sce {
    spec: Spec,
    /// Whether the node asks for the log-probabilities output.
    log_prob: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    if ctx.num_outputs > 2 {
        return Err(Error::op(
            OP,
            format!("has {} outputs, at most 2 allowed", ctx.num_outputs),
        ));
    }
    Ok(Box::new(Sce {
        spec: Spec::from_ctx(OP, ctx)?,
        log_prob: ctx.num_outputs == 2,
    }))
}

impl Operator for Sce {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        self.spec.infer(inputs, self.log_prob)
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // max, subtract, exp, add; one more subtraction for log_prob.
        let per = if self.log_prob { 6 } else { 4 };
        self.spec.flops(inputs, outputs, per)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        self.spec.run(&LogSoftmax, inputs, self.log_prob)
    }
}

/// The kernel: per (n, d) position the maximum `m` over the classes and
/// `ls = ln Σ_c e^(x_c - m)`, then `log p_c = (x_c - m) - ls`.
struct LogSoftmax;

impl Kernel for LogSoftmax {
    fn compute<T: Float, C: Real>(
        &self,
        x: &[T],
        g: Geom,
        labels: &[i64],
        ignore: Option<i64>,
        log_prob: bool,
    ) -> (Vec<C>, Option<Vec<T>>) {
        let stats = stats::<T, C>(x, g);
        let mut loss = vec![C::zero(); g.positions()];
        par_rows(&mut loss, 1, |first, chunk| {
            for (i, l) in chunk.iter_mut().enumerate() {
                let p = first + i;
                let t = labels[p];
                if Some(t) == ignore {
                    continue;
                }
                let (n, dd) = (p / g.d, p % g.d);
                let v = C::from_elem(x[(n * g.c + t as usize) * g.d + dd]);
                let (m, ls) = stats[p];
                *l = -((v - m) - ls);
            }
        });
        let lp = log_prob.then(|| {
            let mut out = vec![T::default(); x.len()];
            par_rows(&mut out, g.d, |first_row, chunk| {
                for (i, row) in chunk.chunks_mut(g.d.max(1)).enumerate() {
                    let r = first_row + i;
                    let s = &stats[(r / g.c.max(1)) * g.d..][..row.len()];
                    let xr = &x[r * g.d..][..row.len()];
                    for ((o, &v), &(m, ls)) in row.iter_mut().zip(xr).zip(s) {
                        *o = ((C::from_elem(v) - m) - ls).to_elem();
                    }
                }
            });
            out
        });
        (loss, lp)
    }
}

/// `(m, ls)` per (n, d) position, computed over contiguous runs of d so the
/// inner loops stream over memory.
fn stats<T: Float, C: Real>(x: &[T], g: Geom) -> Vec<(C, C)> {
    let mut stats = vec![(C::neg_infinity(), C::zero()); g.positions()];
    par_rows(&mut stats, 1, |first, chunk| {
        let end = first + chunk.len();
        let mut p = first;
        while p < end {
            let (n, d0) = (p / g.d, p % g.d);
            let len = (g.d - d0).min(end - p);
            let seg = &mut chunk[p - first..][..len];
            let base = n * g.c * g.d + d0;
            for k in 0..g.c {
                let xr = &x[base + k * g.d..][..len];
                for (s, &v) in seg.iter_mut().zip(xr) {
                    let v = C::from_elem(v);
                    if v > s.0 {
                        s.0 = v;
                    }
                }
            }
            for k in 0..g.c {
                let xr = &x[base + k * g.d..][..len];
                for (s, &v) in seg.iter_mut().zip(xr) {
                    s.1 = s.1 + (C::from_elem(v) - s.0).exp();
                }
            }
            for s in seg.iter_mut() {
                s.1 = s.1.ln();
            }
            p += len;
        }
    });
    stats
}
