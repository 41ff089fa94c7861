//! MelWeightMatrix (opset 17): the `[dft_length / 2 + 1, num_mel_bins]`
//! matrix of triangular filters that maps a one-sided spectrum to mel bins.
//! The band edges are `num_mel_bins + 2` points evenly spaced in mel between
//! the lower and upper edge frequencies (mel = 2595 log10(1 + hz / 700)),
//! mapped to spectrum bins `floor((dft_length + 1) · hz / sample_rate)`, as
//! ONNX's reference computes them.

use super::{int_input, numeric_tensor, output_datatype};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::shape::numel_of;
use crate::ops::util::{fact, input, out_len};
use crate::tensor::{DType, Tensor};

const OP: &str = "MelWeightMatrix";

#[derive(Debug)]
struct Mel {
    dtype: DType,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Mel {
        dtype: output_datatype(ctx)?,
    }))
}

/// The parameters read from the five inputs.
struct Params {
    mel_bins: usize,
    dft_length: usize,
    sample_rate: f64,
    lower: f64,
    upper: f64,
}

fn float_scalar(t: &Tensor, what: &str) -> Result<f64> {
    if t.len() != 1 || !t.dtype().is_float() {
        return Err(Error::op(
            OP,
            format!(
                "{what} must be a floating-point scalar, found {} of shape {:?}",
                t.dtype(),
                t.shape()
            ),
        ));
    }
    Ok(t.to_f64_vec()?[0])
}

fn params(values: &[&Tensor]) -> Result<Params> {
    let count = |i: usize, what: &str| -> Result<usize> {
        let v = int_input(OP, values[i], what)?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| Error::op(OP, format!("{what} must be positive, found {v}")))
    };
    let p = Params {
        mel_bins: count(0, "num_mel_bins")?,
        dft_length: count(1, "dft_length")?,
        sample_rate: count(2, "sample_rate")? as f64,
        lower: float_scalar(values[3], "lower_edge_hertz")?,
        upper: float_scalar(values[4], "upper_edge_hertz")?,
    };
    if !(p.lower >= 0.0 && p.lower <= p.upper && p.upper.is_finite()) {
        return Err(Error::op(
            OP,
            format!(
                "edge frequencies must satisfy 0 ≤ lower ≤ upper, found {} and {}",
                p.lower, p.upper
            ),
        ));
    }
    numel_of::<f64>(OP, &[p.dft_length / 2 + 1, p.mel_bins])?;
    Ok(p)
}

fn matrix(p: &Params) -> Result<Vec<f64>> {
    let rows = p.dft_length / 2 + 1;
    let cols = p.mel_bins;
    let mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / 10f64.ln();
    let (lo, hi) = (mel(p.lower), mel(p.upper));
    let step = (hi - lo) / (cols + 2) as f64;
    let edges: Vec<usize> = (0..cols + 2)
        .map(|i| {
            let hz = 700.0 * ((i as f64 * step + lo) / 2595.0 * 10f64.ln()).exp_m1();
            let bin = ((p.dft_length + 1) as f64 * hz / p.sample_rate).floor();
            if bin < rows as f64 {
                Ok(bin as usize)
            } else {
                Err(Error::op(
                    OP,
                    format!(
                        "upper_edge_hertz {} lies beyond the {rows} spectrum bins",
                        p.upper
                    ),
                ))
            }
        })
        .collect::<Result<_>>()?;
    let mut out = vec![0.0f64; rows * cols];
    for i in 0..cols {
        let (left, centre, right) = (edges[i], edges[i + 1], edges[i + 2]);
        if centre == left {
            out[centre * cols + i] = 1.0;
        } else {
            for j in left..=centre {
                out[j * cols + i] = (j - left) as f64 / (centre - left) as f64;
            }
        }
        for j in centre..right {
            out[j * cols + i] = (right - j) as f64 / (right - centre) as f64;
        }
    }
    Ok(out)
}

impl Operator for Mel {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        for i in 0..5 {
            fact(OP, inputs, i)?;
        }
        let values: Option<Vec<&Tensor>> = inputs.iter().take(5).map(|i| i.value).collect();
        Ok(vec![match values {
            Some(v) => {
                let p = params(&v)?;
                Fact::new(self.dtype, vec![p.dft_length / 2 + 1, p.mel_bins])
            }
            None => Fact::unknown_shape(self.dtype),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let v = (0..5)
            .map(|i| input(OP, inputs, i))
            .collect::<Result<Vec<&Tensor>>>()?;
        let p = params(&v)?;
        let shape = [p.dft_length / 2 + 1, p.mel_bins];
        numeric_tensor(OP, self.dtype, &shape, matrix(&p)?).map(|t| vec![t])
    }
}
