//! Add (or a two-input Sum) that reads 8-bit operands through the
//! DequantizeLinear nodes a load-time fusion absorbed: the residual joins
//! onnxruntime's quantizer leaves in float in QOperator ResNets, `Relu(
//! DQ(branch) + shortcut)`. Each operand comes as (data, scale, zero
//! point), the scale and zero point absent for a float operand. 8-bit
//! operands are dequantized in chunks that stay in L1, with the formula of
//! DequantizeLinear's fast path (`(q − zp) · s` in f32), so the fused node
//! computes the unfused graph's bits without writing the dequantized
//! tensors out and reading them back.

use super::activated::add_then;
use super::broadcast::zip2;
use crate::error::{Error, Result};
use crate::ir::{Fact, InferInput};
use crate::ops::gemm::fused::Activation;
use crate::ops::quant::dequantize_span;
use crate::ops::util::{broadcast_all, fact, par_spans};
use crate::tensor::recycle::take_or_default;
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::borrow::Cow;

/// Values a chunk of the fused loop dequantizes at once (two f32 buffers of
/// this length stay in L1).
const CHUNK: usize = 512;

/// One operand: float data, or 8-bit data with its scale and zero point.
enum Operand<'a> {
    Float(&'a ArrayD<f32>),
    Quantized {
        data: &'a Tensor,
        signed: bool,
        scale: f32,
        zero: i32,
    },
}

/// Whether operand `k` is 8-bit (its scale given).
fn quantized(inputs_len: usize, has: impl Fn(usize) -> bool, k: usize) -> bool {
    3 * k + 1 < inputs_len && has(3 * k + 1)
}

/// The output fact: float32, the operands' broadcast shape.
pub(super) fn infer(op: &str, inputs: &[InferInput]) -> Result<Vec<Fact>> {
    let mut shapes = Vec::new();
    for k in 0..2 {
        let data = fact(op, inputs, 3 * k)?;
        let q = quantized(inputs.len(), |i| inputs[i].fact.is_some(), k);
        let ok = if q {
            matches!(data.dtype, DType::U8 | DType::I8)
        } else {
            data.dtype == DType::F32
        };
        if !ok {
            return Err(Error::op(
                op,
                format!("operand {k} of a dequantizing add is {}", data.dtype),
            ));
        }
        shapes.push(data.shape.as_deref());
    }
    let shape = match (shapes[0], shapes[1]) {
        (Some(a), Some(b)) => Some(broadcast_all(op, &[a, b])?),
        _ => None,
    };
    Ok(vec![Fact {
        kind: crate::ir::Kind::Tensor,
        dtype: DType::F32,
        shape,
    }])
}

/// Operand `k` of the inputs.
fn operand<'a>(op: &str, inputs: &[Option<&'a Tensor>], k: usize) -> Result<Operand<'a>> {
    let get = |i: usize| inputs.get(i).copied().flatten();
    let data = get(3 * k).ok_or_else(|| Error::op(op, format!("operand {k} is missing")))?;
    let Some(scale) = get(3 * k + 1) else {
        return match data {
            Tensor::F32(a) => Ok(Operand::Float(a)),
            other => Err(Error::op(
                op,
                format!("operand {k} is {}, expected float32", other.dtype()),
            )),
        };
    };
    let signed = match data.dtype() {
        DType::U8 => false,
        DType::I8 => true,
        other => {
            return Err(Error::op(
                op,
                format!("quantized operand {k} is {other}, expected uint8 or int8"),
            ))
        }
    };
    let scale = match scale {
        Tensor::F32(s) if s.len() == 1 => s.iter().copied().next().unwrap_or(1.0),
        _ => {
            return Err(Error::op(
                op,
                format!("operand {k}'s scale must be one float32"),
            ))
        }
    };
    let zero = match get(3 * k + 2) {
        None => 0,
        Some(z) if z.dtype() == data.dtype() && z.len() == 1 => match z {
            Tensor::U8(a) => a.iter().next().map_or(0, |&v| v as i32),
            Tensor::I8(a) => a.iter().next().map_or(0, |&v| v as i32),
            _ => 0,
        },
        Some(_) => {
            return Err(Error::op(
                op,
                format!("operand {k}'s zero point must be one value of its type"),
            ))
        }
    };
    Ok(Operand::Quantized {
        data,
        signed,
        scale,
        zero,
    })
}

impl Operand<'_> {
    fn shape(&self) -> &[usize] {
        match self {
            Operand::Float(a) => a.shape(),
            Operand::Quantized { data, .. } => data.shape(),
        }
    }

    /// The contiguous values, if they are.
    fn contiguous(&self) -> Option<Values<'_>> {
        Some(match self {
            Operand::Float(a) => Values::Float(a.as_slice()?),
            &Operand::Quantized {
                data,
                signed,
                scale,
                zero,
            } => Values::Bytes(data.as_bytes()?, signed, scale, zero),
        })
    }

    /// The dequantized values as an array (the broadcasting path).
    fn to_f32(&self, op: &str) -> Result<Cow<'_, ArrayD<f32>>> {
        Ok(match self {
            Operand::Float(a) => Cow::Borrowed(a),
            &Operand::Quantized {
                data,
                signed,
                scale,
                zero,
            } => {
                let bytes: Vec<u8> = match data {
                    Tensor::U8(a) => a.iter().copied().collect(),
                    Tensor::I8(a) => a.iter().map(|&v| v as u8).collect(),
                    _ => Vec::new(),
                };
                let mut out = vec![0f32; bytes.len()];
                dequantize_span(&bytes, &mut out, signed, scale, zero);
                let array = ArrayD::from_shape_vec(IxDyn(data.shape()), out)
                    .map_err(|e| Error::op(op, format!("internal: {e}")))?;
                Cow::Owned(array)
            }
        })
    }
}

/// Contiguous operand values.
#[derive(Clone, Copy)]
enum Values<'a> {
    Float(&'a [f32]),
    Bytes(&'a [u8], bool, f32, i32),
}

impl<'a> Values<'a> {
    /// Values `at .. at + out.len()` as f32: borrowed, or dequantized into
    /// `buf`.
    fn chunk<'b>(self, at: usize, buf: &'b mut [f32; CHUNK], len: usize) -> &'b [f32]
    where
        'a: 'b,
    {
        match self {
            Values::Float(v) => &v[at..at + len],
            Values::Bytes(b, signed, s, zp) => {
                dequantize_span(&b[at..at + len], &mut buf[..len], signed, s, zp);
                &buf[..len]
            }
        }
    }
}

/// `act(deq(a) + deq(b))` for the operands in `inputs` (see the module
/// header).
pub(super) fn run(op: &str, act: Option<Activation>, inputs: &[Option<&Tensor>]) -> Result<Tensor> {
    let (a, b) = (operand(op, inputs, 0)?, operand(op, inputs, 1)?);
    if a.shape() == b.shape() {
        if let (Some(va), Some(vb)) = (a.contiguous(), b.contiguous()) {
            return fused(a.shape(), va, vb, act);
        }
    }
    let (fa, fb) = (a.to_f32(op)?, b.to_f32(op)?);
    let sum = match act {
        Some(act) => add_then(op, act, &fa, &fb)?,
        None => zip2(op, &fa, &fb, |&x, &y| x + y)?,
    };
    Ok(Tensor::F32(sum))
}

/// The one-pass loop over operands of one shape.
fn fused(shape: &[usize], a: Values, b: Values, act: Option<Activation>) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    // Every element is written below: a recycled buffer needs no zero-fill.
    let mut out = take_or_default::<f32>(n);
    par_spans(&mut out, |start, span| {
        let (mut ba, mut bb) = ([0f32; CHUNK], [0f32; CHUNK]);
        for (c, o) in span.chunks_mut(CHUNK).enumerate() {
            let at = start + c * CHUNK;
            let x = a.chunk(at, &mut ba, o.len());
            let y = b.chunk(at, &mut bb, o.len());
            add_chunk(x, y, o, act == Some(Activation::Relu));
        }
        match act {
            Some(act) if act != Activation::Relu => act.apply(span),
            _ => {}
        }
    });
    Tensor::from_vec(shape, out)
}

crate::ops::gemm::simd::multiversion! {
    /// `o = x + y`, then `max(·, 0)` when `relu` (as `Activation::Relu`).
    fn add_chunk(x: &[f32], y: &[f32], o: &mut [f32], relu: bool) {
        if relu {
            for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                *o = Activation::Relu.eval(x + y);
            }
        } else {
            for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                *o = x + y;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar_f32(v: f32) -> Tensor {
        Tensor::from_vec(&[], vec![v]).unwrap()
    }

    /// Each operand's value, `(q − zp) · s` or the float, summed and
    /// rectified; a broadcast row takes the general path.
    #[test]
    fn operands_are_dequantized_as_dequantize_linear_does() {
        let q = Tensor::from_vec(&[2, 3], vec![0u8, 7, 128, 200, 255, 1]).unwrap();
        let (s, z) = (scalar_f32(0.5), Tensor::from_vec(&[], vec![3u8]).unwrap());
        let row = Tensor::from_vec(&[3], vec![-1.0f32, 0.25, -70.0]).unwrap();
        let ins = [Some(&q), Some(&s), Some(&z), Some(&row), None, None];
        let got = run("Add", Some(Activation::Relu), &ins).unwrap();
        let want: Vec<f32> = [0u8, 7, 128, 200, 255, 1]
            .iter()
            .enumerate()
            .map(|(i, &v)| ((v as i32 - 3) as f32 * 0.5 + [-1.0, 0.25, -70.0][i % 3]).max(0.0))
            .collect();
        assert_eq!(
            got.view::<f32>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            want
        );
        assert_eq!(got.shape(), &[2, 3]);
    }

    #[test]
    fn mismatched_operands_are_errors() {
        let f = Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
        let q = Tensor::from_vec(&[2], vec![1u8, 2]).unwrap();
        let s = scalar_f32(0.5);
        let two = Tensor::from_vec(&[2], vec![0.5f32, 0.5]).unwrap();
        let z8 = Tensor::from_vec(&[], vec![1i8]).unwrap();
        // A scale on float data; 8-bit data without one; a per-channel
        // scale; a zero point of another type; a missing operand.
        for ins in [
            [Some(&f), Some(&s), None, Some(&f), None, None],
            [Some(&q), None, None, Some(&f), None, None],
            [Some(&q), Some(&two), None, Some(&f), None, None],
            [Some(&q), Some(&s), Some(&z8), Some(&f), None, None],
            [Some(&q), Some(&s), None, None, None, None],
        ] {
            assert!(run("Add", None, &ins).is_err());
        }
    }
}
