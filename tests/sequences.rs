//! Sequence and optional values through the public API, on models built in
//! code: a tensor split into a sequence and read back, a sequence graph
//! input and output, and the typed errors of the tensor-only entry points.

mod common;

use common::{graph, int64_init, int_attr, model, node, value_info};
use onnx_protobuf::type_proto::{Sequence as TypeSequence, Value as TypeValue};
use onnx_protobuf::{Message, TypeProto, ValueInfoProto};
use ramify::{DType, Error, Sequence, Session, Tensor, Value, ValueKind};
use std::sync::Arc;

const FLOAT: i32 = 1;
const INT64: i32 = 7;

/// A value info of a sequence of `elem_type` tensors.
fn sequence_info(name: &str, elem_type: i32) -> ValueInfoProto {
    let elem = value_info(name, elem_type, &[]);
    let mut s = TypeSequence::new();
    s.elem_type = elem.type_.clone();
    let mut tp = TypeProto::new();
    tp.value = Some(TypeValue::SequenceType(s));
    let mut vi = ValueInfoProto::new();
    vi.name = name.into();
    vi.type_ = Some(tp).into();
    vi
}

/// x[3, 2] → SplitToSequence(axis 0, keepdims 0) → seq (an output too);
/// SequenceLength(seq) → n; SequenceAt(seq, -1) → last;
/// ConcatFromSequence(seq, axis 1, new_axis) → stacked[2, 3].
fn split_model() -> Session {
    let mut split = node("SplitToSequence", &["x"], &["seq"]);
    split.attribute.push(int_attr("axis", 0));
    split.attribute.push(int_attr("keepdims", 0));
    let mut concat = node("ConcatFromSequence", &["seq"], &["stacked"]);
    concat.attribute.push(int_attr("axis", 1));
    concat.attribute.push(int_attr("new_axis", 1));
    let g = graph(
        vec![
            split,
            node("SequenceLength", &["seq"], &["n"]),
            node("SequenceAt", &["seq", "minus_one"], &["last"]),
            concat,
        ],
        vec![value_info("x", FLOAT, &[3, 2])],
        vec![
            sequence_info("seq", FLOAT),
            value_info("n", INT64, &[]),
            value_info("last", FLOAT, &[2]),
            value_info("stacked", FLOAT, &[2, 3]),
        ],
        vec![int64_init("minus_one", -1)],
    );
    let bytes = model(g, 18).write_to_bytes().unwrap();
    Session::from_bytes(&bytes).unwrap()
}

fn x() -> Tensor {
    Tensor::from_vec(&[3, 2], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap()
}

#[test]
fn a_split_sequence_reads_back() {
    let s = split_model();
    assert_eq!(
        s.outputs()[0].declared.as_ref().map(|d| d.kind),
        Some(ValueKind::Sequence)
    );
    let out = s.run_values([("x", Value::from(x()))]).unwrap();
    let seq = out[0].1.as_sequence("seq").unwrap();
    assert_eq!(seq.len(), 3);
    assert_eq!(seq.items()[1].shape(), &[2]);
    assert_eq!(out[1].1, Value::from(Tensor::scalar(3i64)));
    assert_eq!(
        out[2].1,
        Value::from(Tensor::from_vec(&[2], vec![5.0f32, 6.0]).unwrap())
    );
    let stacked = out[3].1.tensor().unwrap();
    assert_eq!(stacked.shape(), &[2, 3]);
    assert_eq!(
        stacked.to_f64_vec().unwrap(),
        vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]
    );
}

#[test]
fn tensor_entry_points_refuse_a_sequence_output() {
    let s = split_model();
    match s.run([("x", x())]) {
        Err(Error::ValueKind { what, actual, .. }) => {
            assert!(
                what.contains("seq") && actual == "sequence",
                "{what} {actual}"
            );
        }
        other => panic!("expected a ValueKind error, got {other:?}"),
    }
}

/// seq (a sequence input) → SequenceInsert(seq, t) → out (a sequence).
fn insert_model() -> Session {
    let g = graph(
        vec![node("SequenceInsert", &["seq", "t"], &["out"])],
        vec![sequence_info("seq", FLOAT), value_info("t", FLOAT, &[1])],
        vec![sequence_info("out", FLOAT)],
        vec![],
    );
    Session::from_bytes(&model(g, 18).write_to_bytes().unwrap()).unwrap()
}

#[test]
fn a_sequence_input_is_checked_and_runs() {
    let s = insert_model();
    let t = || Tensor::from_vec(&[1], vec![7.0f32]).unwrap();
    let seq = Sequence::new(DType::F32, vec![Arc::new(t())]).unwrap();
    let out = s
        .run_values([("seq", Value::from(seq)), ("t", Value::from(t()))])
        .unwrap();
    assert_eq!(out[0].1.as_sequence("out").unwrap().len(), 2);
    // A tensor where the model declares a sequence.
    assert!(matches!(
        s.run([("seq", t()), ("t", t())]),
        Err(Error::ValueKind { .. })
    ));
    // A sequence of another element type.
    let ints = Sequence::empty(DType::I64);
    assert!(matches!(
        s.run_values([("seq", Value::from(ints)), ("t", Value::from(t()))]),
        Err(Error::InputType { .. })
    ));
    // A tensor of another type inserted into the sequence.
    let empty = Sequence::empty(DType::F32);
    let wrong = Tensor::from_vec(&[1], vec![1i64]).unwrap();
    assert!(s
        .run_values([("seq", Value::from(empty)), ("t", Value::from(wrong))])
        .is_err());
}

#[test]
fn a_sequence_of_constants_is_not_folded_away() {
    // SequenceEmpty has no inputs (all constant), yet its sequence stays in
    // the graph; SequenceLength then reads it.
    let mut empty = node("SequenceEmpty", &[], &["e"]);
    empty.attribute.push(int_attr("dtype", i64::from(INT64)));
    let g = graph(
        vec![empty, node("SequenceLength", &["e"], &["n"])],
        vec![],
        vec![value_info("n", INT64, &[])],
        vec![],
    );
    let s = Session::from_bytes(&model(g, 18).write_to_bytes().unwrap()).unwrap();
    let out = s.run(Vec::<(&str, Tensor)>::new()).unwrap();
    assert_eq!(out[0].1, Tensor::scalar(0i64));
}
