//! Unit tests of the sequence family, beyond ONNX's node cases: positions
//! from either end and out of range, empty sequences, mismatched element
//! types, SplitToSequence's forms and ConcatFromSequence with a new axis.

use crate::error::Error;
use crate::ir::attributes::Attribute;
use crate::ir::{Fact, InferInput, Kind, Operator, Optional, Sequence, Value};
use crate::ops::testutil::{build_op, int};
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

fn op(name: &str, attrs: &[(&str, Attribute)], inputs: usize) -> Box<dyn Operator> {
    build_op(name, 18, attrs, &[], inputs, 1).unwrap()
}

fn run(o: &dyn Operator, inputs: &[Option<&Value>]) -> crate::error::Result<Value> {
    let mut outs = o.run_values(inputs)?;
    assert_eq!(outs.len(), 1);
    Ok(outs.remove(0))
}

fn vec_f32(shape: &[usize], v: Vec<f32>) -> Value {
    Tensor::from_vec(shape, v).unwrap().into()
}

fn seq(items: &[&Value]) -> Value {
    let items: Vec<Arc<Tensor>> = items.iter().map(|v| v.tensor().unwrap().clone()).collect();
    Sequence::new(items[0].dtype(), items).unwrap().into()
}

fn scalar(v: i64) -> Value {
    Tensor::scalar(v).into()
}

fn items(v: &Value) -> Vec<Vec<f64>> {
    v.as_sequence("test")
        .unwrap()
        .items()
        .iter()
        .map(|t| t.to_f64_vec().unwrap())
        .collect()
}

#[test]
fn insert_at_erase_length_with_negative_positions() {
    let (a, b, c) = (
        vec_f32(&[1], vec![1.0]),
        vec_f32(&[2], vec![2.0, 2.0]),
        vec_f32(&[1], vec![3.0]),
    );
    let s = run(&*op("SequenceConstruct", &[], 2), &[Some(&a), Some(&b)]).unwrap();
    let insert = op("SequenceInsert", &[], 3);
    let s = run(&*insert, &[Some(&s), Some(&c), Some(&scalar(-1))]).unwrap();
    assert_eq!(items(&s), vec![vec![1.0], vec![3.0], vec![2.0, 2.0]]);
    let s = run(&*insert, &[Some(&s), Some(&c), None]).unwrap();
    assert_eq!(items(&s).len(), 4);
    let at = op("SequenceAt", &[], 2);
    let last = run(&*at, &[Some(&s), Some(&scalar(-2))]).unwrap();
    assert_eq!(last, b);
    let i32_pos: Value = Tensor::scalar(0i32).into();
    assert_eq!(run(&*at, &[Some(&s), Some(&i32_pos)]).unwrap(), a);
    for bad in [4, -5] {
        assert!(run(&*at, &[Some(&s), Some(&scalar(bad))]).is_err());
        assert!(run(&*insert, &[Some(&s), Some(&c), Some(&scalar(bad * 2))]).is_err());
    }
    let erase = op("SequenceErase", &[], 1);
    let s = run(&*erase, &[Some(&s)]).unwrap();
    assert_eq!(items(&s).len(), 3);
    let s = run(&*erase, &[Some(&s), Some(&scalar(-3))]).unwrap();
    assert_eq!(items(&s), vec![vec![3.0], vec![2.0, 2.0]]);
    let length = op("SequenceLength", &[], 1);
    assert_eq!(run(&*length, &[Some(&s)]).unwrap(), scalar(2));
}

#[test]
fn empty_sequences() {
    let empty = run(&*op("SequenceEmpty", &[("dtype", int(7))], 0), &[]).unwrap();
    assert_eq!(empty.kind(), Kind::Sequence);
    assert_eq!(empty.dtype(), DType::I64);
    let length = op("SequenceLength", &[], 1);
    assert_eq!(run(&*length, &[Some(&empty)]).unwrap(), scalar(0));
    assert!(run(
        &*op("SequenceAt", &[], 2),
        &[Some(&empty), Some(&scalar(0))]
    )
    .is_err());
    assert!(run(&*op("SequenceErase", &[], 1), &[Some(&empty)]).is_err());
    let concat = op("ConcatFromSequence", &[("axis", int(0))], 1);
    assert!(run(&*concat, &[Some(&empty)]).is_err());
    // Inserting at 0 into an empty sequence is allowed.
    let s = run(
        &*op("SequenceInsert", &[], 3),
        &[Some(&empty), Some(&scalar(5)), Some(&scalar(0))],
    )
    .unwrap();
    assert_eq!(items(&s), vec![vec![5.0]]);
}

#[test]
fn mismatched_element_types_are_typed_errors() {
    let f = vec_f32(&[1], vec![1.0]);
    let i = scalar(1);
    let construct = op("SequenceConstruct", &[], 2);
    assert!(matches!(
        run(&*construct, &[Some(&f), Some(&i)]),
        Err(Error::Op { .. })
    ));
    let s = seq(&[&f]);
    assert!(run(&*op("SequenceInsert", &[], 2), &[Some(&s), Some(&i)]).is_err());
    // A tensor where a sequence is needed, and the other way round.
    assert!(matches!(
        run(&*op("SequenceLength", &[], 1), &[Some(&f)]),
        Err(Error::ValueKind { .. })
    ));
    let relu = op("Relu", &[], 1);
    assert!(matches!(
        relu.run_values(&[Some(&s)]),
        Err(Error::ValueKind { .. })
    ));
    // Shape inference says the same before running.
    let (sf, ff) = (Fact::of_value(&s), Fact::of_value(&i));
    let facts = [
        InferInput {
            fact: Some(&sf),
            value: None,
        },
        InferInput {
            fact: Some(&ff),
            value: None,
        },
    ];
    assert!(op("SequenceInsert", &[], 2).infer(&facts).is_err());
    assert!(op("SequenceAt", &[], 2).infer(&facts[1..]).is_err());
}

#[test]
fn split_to_sequence_forms() {
    let x = vec_f32(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // No split: pieces of one along the axis; keepdims=0 drops the axis.
    let s = run(&*op("SplitToSequence", &[("axis", int(1))], 1), &[Some(&x)]).unwrap();
    let s = s.as_sequence("t").unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s.items()[0].shape(), &[3, 1]);
    let flat = op(
        "SplitToSequence",
        &[("axis", int(-1)), ("keepdims", int(0))],
        1,
    );
    let s = run(&*flat, &[Some(&x)]).unwrap();
    assert_eq!(items(&s), vec![vec![1.0, 3.0, 5.0], vec![2.0, 4.0, 6.0]]);
    assert_eq!(s.as_sequence("t").unwrap().items()[0].shape(), &[3]);
    // A scalar split: chunks, the last shorter (keepdims is then ignored).
    let chunks = op(
        "SplitToSequence",
        &[("axis", int(0)), ("keepdims", int(0))],
        2,
    );
    let s = run(&*chunks, &[Some(&x), Some(&scalar(2))]).unwrap();
    let shapes: Vec<Vec<usize>> = s
        .as_sequence("t")
        .unwrap()
        .items()
        .iter()
        .map(|t| t.shape().to_vec())
        .collect();
    assert_eq!(shapes, vec![vec![2, 2], vec![1, 2]]);
    // A list of lengths, which must add up to the axis.
    let lengths: Value = Tensor::from_vec(&[2], vec![1i64, 2]).unwrap().into();
    let s = run(&*chunks, &[Some(&x), Some(&lengths)]).unwrap();
    assert_eq!(items(&s), vec![vec![1.0, 2.0], vec![3.0, 4.0, 5.0, 6.0]]);
    let wrong: Value = Tensor::from_vec(&[2], vec![1i64, 1]).unwrap().into();
    assert!(run(&*chunks, &[Some(&x), Some(&wrong)]).is_err());
    assert!(run(&*chunks, &[Some(&x), Some(&scalar(0))]).is_err());
    let bad_axis = op("SplitToSequence", &[("axis", int(2))], 1);
    assert!(run(&*bad_axis, &[Some(&x)]).is_err());
}

#[test]
fn concat_from_sequence_on_an_existing_or_a_new_axis() {
    let a = vec_f32(&[2], vec![1.0, 2.0]);
    let b = vec_f32(&[2], vec![3.0, 4.0]);
    let s = seq(&[&a, &b]);
    let cat = op("ConcatFromSequence", &[("axis", int(0))], 1);
    assert_eq!(
        run(&*cat, &[Some(&s)]).unwrap(),
        vec_f32(&[4], vec![1.0, 2.0, 3.0, 4.0])
    );
    let stack = |axis| {
        op(
            "ConcatFromSequence",
            &[("axis", int(axis)), ("new_axis", int(1))],
            1,
        )
    };
    assert_eq!(
        run(&*stack(1), &[Some(&s)]).unwrap(),
        vec_f32(&[2, 2], vec![1.0, 3.0, 2.0, 4.0])
    );
    assert_eq!(
        run(&*stack(-1), &[Some(&s)]).unwrap(),
        vec_f32(&[2, 2], vec![1.0, 3.0, 2.0, 4.0])
    );
    assert_eq!(
        run(&*stack(0), &[Some(&s)]).unwrap(),
        vec_f32(&[2, 2], vec![1.0, 2.0, 3.0, 4.0])
    );
    assert!(run(&*stack(2), &[Some(&s)]).is_err());
    // Shapes that do not fit.
    let c = vec_f32(&[3], vec![0.0; 3]);
    let uneven = seq(&[&a, &c]);
    assert_eq!(
        run(&*cat, &[Some(&uneven)])
            .unwrap()
            .tensor()
            .unwrap()
            .len(),
        5
    );
    assert!(run(&*stack(0), &[Some(&uneven)]).is_err());
    let scalars = seq(&[&scalar(1), &scalar(2)]);
    assert!(run(&*cat, &[Some(&scalars)]).is_err());
    assert_eq!(
        run(&*stack(0), &[Some(&scalars)]).unwrap(),
        Tensor::from_vec(&[2], vec![1i64, 2]).unwrap().into()
    );
}

#[test]
fn optionals() {
    let t = vec_f32(&[1], vec![1.0]);
    let wrap = op("Optional", &[], 1);
    let o = run(&*wrap, &[Some(&t)]).unwrap();
    assert_eq!(o.kind(), Kind::OptionalTensor);
    let has = op("OptionalHasElement", &[], 1);
    let get = op("OptionalGetElement", &[], 1);
    let yes: Value = Tensor::scalar(true).into();
    let no: Value = Tensor::scalar(false).into();
    assert_eq!(run(&*has, &[Some(&o)]).unwrap(), yes);
    assert_eq!(run(&*has, &[Some(&t)]).unwrap(), yes);
    assert_eq!(run(&*has, &[None]).unwrap(), no);
    assert_eq!(run(&*get, &[Some(&o)]).unwrap(), t);
    assert_eq!(run(&*get, &[Some(&t)]).unwrap(), t);
    let none: Value = Optional::none(Kind::Sequence, DType::F32).into();
    assert_eq!(run(&*has, &[Some(&none)]).unwrap(), no);
    assert!(run(&*get, &[Some(&none)]).is_err());
    // An optional of an optional is refused.
    assert!(run(&*wrap, &[Some(&o)]).is_err());
    // Without an input, the type attribute says what is absent.
    let typed = op(
        "Optional",
        &[("type", Attribute::Type(Kind::Sequence, DType::I64))],
        0,
    );
    let empty = run(&*typed, &[]).unwrap();
    assert_eq!(empty.kind(), Kind::OptionalSequence);
    assert!(build_op("Optional", 18, &[], &[], 0, 1).is_err());
}

#[test]
fn sequence_operators_are_never_folded() {
    // All inputs constant (SequenceEmpty has none), yet the output is a
    // sequence: run_via_values refuses to give it as a tensor.
    let empty = op("SequenceEmpty", &[], 0);
    assert!(empty.uses_values());
    assert!(matches!(empty.run(&[]), Err(Error::ValueKind { .. })));
}
