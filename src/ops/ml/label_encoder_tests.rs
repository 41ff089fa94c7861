//! LabelEncoder tests: each opset's attributes, NaN and repeated keys,
//! defaults, empty inputs and refusals, against hand-computed tables.

use super::super::testutil::{build_ml, strings};
use crate::ir::attributes::Attribute;
use crate::ops::testutil::{infer_and_run, int, ints, string};
use crate::tensor::Tensor;

fn encode(opset: i64, attrs: &[(&str, Attribute)], x: &Tensor) -> crate::Result<Tensor> {
    let op = build_ml("LabelEncoder", opset, attrs, 1)?;
    Ok(infer_and_run(op.as_ref(), &[Some(x)])?.remove(0))
}

fn strs(v: &[&str]) -> Tensor {
    Tensor::from_vec(&[v.len()], v.iter().map(|s| s.to_string()).collect()).unwrap()
}

#[test]
fn opset1_maps_both_ways() {
    let attrs = [
        ("classes_strings", strings(&["a", "b", "a"])),
        ("default_int64", int(9)),
    ];
    // First occurrence wins; misses take default_int64.
    let y = encode(1, &attrs, &strs(&["b", "a", "z"])).unwrap();
    assert_eq!(y, Tensor::from_vec(&[3], vec![1i64, 0, 9]).unwrap());
    let x = Tensor::from_vec(&[2, 2], vec![0i64, 2, 3, -1]).unwrap();
    let y = encode(1, &attrs, &x).unwrap();
    let want: Vec<String> = ["a", "a", "_Unused", "_Unused"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(y, Tensor::from_vec(&[2, 2], want).unwrap());
}

#[test]
fn opset2_lists_last_key_wins_and_nan_matches() {
    let attrs = [
        (
            "keys_floats",
            Attribute::Floats(vec![1.0, f32::NAN, 1.0, 0.0]),
        ),
        ("values_strings", strings(&["one", "nan", "uno", "zero"])),
        ("default_string", string("?")),
    ];
    let x = Tensor::from_vec(&[5], vec![1f32, -f32::NAN, 2., -0.0, 0.0]).unwrap();
    let y = encode(2, &attrs, &x).unwrap();
    let want: Vec<String> = ["uno", "nan", "?", "zero", "zero"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(y, Tensor::from_vec(&[5], want).unwrap());
    // Default float is -0.0 when not given.
    let attrs = [
        ("keys_int64s", ints(&[5])),
        ("values_floats", Attribute::Floats(vec![2.5])),
    ];
    let x = Tensor::from_vec(&[2], vec![5i64, 6]).unwrap();
    let y = encode(2, &attrs, &x).unwrap().to_f64_vec().unwrap();
    assert_eq!(y[0], 2.5);
    assert!(y[1] == 0.0 && y[1].is_sign_negative());
}

#[test]
fn opset4_tensors_and_defaults() {
    let keys = Tensor::from_vec(&[3], vec![10i32, 20, 30]).unwrap();
    let values = Tensor::from_vec(&[3], vec![1.5f64, 2.5, 3.5]).unwrap();
    let attrs = [
        ("keys_tensor", Attribute::Tensor(keys.clone())),
        ("values_tensor", Attribute::Tensor(values.clone())),
    ];
    let x = Tensor::from_vec(&[2, 2], vec![30i32, 11, 10, 20]).unwrap();
    let y = encode(4, &attrs, &x).unwrap().to_f64_vec().unwrap();
    assert_eq!(&y[..1], &[3.5]);
    assert!(y[1] == 0.0 && y[1].is_sign_negative());
    assert_eq!(&y[2..], &[1.5, 2.5]);
    let mut with_default = attrs.to_vec();
    with_default.push((
        "default_tensor",
        Attribute::Tensor(Tensor::from_vec(&[1], vec![7f64]).unwrap()),
    ));
    let y = encode(4, &with_default, &x).unwrap();
    assert_eq!(y.to_f64_vec().unwrap(), [3.5, 7., 1.5, 2.5]);
    // Empty input keeps its shape.
    let e = Tensor::from_vec(&[0, 4], Vec::<i32>::new()).unwrap();
    assert_eq!(encode(4, &attrs, &e).unwrap().shape(), &[0, 4]);
    // Integer values default to -1.
    let attrs = [
        ("keys_strings", strings(&["x"])),
        (
            "values_tensor",
            Attribute::Tensor(Tensor::from_vec(&[1], vec![4i16]).unwrap()),
        ),
    ];
    let y = encode(4, &attrs, &strs(&["x", "y"])).unwrap();
    assert_eq!(y, Tensor::from_vec(&[2], vec![4i16, -1]).unwrap());
}

#[test]
fn refusals() {
    let x = strs(&["a"]);
    // No keys, two keys attributes, length mismatch.
    assert!(encode(2, &[("values_int64s", ints(&[1]))], &x).is_err());
    let two = [
        ("keys_strings", strings(&["a"])),
        ("keys_int64s", ints(&[1])),
        ("values_int64s", ints(&[1])),
    ];
    assert!(encode(2, &two, &x).is_err());
    let short = [
        ("keys_strings", strings(&["a", "b"])),
        ("values_int64s", ints(&[1])),
    ];
    assert!(encode(2, &short, &x)
        .unwrap_err()
        .to_string()
        .contains("2 keys but 1 values"));
    // Tensors before opset 4; a default of the wrong type; a wrong input type.
    let t = [
        ("keys_tensor", Attribute::Tensor(strs(&["a"]))),
        ("values_int64s", ints(&[1])),
    ];
    assert!(encode(2, &t, &x).is_err());
    let bad_default = [
        ("keys_strings", strings(&["a"])),
        ("values_int64s", ints(&[1])),
        ("default_tensor", Attribute::Tensor(Tensor::scalar(1f32))),
    ];
    assert!(encode(4, &bad_default, &x).is_err());
    let ok = [
        ("keys_strings", strings(&["a"])),
        ("values_int64s", ints(&[1])),
        ("default_int64", int(0)),
    ];
    let n = Tensor::from_vec(&[1], vec![1i64]).unwrap();
    assert!(encode(4, &ok, &n)
        .unwrap_err()
        .to_string()
        .contains("input must be string"));
}

#[test]
fn lives_in_the_ml_domain_only() {
    assert!(crate::ops::is_supported_domain(crate::ops::ML_DOMAIN));
    let attrs = [
        ("keys_strings", strings(&["a"])),
        ("values_int64s", ints(&[1])),
    ];
    assert!(build_ml("LabelEncoder", 2, &attrs, 1).is_ok());
    // Not an operator of the default domain; and opset 5 has TreeEnsemble only from 5.
    let e = crate::ops::testutil::build_op("LabelEncoder", 20, &attrs, &[], 1, 1).unwrap_err();
    assert!(matches!(e, crate::Error::UnsupportedOperator { .. }), "{e}");
    assert!(build_ml("TreeEnsemble", 4, &[], 1).is_err());
}
