//! DynamicQuantizeLinear: quantizes a float tensor to uint8 with a scale and
//! zero point computed from its range (which always includes 0), in f32 as
//! the ONNX reference does.

use crate::error::Result;
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, out_len, par_rows};
use crate::tensor::recycle::take_or_default;
use crate::tensor::{DType, Tensor};

const OP: &str = "DynamicQuantizeLinear";

#[derive(Debug)]
struct DynamicQuantize;

pub(super) fn build(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(DynamicQuantize))
}

/// The scale and zero point for values in `[min(0, lo), max(0, hi)]`.
pub(super) fn params(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = (0f32, 0f32);
    for &v in x {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let scale = if hi == lo { 1.0 } else { hi - lo } / 255.0;
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zp)
}

impl Operator for DynamicQuantize {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        if !x.dtype.is_float() {
            return Err(crate::Error::op(
                OP,
                format!("expected a floating-point input, found {}", x.dtype),
            ));
        }
        Ok(vec![
            Fact {
                kind: crate::ir::Kind::Tensor,
                dtype: DType::U8,
                shape: x.shape.clone(),
            },
            Fact::new(x.dtype, vec![]),
            Fact::new(DType::U8, vec![]),
        ])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        5 * out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        // float32 as it lies; the other float types through a copy.
        let contiguous = match x {
            Tensor::F32(a) => a.as_slice(),
            _ => None,
        };
        let copied: Vec<f32>;
        let xv: &[f32] = match contiguous {
            Some(v) => v,
            None => {
                copied = super::float_values(OP, x)?
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                &copied
            }
        };
        let (scale, zp) = params(xv);
        // Every byte is written below: a recycled buffer needs no zero-fill.
        let mut out = take_or_default::<u8>(xv.len());
        par_rows(&mut out, 1, |first, chunk| {
            for (o, &v) in chunk.iter_mut().zip(&xv[first..]) {
                *o = ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8;
            }
        });
        Ok(vec![
            Tensor::from_vec(x.shape(), out)?,
            super::float_tensor(OP, x.dtype(), &[], vec![scale as f64])?,
            Tensor::scalar(zp as u8),
        ])
    }
}
