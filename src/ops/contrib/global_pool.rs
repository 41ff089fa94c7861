//! QLinearGlobalAveragePool: the average of each channel's spatial plane of
//! an 8-bit tensor, NCHW or (`channels_last = 1`) NHWC. As in onnxruntime,
//! the plane is summed exactly in i32 with the input zero point taken out,
//! then requantized with `sx / (sy · size)` (in f32), rounding half to even.

use super::{check8, range8, requantize, scalar_scale, scalar_zp, tensor8};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::util::{fact, input};
use crate::tensor::{DType, Tensor};

const OP: &str = "QLinearGlobalAveragePool";

#[derive(Debug)]
struct QLinearGlobalAvg {
    channels_last: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(QLinearGlobalAvg {
        channels_last: ctx.attrs.int("channels_last", 0)? != 0,
    }))
}

impl QLinearGlobalAvg {
    /// The output shape (spatial dims 1) and (N, C, plane size).
    fn plan(&self, x: &[usize]) -> Result<(Vec<usize>, usize, usize, usize)> {
        if x.len() < 3 {
            return Err(Error::op(
                OP,
                format!("X must have rank ≥ 3, found shape {x:?}"),
            ));
        }
        let r = x.len();
        let (c, spatial) = if self.channels_last {
            (x[r - 1], 1..r - 1)
        } else {
            (x[1], 2..r)
        };
        let size = x[spatial.clone()].iter().product();
        let mut out = x.to_vec();
        out[spatial].iter_mut().for_each(|d| *d = 1);
        Ok((out, x[0], c, size))
    }
}

impl Operator for QLinearGlobalAvg {
    fn cost_class(&self) -> OpClass {
        OpClass::Window
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        check8(OP, "X", x.dtype)?;
        let shape = match &x.shape {
            Some(s) => Some(self.plan(s)?.0),
            None => None,
        };
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: x.dtype,
            shape,
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        let x = inputs.first().copied().flatten().and_then(|f| f.len());
        x.unwrap_or(0).max(1) as u64
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let t = x.dtype();
        let (lo, hi) = range8(OP, t)?;
        let sx = scalar_scale(OP, inputs, 1, "x_scale")?;
        let zx = scalar_zp(OP, inputs, 2, t, "x_zero_point")?;
        let sy = scalar_scale(OP, inputs, 3, "y_scale")?;
        let zy = scalar_zp(OP, inputs, 4, t, "y_zero_point")?;
        let (out_shape, n, c, size) = self.plan(x.shape())?;
        // onnxruntime's kernel refuses planes whose sum could overflow and
        // scales that make every output constant.
        if size >= 1 << 24 {
            return Err(Error::op(
                OP,
                format!("plane of {size} elements is too large"),
            ));
        }
        let scale = sx / (sy * size as f32);
        if !(scale >= f32::powi(2.0, -32) && scale < 256.0) {
            return Err(Error::op(
                OP,
                format!("x_scale / (y_scale · {size}) = {scale} is out of the computable range"),
            ));
        }
        // The bytes as they lie (no widened copy of the whole input).
        let bytes = x.standard_bytes().unwrap_or_default();
        let signed = t == DType::I8;
        let value = |b: u8| if signed { b as i8 as i32 } else { b as i32 };
        let bias = -zx * size as i32;
        let mut out = vec![0i32; n * c];
        for (b, row) in out.chunks_mut(c.max(1)).enumerate() {
            let img = &bytes[b * c * size..(b + 1) * c * size];
            for (ch, o) in row.iter_mut().enumerate() {
                let acc: i32 = if self.channels_last {
                    (0..size).map(|p| value(img[p * c + ch])).sum()
                } else {
                    img[ch * size..(ch + 1) * size]
                        .iter()
                        .map(|&v| value(v))
                        .sum()
                };
                *o = requantize(acc + bias, scale, zy, lo, hi);
            }
        }
        Ok(vec![tensor8(OP, t, &out_shape, out)?])
    }
}
