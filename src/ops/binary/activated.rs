//! Add (or a two-input Sum) with an activation fused at load: ResNet's
//! residual join `Relu(Add(branch, shortcut))` as one pass that writes
//! `act(a + b)`, instead of a sum written and read back by the Relu. The
//! sum is the same f32/f64 addition as the plain operator's, so fused and
//! unfused graphs agree bit for bit. Activations other than Relu (a
//! quantized BERT's bias Add takes its GELU here) run as a second pass of
//! their vectorised kernels over the sum.

use super::broadcast::zip2;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, FusionKind, InferInput, OpClass, Operator};
use crate::ops::gemm::fused::{Activation, ActivationFloat};
use crate::ops::util::{out_len, par_rows};
use crate::tensor::{DType, Tensor};
use ndarray::ArrayD;

/// `act(a + b)` with numpy broadcasting; with `dequantize`, the operands
/// taken through absorbed DequantizeLinear nodes ([`super::dequantized`]).
#[derive(Debug)]
pub(crate) struct ActivatedAdd {
    name: &'static str,
    act: Option<Activation>,
    dequantize: bool,
}

/// The fused operator when a fusion gave the node an activation or
/// dequantized operands.
pub(crate) fn build(name: &'static str, ctx: &BuildContext) -> Option<Box<dyn Operator>> {
    let (act, dequantize) = (ctx.fusion.activation, ctx.fusion.dequantize);
    (act.is_some() || dequantize).then(|| {
        Box::new(ActivatedAdd {
            name,
            act,
            dequantize,
        }) as Box<dyn Operator>
    })
}

/// Whether a two-input Add or Sum with these inputs can take an
/// activation: both present and float32 (the fused kernels' type).
pub(crate) fn accepts(kind: FusionKind, inputs: &[InferInput]) -> bool {
    kind == FusionKind::Activation
        && inputs.len() == 2
        && inputs
            .iter()
            .all(|i| i.fact.is_some_and(|f| f.dtype == DType::F32))
}

pub(super) fn add_then<T: ActivationFloat + Clone + Default + Send + Sync + 'static>(
    op: &str,
    act: Activation,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
) -> Result<ArrayD<T>> {
    // The Relu loop is specialised so that it vectorises; the other
    // activations (GELU's erf, tanh, sigmoid...) run as a second pass of
    // their vectorised kernels, which give `eval`'s bits.
    if act == Activation::Relu {
        return zip2(op, a, b, |&x, &y| Activation::Relu.eval(x + y));
    }
    let mut y = zip2(op, a, b, |&x, &y| x + y)?;
    match y.as_slice_mut() {
        Some(s) => par_rows(s, 1, |_, chunk| act.apply(chunk)),
        None => y.mapv_inplace(|v| act.eval(v)),
    }
    Ok(y)
}

impl Operator for ActivatedAdd {
    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    /// With dequantized operands and no activation yet: an activation.
    fn accepts_fusion(&self, kind: FusionKind, _inputs: &[InferInput]) -> bool {
        kind == FusionKind::Activation && self.dequantize && self.act.is_none()
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        if self.dequantize {
            return super::dequantized::infer(self.name, inputs);
        }
        if inputs.iter().filter(|i| i.fact.is_some()).count() != 2 {
            return Err(Error::op(
                self.name,
                "a fused activation needs exactly two inputs",
            ));
        }
        super::infer_types(
            self.name,
            inputs,
            2,
            |d| matches!(d, DType::F32 | DType::F64),
            None,
        )
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0).saturating_mul(2)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name;
        if self.dequantize {
            return Ok(vec![super::dequantized::run(op, self.act, inputs)?]);
        }
        let Some(act) = self.act else {
            return Err(Error::op(op, "internal: a fused add without its fusion"));
        };
        let all: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
        Ok(vec![match all.as_slice() {
            [Tensor::F32(a), Tensor::F32(b)] => Tensor::F32(add_then(op, act, a, b)?),
            [Tensor::F64(a), Tensor::F64(b)] => Tensor::F64(add_then(op, act, a, b)?),
            [a, b] => {
                return Err(Error::op(
                    op,
                    format!(
                    "a fused activation takes two float32 or two float64 inputs, found {} and {}",
                    a.dtype(),
                    b.dtype()
                ),
                ))
            }
            _ => {
                return Err(Error::op(
                    op,
                    format!(
                        "a fused activation needs exactly two inputs, found {}",
                        all.len()
                    ),
                ))
            }
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    /// Every activation gives `eval(a + b)`'s bits, with and without
    /// broadcasting (a bias row), on lengths with vector tails.
    #[test]
    fn fused_activations_match_eval_of_the_sum() {
        let acts = [
            Activation::Relu,
            Activation::LeakyRelu(0.1),
            Activation::Clip(-0.5, 0.75),
            Activation::Sigmoid,
            Activation::HardSwish,
            Activation::Tanh,
            Activation::Gelu,
            Activation::GeluTanh,
        ];
        let value = |i: usize| ((i * 7919 % 1013) as f32 - 506.0) * 0.013;
        let a = ArrayD::from_shape_fn(IxDyn(&[3, 37]), |d| value(d[0] * 37 + d[1]));
        let full = ArrayD::from_shape_fn(IxDyn(&[3, 37]), |d| value(d[0] * 41 + d[1] + 5));
        let row = ArrayD::from_shape_fn(IxDyn(&[37]), |d| value(d[0] * 3 + 1));
        for act in acts {
            for b in [&full, &row] {
                let got = add_then("Add", act, &a, b).unwrap();
                let b = b.broadcast(a.raw_dim()).unwrap();
                for ((g, &x), &y) in got.iter().zip(a.iter()).zip(b.iter()) {
                    let want = act.eval(x + y);
                    assert_eq!(g.to_bits(), want.to_bits(), "{act:?}: {x} + {y}");
                }
            }
        }
    }
}
