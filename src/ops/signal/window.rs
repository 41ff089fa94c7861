//! HannWindow, HammingWindow and BlackmanWindow (opset 17): window
//! functions of `size` points (a scalar input), periodic (the default,
//! denominator `size`) or symmetric (`periodic = 0`, denominator `size - 1`),
//! of type `output_datatype` (default float). Hamming uses α = 25/46 as
//! ONNX's reference does; a one-point symmetric window is `[1]`.

use super::{int_input, numeric_tensor, output_datatype};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::shape::numel_of;
use crate::ops::util::{const_value, fact, input, out_len};
use crate::tensor::{DType, Tensor};
use std::f64::consts::PI;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Hann,
    Hamming,
    Blackman,
}

#[derive(Debug)]
struct Window {
    kind: Kind,
    periodic: bool,
    dtype: DType,
}

fn build(ctx: &BuildContext, kind: Kind) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Window {
        kind,
        periodic: ctx.attrs.int("periodic", 1)? != 0,
        dtype: output_datatype(ctx)?,
    }))
}

pub(super) fn build_hann(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, Kind::Hann)
}

pub(super) fn build_hamming(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, Kind::Hamming)
}

pub(super) fn build_blackman(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, Kind::Blackman)
}

impl Window {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Hann => "HannWindow",
            Kind::Hamming => "HammingWindow",
            Kind::Blackman => "BlackmanWindow",
        }
    }

    fn size(&self, t: &Tensor) -> Result<usize> {
        let op = self.name();
        let n = int_input(op, t, "size")?;
        let n = usize::try_from(n)
            .map_err(|_| Error::op(op, format!("size must not be negative, found {n}")))?;
        numel_of::<f64>(op, &[n])?;
        Ok(n)
    }

    /// The window's values.
    fn values(&self, size: usize) -> Vec<f64> {
        let denom = if self.periodic {
            size
        } else {
            size.saturating_sub(1)
        };
        if denom == 0 {
            return vec![1.0; size];
        }
        (0..size)
            .map(|i| {
                let x = 2.0 * PI * i as f64 / denom as f64;
                match self.kind {
                    Kind::Hann => 0.5 - 0.5 * x.cos(),
                    Kind::Hamming => 25.0 / 46.0 - 21.0 / 46.0 * x.cos(),
                    Kind::Blackman => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
                }
            })
            .collect()
    }
}

impl Operator for Window {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name(), inputs, 0)?;
        if !matches!(f.dtype, DType::I32 | DType::I64) {
            return Err(Error::op(
                self.name(),
                format!("size must be int32 or int64, found {}", f.dtype),
            ));
        }
        Ok(vec![match const_value(inputs, 0) {
            Some(v) => Fact::new(self.dtype, vec![self.size(v)?]),
            None => Fact::unknown_shape(self.dtype),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0).saturating_mul(8)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let n = self.size(input(self.name(), inputs, 0)?)?;
        let v = if n == 0 { Vec::new() } else { self.values(n) };
        Ok(vec![numeric_tensor(self.name(), self.dtype, &[n], v)?])
    }
}
