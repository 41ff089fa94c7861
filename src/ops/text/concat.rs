//! StringConcat (opset 20): the elementwise concatenation of two string
//! tensors, with numpy-style broadcasting.

use super::{fact_len, string_fact, string_flops, strings};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{broadcast_shapes, input};
use crate::tensor::{budget, DType, Tensor};
use ndarray::{IxDyn, Zip};

const OP: &str = "StringConcat";

#[derive(Debug)]
struct StringConcat;

pub(super) fn build(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(StringConcat))
}

impl Operator for StringConcat {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let a = string_fact(OP, inputs, 0, "X")?;
        let b = string_fact(OP, inputs, 1, "Y")?;
        Ok(vec![match (&a.shape, &b.shape) {
            (Some(sa), Some(sb)) => Fact::new(DType::String, broadcast_shapes(OP, sa, sb)?),
            _ => Fact::unknown_shape(DType::String),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let n = outputs
            .first()
            .and_then(|f| f.len())
            .unwrap_or_else(|| fact_len(inputs, 0).max(fact_len(inputs, 1)));
        2 * string_flops(n)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let a = strings(OP, "X", input(OP, inputs, 0)?)?;
        let b = strings(OP, "Y", input(OP, inputs, 1)?)?;
        let shape = broadcast_shapes(OP, a.shape(), b.shape())?;
        budget::check("StringConcat output", DType::String, &shape)?;
        let shape = IxDyn(&shape);
        let internal = || Error::op(OP, "internal: broadcast failed");
        let (a, b) = (
            a.broadcast(shape.clone()).ok_or_else(internal)?,
            b.broadcast(shape).ok_or_else(internal)?,
        );
        let out = Zip::from(&a).and(&b).map_collect(|x, y| {
            let mut s = String::with_capacity(x.len() + y.len());
            s.push_str(x);
            s.push_str(y);
            s
        });
        Ok(vec![Tensor::String(out)])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::{build_op, infer_and_run};
    use crate::tensor::Tensor;

    fn strs(shape: &[usize], v: &[&str]) -> Tensor {
        Tensor::from_vec(shape, v.iter().map(|s| s.to_string()).collect()).unwrap()
    }

    fn concat(a: &Tensor, b: &Tensor) -> crate::Result<Tensor> {
        let op = build_op("StringConcat", 20, &[], &[], 2, 1)?;
        Ok(infer_and_run(op.as_ref(), &[Some(a), Some(b)])?.remove(0))
    }

    #[test]
    fn broadcasts_both_ways() {
        // [2,1] with [3]: every pair, row-major.
        let a = strs(&[2, 1], &["a", "b"]);
        let b = strs(&[3], &["x", "", "zz"]);
        let y = concat(&a, &b).unwrap();
        assert_eq!(y, strs(&[2, 3], &["ax", "a", "azz", "bx", "b", "bzz"]));
        let y = concat(&b, &a).unwrap();
        assert_eq!(y, strs(&[2, 3], &["xa", "a", "zza", "xb", "b", "zzb"]));
    }

    #[test]
    fn scalars_empty_tensors_and_utf8() {
        let y = concat(&strs(&[], &["é"]), &strs(&[], &["中"])).unwrap();
        assert_eq!(y, strs(&[], &["é中"]));
        let y = concat(&strs(&[0, 2], &[]), &strs(&[2], &["a", "b"])).unwrap();
        assert_eq!(y.shape(), &[0, 2]);
    }

    #[test]
    fn refuses_mismatched_shapes_and_numbers() {
        let e = concat(&strs(&[2], &["a", "b"]), &strs(&[3], &["a", "b", "c"])).unwrap_err();
        assert!(e.to_string().contains("broadcast"), "{e}");
        let n = Tensor::from_vec(&[1], vec![1f32]).unwrap();
        let e = concat(&strs(&[1], &["a"]), &n).unwrap_err();
        assert!(e.to_string().contains("string"), "{e}");
    }
}
