//! Binarizer (ai.onnx.ml opset 1): 1 where an element is greater than
//! `threshold`, else 0 (NaN gives 0), in the input's type (float, double,
//! int32 or int64). Integers are compared with the threshold as numbers, not
//! with the threshold truncated to an integer.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::util::{fact, input, out_len};
use crate::tensor::{DType, Tensor};

const OP: &str = "Binarizer";

#[derive(Debug)]
struct Binarizer {
    threshold: f32,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Binarizer {
        threshold: ctx.attrs.float("threshold", 0.0)?,
    }))
}

fn type_error(t: DType) -> Error {
    Error::op(
        OP,
        format!("input must be float, double, int32 or int64, found {t}"),
    )
}

impl Operator for Binarizer {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::I32 | DType::I64) {
            return Err(type_error(x.dtype));
        }
        Ok(vec![x.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let th = f64::from(self.threshold);
        let out = match x {
            Tensor::F32(a) => Tensor::F32(a.mapv(|v| f32::from(u8::from(f64::from(v) > th)))),
            Tensor::F64(a) => Tensor::F64(a.mapv(|v| f64::from(u8::from(v > th)))),
            Tensor::I32(a) => Tensor::I32(a.mapv(|v| i32::from(f64::from(v) > th))),
            Tensor::I64(a) => Tensor::I64(a.mapv(|v| i64::from(v as f64 > th))),
            other => return Err(type_error(other.dtype())),
        };
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::build_ml;
    use crate::ops::testutil::{float, infer_and_run};
    use crate::tensor::Tensor;

    fn binarize(x: &Tensor, threshold: f32) -> crate::Result<Tensor> {
        let op = build_ml("Binarizer", 1, &[("threshold", float(threshold))], 1)?;
        Ok(infer_and_run(op.as_ref(), &[Some(x)])?.remove(0))
    }

    #[test]
    fn greater_than_only() {
        let x = Tensor::from_vec(&[5], vec![-1f32, 0.5, 0.5001, 2., f32::NAN]).unwrap();
        let y = binarize(&x, 0.5).unwrap();
        assert_eq!(y.to_f64_vec().unwrap(), [0., 0., 1., 1., 0.]);
        let x = Tensor::from_vec(&[2, 2], vec![-2f64, -1., 0., 3.]).unwrap();
        assert_eq!(
            binarize(&x, -1.5).unwrap().to_f64_vec().unwrap(),
            [0., 1., 1., 1.]
        );
    }

    #[test]
    fn integers_compare_with_the_float_threshold() {
        let x = Tensor::from_vec(&[4], vec![-2i64, -1, 0, 1]).unwrap();
        let y = binarize(&x, -1.5).unwrap();
        assert_eq!(y, Tensor::from_vec(&[4], vec![0i64, 1, 1, 1]).unwrap());
        let x = Tensor::from_vec(&[0, 3], Vec::<i32>::new()).unwrap();
        assert_eq!(binarize(&x, 0.).unwrap().shape(), &[0, 3]);
    }

    #[test]
    fn refuses_other_types() {
        let x = Tensor::from_vec(&[1], vec![1u8]).unwrap();
        assert!(binarize(&x, 0.).is_err());
    }
}
