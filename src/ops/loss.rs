//! Loss functions: `SoftmaxCrossEntropyLoss` and `NegativeLogLikelihoodLoss`
//! (opsets 12+), following ONNX's reference implementations.
//!
//! Both see the scores as `[N, C, D]` (D the product of the trailing
//! dimensions) and the labels as `[N, D]`. A label equal to `ignore_index`
//! contributes a zero loss and a zero weight, even when it names a valid
//! class; any other label outside `[0, C)` is an error. `mean` divides the
//! weighted sum by the sum of the applied weights (0/0 = NaN when every entry
//! is ignored). Per-element values are computed in f32 (f32, f16, bf16) or f64
//! in parallel; sums are accumulated sequentially in f64, in index order, so
//! results are bit-identical at any thread count.

use super::norm::Real;
use super::unary::kernel::{contiguous, Float};
use super::util::{fact, input, opt_fact, opt_input, out_len};
use super::Registrar;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput};
use crate::tensor::{DType, Element, Tensor};
use half::{bf16, f16};

mod nll;
mod sce;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("SoftmaxCrossEntropyLoss", 12, sce::build);
    r.add("NegativeLogLikelihoodLoss", 12, nll::build);
}

/// The `reduction` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reduction {
    None,
    Sum,
    Mean,
}

/// The attributes shared by both losses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    /// Operator name, for errors.
    pub op: &'static str,
    pub reduction: Reduction,
    pub ignore: Option<i64>,
}

/// The `[N, C, D]` view of the scores.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geom {
    pub n: usize,
    pub c: usize,
    pub d: usize,
}

impl Geom {
    /// Number of (n, d) positions, i.e. of labels.
    pub fn positions(&self) -> usize {
        self.n * self.d
    }
}

/// The per-operator part of a loss.
pub(crate) trait Kernel {
    /// Per (n, d) position the negative log-probability of the labelled
    /// class (exactly 0 at ignored positions), and the `[N, C, D]`
    /// log-probabilities when `log_prob` is asked for.
    fn compute<T: Float, C: Real>(
        &self,
        x: &[T],
        g: Geom,
        labels: &[i64],
        ignore: Option<i64>,
        log_prob: bool,
    ) -> (Vec<C>, Option<Vec<T>>);
}

impl Spec {
    /// Reads `reduction` (default `mean`) and `ignore_index`.
    pub fn from_ctx(op: &'static str, ctx: &BuildContext) -> Result<Spec> {
        let r = ctx.attrs.string("reduction", "mean")?;
        let reduction = match r.as_str() {
            "none" => Reduction::None,
            "sum" => Reduction::Sum,
            "mean" => Reduction::Mean,
            other => {
                return Err(ctx.attrs.error(
                    "reduction",
                    format!("must be none, sum or mean, found {other:?}"),
                ))
            }
        };
        Ok(Spec {
            op,
            reduction,
            ignore: ctx.attrs.int_opt("ignore_index")?,
        })
    }

    /// Checks the scores and labels shapes against each other.
    pub fn geom(&self, x: &[usize], t: &[usize]) -> Result<Geom> {
        if x.len() < 2 {
            return Err(Error::op(
                self.op,
                format!("the input must have rank ≥ 2 (N, C, d1...), found shape {x:?}"),
            ));
        }
        let want: Vec<usize> = std::iter::once(x[0])
            .chain(x[2..].iter().copied())
            .collect();
        if t != want.as_slice() {
            return Err(Error::op(
                self.op,
                format!("labels have shape {t:?}, expected {want:?} for input shape {x:?}"),
            ));
        }
        Ok(Geom {
            n: x[0],
            c: x[1],
            d: x[2..].iter().product(),
        })
    }

    /// Output facts: the loss and, with `log_prob`, the log-probabilities.
    pub fn infer(&self, inputs: &[InferInput], log_prob: bool) -> Result<Vec<Fact>> {
        let x = fact(self.op, inputs, 0)?;
        let t = fact(self.op, inputs, 1)?;
        check_types(
            self.op,
            x.dtype,
            t.dtype,
            opt_fact(inputs, 2).map(|w| w.dtype),
        )?;
        let mut c = None;
        if let (Some(xs), Some(ts)) = (&x.shape, &t.shape) {
            c = Some(self.geom(xs, ts)?.c);
        }
        if let (Some(c), Some(Some(ws))) = (c, opt_fact(inputs, 2).map(|w| &w.shape)) {
            check_weight_shape(self.op, ws, c)?;
        }
        let loss = match self.reduction {
            Reduction::None => match (&x.shape, &t.shape) {
                (_, Some(ts)) => Fact::new(x.dtype, ts.clone()),
                (Some(xs), None) if xs.len() >= 2 => {
                    let s = std::iter::once(xs[0]).chain(xs[2..].iter().copied());
                    Fact::new(x.dtype, s.collect())
                }
                _ => Fact::unknown_shape(x.dtype),
            },
            _ => Fact::new(x.dtype, vec![]),
        };
        let mut out = vec![loss];
        if log_prob {
            out.push(x.clone());
        }
        Ok(out)
    }

    /// `per_score` operations per score element plus a few per label.
    pub fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact], per_score: u64) -> u64 {
        let scores = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64;
        let labels = inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or_else(|| out_len(outputs, 0) as usize) as u64;
        (per_score * scores + 3 * labels).max(1)
    }

    /// Runs `k` on the inputs (scores, labels, optional weights).
    pub fn run<K: Kernel>(
        &self,
        k: &K,
        inputs: &[Option<&Tensor>],
        log_prob: bool,
    ) -> Result<Vec<Tensor>> {
        let x = input(self.op, inputs, 0)?;
        let t = input(self.op, inputs, 1)?;
        let w = opt_input(inputs, 2);
        check_types(self.op, x.dtype(), t.dtype(), w.map(|w| w.dtype()))?;
        let g = self.geom(x.shape(), t.shape())?;
        let labels = self.labels(t, g)?;
        let w = match w {
            Some(w) => {
                check_weight_shape(self.op, w.shape(), g.c)?;
                Some(w.to_f64_vec()?)
            }
            None => None,
        };
        let a = Args {
            spec: self,
            shape: x.shape(),
            label_shape: t.shape(),
            g,
            labels: &labels,
            weight: w.as_deref(),
            log_prob,
        };
        match x {
            Tensor::F32(v) => a.finish::<f32, f32, K>(k, &contiguous(v)),
            Tensor::F64(v) => a.finish::<f64, f64, K>(k, &contiguous(v)),
            Tensor::F16(v) => a.finish::<f16, f32, K>(k, &contiguous(v)),
            Tensor::BF16(v) => a.finish::<bf16, f32, K>(k, &contiguous(v)),
            other => Err(not_float(self.op, other.dtype())),
        }
    }

    /// Reads the labels, rejecting those outside `[0, C)` that are not
    /// `ignore_index`.
    fn labels(&self, t: &Tensor, g: Geom) -> Result<Vec<i64>> {
        let v = t.to_i64_vec()?;
        let c = g.c as i64;
        if let Some((i, &l)) = v
            .iter()
            .enumerate()
            .find(|&(_, &l)| Some(l) != self.ignore && !(0..c).contains(&l))
        {
            return Err(Error::op(
                self.op,
                format!("label {l} at flat index {i} is outside [0, {c}) and is not ignore_index"),
            ));
        }
        Ok(v)
    }
}

/// What [`Spec::run`] passes to the typed kernel.
struct Args<'a> {
    spec: &'a Spec,
    shape: &'a [usize],
    label_shape: &'a [usize],
    g: Geom,
    labels: &'a [i64],
    weight: Option<&'a [f64]>,
    log_prob: bool,
}

impl Args<'_> {
    fn finish<T: Float + Element, C: Real, K: Kernel>(
        &self,
        k: &K,
        x: &[T],
    ) -> Result<Vec<Tensor>> {
        let (op, ignore) = (self.spec.op, self.spec.ignore);
        let (l, lp) = k.compute::<T, C>(x, self.g, self.labels, ignore, self.log_prob);
        // The applied weight of each position: 0 when ignored.
        let weight = |label: i64| -> C {
            if Some(label) == ignore {
                C::zero()
            } else {
                self.weight.map_or(C::one(), |w| C::of(w[label as usize]))
            }
        };
        let weighted = l.iter().zip(self.labels).map(|(&v, &t)| {
            if self.weight.is_some() {
                weight(t) * v
            } else {
                v
            }
        });
        let loss = match self.spec.reduction {
            Reduction::None => {
                let v: Vec<T> = weighted.map(|v| v.to_elem::<T>()).collect();
                tensor(op, self.label_shape, v)?
            }
            Reduction::Sum => {
                let s: f64 = weighted.fold(0.0, |a, v| a + v.to_f64().unwrap_or(f64::NAN));
                Tensor::scalar(T::from_f64(s))
            }
            Reduction::Mean => {
                let s: f64 = weighted.fold(0.0, |a, v| a + v.to_f64().unwrap_or(f64::NAN));
                let ws: f64 = self
                    .labels
                    .iter()
                    .fold(0.0, |a, &t| a + weight(t).to_f64().unwrap_or(f64::NAN));
                Tensor::scalar(T::from_f64(s / ws))
            }
        };
        let mut out = vec![loss];
        if let Some(lp) = lp {
            out.push(tensor(op, self.shape, lp)?);
        }
        Ok(out)
    }
}

/// Wraps row-major data as a tensor.
fn tensor<T: Element>(op: &str, shape: &[usize], v: Vec<T>) -> Result<Tensor> {
    Tensor::from_vec(shape, v).map_err(|e| Error::op(op, format!("internal shape error: {e}")))
}

fn not_float(op: &str, d: DType) -> Error {
    Error::op(op, format!("expected floating-point scores, found {d}"))
}

/// Scores float, labels int32/int64, weights (if any) of the scores' type.
fn check_types(op: &str, x: DType, t: DType, w: Option<DType>) -> Result<()> {
    if !x.is_float() {
        return Err(not_float(op, x));
    }
    if !matches!(t, DType::I32 | DType::I64) {
        return Err(Error::op(
            op,
            format!("labels must be int32 or int64, found {t}"),
        ));
    }
    match w {
        Some(w) if w != x => Err(Error::op(
            op,
            format!("weights must have the scores' type {x}, found {w}"),
        )),
        _ => Ok(()),
    }
}

fn check_weight_shape(op: &str, w: &[usize], c: usize) -> Result<()> {
    if w != [c] {
        return Err(Error::op(
            op,
            format!("weights must have shape [{c}] (one per class), found {w:?}"),
        ));
    }
    Ok(())
}
