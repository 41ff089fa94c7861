//! Multinomial: `sample_size` class indices per row of a batch × classes
//! input of unnormalised log-probabilities, each drawn with probability
//! softmax(row) (int32 by default, or int64).

use super::rng::Seed;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::shape::make;
use crate::ops::util::{fact, input};
use crate::tensor::{budget, DType, Tensor};

const OP: &str = "Multinomial";

#[derive(Debug)]
struct Multinomial {
    samples: usize,
    dtype: DType,
    seed: Seed,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let n = a.int("sample_size", 1)?;
    let samples = usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| a.error("sample_size", format!("{n} is not positive")))?;
    let dtype = match a.int("dtype", 6)? {
        6 => DType::I32,
        7 => DType::I64,
        code => {
            return Err(a.error(
                "dtype",
                format!("type code {code} is not int32 (6) or int64 (7)"),
            ))
        }
    };
    Ok(Box::new(Multinomial {
        samples,
        dtype,
        seed: Seed::from_float_attr(a)?,
    }))
}

/// The batch size of an input of type `t` and shape `shape` (checked).
fn batch(t: DType, shape: Option<&[usize]>) -> Result<Option<usize>> {
    if !matches!(t, DType::F32 | DType::F64 | DType::F16) {
        return Err(Error::op(
            OP,
            format!("expected a float, double or float16 input, found {t}"),
        ));
    }
    match shape {
        None => Ok(None),
        Some([b, _]) => Ok(Some(*b)),
        Some(s) => Err(Error::op(
            OP,
            format!("expected a batch × classes input, found shape {s:?}"),
        )),
    }
}

/// The cumulative unnormalised probabilities exp(x − max) of one row.
fn cumulative(row: &[f64]) -> Result<Vec<f64>> {
    if let Some(bad) = row.iter().find(|v| v.is_nan() || **v == f64::INFINITY) {
        return Err(Error::op(
            OP,
            format!("log-probability {bad} is not finite or −∞"),
        ));
    }
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return Err(Error::op(
            OP,
            "a row has no class with a finite log-probability",
        ));
    }
    let mut sum = 0.0;
    Ok(row
        .iter()
        .map(|&v| {
            sum += (v - max).exp();
            sum
        })
        .collect())
}

impl Operator for Multinomial {
    fn is_random(&self) -> bool {
        true
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(OP, inputs, 0)?;
        let b = batch(f.dtype, f.shape.as_deref())?;
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: self.dtype,
            shape: b.map(|b| vec![b, self.samples]),
        }])
    }

    /// An exponential per class and row, then a binary search per sample.
    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let classes = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64;
        let samples = crate::ops::util::out_len(outputs, 0);
        let steps = u64::from(u64::BITS - classes.leading_zeros());
        classes
            .saturating_mul(20)
            .saturating_add(samples.saturating_mul(4 + steps))
            .max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        batch(x.dtype(), Some(x.shape()))?;
        let (b, c) = (x.shape()[0], x.shape()[1]);
        let shape = [b, self.samples];
        budget::check("Multinomial output", self.dtype, &shape)?;
        let v = x.to_f64_vec()?;
        let mut rng = self.seed.rng();
        if c == 0 && b > 0 {
            return Err(Error::op(OP, "the input has no classes"));
        }
        let mut out = Vec::with_capacity(b * self.samples);
        for row in v.chunks(c.max(1)).take(b) {
            let cum = cumulative(row)?;
            let total = cum[c - 1];
            // The last class of nonzero probability, for a draw that
            // rounds up to the total.
            let last = cum.partition_point(|&s| s < total);
            for _ in 0..self.samples {
                let u = rng.uniform() * total;
                // The first class whose cumulative sum exceeds u; a class of
                // probability 0 (equal sums) is never chosen.
                let k = cum.partition_point(|&s| s <= u).min(last);
                out.push(k as i64);
            }
        }
        Ok(vec![match self.dtype {
            DType::I32 => make(OP, &shape, out.into_iter().map(|k| k as i32).collect())?,
            _ => make(OP, &shape, out)?,
        }])
    }
}
