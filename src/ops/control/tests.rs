//! Unit tests of the control-flow tensor helpers.

use super::tensors::{stack, take, truth};
use crate::tensor::Tensor;

#[test]
fn stack_and_take_round_trip() {
    let a = Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
    let b = Tensor::from_vec(&[2], vec![3.0f32, 4.0]).unwrap();
    let s = stack("t", &[a.clone(), b.clone()], 1).unwrap();
    assert_eq!(s.shape(), &[2, 2]);
    assert_eq!(s.to_f64_vec().unwrap(), vec![1.0, 3.0, 2.0, 4.0]);
    assert_eq!(take(&s, 1, 1), b);
    let c = Tensor::from_vec(&[3], vec![0.0f32; 3]).unwrap();
    assert!(stack("t", &[a, c], 0).is_err());
}

#[test]
fn truth_reads_one_element() {
    assert!(truth("t", &Tensor::scalar(true)).unwrap());
    assert!(!truth("t", &Tensor::scalar(0i64)).unwrap());
    assert!(truth("t", &Tensor::from_vec(&[2], vec![true, true]).unwrap()).is_err());
}
