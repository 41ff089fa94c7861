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
    assert_eq!(take(&s, 1, 1).unwrap(), b);
    assert_eq!(
        take(&s, 0, 1).unwrap().to_f64_vec().unwrap(),
        vec![2.0, 4.0]
    );
    assert!(take(&s, 2, 0).is_err() && take(&s, 1, 2).is_err());
    // Along axis 0 of three parts of shape [2, 2], and of strings.
    let m = Tensor::from_vec(&[2, 2], vec![1i64, 2, 3, 4]).unwrap();
    let s3 = stack("t", &[m.clone(), m.clone(), m.clone()], 0).unwrap();
    assert_eq!(s3.shape(), &[3, 2, 2]);
    assert_eq!(take(&s3, 0, 2).unwrap(), m);
    let st = Tensor::from_vec(&[2], vec!["x".to_string(), "y".to_string()]).unwrap();
    let ss = stack("t", &[st.clone(), st.clone()], 1).unwrap();
    assert_eq!(take(&ss, 1, 0).unwrap(), st);
    let c = Tensor::from_vec(&[3], vec![0.0f32; 3]).unwrap();
    assert!(stack("t", &[a, c], 0).is_err());
}

#[test]
fn truth_reads_one_element() {
    assert!(truth("t", &Tensor::scalar(true)).unwrap());
    assert!(!truth("t", &Tensor::scalar(0i64)).unwrap());
    assert!(truth("t", &Tensor::from_vec(&[2], vec![true, true]).unwrap()).is_err());
}
