//! Operators that generate tensors: ConstantOfShape, Range, EyeLike and OneHot.

use super::num::{num_dispatch, Num};
use super::{f64_list, int_list, make, movement_flops, numel_of, to_dims};
use crate::error::{Error, Result};
use crate::ops::util::{fact, input};
use crate::ops::{BuildContext, Fact, InferInput, Operator, Registry};
use crate::tensor::{DType, Element, Tensor};
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

pub(super) fn register(r: &mut Registry) {
    r.add("ConstantOfShape", 9, build_cos);
    r.add("Range", 11, build_range);
    r.add("EyeLike", 9, build_eye);
    r.add("OneHot", 9, build_onehot);
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

fn fill<T: Element>(v: &ArrayD<T>, shape: &[usize]) -> Result<Tensor> {
    numel_of::<T>(COS, shape)?;
    let x = v.iter().next().cloned().unwrap_or_default();
    Ok(T::into_tensor(ArrayD::from_elem(IxDyn(shape), x)))
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
        Ok(vec![crate::dispatch!(&self.value, a => fill(a, &dims)?)])
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

const EYE: &str = "EyeLike";

#[derive(Debug)]
struct EyeLike {
    dtype: Option<DType>,
    k: i64,
}

fn build_eye(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let dtype = match a.int_opt("dtype")? {
        Some(code) => {
            // Only known codes reach `from_onnx_code` (which recurses on unknown ones).
            let dt = i32::try_from(code)
                .ok()
                .filter(|c| (1..=13).contains(c) || *c == 16)
                .and_then(|c| DType::from_onnx_code(c).ok())
                .ok_or_else(|| a.error("dtype", format!("unsupported type code {code}")))?;
            if dt == DType::String {
                return Err(a.error("dtype", "string is not supported"));
            }
            Some(dt)
        }
        None => None,
    };
    Ok(Box::new(EyeLike {
        dtype,
        k: a.int("k", 0)?,
    }))
}

/// A scalar one of the given type.
fn one_of(op: &str, dtype: DType) -> Result<Tensor> {
    Ok(match dtype {
        DType::F32 => Tensor::scalar(1.0f32),
        DType::F64 => Tensor::scalar(1.0f64),
        DType::F16 => Tensor::scalar(f16::ONE),
        DType::BF16 => Tensor::scalar(bf16::ONE),
        DType::I8 => Tensor::scalar(1i8),
        DType::I16 => Tensor::scalar(1i16),
        DType::I32 => Tensor::scalar(1i32),
        DType::I64 => Tensor::scalar(1i64),
        DType::U8 => Tensor::scalar(1u8),
        DType::U16 => Tensor::scalar(1u16),
        DType::U32 => Tensor::scalar(1u32),
        DType::U64 => Tensor::scalar(1u64),
        DType::Bool => Tensor::scalar(true),
        DType::String => return Err(Error::op(op, "string output is not supported")),
    })
}

fn eye<T: Element>(one: &ArrayD<T>, rows: usize, cols: usize, k: i64) -> Result<Tensor> {
    let n = numel_of::<T>(EYE, &[rows, cols])?;
    let mut v = vec![T::default(); n];
    let one = one.iter().next().cloned().unwrap_or_default();
    for i in 0..rows {
        let j = i as i64 + k;
        if j >= 0 && (j as usize) < cols {
            v[i * cols + j as usize] = one.clone();
        }
    }
    make(EYE, &[rows, cols], v)
}

impl EyeLike {
    fn out_type(&self, x: DType) -> Result<DType> {
        let dt = self.dtype.unwrap_or(x);
        if dt == DType::String {
            return Err(Error::op(EYE, "string output is not supported"));
        }
        Ok(dt)
    }
}

impl Operator for EyeLike {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(EYE, inputs, 0)?;
        let dt = self.out_type(f.dtype)?;
        if let Some(s) = &f.shape {
            if s.len() != 2 {
                return Err(Error::op(
                    EYE,
                    format!("expected a 2-D input, found shape {s:?}"),
                ));
            }
        }
        Ok(vec![super::fact_or_unknown(dt, f.shape.clone())])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(EYE, inputs, 0)?;
        let &[r, c] = x.shape() else {
            return Err(Error::op(
                EYE,
                format!("expected a 2-D input, found shape {:?}", x.shape()),
            ));
        };
        let one = one_of(EYE, self.out_type(x.dtype())?)?;
        Ok(vec![crate::dispatch!(&one, a => eye(a, r, c, self.k)?)])
    }
}

const ONEHOT: &str = "OneHot";

#[derive(Debug)]
struct OneHot {
    axis: i64,
}

fn build_onehot(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(OneHot {
        axis: ctx.attrs.int("axis", -1)?,
    }))
}

impl OneHot {
    fn axis(&self, rank: usize) -> Result<usize> {
        let r = rank as i64 + 1;
        let a = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        if a < 0 || a >= r {
            return Err(Error::op(
                ONEHOT,
                format!("axis {} is out of range for output rank {r}", self.axis),
            ));
        }
        Ok(a as usize)
    }
}

fn depth_of(t: &Tensor) -> Result<usize> {
    let v = f64_list(ONEHOT, t, "depth")
        .map_err(|_| Error::op(ONEHOT, format!("depth must be a numeric scalar, found {t}")))?;
    match v.as_slice() {
        [d] if *d >= 1.0 && d.is_finite() => {
            usize::try_from(*d as i64).map_err(|_| Error::op(ONEHOT, "depth too large"))
        }
        _ => Err(Error::op(
            ONEHOT,
            format!("depth must be one positive value, found {v:?}"),
        )),
    }
}

fn onehot_typed<T: Element>(
    values: &ArrayD<T>,
    idx: &[i64],
    ishape: &[usize],
    axis: usize,
    depth: usize,
) -> Result<Tensor> {
    let vals: Vec<&T> = values.iter().collect();
    let [off, on] = vals.as_slice() else {
        return Err(Error::op(
            ONEHOT,
            format!("values must hold two elements, found {}", vals.len()),
        ));
    };
    let mut shape = ishape.to_vec();
    shape.insert(axis, depth);
    let n = numel_of::<T>(ONEHOT, &shape)?;
    let inner: usize = ishape[axis..].iter().product();
    let mut out = vec![(*off).clone(); n];
    let d = depth as i64;
    for (p, &i) in idx.iter().enumerate() {
        let i = if i < 0 { i + d } else { i };
        if (0..d).contains(&i) {
            let (o, r) = (p / inner.max(1), p % inner.max(1));
            out[(o * depth + i as usize) * inner + r] = (*on).clone();
        }
    }
    make(ONEHOT, &shape, out)
}

impl Operator for OneHot {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let i = fact(ONEHOT, inputs, 0)?;
        fact(ONEHOT, inputs, 1)?;
        let v = fact(ONEHOT, inputs, 2)?;
        Ok(vec![match (&i.shape, inputs[1].value) {
            (Some(s), Some(depth)) => {
                let mut out = s.clone();
                out.insert(self.axis(s.len())?, depth_of(depth)?);
                Fact::new(v.dtype, out)
            }
            _ => Fact::unknown_shape(v.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let it = input(ONEHOT, inputs, 0)?;
        let depth = depth_of(input(ONEHOT, inputs, 1)?)?;
        let values = input(ONEHOT, inputs, 2)?;
        let axis = self.axis(it.shape().len())?;
        let idx: Vec<i64> = match it {
            Tensor::String(_) | Tensor::Bool(_) => {
                return Err(Error::op(
                    ONEHOT,
                    format!("indices must be numeric, found {}", it.dtype()),
                ))
            }
            t if t.dtype().is_float() => t.to_f64_vec()?.iter().map(|&v| v as i64).collect(),
            t => t.to_i64_vec()?,
        };
        Ok(vec![
            crate::dispatch!(values, a => onehot_typed(a, &idx, it.shape(), axis, depth)?),
        ])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::attributes::Attribute;
    use crate::tensor::Tensor;
    use half::f16;

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

    #[test]
    fn eye_like() {
        let x = t(&[3, 4], vec![0i32; 12]);
        let y = run1("EyeLike", 9, &[("k", Attribute::Int(1))], &[x.clone()]);
        assert_eq!(y, t(&[3, 4], vec![0i32, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]));
        let y = run1(
            "EyeLike",
            9,
            &[("k", Attribute::Int(-2)), ("dtype", Attribute::Int(10))],
            &[x.clone()],
        );
        let mut want = vec![f16::ZERO; 12];
        want[8] = f16::ONE;
        assert_eq!(y, t(&[3, 4], want));
        let y = run1("EyeLike", 9, &[("dtype", Attribute::Int(9))], &[x.clone()]);
        assert_eq!(
            y.to_i64_vec().unwrap(),
            vec![1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0]
        );
        let y = run1("EyeLike", 9, &[("k", Attribute::Int(10))], &[x.clone()]);
        assert_eq!(y, t(&[3, 4], vec![0i32; 12]));
        let msg = fails("EyeLike", 9, &[], &[t(&[3], vec![0i32; 3])]);
        assert!(msg.contains("2-D"), "{msg}");
        let msg = fails("EyeLike", 9, &[("dtype", Attribute::Int(99))], &[x]);
        assert!(msg.contains("dtype"), "{msg}");
    }

    #[test]
    fn one_hot() {
        let idx = t(&[3], vec![0i64, 2, -1]);
        let vals = t(&[2], vec![0.0f32, 5.0]);
        let y = run1(
            "OneHot",
            11,
            &[],
            &[idx.clone(), Tensor::scalar(3i64), vals.clone()],
        );
        assert_eq!(
            y,
            t(
                &[3, 3],
                vec![5.0f32, 0.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 5.0]
            )
        );
        // Axis 0: transposed; float depth and indices; out-of-range index is all off.
        let y = run1(
            "OneHot",
            11,
            &[("axis", Attribute::Int(0))],
            &[
                t(&[3], vec![1.0f32, 7.0, -3.0]),
                t(&[1], vec![3.0f32]),
                vals.clone(),
            ],
        );
        assert_eq!(
            y,
            t(
                &[3, 3],
                vec![0.0f32, 0.0, 5.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0]
            )
        );
        // 2-D indices, middle axis, string values.
        let sv = t(&[2], vec!["n".to_string(), "y".to_string()]);
        let y = run1(
            "OneHot",
            11,
            &[("axis", Attribute::Int(1))],
            &[t(&[1, 2], vec![1i32, 0]), Tensor::scalar(2i32), sv],
        );
        assert_eq!(y.shape(), &[1, 2, 2]);
        assert_eq!(
            y,
            t(&[1, 2, 2], ["n", "y", "y", "n"].map(String::from).to_vec())
        );
        let msg = fails(
            "OneHot",
            11,
            &[],
            &[idx.clone(), Tensor::scalar(0i64), vals.clone()],
        );
        assert!(msg.contains("positive"), "{msg}");
        let msg = fails(
            "OneHot",
            11,
            &[("axis", Attribute::Int(2))],
            &[idx.clone(), Tensor::scalar(2i64), vals],
        );
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails(
            "OneHot",
            11,
            &[],
            &[idx, Tensor::scalar(2i64), t(&[3], vec![0i32; 3])],
        );
        assert!(msg.contains("two elements"), "{msg}");
    }
}
