//! Multi-input elementwise operators with numpy broadcasting: arithmetic
//! (`arith`), comparisons, logic, bit operations and Where (`logic`), all on
//! the shared broadcasting engine (`broadcast`).

mod activated;
pub(crate) mod arith;
pub(crate) mod broadcast;
mod dequantized;
pub(crate) mod logic;

use self::arith::{ArithKind, Arithmetic, Pow, VarKind, Variadic};
use self::logic::{BitKind, BitShift, Bitwise, CmpKind, Compare, Where};
use super::util::broadcast_all;
use super::Registrar;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::tensor::DType;

/// The error for inputs whose types differ or are not accepted.
pub(crate) fn type_error(op: &str, a: DType, b: DType) -> Error {
    if a == b {
        Error::op(op, format!("input type {a} is not supported"))
    } else {
        Error::op(op, format!("inputs must have one type, found {a} and {b}"))
    }
}

/// Output fact of an operator whose present inputs (at least `min`, the
/// first `min` required) share one accepted type and broadcast together;
/// the output type is `out`, or the inputs' type.
pub(crate) fn infer_types(
    op: &str,
    inputs: &[InferInput],
    min: usize,
    accepts: impl Fn(DType) -> bool,
    out: Option<DType>,
) -> Result<Vec<Fact>> {
    for i in 0..min {
        super::util::fact(op, inputs, i)?;
    }
    let facts: Vec<&Fact> = inputs.iter().filter_map(|x| x.fact).collect();
    let first = facts
        .first()
        .ok_or_else(|| Error::op(op, "needs at least one input"))?;
    for f in &facts {
        if f.dtype != first.dtype || !accepts(f.dtype) {
            return Err(type_error(op, first.dtype, f.dtype));
        }
    }
    let shapes: Option<Vec<&[usize]>> = facts.iter().map(|f| f.shape.as_deref()).collect();
    let shape = match shapes {
        Some(s) => Some(broadcast_all(op, &s)?),
        None => None,
    };
    Ok(vec![Fact {
        kind: crate::ir::Kind::Tensor,
        dtype: out.unwrap_or(first.dtype),
        shape,
    }])
}

fn arithmetic(name: &'static str, kind: ArithKind) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Arithmetic { name, kind }))
}

fn variadic(name: &'static str, kind: VarKind) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Variadic { name, kind }))
}

fn compare(name: &'static str, kind: CmpKind) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Compare { name, kind }))
}

fn bitwise(name: &'static str, kind: BitKind, logical: bool) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Bitwise {
        name,
        kind,
        logical,
    }))
}

fn build_mod(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let fmod = match ctx.attrs.int("fmod", 0)? {
        0 => false,
        1 => true,
        v => {
            return Err(ctx
                .attrs
                .error("fmod", format!("must be 0 or 1, found {v}")))
        }
    };
    arithmetic("Mod", ArithKind::Mod { fmod })
}

fn build_bitshift(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let dir = ctx
        .attrs
        .string_opt("direction")?
        .ok_or_else(|| ctx.attrs.error("direction", "required but missing"))?;
    let left = match dir.as_str() {
        "LEFT" => true,
        "RIGHT" => false,
        other => {
            return Err(ctx.attrs.error(
                "direction",
                format!("must be LEFT or RIGHT, found {other:?}"),
            ))
        }
    };
    Ok(Box::new(BitShift {
        left,
        signed: ctx.opset >= 28,
    }))
}

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Add", 7, |ctx| match activated::build("Add", ctx) {
        Some(op) => Ok(op),
        None => arithmetic("Add", ArithKind::Add),
    });
    r.add("Sub", 7, |_| arithmetic("Sub", ArithKind::Sub));
    r.add("Mul", 7, |_| arithmetic("Mul", ArithKind::Mul));
    r.add("Div", 7, |_| arithmetic("Div", ArithKind::Div));
    r.add("Mod", 10, build_mod);
    r.add("Pow", 7, |_| Ok(Box::new(Pow)));
    r.add("Sum", 1, |ctx| match activated::build("Sum", ctx) {
        Some(op) => Ok(op),
        None => variadic("Sum", VarKind::Sum),
    });
    r.add("Mean", 1, |_| variadic("Mean", VarKind::Mean));
    r.add("Max", 1, |_| variadic("Max", VarKind::Max));
    r.add("Min", 1, |_| variadic("Min", VarKind::Min));
    r.add("Equal", 7, |_| compare("Equal", CmpKind::Equal));
    r.add("Less", 7, |_| compare("Less", CmpKind::Less));
    r.add("Greater", 7, |_| compare("Greater", CmpKind::Greater));
    r.add("LessOrEqual", 12, |_| {
        compare("LessOrEqual", CmpKind::LessOrEqual)
    });
    r.add("GreaterOrEqual", 12, |_| {
        compare("GreaterOrEqual", CmpKind::GreaterOrEqual)
    });
    r.add("And", 7, |_| bitwise("And", BitKind::And, true));
    r.add("Or", 7, |_| bitwise("Or", BitKind::Or, true));
    r.add("Xor", 7, |_| bitwise("Xor", BitKind::Xor, true));
    r.add("BitwiseAnd", 18, |_| {
        bitwise("BitwiseAnd", BitKind::And, false)
    });
    r.add("BitwiseOr", 18, |_| {
        bitwise("BitwiseOr", BitKind::Or, false)
    });
    r.add("BitwiseXor", 18, |_| {
        bitwise("BitwiseXor", BitKind::Xor, false)
    });
    r.add("BitShift", 11, build_bitshift);
    r.add("Where", 9, |_| Ok(Box::new(Where)));
}

#[cfg(test)]
mod tests;
