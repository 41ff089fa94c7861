//! Small operators that fit no other family: Constant, whose output is one of
//! its attributes (`value`, and from opset 12 `value_float(s)`,
//! `value_int(s)`, `value_string(s)`; sparse values are refused).

use super::shape::movement_flops;
use super::Registrar;
use crate::error::Result;
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::tensor::Tensor;
use ndarray::Array1;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Constant", 1, build_constant);
}

#[derive(Debug)]
struct Constant {
    value: Tensor,
}

const VALUE_ATTRS: [&str; 8] = [
    "value",
    "sparse_value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
];

fn vector<T: crate::Element>(v: Vec<T>) -> Tensor {
    T::into_tensor(Array1::from_vec(v).into_dyn())
}

fn build_constant(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let present: Vec<&str> = VALUE_ATTRS.iter().copied().filter(|n| a.has(n)).collect();
    let name = match present.as_slice() {
        [one] => *one,
        [] => return Err(a.error("value", "Constant needs one value attribute, found none")),
        many => {
            return Err(a.error(
                many[1],
                format!("Constant needs exactly one value attribute, found {many:?}"),
            ))
        }
    };
    if ctx.opset < 12 && name != "value" && name != "sparse_value" {
        return Err(a.error(
            name,
            format!("not available before opset 12 (model uses {})", ctx.opset),
        ));
    }
    let value = match name {
        "value" => a
            .tensor_opt("value")?
            .cloned()
            .ok_or_else(|| a.error("value", "required but missing"))?,
        "sparse_value" => return Err(a.error("sparse_value", "sparse tensors are not supported")),
        "value_float" => Tensor::scalar(a.float("value_float", 0.0)?),
        "value_floats" => vector(a.floats_opt("value_floats")?.unwrap_or_default()),
        "value_int" => Tensor::scalar(a.int("value_int", 0)?),
        "value_ints" => vector(a.ints_opt("value_ints")?.unwrap_or_default()),
        "value_string" => Tensor::scalar(a.string("value_string", "")?),
        _ => vector(a.strings_opt("value_strings")?.unwrap_or_default()),
    };
    // Constants are stored in standard layout like every kernel output.
    Ok(Box::new(Constant {
        value: value.into_standard_layout(),
    }))
}

impl Operator for Constant {
    fn infer(&self, _inputs: &[InferInput]) -> Result<Vec<Fact>> {
        Ok(vec![Fact::of(&self.value)])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, _inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![self.value.clone()])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use crate::ir::attributes::Attribute;
    use crate::ops::shape::test_util::*;
    use crate::tensor::Tensor;

    #[test]
    fn constant_forms() {
        let v = t(&[2, 2], vec![1i32, 2, 3, 4]);
        assert_eq!(
            run1(
                "Constant",
                1,
                &[("value", Attribute::Tensor(v.clone()))],
                &[]
            ),
            v
        );
        assert_eq!(
            run1(
                "Constant",
                13,
                &[("value_float", Attribute::Float(2.5))],
                &[]
            ),
            Tensor::scalar(2.5f32)
        );
        assert_eq!(
            run1(
                "Constant",
                13,
                &[("value_floats", Attribute::Floats(vec![1.0, 2.0]))],
                &[]
            ),
            f32s(&[1.0, 2.0])
        );
        assert_eq!(
            run1("Constant", 13, &[("value_int", Attribute::Int(-4))], &[]),
            Tensor::scalar(-4i64)
        );
        assert_eq!(
            run1("Constant", 13, &[("value_ints", ints(&[]))], &[]),
            i64s(&[])
        );
        assert_eq!(
            run1("Constant", 13, &[("value_string", s("hi"))], &[]),
            Tensor::scalar("hi".to_string())
        );
        assert_eq!(
            run1(
                "Constant",
                13,
                &[(
                    "value_strings",
                    Attribute::Strings(vec![b"a".to_vec(), b"b".to_vec()])
                )],
                &[]
            ),
            t(&[2], vec!["a".to_string(), "b".to_string()])
        );
        // An empty tensor constant.
        let e = t(&[0, 3], Vec::<f64>::new());
        assert_eq!(
            run1(
                "Constant",
                13,
                &[("value", Attribute::Tensor(e.clone()))],
                &[]
            ),
            e
        );
    }

    #[test]
    fn constant_errors() {
        let msg = fails("Constant", 13, &[], &[]);
        assert!(msg.contains("none"), "{msg}");
        let msg = fails(
            "Constant",
            13,
            &[
                ("value_int", Attribute::Int(1)),
                ("value_float", Attribute::Float(1.0)),
            ],
            &[],
        );
        assert!(msg.contains("exactly one"), "{msg}");
        let msg = fails(
            "Constant",
            13,
            &[("sparse_value", Attribute::Other("sparse_tensor"))],
            &[],
        );
        assert!(msg.contains("sparse"), "{msg}");
        let msg = fails("Constant", 11, &[("value_int", Attribute::Int(1))], &[]);
        assert!(msg.contains("opset 12"), "{msg}");
        let msg = fails("Constant", 13, &[("value", Attribute::Int(1))], &[]);
        assert!(msg.contains("expected tensor"), "{msg}");
    }
}
