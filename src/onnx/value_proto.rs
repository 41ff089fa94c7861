//! SequenceProto and OptionalProto ↔ [`Value`]: the files ONNX's node tests
//! store for sequence and optional inputs and outputs. onnx-protobuf does
//! not generate these two messages, so their few fields are read and written
//! here on protobuf's wire format; their tensors are ordinary TensorProtos.

use super::tensor_proto::{tensor_from_proto, tensor_to_proto};
use crate::error::{Error, Result};
use crate::ir::{Kind, Optional, Sequence, Value};
use crate::tensor::DType;
use onnx_protobuf::{Message, TensorProto};
use protobuf::rt::WireType;
use protobuf::{CodedInputStream, CodedOutputStream};
use std::path::Path;
use std::sync::Arc;

/// `SequenceProto.DataType` / `OptionalProto.DataType`: a tensor.
const ELEM_TENSOR: i32 = 1;
/// … a sequence.
const ELEM_SEQUENCE: i32 = 3;
/// … an optional.
const ELEM_OPTIONAL: i32 = 5;

fn malformed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Malformed(format!("{what}: {e}"))
}

/// One field of a message: its number and its varint or bytes.
enum Field {
    Varint(u64),
    Bytes(Vec<u8>),
}

/// The varint and length-delimited fields of a message, in order (others
/// are skipped).
fn fields(bytes: &[u8], what: &str) -> Result<Vec<(u32, Field)>> {
    let mut is = CodedInputStream::from_bytes(bytes);
    let mut out = Vec::new();
    while let Some(tag) = is.read_raw_tag_or_eof().map_err(|e| malformed(what, e))? {
        let (number, wire) = (tag >> 3, tag & 7);
        let field = match wire {
            0 => Field::Varint(is.read_raw_varint64().map_err(|e| malformed(what, e))?),
            2 => Field::Bytes(is.read_bytes().map_err(|e| malformed(what, e))?),
            w => {
                let wt = WireType::new(w)
                    .ok_or_else(|| malformed(what, format!("wire type {w} in field {number}")))?;
                is.skip_field(wt).map_err(|e| malformed(what, e))?;
                continue;
            }
        };
        out.push((number, field));
    }
    Ok(out)
}

fn tensor(bytes: &[u8], base: Option<&Path>) -> Result<Arc<crate::tensor::Tensor>> {
    let mut p = TensorProto::parse_from_bytes(bytes).map_err(|e| malformed("TensorProto", e))?;
    Ok(Arc::new(tensor_from_proto(&mut p, base)?))
}

/// A SequenceProto of tensors; an empty one has element type `dtype`.
fn sequence_from_bytes(bytes: &[u8], dtype: DType, base: Option<&Path>) -> Result<Sequence> {
    let mut items = Vec::new();
    for (number, field) in fields(bytes, "SequenceProto")? {
        match (number, field) {
            (2, Field::Varint(e)) if e != ELEM_TENSOR as u64 && e != 0 => {
                return Err(Error::UnsupportedType(format!(
                    "a sequence of element kind {e} (only sequences of tensors are supported)"
                )))
            }
            (3, Field::Bytes(b)) => items.push(tensor(&b, base)?),
            (4..=7, _) => {
                return Err(Error::UnsupportedType(
                    "a sequence of sparse tensors, sequences, maps or optionals".into(),
                ))
            }
            _ => {}
        }
    }
    let dtype = items.first().map_or(dtype, |t| t.dtype());
    Sequence::new(dtype, items)
}

/// A value of `kind` from a serialized TensorProto, SequenceProto or
/// OptionalProto; `dtype` is the element type of an empty sequence or an
/// absent optional (the files do not say it). `base` is the folder for
/// external tensor data.
pub fn value_from_bytes(
    bytes: &[u8],
    kind: Kind,
    dtype: DType,
    base: Option<&Path>,
) -> Result<Value> {
    match kind {
        Kind::Tensor => Ok(Value::Tensor(tensor(bytes, base)?)),
        Kind::Sequence => Ok(Value::Sequence(sequence_from_bytes(bytes, dtype, base)?)),
        Kind::OptionalTensor | Kind::OptionalSequence => {
            let mut held = None;
            for (number, field) in fields(bytes, "OptionalProto")? {
                match (number, field) {
                    (3, Field::Bytes(b)) => held = Some(Value::Tensor(tensor(&b, base)?)),
                    (5, Field::Bytes(b)) => {
                        held = Some(Value::Sequence(sequence_from_bytes(&b, dtype, base)?))
                    }
                    (4 | 6 | 7, _) => {
                        return Err(Error::UnsupportedType(
                            "an optional sparse tensor, map or optional".into(),
                        ))
                    }
                    _ => {}
                }
            }
            Ok(Value::Optional(match held {
                Some(v) => Optional::some(v)?,
                None => Optional::none(kind, dtype),
            }))
        }
    }
}

/// Reads a value file of ONNX's test data sets (see [`value_from_bytes`]).
pub fn read_value_file(path: &Path, kind: Kind, dtype: DType) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    value_from_bytes(&bytes, kind, dtype, path.parent())
        .map_err(|e| naming(e, &path.display().to_string()))
}

fn naming(e: Error, source: &str) -> Error {
    match e {
        Error::Malformed(m) => Error::Malformed(format!("{m} (in {source})")),
        other => other,
    }
}

fn write_err(e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("writing a value: {e}"))
}

fn sequence_to_bytes(s: &Sequence, name: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut os = CodedOutputStream::vec(&mut out);
        if !name.is_empty() {
            os.write_string(1, name).map_err(write_err)?;
        }
        os.write_int32(2, ELEM_TENSOR).map_err(write_err)?;
        for t in s.items() {
            let b = tensor_to_proto(t, "").write_to_bytes().map_err(write_err)?;
            os.write_bytes(3, &b).map_err(write_err)?;
        }
        os.flush().map_err(write_err)?;
    }
    Ok(out)
}

/// Serializes a value as ONNX stores it: a TensorProto, a SequenceProto or
/// an OptionalProto named `name`.
pub fn value_to_bytes(v: &Value, name: &str) -> Result<Vec<u8>> {
    match v {
        Value::Tensor(t) => tensor_to_proto(t, name).write_to_bytes().map_err(write_err),
        Value::Sequence(s) => sequence_to_bytes(s, name),
        Value::Optional(o) => {
            let mut out = Vec::new();
            {
                let mut os = CodedOutputStream::vec(&mut out);
                if !name.is_empty() {
                    os.write_string(1, name).map_err(write_err)?;
                }
                let elem = if o.kind() == Kind::Sequence {
                    ELEM_SEQUENCE
                } else {
                    ELEM_TENSOR
                };
                os.write_int32(2, elem).map_err(write_err)?;
                match o.value() {
                    Some(Value::Tensor(t)) => {
                        let b = tensor_to_proto(t, "").write_to_bytes().map_err(write_err)?;
                        os.write_bytes(3, &b).map_err(write_err)?;
                    }
                    Some(Value::Sequence(s)) => {
                        os.write_bytes(5, &sequence_to_bytes(s, "")?)
                            .map_err(write_err)?;
                    }
                    Some(Value::Optional(_)) => {
                        return Err(Error::UnsupportedType(format!(
                            "an optional of optionals (elem_type {ELEM_OPTIONAL})"
                        )))
                    }
                    None => {}
                }
                os.flush().map_err(write_err)?;
            }
            Ok(out)
        }
    }
}

/// Writes a value file as ONNX's test data sets store it.
pub fn write_value_file(path: &Path, v: &Value, name: &str) -> Result<()> {
    std::fs::write(path, value_to_bytes(v, name)?).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn t(v: Vec<f32>) -> Arc<Tensor> {
        Arc::new(Tensor::from_vec(&[v.len()], v).unwrap())
    }

    #[test]
    fn sequences_and_optionals_round_trip() {
        let seq = Sequence::new(DType::F32, vec![t(vec![1.0, 2.0]), t(vec![3.0])]).unwrap();
        let cases = [
            (Value::Sequence(seq.clone()), Kind::Sequence),
            (Value::Sequence(Sequence::empty(DType::I64)), Kind::Sequence),
            (
                Value::Optional(Optional::some(Value::Sequence(seq)).unwrap()),
                Kind::OptionalSequence,
            ),
            (
                Value::Optional(Optional::some(Value::Tensor(t(vec![5.0]))).unwrap()),
                Kind::OptionalTensor,
            ),
            (
                Value::Optional(Optional::none(Kind::Tensor, DType::I64)),
                Kind::OptionalTensor,
            ),
            (Value::Tensor(t(vec![7.0])), Kind::Tensor),
        ];
        for (v, kind) in cases {
            let bytes = value_to_bytes(&v, "x").unwrap();
            let back = value_from_bytes(&bytes, kind, v.dtype(), None).unwrap();
            assert_eq!(back, v);
        }
    }

    #[test]
    fn garbage_is_a_typed_error() {
        let bad = [0x1a, 0x05, 0x01];
        assert!(value_from_bytes(&bad, Kind::Sequence, DType::F32, None).is_err());
        assert!(value_from_bytes(&[0x2a, 0x00], Kind::Sequence, DType::F32, None).is_err());
    }
}
