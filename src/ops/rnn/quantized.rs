//! onnxruntime's `com.microsoft` DynamicQuantizeLSTM, which its dynamic
//! quantizer writes in place of every LSTM: the LSTM's inputs and
//! attributes, but W (`dirs × input × 4h`) and R (`dirs × hidden × 4h`) are
//! int8 or uint8, transposed, with per-direction (`[dirs]`) or per-column
//! (`[dirs, 4h]`) scales and zero points as inputs 8–11. Constant weights
//! on a CPU with a fast int8 matrix-vector product run as onnxruntime runs
//! them: X quantized once, h at every step, int8 products
//! ([`super::int8`]). Otherwise the weights are dequantized into the
//! LSTM's layout (once at build when they are constants) and the float32
//! LSTM runs on them, with float activations: the results then differ from
//! onnxruntime's by the activations' rounding.

use super::fast::Prepared;
use super::int8::QuantizedParts;
use super::lstm::Lstm;
use super::spec::{Cell, CellKind, Recurrent};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::util::{fact, input, opt_input};
use crate::tensor::{DType, Tensor};
use std::borrow::Cow;

const OP: &str = "DynamicQuantizeLSTM";

/// Inputs of the quantized weights: (data, scale, zero point).
const W_INPUTS: (usize, usize, usize) = (1, 8, 9);
const R_INPUTS: (usize, usize, usize) = (2, 10, 11);

/// A built DynamicQuantizeLSTM node: the float LSTM it runs.
#[derive(Debug)]
struct QuantizedLstm {
    lstm: Recurrent<Lstm>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    if ctx.num_inputs < 12 {
        return Err(Error::op(
            OP,
            format!(
                "needs 12 inputs (W_scale … R_zero_point among them), the node has {}",
                ctx.num_inputs
            ),
        ));
    }
    let mut lstm = Recurrent::new(ctx, Lstm::from_attrs(ctx)?)?;
    let kind = lstm.cell.kind();
    let dirs = lstm.common.direction.count();
    let constant = |(q, s, z): (usize, usize, usize)| {
        let zp = match ctx.constant(z) {
            Some(t) => Some(Some(t)),
            None if ctx.consts.get(z).is_none() => Some(None),
            None => None,
        };
        Some(dequantize(ctx.constant(q)?, ctx.constant(s)?, zp?, dirs))
    };
    if let Some(prepared) = int8_prepared(ctx, kind) {
        lstm.prepared = Some(prepared);
        return Ok(Box::new(QuantizedLstm { lstm }));
    }
    lstm.prepared = match (constant(W_INPUTS), constant(R_INPUTS)) {
        (Some(Ok((w, ws))), Some(Ok((r, rs)))) => {
            Prepared::from_weights(kind, (&w, &ws), (&r, &rs))
        }
        _ => None,
    };
    Ok(Box::new(QuantizedLstm { lstm }))
}

/// Constant 8-bit W and R prepared for the int8 products, where those are
/// the fast path here and the parts fit together.
fn int8_prepared(ctx: &BuildContext, kind: CellKind) -> Option<Prepared> {
    let (w, r) = (int8_parts(ctx, W_INPUTS)?, int8_parts(ctx, R_INPUTS)?);
    Prepared::from_quantized(kind, w.view(), r.view())
}

/// Inputs `(q, s, z)` as [`QuantizedParts`] when all are constants (the zero
/// point may be absent) of the expected types and ranks.
fn int8_parts(ctx: &BuildContext, (q, s, z): (usize, usize, usize)) -> Option<QuantizedParts> {
    let qt = ctx.constant(q)?;
    let shape = <[usize; 3]>::try_from(qt.shape()).ok()?;
    let (bytes, signed): (Vec<u8>, bool) = match qt {
        Tensor::I8(a) => (a.iter().map(|&v| v as u8).collect(), true),
        Tensor::U8(a) => (a.iter().copied().collect(), false),
        _ => return None,
    };
    let Tensor::F32(st) = ctx.constant(s)? else {
        return None;
    };
    let scale: Vec<f32> = st.iter().copied().collect();
    let zero = match ctx.constant(z) {
        Some(zt) if zt.dtype() == qt.dtype() => ints(zt, "zero points").ok()?.into_owned(),
        Some(_) => return None,
        None if ctx.consts.get(z).is_none() => vec![0; scale.len()],
        None => return None,
    };
    Some(QuantizedParts {
        bytes,
        signed,
        shape,
        scale,
        zero,
    })
}

/// `q` (`dirs × rows × cols`) dequantized with `scale` and `zero` (one per
/// direction or per direction and column) and transposed to `dirs × cols ×
/// rows`, the LSTM's W or R layout; its shape beside it.
fn dequantize(
    q: &Tensor,
    scale: &Tensor,
    zero: Option<&Tensor>,
    dirs: usize,
) -> Result<(Vec<f32>, [usize; 3])> {
    let shape = q.shape();
    let [d, rows, cols] = <[usize; 3]>::try_from(shape).map_err(|_| {
        Error::op(
            OP,
            format!("quantized weights must have rank 3, have shape {shape:?}"),
        )
    })?;
    if d != dirs {
        return Err(Error::op(
            OP,
            format!("quantized weights of shape {shape:?} for {dirs} direction(s)"),
        ));
    }
    let values = ints(q, "quantized weights")?;
    let Tensor::F32(s) = scale else {
        return Err(Error::op(
            OP,
            format!("scales must be float32, are {}", scale.dtype()),
        ));
    };
    let s: Vec<f32> = s.iter().copied().collect();
    let z: Vec<i32> = match zero {
        Some(z) if z.dtype() != q.dtype() => {
            return Err(Error::op(
                OP,
                format!("zero points are {}, the weights {}", z.dtype(), q.dtype()),
            ))
        }
        Some(z) => ints(z, "zero points")?.into_owned(),
        None => vec![0; s.len()],
    };
    let per_column = match s.len() {
        n if n == dirs => false,
        n if n == dirs * cols => true,
        n => {
            return Err(Error::op(
                OP,
                format!(
                    "{n} scales for weights of shape {shape:?}: expected {dirs} or {}",
                    dirs * cols
                ),
            ))
        }
    };
    if z.len() != s.len() {
        return Err(Error::op(
            OP,
            format!("{} zero points for {} scales", z.len(), s.len()),
        ));
    }
    let mut out = vec![0f32; values.len()];
    for di in 0..dirs {
        for row in 0..rows {
            for col in 0..cols {
                let p = if per_column { di * cols + col } else { di };
                let v = values[(di * rows + row) * cols + col];
                out[(di * cols + col) * rows + row] = (v - z[p]) as f32 * s[p];
            }
        }
    }
    Ok((out, [dirs, cols, rows]))
}

/// The elements of an int8 or uint8 tensor as i32.
fn ints<'a>(t: &'a Tensor, what: &str) -> Result<Cow<'a, [i32]>> {
    Ok(Cow::Owned(match t {
        Tensor::I8(a) => a.iter().map(|&v| v as i32).collect(),
        Tensor::U8(a) => a.iter().map(|&v| v as i32).collect(),
        other => {
            return Err(Error::op(
                OP,
                format!("{what} must be int8 or uint8, are {}", other.dtype()),
            ))
        }
    }))
}

/// The shape of W or R in the LSTM's layout, from the quantized one.
fn lstm_shape(q: &[usize]) -> Option<Vec<usize>> {
    match q {
        [d, rows, cols] => Some(vec![*d, *cols, *rows]),
        _ => None,
    }
}

impl Operator for QuantizedLstm {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let weight = |i: usize| -> Result<Fact> {
            let f = fact(OP, inputs, i)?;
            if !matches!(f.dtype, DType::I8 | DType::U8) {
                return Err(Error::op(
                    OP,
                    format!("input {i} must be int8 or uint8, is {}", f.dtype),
                ));
            }
            Ok(Fact {
                dtype: x.dtype,
                shape: f.shape.as_deref().and_then(lstm_shape),
                kind: f.kind,
            })
        };
        let (w, r) = (weight(W_INPUTS.0)?, weight(R_INPUTS.0)?);
        let mut lstm_inputs: Vec<InferInput> = inputs.iter().take(8).copied().collect();
        lstm_inputs[1] = InferInput {
            fact: Some(&w),
            value: None,
        };
        lstm_inputs[2] = InferInput {
            fact: Some(&r),
            value: None,
        };
        self.lstm.infer(&lstm_inputs)
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let convert = |f: Option<&Fact>| {
            f.map(|f| Fact {
                dtype: DType::F32,
                shape: f.shape.as_deref().and_then(lstm_shape),
                kind: f.kind,
            })
        };
        let (w, r) = (
            convert(inputs.get(1).copied().flatten()),
            convert(inputs.get(2).copied().flatten()),
        );
        let mut v: Vec<Option<&Fact>> = inputs.iter().take(8).copied().collect();
        if v.len() > 2 {
            v[1] = w.as_ref();
            v[2] = r.as_ref();
        }
        self.lstm.flops(&v, outputs)
    }

    fn cost_class(&self) -> OpClass {
        self.lstm.cost_class()
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        if x.dtype() != DType::F32 {
            return Err(Error::op(
                OP,
                format!("X must be float32, is {}", x.dtype()),
            ));
        }
        let layout = |i: usize| -> Result<Vec<usize>> {
            let q = input(OP, inputs, i)?.shape();
            lstm_shape(q).ok_or_else(|| {
                Error::op(OP, format!("input {i} must have rank 3, has shape {q:?}"))
            })
        };
        let (ws, rs) = (layout(W_INPUTS.0)?, layout(R_INPUTS.0)?);
        let mut lstm_inputs: Vec<Option<&Tensor>> = (0..8).map(|i| opt_input(inputs, i)).collect();
        let mut shapes: Vec<Option<&[usize]>> =
            lstm_inputs.iter().map(|t| t.map(|t| t.shape())).collect();
        shapes[1] = Some(&ws);
        shapes[2] = Some(&rs);
        let d = self.lstm.dims(&shapes)?;
        let prepared = self
            .lstm
            .prepared
            .as_ref()
            .is_some_and(|p| p.fits(&d, Lstm::GATES * d.hidden));
        let (w, r);
        if prepared {
            // The fast path reads the weights prepared at build.
            lstm_inputs[1] = None;
            lstm_inputs[2] = None;
        } else {
            let weights = |(q, s, z): (usize, usize, usize)| -> Result<Tensor> {
                let (data, shape) = dequantize(
                    input(OP, inputs, q)?,
                    input(OP, inputs, s)?,
                    opt_input(inputs, z),
                    d.dirs,
                )?;
                Tensor::from_vec(&shape, data).map_err(|e| Error::op(OP, format!("{e}")))
            };
            w = weights(W_INPUTS)?;
            r = weights(R_INPUTS)?;
            lstm_inputs[1] = Some(&w);
            lstm_inputs[2] = Some(&r);
        }
        self.lstm.run_shaped(&lstm_inputs, &shapes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor<T: crate::tensor::Element>(shape: &[usize], v: Vec<T>) -> Tensor {
        Tensor::from_vec(shape, v).unwrap()
    }

    /// One direction, 2 input rows × 3 gate columns, transposed on the way.
    #[test]
    fn weights_dequantize_per_direction_and_per_column() {
        let q = tensor(&[1, 2, 3], vec![10u8, 20, 30, 40, 50, 60]);
        let (w, shape) = dequantize(
            &q,
            &tensor(&[1], vec![0.5f32]),
            Some(&tensor(&[1], vec![10u8])),
            1,
        )
        .unwrap();
        assert_eq!(shape, [1, 3, 2]);
        assert_eq!(w, vec![0.0, 15.0, 5.0, 20.0, 10.0, 25.0]);
        let q = tensor(&[1, 2, 3], vec![1i8, -2, 3, -4, 5, -6]);
        let scales = tensor(&[1, 3], vec![1.0f32, 2.0, 4.0]);
        let zeros = tensor(&[1, 3], vec![0i8, 1, -1]);
        let (w, _) = dequantize(&q, &scales, Some(&zeros), 1).unwrap();
        assert_eq!(w, vec![1.0, -4.0, -6.0, 8.0, 16.0, -20.0]);
        // Without zero points, zero.
        let (w, _) = dequantize(&q, &scales, None, 1).unwrap();
        assert_eq!(w, vec![1.0, -4.0, -4.0, 10.0, 12.0, -24.0]);
    }

    #[test]
    fn inconsistent_quantization_parameters_are_errors() {
        let q = tensor(&[2, 2, 3], vec![0i8; 12]);
        let err = |s: Tensor, z: Option<Tensor>, dirs: usize| {
            dequantize(&q, &s, z.as_ref(), dirs)
                .unwrap_err()
                .to_string()
        };
        let msg = err(tensor(&[3], vec![1.0f32; 3]), None, 2);
        assert!(msg.contains("3 scales"), "{msg}");
        let msg = err(
            tensor(&[2], vec![1.0f32; 2]),
            Some(tensor(&[2], vec![0u8; 2])),
            2,
        );
        assert!(msg.contains("zero points are uint8"), "{msg}");
        let msg = err(tensor(&[2], vec![1.0f32; 2]), None, 1);
        assert!(msg.contains("1 direction"), "{msg}");
        let msg = dequantize(
            &tensor(&[2], vec![1.0f32; 2]),
            &tensor(&[1], vec![1.0f32]),
            None,
            1,
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("rank 3"), "{msg}");
    }
}
