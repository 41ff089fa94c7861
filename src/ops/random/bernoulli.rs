//! Bernoulli: each output element is 1 with the probability its input
//! element gives, else 0, in the type of `dtype` (default the input's).

use super::rng::Seed;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::unary::cast::cast_sat;
use crate::ops::util::{fact, input, out_len};
use crate::tensor::{budget, DType, Tensor};
use ndarray::ArrayD;

const OP: &str = "Bernoulli";

#[derive(Debug)]
struct Bernoulli {
    /// The output type, when the `dtype` attribute names one.
    dtype: Option<DType>,
    opset: i64,
    seed: Seed,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let dtype = match a.int_opt("dtype")? {
        None => None,
        Some(code) => {
            let t = i32::try_from(code)
                .ok()
                .and_then(|c| DType::from_onnx_code(c).ok())
                .filter(|t| output_type(*t, ctx.opset));
            Some(t.ok_or_else(|| {
                a.error(
                    "dtype",
                    format!("type code {code} is not a numeric or bool type"),
                )
            })?)
        }
    };
    Ok(Box::new(Bernoulli {
        dtype,
        opset: ctx.opset,
        seed: Seed::from_float_attr(a)?,
    }))
}

/// Whether Bernoulli may output `t` at `opset`: a float, integer or bool
/// type (bfloat16 from opset 22).
fn output_type(t: DType, opset: i64) -> bool {
    use DType::*;
    match t {
        F32 | F64 | F16 | I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64 | Bool => true,
        BF16 => opset >= 22,
        _ => false,
    }
}

impl Bernoulli {
    /// Checks the probabilities' type and gives the output type.
    fn types(&self, input: DType) -> Result<DType> {
        let real = matches!(input, DType::F32 | DType::F64 | DType::F16)
            || (input == DType::BF16 && self.opset >= 22);
        if !real {
            return Err(Error::op(
                OP,
                format!("expected floating-point probabilities, found {input}"),
            ));
        }
        Ok(self.dtype.unwrap_or(input))
    }
}

impl Operator for Bernoulli {
    fn is_random(&self) -> bool {
        true
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(OP, inputs, 0)?;
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: self.types(f.dtype)?,
            shape: f.shape.clone(),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0).saturating_mul(4).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let to = self.types(x.dtype())?;
        budget::check("Bernoulli output", to, x.shape())?;
        let p = x.to_f64_vec()?;
        if let Some(bad) = p.iter().find(|v| !(0.0..=1.0).contains(*v)) {
            return Err(Error::op(OP, format!("probability {bad} is not in [0, 1]")));
        }
        let mut rng = self.seed.rng();
        let draws: Vec<bool> = p.iter().map(|&p| rng.uniform() < p).collect();
        let mask = ArrayD::from_shape_vec(x.shape(), draws)
            .map_err(|e| Error::op(OP, format!("internal shape error: {e}")))?;
        let out = Tensor::Bool(mask);
        Ok(vec![if to == DType::Bool {
            out
        } else {
            cast_sat(&out, to, false)?
        }])
    }
}
