//! ScatterElements (and its deprecated alias Scatter) and ScatterND: a copy
//! of the data with elements or slices replaced (or combined by add, mul,
//! max, min) at positions given by an index tensor. Updates are applied in
//! index order, so repeated indices give deterministic results.

use super::gather::{check_elements, element_offsets, index_values, nd_offsets, nd_shape};
use super::num::{num_dispatch, Num};
use super::{data, make, movement_flops};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input};
use crate::ops::Registrar;
use crate::tensor::bits::AsBits;
use crate::tensor::widths::{by_width, same_width, Bits, WidthVec};
use crate::tensor::Tensor;
use ndarray::ArrayD;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Scatter", 9, build_scatter);
    r.add("ScatterElements", 11, build_elements);
    r.add("ScatterND", 11, build_nd);
}

/// How an update combines with the existing element.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

fn reduction(ctx: &BuildContext) -> Result<Reduction> {
    if ctx.opset < 16 {
        return Ok(Reduction::None);
    }
    let a = ctx.attrs;
    let r = a.string("reduction", "none")?;
    Ok(match r.as_str() {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" if ctx.opset >= 18 => Reduction::Max,
        "min" if ctx.opset >= 18 => Reduction::Min,
        other => {
            return Err(a.error(
                "reduction",
                format!("unsupported value {other:?} at opset {}", ctx.opset),
            ))
        }
    })
}

#[derive(Debug)]
struct Scatter {
    name: &'static str,
    /// ScatterND instead of ScatterElements.
    nd: bool,
    axis: i64,
    reduction: Reduction,
}

fn build_scatter(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    if ctx.opset >= 11 {
        return Err(Error::op(
            "Scatter",
            "Scatter was removed in opset 11; use ScatterElements",
        ));
    }
    Ok(Box::new(Scatter {
        name: "Scatter",
        nd: false,
        axis: ctx.attrs.int("axis", 0)?,
        reduction: Reduction::None,
    }))
}

fn build_elements(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Scatter {
        name: "ScatterElements",
        nd: false,
        axis: ctx.attrs.int("axis", 0)?,
        reduction: reduction(ctx)?,
    }))
}

fn build_nd(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Scatter {
        name: "ScatterND",
        nd: true,
        axis: 0,
        reduction: reduction(ctx)?,
    }))
}

/// Copies `x` and applies `f(element, update)` for update slice `j` at `offs[j]`.
fn apply<T: AsBits>(
    op: &str,
    x: &ArrayD<T>,
    updates: &Tensor,
    offs: &[usize],
    slice: usize,
    f: impl Fn(&mut T, &T),
) -> Result<Tensor> {
    let u = T::view(updates).ok_or_else(|| {
        Error::op(
            op,
            format!("updates are {}, data is {}", updates.dtype(), T::DTYPE),
        )
    })?;
    let upd = data(u);
    let mut out = data(x).into_owned();
    if offs.iter().any(|&o| o + slice > out.len()) || upd.len() < offs.len() * slice {
        return Err(Error::op(op, "internal error: offsets out of range"));
    }
    for (j, &o) in offs.iter().enumerate() {
        for (dst, v) in out[o..o + slice]
            .iter_mut()
            .zip(&upd[j * slice..(j + 1) * slice])
        {
            f(dst, v);
        }
    }
    make(op, x.shape(), out)
}

/// A copy of `x` (row-major elements of one width) with update slice `j`
/// written at `offs[j]`.
fn replace<B: Bits>(
    op: &str,
    x: &[B],
    upd: Option<&[B]>,
    offs: &[usize],
    slice: usize,
) -> Result<WidthVec> {
    let upd = upd.ok_or_else(|| Error::op(op, "updates and data differ in type"))?;
    if offs.iter().any(|&o| o + slice > x.len()) || upd.len() < offs.len() * slice {
        return Err(Error::op(op, "internal error: offsets out of range"));
    }
    let mut out = x.to_vec();
    for (j, &o) in offs.iter().enumerate() {
        out[o..o + slice].clone_from_slice(&upd[j * slice..(j + 1) * slice]);
    }
    Ok(B::vec(out))
}

fn combine<T: Num>(r: Reduction) -> impl Fn(&mut T, &T) {
    move |o: &mut T, v: &T| {
        *o = match r {
            Reduction::None => *v,
            Reduction::Add => T::plus(*o, *v),
            Reduction::Mul => T::times(*o, *v),
            Reduction::Max => T::max_nan(*o, *v),
            Reduction::Min => T::min_nan(*o, *v),
        }
    }
}

impl Scatter {
    /// Checks shapes: returns the offsets' slice length expectation (`k` for ND).
    fn check(&self, data: &[usize], idx: &[usize], upd: &[usize]) -> Result<()> {
        if self.nd {
            let (_, want) = nd_shape(self.name, 0, data, idx)?;
            if upd != want.as_slice() {
                return Err(Error::op(
                    self.name,
                    format!("updates shape {upd:?} should be {want:?}"),
                ));
            }
        } else {
            check_elements(self.name, self.axis, data, idx)?;
            if upd != idx {
                return Err(Error::op(
                    self.name,
                    format!("updates shape {upd:?} differs from indices shape {idx:?}"),
                ));
            }
        }
        Ok(())
    }
}

impl Operator for Scatter {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name, inputs, 0)?;
        let i = fact(self.name, inputs, 1)?;
        let u = fact(self.name, inputs, 2)?;
        if u.dtype != f.dtype {
            return Err(Error::op(
                self.name,
                format!("updates are {}, data is {}", u.dtype, f.dtype),
            ));
        }
        if self.nd && i.dtype != crate::DType::I64 {
            return Err(Error::op(
                self.name,
                format!("indices must be int64, found {}", i.dtype),
            ));
        }
        if let (Some(d), Some(ix), Some(us)) = (&f.shape, &i.shape, &u.shape) {
            self.check(d, ix, us)?;
        }
        Ok(vec![f.clone()])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let upd = inputs
            .get(2)
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64;
        movement_flops(inputs, outputs) + upd
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name;
        let x = input(op, inputs, 0)?;
        let it = input(op, inputs, 1)?;
        let u = input(op, inputs, 2)?;
        self.check(x.shape(), it.shape(), u.shape())?;
        let idx = index_values(op, it)?;
        let (offs, slice) = if self.nd {
            let (k, _) = nd_shape(op, 0, x.shape(), it.shape())?;
            let offs = nd_offsets(op, 0, k, x.shape(), it.shape(), &idx)?;
            (offs, x.shape()[k..].iter().product())
        } else {
            let axis = check_elements(op, self.axis, x.shape(), it.shape())?;
            (element_offsets(op, x.shape(), it.shape(), &idx, axis)?, 1)
        };
        let out = if self.reduction == Reduction::None {
            if u.dtype() != x.dtype() {
                return Err(Error::op(
                    op,
                    format!("updates are {}, data is {}", u.dtype(), x.dtype()),
                ));
            }
            // Only moves elements: once per width, not per element type.
            let wu = u.width();
            let v = by_width!(x, sx => replace(op, sx, same_width(sx, &wu), &offs, slice)?);
            Tensor::from_width(op, x.dtype(), x.shape(), v)?
        } else {
            num_dispatch!(op, x, a => apply(op, a, u, &offs, slice, combine(self.reduction)))?
        };
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::ir::attributes::Attribute;

    #[test]
    fn scatter_elements_spec_examples() {
        let x = t(&[3, 3], vec![0.0f32; 9]);
        let idx = t(&[2, 3], vec![1i64, 0, 2, 0, 2, 1]);
        let upd = t(&[2, 3], vec![1.0f32, 1.1, 1.2, 2.0, 2.1, 2.2]);
        let y = run1(
            "ScatterElements",
            11,
            &[],
            &[x.clone(), idx.clone(), upd.clone()],
        );
        assert_eq!(
            y,
            t(
                &[3, 3],
                vec![2.0f32, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2]
            )
        );
        // The deprecated Scatter at opset 9 behaves the same.
        assert_eq!(
            run1("Scatter", 9, &[], &[x.clone(), idx.clone(), upd.clone()]),
            y
        );
        let x = t(&[1, 5], vec![1.0f32, 2.0, 3.0, 4.0, 5.0]);
        let y = run1(
            "ScatterElements",
            13,
            &[("axis", Attribute::Int(1))],
            &[
                x.clone(),
                t(&[1, 2], vec![1i64, 3]),
                t(&[1, 2], vec![1.1f32, 2.1]),
            ],
        );
        assert_eq!(y, t(&[1, 5], vec![1.0f32, 1.1, 3.0, 2.1, 5.0]));
        // Negative indices and axis.
        let y = run1(
            "ScatterElements",
            13,
            &[("axis", Attribute::Int(-1))],
            &[
                x.clone(),
                t(&[1, 2], vec![1i32, -3]),
                t(&[1, 2], vec![1.1f32, 2.1]),
            ],
        );
        assert_eq!(y, t(&[1, 5], vec![1.0f32, 1.1, 2.1, 4.0, 5.0]));
    }

    #[test]
    fn scatter_elements_reductions() {
        let x = t(&[1, 5], vec![1i32, 2, 3, 4, 5]);
        let idx = t(&[1, 3], vec![1i64, 1, 4]);
        let upd = t(&[1, 3], vec![10i32, 3, 0]);
        let cases = [
            ("add", vec![1i32, 15, 3, 4, 5]),
            ("mul", vec![1, 60, 3, 4, 0]),
            ("max", vec![1, 10, 3, 4, 5]),
            ("min", vec![1, 2, 3, 4, 0]),
        ];
        for (r, want) in cases {
            let y = run1(
                "ScatterElements",
                18,
                &[("axis", Attribute::Int(1)), ("reduction", s(r))],
                &[x.clone(), idx.clone(), upd.clone()],
            );
            assert_eq!(y, t(&[1, 5], want), "{r}");
        }
        // Without reduction the last duplicate wins.
        let y = run1(
            "ScatterElements",
            18,
            &[("axis", Attribute::Int(1))],
            &[x.clone(), idx.clone(), upd.clone()],
        );
        assert_eq!(y, t(&[1, 5], vec![1i32, 3, 3, 4, 0]));
        // max is not accepted before opset 18.
        let msg = fails(
            "ScatterElements",
            16,
            &[("reduction", s("max"))],
            &[x.clone(), idx.clone(), upd.clone()],
        );
        assert!(msg.contains("reduction"), "{msg}");
        // Strings only without reduction.
        let xs = t(&[2], vec!["a".to_string(), "b".to_string()]);
        let y = run1(
            "ScatterElements",
            18,
            &[],
            &[
                xs.clone(),
                t(&[1], vec![1i64]),
                t(&[1], vec!["z".to_string()]),
            ],
        );
        assert_eq!(y, t(&[2], vec!["a".to_string(), "z".to_string()]));
        let msg = fails(
            "ScatterElements",
            18,
            &[("reduction", s("add"))],
            &[xs, t(&[1], vec![1i64]), t(&[1], vec!["z".to_string()])],
        );
        assert!(msg.contains("numeric"), "{msg}");
    }

    #[test]
    fn scatter_elements_errors() {
        let x = t(&[2, 2], vec![0.0f32; 4]);
        let msg = fails(
            "ScatterElements",
            13,
            &[],
            &[x.clone(), t(&[1, 1], vec![2i64]), t(&[1, 1], vec![1.0f32])],
        );
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails(
            "ScatterElements",
            13,
            &[],
            &[
                x.clone(),
                t(&[1, 1], vec![0i64]),
                t(&[1, 2], vec![1.0f32; 2]),
            ],
        );
        assert!(msg.contains("updates shape"), "{msg}");
        let msg = fails(
            "ScatterElements",
            13,
            &[],
            &[x.clone(), t(&[1, 1], vec![0i64]), t(&[1, 1], vec![1.0f64])],
        );
        assert!(msg.contains("updates are"), "{msg}");
        let msg = fails(
            "Scatter",
            11,
            &[],
            &[x.clone(), t(&[1, 1], vec![0i64]), t(&[1, 1], vec![1.0f32])],
        );
        assert!(msg.contains("removed"), "{msg}");
    }

    #[test]
    fn scatter_nd_spec_examples() {
        let x = t(&[8], (1..=8).collect::<Vec<i64>>());
        let y = run1(
            "ScatterND",
            11,
            &[],
            &[
                x.clone(),
                t(&[4, 1], vec![4i64, 3, 1, 7]),
                t(&[4], vec![9i64, 10, 11, 12]),
            ],
        );
        assert_eq!(y, t(&[8], vec![1i64, 11, 3, 10, 9, 6, 7, 12]));
        // Slices: 4x4x4 data, replace two 4x4 blocks.
        let x = t(&[4, 4, 4], vec![1.0f64; 64]);
        let upd: Vec<f64> = (0..32).map(|v| v as f64 + 100.0).collect();
        let y = run1(
            "ScatterND",
            13,
            &[],
            &[
                x.clone(),
                t(&[2, 1], vec![0i64, 2]),
                t(&[2, 4, 4], upd.clone()),
            ],
        );
        let yv = y.to_f64_vec().unwrap();
        assert_eq!(&yv[0..16], &upd[0..16]);
        assert_eq!(&yv[16..32], &[1.0; 16]);
        assert_eq!(&yv[32..48], &upd[16..32]);
        // Reductions with a duplicate index.
        let x = t(&[4], vec![1.0f32, 2.0, 3.0, 4.0]);
        let idx = t(&[2, 1], vec![1i64, 1]);
        let upd = t(&[2], vec![5.0f32, 0.5]);
        for (r, want) in [("add", 7.5f32), ("mul", 5.0), ("max", 5.0), ("min", 0.5)] {
            let y = run1(
                "ScatterND",
                18,
                &[("reduction", s(r))],
                &[x.clone(), idx.clone(), upd.clone()],
            );
            assert_eq!(y, t(&[4], vec![1.0f32, want, 3.0, 4.0]), "{r}");
        }
    }

    #[test]
    fn scatter_nd_errors() {
        let x = t(&[2, 2], vec![0.0f32; 4]);
        let msg = fails(
            "ScatterND",
            13,
            &[],
            &[x.clone(), t(&[1, 2], vec![0i64, 2]), t(&[1], vec![1.0f32])],
        );
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails(
            "ScatterND",
            13,
            &[],
            &[
                x.clone(),
                t(&[1, 1], vec![0i64]),
                t(&[1, 3], vec![1.0f32; 3]),
            ],
        );
        assert!(msg.contains("should be"), "{msg}");
        let msg = fails(
            "ScatterND",
            13,
            &[],
            &[x.clone(), t(&[1, 3], vec![0i64; 3]), t(&[1], vec![1.0f32])],
        );
        assert!(msg.contains("last indices"), "{msg}");
        // Before opset 16 the reduction attribute does not exist: a plain replace.
        let y = run1(
            "ScatterND",
            15,
            &[("reduction", s("add"))],
            &[x, t(&[1, 1], vec![0i64]), t(&[1, 2], vec![1.0f32; 2])],
        );
        assert_eq!(y, t(&[2, 2], vec![1.0f32, 1.0, 0.0, 0.0]));
    }
}
