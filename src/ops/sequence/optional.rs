//! Optionals: Optional wraps a tensor or a sequence (or, without an input,
//! makes an absent one of the `type` attribute), OptionalHasElement says
//! whether one holds a value, OptionalGetElement takes the value out. From
//! opset 18 the last two also take a plain tensor or sequence (which always
//! has its element), and OptionalHasElement an absent input (which has none).

use super::value;
use crate::error::{Error, Result};
use crate::ir::{run_via_values, BuildContext, Fact, InferInput, Kind, Operator, Optional, Value};
use crate::tensor::{DType, Tensor};

/// Which optional operator a node is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    /// Optional, with the attribute `type` when there is no input.
    Wrap(Option<(Kind, DType)>),
    Has,
    Get,
}

#[derive(Debug)]
struct OptOp(Op);

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Wrap(_) => "Optional",
            Op::Has => "OptionalHasElement",
            Op::Get => "OptionalGetElement",
        }
    }
}

pub(super) fn build_optional(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let ty = ctx.attrs.value_type("type")?;
    if ty.is_none() && ctx.num_inputs == 0 {
        return Err(ctx
            .attrs
            .error("type", "required when the input is left out"));
    }
    if let Some((k, _)) = ty {
        if k.is_optional() {
            return Err(ctx
                .attrs
                .error("type", "an optional cannot hold an optional"));
        }
    }
    Ok(Box::new(OptOp(Op::Wrap(ty))))
}

pub(super) fn build_has(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(OptOp(Op::Has)))
}

pub(super) fn build_get(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(OptOp(Op::Get)))
}

impl Operator for OptOp {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let op = self.0.name();
        let input = inputs.first().and_then(|x| x.fact);
        let fact = match (self.0, input) {
            (Op::Has, _) => Fact::new(DType::Bool, vec![]),
            (Op::Wrap(_), Some(f)) if f.kind.is_optional() => {
                return Err(Error::ValueKind {
                    what: format!("{op} input 0"),
                    actual: f.kind.to_string(),
                    expected: "tensor or sequence".into(),
                })
            }
            (Op::Wrap(_), Some(f)) => Fact::of_kind(f.kind.optional(), f.dtype),
            (Op::Wrap(Some((k, d))), None) => Fact::of_kind(k.optional(), d),
            (Op::Get, Some(f)) => match f.kind {
                Kind::Tensor => f.clone(),
                k => Fact::of_kind(k.unwrapped(), f.dtype),
            },
            (_, None) => return Err(Error::op(op, "input 0 is missing")),
        };
        Ok(vec![fact])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        0
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        run_via_values(self, inputs)
    }

    fn uses_values(&self) -> bool {
        true
    }

    fn run_values(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let op = self.0.name();
        let input = inputs.first().copied().flatten();
        let out = match (self.0, input) {
            (Op::Wrap(_), Some(v)) => Optional::some(v.clone())?.into(),
            (Op::Wrap(Some((k, d))), None) => Optional::none(k, d).into(),
            (Op::Wrap(None), None) => return Err(Error::op(op, "input 0 is missing")),
            (Op::Has, None) => Tensor::scalar(false).into(),
            (Op::Has, Some(Value::Optional(o))) => Tensor::scalar(o.value().is_some()).into(),
            (Op::Has, Some(_)) => Tensor::scalar(true).into(),
            (Op::Get, Some(Value::Optional(o))) => o
                .value()
                .cloned()
                .ok_or_else(|| Error::op(op, "the optional holds no value"))?,
            (Op::Get, Some(_)) => value(op, inputs, 0)?.clone(),
            (Op::Get, None) => return Err(Error::op(op, "input 0 is missing")),
        };
        Ok(vec![out])
    }
}
