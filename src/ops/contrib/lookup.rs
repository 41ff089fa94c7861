//! QLinearSigmoid and QLinearLeakyRelu: elementwise activations of an 8-bit
//! tensor through a 256-entry table built as onnxruntime builds it:
//! dequantize each code (`sx·(x−zx)` in f32), apply the activation in f32,
//! quantize with `round_half_even(v / sy) + zy` saturated. The table is
//! shared with QLinearConcat (identity activation).

use super::byte_map::map_bytes;
use super::{fact8, quantize, range8, scalar_scale, scalar_zp};
use crate::error::Result;
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::util::{input, out_len};
use crate::tensor::{DType, Tensor};

/// The table mapping each code of type `t` (indexed by `code − lo`) to its
/// requantized image under `f`.
pub(super) fn table(
    t: DType,
    (sx, zx): (f32, i32),
    (sy, zy): (f32, i32),
    (lo, hi): (i32, i32),
    f: impl Fn(f32) -> f32,
) -> Vec<i32> {
    debug_assert!(matches!(t, DType::U8 | DType::I8));
    (lo..=hi)
        .map(|x| quantize(f(sx * (x - zx) as f32), sy, zy, lo, hi))
        .collect()
}

/// A table of [`table`]'s kind indexed by raw byte (an s8 value by its
/// bits), giving the result's raw byte.
pub(super) fn byte_table(t: DType, table: &[i32]) -> [u8; 256] {
    let signed = t == DType::I8;
    std::array::from_fn(|b| {
        let v = if signed {
            b as u8 as i8 as i32 + 128
        } else {
            b as i32
        };
        table[v as usize] as u8
    })
}

#[derive(Debug, Clone, Copy)]
enum Act {
    Sigmoid,
    LeakyRelu(f32),
}

#[derive(Debug)]
struct QLinearLookup {
    act: Act,
}

impl QLinearLookup {
    fn name(&self) -> &'static str {
        match self.act {
            Act::Sigmoid => "QLinearSigmoid",
            Act::LeakyRelu(_) => "QLinearLeakyRelu",
        }
    }
}

pub(super) fn build_sigmoid(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(QLinearLookup { act: Act::Sigmoid }))
}

pub(super) fn build_leaky_relu(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let alpha = ctx.attrs.float("alpha", 0.01)?;
    Ok(Box::new(QLinearLookup {
        act: Act::LeakyRelu(alpha),
    }))
}

impl Operator for QLinearLookup {
    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        Ok(vec![fact8(self.name(), inputs, 0, "X")?])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0) + 256 * 8
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name();
        let x = input(op, inputs, 0)?;
        let t = x.dtype();
        let range = range8(op, t)?;
        let sx = scalar_scale(op, inputs, 1, "X_scale")?;
        let zx = scalar_zp(op, inputs, 2, t, "X_zero_point")?;
        let sy = scalar_scale(op, inputs, 3, "Y_scale")?;
        let zy = scalar_zp(op, inputs, 4, t, "Y_zero_point")?;
        let tab = match self.act {
            Act::Sigmoid => table(t, (sx, zx), (sy, zy), range, |v| 1.0 / (1.0 + (-v).exp())),
            Act::LeakyRelu(alpha) => table(t, (sx, zx), (sy, zy), range, |v| {
                if v >= 0.0 {
                    v
                } else {
                    alpha * v
                }
            }),
        };
        let map = byte_table(t, &tab);
        let bytes = x.standard_bytes().unwrap_or_default();
        let mut y = crate::tensor::recycle::take_or_default::<u8>(bytes.len());
        map_bytes(&map, &bytes, &mut y);
        Ok(vec![Tensor::from_bytes(x.shape(), y, t == DType::I8)?])
    }
}
