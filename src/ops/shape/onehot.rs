//! Operators that generate tensors shaped by another: EyeLike (a diagonal of
//! ones) and OneHot (one-hot encoding of indices along a new axis).

use super::{f64_list, movement_flops, numel_like, numel_of};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, Bits};
use crate::tensor::{DType, Tensor};
use half::{bf16, f16};

pub(super) fn register(r: &mut impl Registrar) {
    r.add("EyeLike", 9, build_eye);
    r.add("OneHot", 9, build_onehot);
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
        other => return Err(Error::UnsupportedType(format!("{other} output of {op}"))),
    })
}

/// A `rows × cols` tensor of `one`'s type: `one`'s value on diagonal `k`,
/// zero elsewhere (built once per element width).
fn eye(one: &Tensor, rows: usize, cols: usize, k: i64) -> Result<Tensor> {
    let v = by_width!(one, s => Bits::vec(eye_bits(s, rows, cols, k)?));
    Tensor::from_width(EYE, one.dtype(), &[rows, cols], v)
}

fn eye_bits<B: Bits>(one: &[B], rows: usize, cols: usize, k: i64) -> Result<Vec<B>> {
    let n = numel_of::<B>(EYE, &[rows, cols])?;
    let mut v = vec![B::default(); n];
    let one = one.first().cloned().unwrap_or_default();
    for i in 0..rows {
        let j = i as i64 + k;
        if j >= 0 && (j as usize) < cols {
            v[i * cols + j as usize] = one.clone();
        }
    }
    Ok(v)
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
        Ok(vec![eye(&one, r, c, self.k)?])
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

fn onehot(
    values: &Tensor,
    idx: &[i64],
    ishape: &[usize],
    axis: usize,
    depth: usize,
) -> Result<Tensor> {
    if values.len() != 2 {
        return Err(Error::op(
            ONEHOT,
            format!("values must hold two elements, found {}", values.len()),
        ));
    }
    let mut shape = ishape.to_vec();
    shape.insert(axis, depth);
    let inner: usize = ishape[axis..].iter().product();
    let v = by_width!(values, s => {
        let n = numel_like(ONEHOT, s, &shape)?;
        Bits::vec(onehot_bits(&s[0], &s[1], idx, n, inner, depth))
    });
    Tensor::from_width(ONEHOT, values.dtype(), &shape, v)
}

/// OneHot on bits: `n` elements of `off`, `on` where the indices point.
#[inline(never)]
fn onehot_bits<B: Clone>(
    off: &B,
    on: &B,
    idx: &[i64],
    n: usize,
    inner: usize,
    depth: usize,
) -> Vec<B> {
    let mut out = vec![off.clone(); n];
    let d = depth as i64;
    for (p, &i) in idx.iter().enumerate() {
        let i = if i < 0 { i + d } else { i };
        if (0..d).contains(&i) {
            let (o, r) = (p / inner.max(1), p % inner.max(1));
            out[(o * depth + i as usize) * inner + r] = on.clone();
        }
    }
    out
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
        Ok(vec![onehot(values, &idx, it.shape(), axis, depth)?])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::ir::attributes::Attribute;
    use crate::tensor::Tensor;
    use half::f16;

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
