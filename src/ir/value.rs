//! Values beyond tensors: what a graph value holds at run time. Most values
//! are tensors; ONNX also has sequences of tensors (all of one element type)
//! and optionals (absent, or holding a tensor or a sequence). A [`Value`] is
//! cheap to clone: tensors are shared through `Arc`, so a sequence operator
//! that inserts or picks an element copies no tensor data.

use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};
use std::fmt;
use std::sync::Arc;

/// The kind of a value, as graph facts and declared types say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Kind {
    /// A tensor.
    #[default]
    Tensor,
    /// A sequence of tensors of one element type.
    Sequence,
    /// An optional that, when present, holds a tensor.
    OptionalTensor,
    /// An optional that, when present, holds a sequence.
    OptionalSequence,
}

impl Kind {
    /// The kind an optional of this kind holds (a plain kind is its own).
    pub fn unwrapped(self) -> Kind {
        match self {
            Kind::OptionalTensor => Kind::Tensor,
            Kind::OptionalSequence => Kind::Sequence,
            k => k,
        }
    }

    /// The optional of this kind (an optional stays itself).
    pub fn optional(self) -> Kind {
        match self {
            Kind::Tensor => Kind::OptionalTensor,
            Kind::Sequence => Kind::OptionalSequence,
            k => k,
        }
    }

    /// Whether the kind is an optional.
    pub fn is_optional(self) -> bool {
        matches!(self, Kind::OptionalTensor | Kind::OptionalSequence)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Tensor => "tensor",
            Kind::Sequence => "sequence",
            Kind::OptionalTensor => "optional tensor",
            Kind::OptionalSequence => "optional sequence",
        })
    }
}

/// A sequence of tensors, all of one element type (their shapes may differ).
#[derive(Debug, Clone, PartialEq)]
pub struct Sequence {
    dtype: DType,
    items: Vec<Arc<Tensor>>,
}

impl Sequence {
    /// An empty sequence of `dtype` tensors.
    pub fn empty(dtype: DType) -> Sequence {
        Sequence {
            dtype,
            items: Vec::new(),
        }
    }

    /// A sequence of `items`, each of element type `dtype`; a tensor of
    /// another type is an error.
    pub fn new(dtype: DType, items: Vec<Arc<Tensor>>) -> Result<Sequence> {
        let s = Sequence {
            dtype,
            items: Vec::with_capacity(items.len()),
        };
        items.into_iter().try_fold(s, |mut s, t| {
            s.push(t)?;
            Ok(s)
        })
    }

    /// The element type of every tensor of the sequence.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The tensors, in order.
    pub fn items(&self) -> &[Arc<Tensor>] {
        &self.items
    }

    /// The tensors, in order, taken out.
    pub fn into_items(self) -> Vec<Arc<Tensor>> {
        self.items
    }

    /// How many tensors the sequence holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the sequence holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn check(&self, t: &Tensor) -> Result<()> {
        if t.dtype() == self.dtype {
            Ok(())
        } else {
            Err(Error::InputType {
                name: "sequence element".into(),
                actual: t.dtype().to_string(),
                expected: self.dtype.to_string(),
            })
        }
    }

    /// Appends a tensor of the sequence's element type.
    pub fn push(&mut self, t: Arc<Tensor>) -> Result<()> {
        self.check(&t)?;
        self.items.push(t);
        Ok(())
    }

    /// The index that ONNX position `pos` names (negative counts from the
    /// back) among `len` slots, or an error when out of range.
    pub fn index(pos: i64, len: usize) -> Result<usize> {
        let n = len as i64;
        let i = if pos < 0 { pos + n } else { pos };
        if (0..n).contains(&i) {
            Ok(i as usize)
        } else {
            Err(Error::op(
                "sequence",
                format!("position {pos} is out of range for a sequence of {len} tensors"),
            ))
        }
    }

    /// The tensor at ONNX position `pos` (negative counts from the back).
    pub fn get(&self, pos: i64) -> Result<&Arc<Tensor>> {
        let i = Sequence::index(pos, self.len())?;
        self.items
            .get(i)
            .ok_or_else(|| Error::Internal("sequence index".into()))
    }

    /// Inserts a tensor before ONNX position `pos`, from `-len` to `len`
    /// (negative counts from the back; `len` appends).
    pub fn insert(&mut self, pos: i64, t: Arc<Tensor>) -> Result<()> {
        self.check(&t)?;
        let n = self.len() as i64;
        if pos < -n || pos > n {
            return Err(Error::op(
                "SequenceInsert",
                format!("position {pos} is out of range for a sequence of {n} tensors"),
            ));
        }
        let i = if pos < 0 { pos + n } else { pos };
        self.items.insert(i as usize, t);
        Ok(())
    }

    /// Removes the tensor at ONNX position `pos`.
    pub fn remove(&mut self, pos: i64) -> Result<Arc<Tensor>> {
        let i = Sequence::index(pos, self.len())?;
        Ok(self.items.remove(i))
    }
}

/// An optional value: absent, or holding a tensor or a sequence. An absent
/// one still knows what it would hold (its kind and element type).
#[derive(Debug, Clone, PartialEq)]
pub struct Optional {
    kind: Kind,
    dtype: DType,
    value: Option<Box<Value>>,
}

impl Optional {
    /// An absent optional that would hold a `kind` (tensor or sequence) of
    /// element type `dtype`.
    pub fn none(kind: Kind, dtype: DType) -> Optional {
        Optional {
            kind: kind.unwrapped(),
            dtype,
            value: None,
        }
    }

    /// An optional holding `value` (a tensor or a sequence; an optional
    /// cannot hold an optional).
    pub fn some(value: Value) -> Result<Optional> {
        if let Value::Optional(_) = value {
            return Err(Error::ValueKind {
                what: "the element of an optional".into(),
                actual: value.kind().to_string(),
                expected: "tensor or sequence".into(),
            });
        }
        Ok(Optional {
            kind: value.kind(),
            dtype: value.dtype(),
            value: Some(Box::new(value)),
        })
    }

    /// The kind it holds or would hold (tensor or sequence).
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The element type it holds or would hold.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The value held, if any.
    pub fn value(&self) -> Option<&Value> {
        self.value.as_deref()
    }
}

/// A value at run time: a tensor, a sequence of tensors, or an optional.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A tensor (shared, never mutated in place).
    Tensor(Arc<Tensor>),
    /// A sequence of tensors.
    Sequence(Sequence),
    /// An optional tensor or sequence.
    Optional(Optional),
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Tensor(Arc::new(t))
    }
}

impl From<Arc<Tensor>> for Value {
    fn from(t: Arc<Tensor>) -> Value {
        Value::Tensor(t)
    }
}

impl From<Sequence> for Value {
    fn from(s: Sequence) -> Value {
        Value::Sequence(s)
    }
}

impl From<Optional> for Value {
    fn from(o: Optional) -> Value {
        Value::Optional(o)
    }
}

impl Value {
    /// The value's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Tensor(_) => Kind::Tensor,
            Value::Sequence(_) => Kind::Sequence,
            Value::Optional(o) => o.kind.optional(),
        }
    }

    /// The element type of the tensor, of the sequence's tensors, or of
    /// what the optional holds or would hold.
    pub fn dtype(&self) -> DType {
        match self {
            Value::Tensor(t) => t.dtype(),
            Value::Sequence(s) => s.dtype,
            Value::Optional(o) => o.dtype,
        }
    }

    /// The tensor, if the value is one.
    pub fn tensor(&self) -> Option<&Arc<Tensor>> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The tensor, or [`Error::ValueKind`] naming `what` when the value is
    /// not one.
    pub fn as_tensor(&self, what: &str) -> Result<&Arc<Tensor>> {
        self.tensor().ok_or_else(|| self.not(what, Kind::Tensor))
    }

    /// The tensor taken out, or [`Error::ValueKind`] naming `what`.
    pub fn into_tensor(self, what: &str) -> Result<Arc<Tensor>> {
        match self {
            Value::Tensor(t) => Ok(t),
            other => Err(other.not(what, Kind::Tensor)),
        }
    }

    /// The sequence, or [`Error::ValueKind`] naming `what`.
    pub fn as_sequence(&self, what: &str) -> Result<&Sequence> {
        match self {
            Value::Sequence(s) => Ok(s),
            other => Err(other.not(what, Kind::Sequence)),
        }
    }

    /// The error for this value where a `expected` is needed.
    pub fn not(&self, what: &str, expected: Kind) -> Error {
        Error::ValueKind {
            what: what.to_string(),
            actual: self.kind().to_string(),
            expected: expected.to_string(),
        }
    }

    /// Bytes of tensor data the value holds.
    pub fn byte_size(&self) -> usize {
        match self {
            Value::Tensor(t) => t.byte_size(),
            Value::Sequence(s) => s.items.iter().map(|t| t.byte_size()).sum(),
            Value::Optional(o) => o.value().map_or(0, Value::byte_size),
        }
    }
}

/// Tensors from values, for a tensor operator: an absent input stays
/// absent; any other kind is an [`Error::ValueKind`] naming the input.
pub fn tensor_args<'a>(inputs: &[Option<&'a Value>]) -> Result<Vec<Option<&'a Tensor>>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            None => Ok(None),
            Some(v) => v.as_tensor(&format!("input {i}")).map(|t| Some(&**t)),
        })
        .collect()
}

/// [`Operator::run`](super::Operator::run) for an operator that works on
/// values: the tensors are wrapped (copied) into values, and every output
/// must be a tensor (else an [`Error::ValueKind`]). Only generic callers
/// that hold tensors use it; the executor calls `run_values` directly.
pub fn run_via_values<O: super::Operator + ?Sized>(
    op: &O,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let values: Vec<Option<Value>> = inputs
        .iter()
        .map(|t| t.map(|t| Value::from(t.clone())))
        .collect();
    let refs: Vec<Option<&Value>> = values.iter().map(Option::as_ref).collect();
    op.run_values(&refs)?
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let t = v.into_tensor(&format!("output {i}"))?;
            Ok(Arc::try_unwrap(t).unwrap_or_else(|t| (*t).clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: f32) -> Arc<Tensor> {
        Arc::new(Tensor::scalar(v))
    }

    #[test]
    fn positions_count_from_either_end() {
        let mut s = Sequence::new(DType::F32, vec![t(1.0), t(2.0)]).unwrap();
        s.insert(-1, t(1.5)).unwrap();
        s.insert(3, t(3.0)).unwrap();
        s.insert(0, t(0.0)).unwrap();
        let got: Vec<f32> = s
            .items()
            .iter()
            .map(|x| x.to_f64_vec().unwrap()[0] as f32)
            .collect();
        assert_eq!(got, vec![0.0, 1.0, 1.5, 2.0, 3.0]);
        assert_eq!(**s.get(-1).unwrap(), *t(3.0));
        assert!(s.get(5).is_err() && s.get(-6).is_err());
        assert!(s.insert(7, t(0.0)).is_err() && s.insert(-7, t(0.0)).is_err());
        assert_eq!(*s.remove(-5).unwrap(), *t(0.0));
        assert!(Sequence::empty(DType::F32).remove(0).is_err());
    }

    #[test]
    fn element_types_must_agree() {
        let i = Arc::new(Tensor::scalar(1i64));
        assert!(Sequence::new(DType::F32, vec![t(1.0), i.clone()]).is_err());
        let mut s = Sequence::empty(DType::F32);
        assert!(matches!(s.push(i), Err(Error::InputType { .. })));
    }

    #[test]
    fn kinds_and_typed_errors() {
        let seq = Value::from(Sequence::empty(DType::I64));
        assert_eq!(seq.kind(), Kind::Sequence);
        assert!(matches!(seq.as_tensor("x"), Err(Error::ValueKind { .. })));
        assert!(matches!(
            tensor_args(&[None, Some(&seq)]),
            Err(Error::ValueKind { .. })
        ));
        let o = Optional::some(seq.clone()).unwrap();
        assert_eq!(Value::from(o.clone()).kind(), Kind::OptionalSequence);
        assert!(Optional::some(Value::from(o)).is_err());
        let none = Optional::none(Kind::OptionalTensor, DType::F32);
        assert_eq!(none.kind(), Kind::Tensor);
        assert!(none.value().is_none());
    }
}
