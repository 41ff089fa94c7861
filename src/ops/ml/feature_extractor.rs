//! ArrayFeatureExtractor (ai.onnx.ml opset 1): picks elements along the last
//! axis of X at the int64 indices Y (Y of any shape, read flattened). The
//! output is X's shape with the last axis replaced by the number of indices;
//! a 1-D X gives a `[1, k]` output, as onnxruntime and ONNX's reference do.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, out_len};
use crate::tensor::{budget, DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const OP: &str = "ArrayFeatureExtractor";

#[derive(Debug)]
struct ArrayFeatureExtractor;

pub(super) fn build(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(ArrayFeatureExtractor))
}

fn check_type(t: DType) -> Result<()> {
    match t {
        DType::F32 | DType::F64 | DType::I64 | DType::I32 | DType::String => Ok(()),
        other => Err(Error::op(
            OP,
            format!("X must be float, double, int64, int32 or string, found {other}"),
        )),
    }
}

fn out_shape(x: &[usize], k: usize) -> Result<Vec<usize>> {
    match x {
        [] => Err(Error::op(OP, "X must have at least one axis")),
        [_] => Ok(vec![1, k]),
        [outer @ .., _] => Ok(outer.iter().copied().chain([k]).collect()),
    }
}

/// The elements of `x` (standard layout, last axis `n`) at `idx` in each row.
fn gather<T: Clone>(x: &ArrayD<T>, idx: &[usize], shape: &[usize]) -> Result<ArrayD<T>> {
    let n = x.shape().last().copied().unwrap_or(1);
    let x = x.as_standard_layout();
    let data = x.as_slice().unwrap_or(&[]);
    let out: Vec<T> = data
        .chunks(n.max(1))
        .flat_map(|row| idx.iter().map(move |&i| row[i].clone()))
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), out).map_err(|e| Error::op(OP, format!("internal: {e}")))
}

impl Operator for ArrayFeatureExtractor {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let y = fact(OP, inputs, 1)?;
        check_type(x.dtype)?;
        if y.dtype != DType::I64 {
            return Err(Error::op(OP, format!("Y must be int64, found {}", y.dtype)));
        }
        Ok(vec![match (&x.shape, y.len()) {
            (Some(s), Some(k)) => Fact::new(x.dtype, out_shape(s, k)?),
            _ => Fact::unknown_shape(x.dtype),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let y = input(OP, inputs, 1)?;
        check_type(x.dtype())?;
        let Tensor::I64(y) = y else {
            return Err(Error::op(
                OP,
                format!("Y must be int64, found {}", y.dtype()),
            ));
        };
        let n = x.shape().last().copied().unwrap_or(0);
        let idx = y
            .iter()
            .map(|&i| {
                usize::try_from(i).ok().filter(|&i| i < n).ok_or_else(|| {
                    Error::op(
                        OP,
                        format!("index {i} is out of range for a last axis of {n}"),
                    )
                })
            })
            .collect::<Result<Vec<usize>>>()?;
        let shape = out_shape(x.shape(), idx.len())?;
        budget::check("ArrayFeatureExtractor output", x.dtype(), &shape)?;
        let out = match x {
            Tensor::F32(a) => Tensor::F32(gather(a, &idx, &shape)?),
            Tensor::F64(a) => Tensor::F64(gather(a, &idx, &shape)?),
            Tensor::I64(a) => Tensor::I64(gather(a, &idx, &shape)?),
            Tensor::I32(a) => Tensor::I32(gather(a, &idx, &shape)?),
            Tensor::String(a) => Tensor::String(gather(a, &idx, &shape)?),
            other => {
                return Err(Error::op(
                    OP,
                    format!("unsupported X type {}", other.dtype()),
                ))
            }
        };
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::build_ml;
    use crate::ops::testutil::infer_and_run;
    use crate::tensor::Tensor;

    fn extract(x: &Tensor, idx: &[usize], y: Vec<i64>) -> crate::Result<Tensor> {
        let op = build_ml("ArrayFeatureExtractor", 1, &[], 2)?;
        let y = Tensor::from_vec(idx, y).unwrap();
        Ok(infer_and_run(op.as_ref(), &[Some(x), Some(&y)])?.remove(0))
    }

    #[test]
    fn picks_along_the_last_axis() {
        let x = Tensor::from_vec(&[2, 1, 3], (0..6).map(|v| v as f32).collect()).unwrap();
        let y = extract(&x, &[3], vec![2, 0, 2]).unwrap();
        assert_eq!(y.shape(), &[2, 1, 3]);
        assert_eq!(y.to_f64_vec().unwrap(), [2., 0., 2., 5., 3., 5.]);
        // Indices of shape [1, 2] are read flattened.
        let y = extract(&x, &[1, 2], vec![1, 1]).unwrap();
        assert_eq!(y.to_f64_vec().unwrap(), [1., 1., 4., 4.]);
    }

    #[test]
    fn vectors_strings_and_no_indices() {
        let x = Tensor::from_vec(&[3], vec!["a".to_string(), "b".into(), "c".into()]).unwrap();
        let y = extract(&x, &[2], vec![2, 0]).unwrap();
        assert_eq!(
            y,
            Tensor::from_vec(&[1, 2], vec!["c".to_string(), "a".into()]).unwrap()
        );
        let x = Tensor::from_vec(&[2, 2], vec![1i32, 2, 3, 4]).unwrap();
        assert_eq!(extract(&x, &[0], vec![]).unwrap().shape(), &[2, 0]);
    }

    #[test]
    fn refuses_bad_indices_and_types() {
        let x = Tensor::from_vec(&[2, 2], vec![1i64, 2, 3, 4]).unwrap();
        assert!(extract(&x, &[1], vec![2])
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert!(extract(&x, &[1], vec![-1]).is_err());
        let b = Tensor::from_vec(&[2], vec![true, false]).unwrap();
        assert!(extract(&b, &[1], vec![0]).is_err());
        let s = Tensor::scalar(1f32);
        assert!(extract(&s, &[1], vec![0]).is_err());
    }
}
