//! The sequence operators proper: SequenceEmpty, SequenceConstruct,
//! SequenceInsert, SequenceAt, SequenceErase and SequenceLength. They move
//! no tensor data (their FLOP count is zero): a sequence shares its tensors.

use super::{in_fact, position, sequence, tensor};
use crate::error::{Error, Result};
use crate::ir::{run_via_values, BuildContext, Fact, InferInput, Kind, Operator, Sequence, Value};
use crate::tensor::{DType, Tensor};

/// Which sequence operator a node is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Empty(DType),
    Construct,
    Insert,
    At,
    Erase,
    Length,
}

#[derive(Debug)]
struct SeqOp(Op);

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Empty(_) => "SequenceEmpty",
            Op::Construct => "SequenceConstruct",
            Op::Insert => "SequenceInsert",
            Op::At => "SequenceAt",
            Op::Erase => "SequenceErase",
            Op::Length => "SequenceLength",
        }
    }
}

pub(super) fn build_empty(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let code = ctx.attrs.int("dtype", 1)?;
    let dtype = i32::try_from(code)
        .ok()
        .and_then(|c| DType::from_onnx_code(c).ok())
        .ok_or_else(|| {
            ctx.attrs
                .error("dtype", format!("{code} is not an element type ramify has"))
        })?;
    Ok(Box::new(SeqOp(Op::Empty(dtype))))
}

pub(super) fn build_construct(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(SeqOp(Op::Construct)))
}

pub(super) fn build_insert(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(SeqOp(Op::Insert)))
}

pub(super) fn build_at(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(SeqOp(Op::At)))
}

pub(super) fn build_erase(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(SeqOp(Op::Erase)))
}

pub(super) fn build_length(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(SeqOp(Op::Length)))
}

/// The element type of a sequence input's fact (a tensor fact is an error).
fn seq_dtype(op: &str, f: &Fact) -> Result<DType> {
    if f.kind == Kind::Sequence {
        Ok(f.dtype)
    } else {
        Err(Error::ValueKind {
            what: format!("{op} input 0"),
            actual: f.kind.to_string(),
            expected: Kind::Sequence.to_string(),
        })
    }
}

/// An error for a tensor of another type than the sequence's.
fn mismatch(op: &str, got: DType, want: DType) -> Error {
    Error::op(
        op,
        format!("a {got} tensor cannot join a sequence of {want} tensors"),
    )
}

impl Operator for SeqOp {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let op = self.0.name();
        let fact = match self.0 {
            Op::Empty(d) => Fact::of_kind(Kind::Sequence, d),
            Op::Construct => {
                let d = in_fact(op, inputs, 0)?.dtype;
                for (i, x) in inputs.iter().enumerate() {
                    let f = x.fact.ok_or_else(|| Error::op(op, "an input is missing"))?;
                    if f.kind != Kind::Tensor {
                        return Err(Error::ValueKind {
                            what: format!("{op} input {i}"),
                            actual: f.kind.to_string(),
                            expected: Kind::Tensor.to_string(),
                        });
                    }
                    if f.dtype != d {
                        return Err(mismatch(op, f.dtype, d));
                    }
                }
                Fact::of_kind(Kind::Sequence, d)
            }
            Op::Insert => {
                let d = seq_dtype(op, in_fact(op, inputs, 0)?)?;
                let t = in_fact(op, inputs, 1)?;
                if t.dtype != d {
                    return Err(mismatch(op, t.dtype, d));
                }
                Fact::of_kind(Kind::Sequence, d)
            }
            Op::Erase => Fact::of_kind(Kind::Sequence, seq_dtype(op, in_fact(op, inputs, 0)?)?),
            Op::At => Fact::unknown_shape(seq_dtype(op, in_fact(op, inputs, 0)?)?),
            Op::Length => Fact::new(DType::I64, vec![]),
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
        let out: Value = match self.0 {
            Op::Empty(d) => Sequence::empty(d).into(),
            Op::Construct => {
                let first = tensor(op, inputs, 0)?;
                let mut s = Sequence::empty(first.dtype());
                for i in 0..inputs.len() {
                    let t = tensor(op, inputs, i)?;
                    if t.dtype() != first.dtype() {
                        return Err(mismatch(op, t.dtype(), first.dtype()));
                    }
                    s.push(t.clone())?;
                }
                s.into()
            }
            Op::Insert => {
                let mut s = sequence(op, inputs, 0)?.clone();
                let t = tensor(op, inputs, 1)?;
                if t.dtype() != s.dtype() {
                    return Err(mismatch(op, t.dtype(), s.dtype()));
                }
                match inputs.get(2).copied().flatten() {
                    Some(p) => s.insert(position(op, p.as_tensor("the position")?)?, t.clone())?,
                    None => s.push(t.clone())?,
                }
                s.into()
            }
            Op::At => {
                let s = sequence(op, inputs, 0)?;
                let p = position(op, tensor(op, inputs, 1)?)?;
                Value::Tensor(s.get(p)?.clone())
            }
            Op::Erase => {
                let mut s = sequence(op, inputs, 0)?.clone();
                let p = match inputs.get(1).copied().flatten() {
                    Some(p) => position(op, p.as_tensor("the position")?)?,
                    None => -1,
                };
                s.remove(p)?;
                s.into()
            }
            Op::Length => {
                let n = sequence(op, inputs, 0)?.len();
                Tensor::scalar(n as i64).into()
            }
        };
        Ok(vec![out])
    }
}
