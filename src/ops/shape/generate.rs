//! Operators that generate tensors from shapes and scalars: ConstantOfShape and Range.

use super::num::{num_dispatch, Num};
use super::numel_like;
use super::{f64_list, int_list, make, movement_flops, numel_of, to_dims};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, Bits};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

pub(super) fn register(r: &mut impl Registrar) {
    r.add("ConstantOfShape", 9, build_cos);
    r.add("Range", 11, build_range);
}

const COS: &str = "ConstantOfShape";

#[derive(Debug)]
struct ConstantOfShape {
    /// A one-element tensor holding the fill value.
    value: Tensor,
}

fn build_cos(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let value = match ctx.attrs.tensor_opt("value")? {
        Some(t) if t.len() == 1 => t.clone(),
        Some(t) => {
            return Err(ctx.attrs.error(
                "value",
                format!("must hold one element, found shape {:?}", t.shape()),
            ))
        }
        None => Tensor::scalar(0.0f32),
    };
    Ok(Box::new(ConstantOfShape { value }))
}

/// A tensor of `shape` filled with `v`'s (first) value, built once per
/// element width.
fn fill(v: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let out = by_width!(v, s => {
        let n = numel_like(COS, s, shape)?;
        Bits::vec(vec![s.first().cloned().unwrap_or_default(); n])
    });
    Tensor::from_width(COS, v.dtype(), shape, out)
}

impl Operator for ConstantOfShape {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        fact(COS, inputs, 0)?;
        let dtype = self.value.dtype();
        Ok(vec![match inputs[0].value {
            Some(v) => {
                let dims = to_dims(COS, &int_list(COS, v, "shape")?, "shape")?;
                numel_of::<u8>(COS, &dims)?;
                Fact::new(dtype, dims)
            }
            None => Fact::unknown_shape(dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let dims = to_dims(
            COS,
            &int_list(COS, input(COS, inputs, 0)?, "shape")?,
            "shape",
        )?;
        Ok(vec![fill(&self.value, &dims)?])
    }
}

const RANGE: &str = "Range";

#[derive(Debug)]
struct Range;

fn build_range(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Range))
}

/// The one value of a Range argument, as f64 (floats) or i128 (integers).
fn scalar_of(t: &Tensor, what: &str) -> Result<(f64, i128)> {
    if t.len() != 1 {
        return Err(Error::op(
            RANGE,
            format!("{what} must be a scalar, found shape {:?}", t.shape()),
        ));
    }
    if t.dtype().is_float() {
        let v = f64_list(RANGE, t, what)?;
        Ok((v.first().copied().unwrap_or(0.0), 0))
    } else {
        let v = match t {
            Tensor::U64(a) => a.iter().map(|&x| x as i128).next(),
            Tensor::String(_) | Tensor::Bool(_) => None,
            other => other.to_i64_vec()?.first().map(|&x| x as i128),
        };
        let v = v.ok_or_else(|| {
            Error::op(
                RANGE,
                format!("{what} must be numeric, found {}", t.dtype()),
            )
        })?;
        Ok((v as f64, v))
    }
}

/// Number of elements of the range.
fn range_len(
    dtype: DType,
    start: (f64, i128),
    limit: (f64, i128),
    delta: (f64, i128),
) -> Result<usize> {
    let n: i128 = if dtype.is_float() {
        if delta.0 == 0.0 || !delta.0.is_finite() || !start.0.is_finite() || !limit.0.is_finite() {
            return Err(Error::op(
                RANGE,
                "start, limit and delta must be finite and delta non-zero",
            ));
        }
        let n = ((limit.0 - start.0) / delta.0).ceil();
        if n > 1e15 {
            return Err(Error::op(RANGE, "the range has too many elements"));
        }
        n.max(0.0) as i128
    } else {
        let (s, l, d) = (start.1, limit.1, delta.1);
        if d == 0 {
            return Err(Error::op(RANGE, "delta must be non-zero"));
        }
        let diff = l - s;
        if (diff > 0) != (d > 0) || diff == 0 {
            0
        } else {
            // ceil(diff / d) for same-sign operands.
            (diff + d - d.signum()) / d
        }
    };
    usize::try_from(n).map_err(|_| Error::op(RANGE, "the range has too many elements"))
}

fn range_typed<T: Num>(
    _x: &ArrayD<T>,
    start: (f64, i128),
    delta: (f64, i128),
    n: usize,
) -> Result<Tensor> {
    numel_of::<T>(RANGE, &[n])?;
    let v: Vec<T> = if T::FLOAT {
        (0..n)
            .map(|i| T::from_f64(start.0 + i as f64 * delta.0))
            .collect()
    } else {
        (0..n)
            .map(|i| T::from_f64((start.1 + i as i128 * delta.1) as f64))
            .collect()
    };
    make(RANGE, &[n], v)
}

fn exact_int<T: Num>(_x: &ArrayD<T>, start: i128, delta: i128, n: usize) -> Option<Tensor> {
    // 64-bit integers may exceed f64 precision: build them exactly.
    match T::DTYPE {
        DType::I64 => {
            let v: Vec<i64> = (0..n).map(|i| (start + i as i128 * delta) as i64).collect();
            Some(Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[n]), v).ok()?))
        }
        DType::U64 => {
            let v: Vec<u64> = (0..n).map(|i| (start + i as i128 * delta) as u64).collect();
            Some(Tensor::U64(ArrayD::from_shape_vec(IxDyn(&[n]), v).ok()?))
        }
        _ => None,
    }
}

impl Operator for Range {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(RANGE, inputs, 0)?;
        for i in 1..3 {
            let g = fact(RANGE, inputs, i)?;
            if g.dtype != f.dtype {
                return Err(Error::op(
                    RANGE,
                    format!("start is {}, input {i} is {}", f.dtype, g.dtype),
                ));
            }
        }
        if let (Some(s), Some(l), Some(d)) = (inputs[0].value, inputs[1].value, inputs[2].value) {
            let n = range_len(
                f.dtype,
                scalar_of(s, "start")?,
                scalar_of(l, "limit")?,
                scalar_of(d, "delta")?,
            )?;
            return Ok(vec![Fact::new(f.dtype, vec![n])]);
        }
        Ok(vec![Fact::unknown_shape(f.dtype)])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let s = input(RANGE, inputs, 0)?;
        let l = input(RANGE, inputs, 1)?;
        let d = input(RANGE, inputs, 2)?;
        if s.dtype() != l.dtype() || s.dtype() != d.dtype() {
            return Err(Error::op(
                RANGE,
                format!(
                    "start, limit and delta differ in type: {}, {}, {}",
                    s.dtype(),
                    l.dtype(),
                    d.dtype()
                ),
            ));
        }
        let (start, delta) = (scalar_of(s, "start")?, scalar_of(d, "delta")?);
        let n = range_len(s.dtype(), start, scalar_of(l, "limit")?, delta)?;
        if let Some(t) = num_dispatch!(RANGE, s, a => Ok(exact_int(a, start.1, delta.1, n)))? {
            return Ok(vec![t]);
        }
        Ok(vec![
            num_dispatch!(RANGE, s, a => range_typed(a, start, delta, n))?,
        ])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::ir::attributes::Attribute;
    use crate::tensor::Tensor;

    #[test]
    fn constant_of_shape() {
        let y = run1("ConstantOfShape", 9, &[], &[i64s(&[2, 3])]);
        assert_eq!(y, t(&[2, 3], vec![0.0f32; 6]));
        let y = run1(
            "ConstantOfShape",
            20,
            &[("value", Attribute::Tensor(t(&[1], vec![7i32])))],
            &[i64s(&[3])],
        );
        assert_eq!(y, t(&[3], vec![7i32; 3]));
        let y = run1(
            "ConstantOfShape",
            20,
            &[("value", Attribute::Tensor(t(&[1], vec![true])))],
            &[i64s(&[])],
        );
        assert_eq!(y, Tensor::scalar(true));
        let y = run1("ConstantOfShape", 20, &[], &[i64s(&[0, 4])]);
        assert_eq!(y.shape(), &[0, 4]);
        let msg = fails("ConstantOfShape", 9, &[], &[i64s(&[-1])]);
        assert!(msg.contains("negative"), "{msg}");
        let msg = fails(
            "ConstantOfShape",
            9,
            &[("value", Attribute::Tensor(t(&[2], vec![1.0f32, 2.0])))],
            &[i64s(&[1])],
        );
        assert!(msg.contains("one element"), "{msg}");
        let msg = fails("ConstantOfShape", 9, &[], &[i64s(&[1 << 40, 1 << 40])]);
        assert!(msg.contains("too many"), "{msg}");
    }

    #[test]
    fn range_types() {
        let y = run1(
            "Range",
            11,
            &[],
            &[
                Tensor::scalar(3i32),
                Tensor::scalar(9i32),
                Tensor::scalar(3i32),
            ],
        );
        assert_eq!(y, t(&[2], vec![3i32, 6]));
        let y = run1(
            "Range",
            11,
            &[],
            &[
                Tensor::scalar(10i64),
                Tensor::scalar(4i64),
                Tensor::scalar(-3i64),
            ],
        );
        assert_eq!(y, t(&[2], vec![10i64, 7]));
        let y = run1(
            "Range",
            11,
            &[],
            &[
                Tensor::scalar(10i16),
                Tensor::scalar(4i16),
                Tensor::scalar(3i16),
            ],
        );
        assert_eq!(y.shape(), &[0]);
        let y = run1(
            "Range",
            11,
            &[],
            &[
                Tensor::scalar(1.0f32),
                Tensor::scalar(2.0f32),
                Tensor::scalar(0.25f32),
            ],
        );
        assert_eq!(y, t(&[4], vec![1.0f32, 1.25, 1.5, 1.75]));
        let y = run1(
            "Range",
            11,
            &[],
            &[
                Tensor::scalar(0.0f64),
                Tensor::scalar(1.0f64),
                Tensor::scalar(0.3f64),
            ],
        );
        assert_eq!(y.shape(), &[4]);
        let big = i64::MAX - 2;
        let y = run1(
            "Range",
            11,
            &[],
            &[
                Tensor::scalar(big),
                Tensor::scalar(i64::MAX),
                Tensor::scalar(1i64),
            ],
        );
        assert_eq!(y, t(&[2], vec![big, big + 1]));
    }

    #[test]
    fn range_errors() {
        let msg = fails(
            "Range",
            11,
            &[],
            &[
                Tensor::scalar(0i32),
                Tensor::scalar(5i32),
                Tensor::scalar(0i32),
            ],
        );
        assert!(msg.contains("delta"), "{msg}");
        let msg = fails(
            "Range",
            11,
            &[],
            &[
                Tensor::scalar(0i32),
                Tensor::scalar(5i64),
                Tensor::scalar(1i32),
            ],
        );
        assert!(msg.contains("differ") || msg.contains("int64"), "{msg}");
        let msg = fails(
            "Range",
            11,
            &[],
            &[
                Tensor::scalar(0.0f32),
                Tensor::scalar(1e30f32),
                Tensor::scalar(1.0f32),
            ],
        );
        assert!(msg.contains("too many"), "{msg}");
        let msg = fails(
            "Range",
            11,
            &[],
            &[i64s(&[0, 1]), Tensor::scalar(5i64), Tensor::scalar(1i64)],
        );
        assert!(msg.contains("scalar"), "{msg}");
    }
}
