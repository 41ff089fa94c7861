//! TreeEnsemble (ai.onnx.ml opset 5): the scores of a batch `[N, F]` under
//! an ensemble of decision trees, `[N, n_targets]` in the input's float type.
//! Each tree adds its leaf's weight to the leaf's target; `aggregate_function`
//! sums, averages (over trees), or keeps the least or greatest weight per
//! target (a target no leaf reached scores 0, as in onnxruntime), then
//! `post_transform` applies SOFTMAX, LOGISTIC, SOFTMAX_ZERO (softmax over the
//! nonzero scores, zeros stay zero) or PROBIT (√2·erfinv(2v − 1)) per row.
//! Scores accumulate in f64 and round to the output type once.

use super::tree_model::{Child, Model, OP};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::parallel::par_rows;
use crate::ops::util::{fact, input};
use crate::tensor::{budget, DType, Tensor};
use half::f16;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Aggregate {
    Average,
    Sum,
    Min,
    Max,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Post {
    None,
    Softmax,
    Logistic,
    SoftmaxZero,
    Probit,
}

#[derive(Debug)]
struct TreeEnsemble {
    model: Model,
    aggregate: Aggregate,
    post: Post,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let aggregate = match a.int("aggregate_function", 1)? {
        0 => Aggregate::Average,
        1 => Aggregate::Sum,
        2 => Aggregate::Min,
        3 => Aggregate::Max,
        v => return Err(a.error("aggregate_function", format!("must be 0..=3, found {v}"))),
    };
    let post = match a.int("post_transform", 0)? {
        0 => Post::None,
        1 => Post::Softmax,
        2 => Post::Logistic,
        3 => Post::SoftmaxZero,
        4 => Post::Probit,
        v => return Err(a.error("post_transform", format!("must be 0..=4, found {v}"))),
    };
    Ok(Box::new(TreeEnsemble {
        model: Model::from_attributes(a)?,
        aggregate,
        post,
    }))
}

/// The inverse error function: Winitzki's approximation refined by Newton
/// steps on `libm::erf` (to about 1e-15 inside (-1, 1)).
fn erfinv(y: f64) -> f64 {
    if !(-1.0..=1.0).contains(&y) {
        return f64::NAN;
    }
    if y.abs() == 1.0 {
        return y * f64::INFINITY;
    }
    const A: f64 = 0.147;
    let ln = (1.0 - y * y).ln();
    let t = 2.0 / (std::f64::consts::PI * A) + ln / 2.0;
    let mut x = y.signum() * ((t * t - ln / A).sqrt() - t).sqrt();
    for _ in 0..3 {
        let err = libm::erf(x) - y;
        x -= err / (2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp());
    }
    x
}

fn softmax(v: &mut [f64]) {
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for s in v.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    v.iter_mut().for_each(|s| *s /= sum);
}

fn softmax_zero(v: &mut [f64]) {
    let max = v
        .iter()
        .copied()
        .filter(|&s| s != 0.0)
        .fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for s in v.iter_mut().filter(|s| **s != 0.0) {
        *s = (*s - max).exp();
        sum += *s;
    }
    v.iter_mut().filter(|s| **s != 0.0).for_each(|s| *s /= sum);
}

impl TreeEnsemble {
    /// The leaf that `row` reaches in the tree at `root`.
    fn leaf(&self, root: usize, row: &[f64]) -> usize {
        let mut at = root;
        loop {
            let node = &self.model.nodes[at];
            let branch = if node.goes_true(row[node.feature]) {
                node.on_true
            } else {
                node.on_false
            };
            match branch {
                Child::Leaf(l) => return l,
                Child::Node(n) => at = n,
            }
        }
    }

    /// One row's scores into `out` (n_targets long).
    fn score(&self, row: &[f64], out: &mut [f64]) {
        let mut hit = vec![false; out.len()];
        out.iter_mut().for_each(|s| *s = 0.0);
        for &root in &self.model.roots {
            let (t, w) = self.model.leaves[self.leaf(root, row)];
            out[t] = if !hit[t] {
                w
            } else {
                match self.aggregate {
                    Aggregate::Sum | Aggregate::Average => out[t] + w,
                    Aggregate::Min => out[t].min(w),
                    Aggregate::Max => out[t].max(w),
                }
            };
            hit[t] = true;
        }
        if self.aggregate == Aggregate::Average && !self.model.roots.is_empty() {
            let trees = self.model.roots.len() as f64;
            out.iter_mut().for_each(|s| *s /= trees);
        }
        match self.post {
            Post::None => {}
            Post::Softmax => softmax(out),
            Post::SoftmaxZero => softmax_zero(out),
            Post::Logistic => out.iter_mut().for_each(|s| *s = 1.0 / (1.0 + (-*s).exp())),
            Post::Probit => out
                .iter_mut()
                .for_each(|s| *s = std::f64::consts::SQRT_2 * erfinv(2.0 * *s - 1.0)),
        }
    }

    fn check_input(&self, dtype: DType, shape: Option<&[usize]>) -> Result<()> {
        if dtype != self.model.dtype {
            return Err(Error::op(
                OP,
                format!(
                    "X has type {dtype}, but the thresholds are {}",
                    self.model.dtype
                ),
            ));
        }
        match shape {
            None => Ok(()),
            Some([_, f]) => match self.model.max_feature {
                Some(m) if m >= *f => Err(Error::op(
                    OP,
                    format!("a node reads feature {m}, but X has {f} features"),
                )),
                _ => Ok(()),
            },
            Some(other) => Err(Error::op(OP, format!("X must be [N, F], found {other:?}"))),
        }
    }
}

impl Operator for TreeEnsemble {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        self.check_input(x.dtype, x.shape.as_deref())?;
        Ok(vec![match &x.shape {
            Some(s) => Fact::new(x.dtype, vec![s[0], self.model.n_targets]),
            None => Fact::unknown_shape(x.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        let rows = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.shape.as_ref())
            .and_then(|s| s.first().copied())
            .unwrap_or(0) as u64;
        // Per tree, a walk of about log2(nodes per tree) comparisons.
        let trees = self.model.roots.len().max(1) as u64;
        let per_tree = (self.model.nodes.len() as u64 / trees).max(1);
        let depth = 64 - u64::from(per_tree.leading_zeros());
        rows.saturating_mul((trees * 2 * depth).saturating_add(self.model.n_targets as u64))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        self.check_input(x.dtype(), Some(x.shape()))?;
        let (n, f, t) = (x.shape()[0], x.shape()[1], self.model.n_targets);
        budget::check("TreeEnsemble output", self.model.dtype, &[n, t])?;
        let data = x.to_f64_vec()?;
        let mut out = vec![0.0f64; n * t];
        if t > 0 {
            par_rows(&mut out, t, |first, chunk| {
                for (k, row_out) in chunk.chunks_mut(t).enumerate() {
                    let r = first + k;
                    self.score(&data[r * f..(r + 1) * f], row_out);
                }
            });
        }
        let shape = [n, t];
        Ok(vec![match self.model.dtype {
            DType::F64 => Tensor::from_vec(&shape, out)?,
            DType::F32 => Tensor::from_vec(&shape, out.iter().map(|&v| v as f32).collect())?,
            _ => Tensor::from_vec(&shape, out.iter().map(|&v| f16::from_f64(v)).collect())?,
        }])
    }
}

#[cfg(test)]
#[path = "tree_ensemble_tests.rs"]
mod tests;
