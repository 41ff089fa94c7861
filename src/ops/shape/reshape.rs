//! Reshape, Flatten, Squeeze and Unsqueeze: operators that change the shape
//! but keep the row-major element order.

use super::{int_list, movement_flops, norm_axes, numel};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, opt_input};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, Bits};
use crate::tensor::Tensor;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Reshape", 5, build_reshape);
    r.add("Flatten", 1, build_flatten);
    r.add("Squeeze", 1, build_squeeze);
    r.add("Unsqueeze", 1, build_unsqueeze);
}

/// A copy of `t` with shape `shape` (same number of elements).
pub(super) fn reshape_tensor(op: &str, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let n = numel(op, shape)?;
    if n != t.len() {
        return Err(Error::op(
            op,
            format!(
                "cannot reshape {:?} ({} elements) to {shape:?} ({n} elements)",
                t.shape(),
                t.len()
            ),
        ));
    }
    // The elements in row-major order, copied once per element width into
    // a recycled buffer (a fresh one costs page faults on every run: a
    // graph input's first reshape took 30 µs for 64 KB).
    let v = by_width!(t, s => {
        let mut out = crate::tensor::recycle::take_or_default(s.len());
        out.clone_from_slice(s);
        Bits::vec(out)
    });
    Tensor::from_width(op, t.dtype(), shape, v)
}

/// The value of optional input `i` for shape inference: `Ok(None)` if the
/// input is present but not constant, `Ok(Some(None))` if absent.
fn infer_ints(
    op: &str,
    inputs: &[InferInput],
    i: usize,
    what: &str,
) -> Result<Option<Option<Vec<i64>>>> {
    match inputs.get(i).filter(|x| x.fact.is_some()) {
        None => Ok(Some(None)),
        Some(x) => match x.value {
            None => Ok(None),
            Some(v) => Ok(Some(Some(int_list(op, v, what)?))),
        },
    }
}

#[derive(Debug)]
struct Reshape {
    allowzero: bool,
}

const RESHAPE: &str = "Reshape";

fn build_reshape(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let allowzero = ctx.opset >= 14 && ctx.attrs.int("allowzero", 0)? != 0;
    Ok(Box::new(Reshape { allowzero }))
}

impl Reshape {
    fn out_shape(&self, input: &[usize], spec: &[i64]) -> Result<Vec<usize>> {
        let total = numel(RESHAPE, input)?;
        let mut out = Vec::with_capacity(spec.len());
        let mut infer_at = None;
        for (i, &d) in spec.iter().enumerate() {
            match d {
                -1 => {
                    if infer_at.replace(i).is_some() {
                        return Err(Error::op(
                            RESHAPE,
                            format!("shape {spec:?} has more than one -1"),
                        ));
                    }
                    out.push(1);
                }
                0 if !self.allowzero => {
                    let v = input.get(i).ok_or_else(|| {
                        Error::op(
                            RESHAPE,
                            format!("shape {spec:?} copies dimension {i}, but the input {input:?} has rank {}", input.len()),
                        )
                    })?;
                    out.push(*v);
                }
                d if d < 0 => {
                    return Err(Error::op(
                        RESHAPE,
                        format!("shape {spec:?} has an invalid dimension {d}"),
                    ))
                }
                d => out.push(
                    usize::try_from(d).map_err(|_| Error::op(RESHAPE, "dimension too large"))?,
                ),
            }
        }
        if self.allowzero && infer_at.is_some() && spec.contains(&0) {
            return Err(Error::op(
                RESHAPE,
                format!("shape {spec:?} has both 0 and -1 with allowzero set"),
            ));
        }
        if let Some(i) = infer_at {
            let known = numel(RESHAPE, &out)?;
            if known == 0 || total % known != 0 {
                return Err(Error::op(
                    RESHAPE,
                    format!("cannot infer the -1 in {spec:?} for input shape {input:?} ({total} elements)"),
                ));
            }
            out[i] = total / known;
        }
        let n = numel(RESHAPE, &out)?;
        if n != total {
            return Err(Error::op(
                RESHAPE,
                format!("cannot reshape {input:?} ({total} elements) to {spec:?} ({n} elements)"),
            ));
        }
        Ok(out)
    }
}

impl Operator for Reshape {
    fn is_view_of_input(&self, _later_inputs: bool, _data: Option<&Fact>) -> bool {
        true
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(RESHAPE, inputs, 0)?;
        fact(RESHAPE, inputs, 1)?;
        match (&f.shape, infer_ints(RESHAPE, inputs, 1, "shape")?) {
            (Some(s), Some(Some(spec))) => Ok(vec![Fact::new(f.dtype, self.out_shape(s, &spec)?)]),
            _ => Ok(vec![Fact::unknown_shape(f.dtype)]),
        }
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(RESHAPE, inputs, 0)?;
        let spec = int_list(RESHAPE, input(RESHAPE, inputs, 1)?, "shape")?;
        let shape = self.out_shape(x.shape(), &spec)?;
        Ok(vec![reshape_tensor(RESHAPE, x, &shape)?])
    }
}

#[derive(Debug)]
struct Flatten {
    axis: i64,
}

const FLATTEN: &str = "Flatten";

fn build_flatten(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Flatten {
        axis: ctx.attrs.int("axis", 1)?,
    }))
}

impl Flatten {
    fn out_shape(&self, s: &[usize]) -> Result<Vec<usize>> {
        let r = s.len() as i64;
        let a = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        if a < 0 || a > r {
            return Err(Error::op(
                FLATTEN,
                format!("axis {} is out of range for rank {r}", self.axis),
            ));
        }
        let a = a as usize;
        Ok(vec![numel(FLATTEN, &s[..a])?, numel(FLATTEN, &s[a..])?])
    }
}

impl Operator for Flatten {
    fn is_view_of_input(&self, _later_inputs: bool, _data: Option<&Fact>) -> bool {
        true
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(FLATTEN, inputs, 0)?;
        Ok(vec![match &f.shape {
            Some(s) => Fact::new(f.dtype, self.out_shape(s)?),
            None => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(FLATTEN, inputs, 0)?;
        let shape = self.out_shape(x.shape())?;
        Ok(vec![reshape_tensor(FLATTEN, x, &shape)?])
    }
}

/// Squeeze (`squeeze == true`) or Unsqueeze.
#[derive(Debug)]
struct Squeeze {
    squeeze: bool,
    /// Axes from the attribute (opset < 13).
    axes_attr: Option<Vec<i64>>,
    opset: i64,
}

fn build_squeeze(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build_sq(ctx, true)
}

fn build_unsqueeze(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build_sq(ctx, false)
}

fn build_sq(ctx: &BuildContext, squeeze: bool) -> Result<Box<dyn Operator>> {
    let axes_attr = if ctx.opset < 13 {
        let a = ctx.attrs.ints_opt("axes")?;
        if a.is_none() && !squeeze {
            return Err(ctx.attrs.error("axes", "required but missing"));
        }
        a
    } else {
        None
    };
    Ok(Box::new(Squeeze {
        squeeze,
        axes_attr,
        opset: ctx.opset,
    }))
}

impl Squeeze {
    fn name(&self) -> &'static str {
        if self.squeeze {
            "Squeeze"
        } else {
            "Unsqueeze"
        }
    }

    fn out_shape(&self, s: &[usize], axes: Option<&[i64]>) -> Result<Vec<usize>> {
        let op = self.name();
        if self.squeeze {
            // An empty axes list squeezes every dimension of size 1, as when absent.
            match axes.filter(|a| !a.is_empty()) {
                None => Ok(s.iter().copied().filter(|&d| d != 1).collect()),
                Some(axes) => {
                    let axes = norm_axes(op, axes, s.len())?;
                    for &a in &axes {
                        if s[a] != 1 {
                            return Err(Error::op(
                                op,
                                format!(
                                    "cannot squeeze axis {a} of shape {s:?}: its size is not 1"
                                ),
                            ));
                        }
                    }
                    Ok(s.iter()
                        .enumerate()
                        .filter(|(i, _)| !axes.contains(i))
                        .map(|(_, &d)| d)
                        .collect())
                }
            }
        } else {
            let axes = axes.ok_or_else(|| Error::op(op, "axes are required"))?;
            let rank = s.len() + axes.len();
            let axes = norm_axes(op, axes, rank)?;
            let mut it = s.iter();
            Ok((0..rank)
                .map(|i| {
                    if axes.contains(&i) {
                        1
                    } else {
                        it.next().copied().unwrap_or(1)
                    }
                })
                .collect())
        }
    }
}

impl Operator for Squeeze {
    fn is_view_of_input(&self, _later_inputs: bool, _data: Option<&Fact>) -> bool {
        true
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name(), inputs, 0)?;
        let axes = if self.opset >= 13 {
            infer_ints(self.name(), inputs, 1, "axes")?
        } else {
            Some(self.axes_attr.clone())
        };
        Ok(vec![match (&f.shape, axes) {
            (Some(s), Some(axes)) => Fact::new(f.dtype, self.out_shape(s, axes.as_deref())?),
            _ => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.name(), inputs, 0)?;
        let axes = if self.opset >= 13 {
            opt_input(inputs, 1)
                .map(|t| int_list(self.name(), t, "axes"))
                .transpose()?
        } else {
            self.axes_attr.clone()
        };
        let shape = self.out_shape(x.shape(), axes.as_deref())?;
        Ok(vec![reshape_tensor(self.name(), x, &shape)?])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::ir::attributes::Attribute;
    use crate::tensor::Tensor;

    fn reshape(x: &Tensor, spec: &[i64], opset: i64, allowzero: i64) -> crate::Result<Tensor> {
        Ok(run(
            "Reshape",
            opset,
            &[("allowzero", Attribute::Int(allowzero))],
            &[Some(x.clone()), Some(i64s(spec))],
        )?
        .remove(0))
    }

    #[test]
    fn reshape_rules() {
        let x = iota(&[2, 3, 4]);
        assert_eq!(reshape(&x, &[4, -1], 13, 0).unwrap().shape(), &[4, 6]);
        assert_eq!(reshape(&x, &[0, -1], 13, 0).unwrap().shape(), &[2, 12]);
        assert_eq!(
            reshape(&x, &[0, 0, 2, 2], 13, 0).unwrap().shape(),
            &[2, 3, 2, 2]
        );
        let y = reshape(&x, &[24], 5, 0).unwrap();
        assert_eq!(y.to_f64_vec().unwrap(), x.to_f64_vec().unwrap());
        // Scalar and back.
        let s = reshape(&t(&[1, 1], vec![5i8]), &[], 13, 0).unwrap();
        assert_eq!(s, Tensor::scalar(5i8));
        // allowzero: a literal 0 dimension.
        let e = t(&[0, 3], Vec::<f32>::new());
        assert_eq!(reshape(&e, &[3, 0], 14, 1).unwrap().shape(), &[3, 0]);
        // Without allowzero the 0 copies the input dimension.
        assert_eq!(reshape(&e, &[0, 3], 14, 0).unwrap().shape(), &[0, 3]);
        // allowzero is ignored before opset 14.
        assert_eq!(reshape(&x, &[0, 12], 13, 1).unwrap().shape(), &[2, 12]);
        // Strings.
        let st = t(&[2], vec!["a".to_string(), "b".to_string()]);
        assert_eq!(reshape(&st, &[1, 2], 14, 0).unwrap().shape(), &[1, 2]);
    }

    #[test]
    fn reshape_errors() {
        let x = iota(&[2, 3, 4]);
        assert!(reshape(&x, &[5, -1], 13, 0)
            .unwrap_err()
            .to_string()
            .contains("-1"));
        assert!(reshape(&x, &[-1, -1], 13, 0)
            .unwrap_err()
            .to_string()
            .contains("more than one"));
        assert!(reshape(&x, &[25], 13, 0)
            .unwrap_err()
            .to_string()
            .contains("24 elements"));
        assert!(reshape(&x, &[2, -2, 12], 13, 0)
            .unwrap_err()
            .to_string()
            .contains("invalid"));
        assert!(reshape(&x, &[0, 0, 0, 0], 13, 0)
            .unwrap_err()
            .to_string()
            .contains("rank"));
        let e = t(&[0, 3], Vec::<f32>::new());
        assert!(reshape(&e, &[0, -1], 14, 1)
            .unwrap_err()
            .to_string()
            .contains("allowzero"));
        // -1 next to a zero-size dimension is ambiguous...
        assert!(reshape(&e, &[0, -1], 14, 0)
            .unwrap_err()
            .to_string()
            .contains("-1"));
        // ...but not next to known non-zero ones.
        assert_eq!(reshape(&e, &[3, -1], 14, 0).unwrap().shape(), &[3, 0]);
        assert!(reshape(&x, &[i64::MAX, i64::MAX], 14, 0)
            .unwrap_err()
            .to_string()
            .contains("too many"));
    }

    #[test]
    fn flatten_axes() {
        let x = iota(&[2, 3, 4, 5]);
        for (axis, want) in [
            (0, [1, 120]),
            (1, [2, 60]),
            (2, [6, 20]),
            (4, [120, 1]),
            (-1, [24, 5]),
            (-4, [1, 120]),
        ] {
            let y = run1(
                "Flatten",
                13,
                &[("axis", Attribute::Int(axis))],
                &[x.clone()],
            );
            assert_eq!(y.shape(), &want, "axis {axis}");
        }
        let y = run1(
            "Flatten",
            13,
            &[("axis", Attribute::Int(0))],
            &[Tensor::scalar(3u16)],
        );
        assert_eq!(y, t(&[1, 1], vec![3u16]));
        let msg = fails("Flatten", 13, &[("axis", Attribute::Int(5))], &[x.clone()]);
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails("Flatten", 13, &[("axis", Attribute::Int(-5))], &[x]);
        assert!(msg.contains("out of range"), "{msg}");
    }

    #[test]
    fn squeeze_and_unsqueeze() {
        let x = iota(&[1, 3, 1, 2]);
        assert_eq!(run1("Squeeze", 11, &[], &[x.clone()]).shape(), &[3, 2]);
        assert_eq!(
            run1("Squeeze", 11, &[("axes", ints(&[-2]))], &[x.clone()]).shape(),
            &[1, 3, 2]
        );
        assert_eq!(
            run1("Squeeze", 13, &[], &[x.clone(), i64s(&[0])]).shape(),
            &[3, 1, 2]
        );
        assert_eq!(run1("Squeeze", 13, &[], &[x.clone()]).shape(), &[3, 2]);
        assert_eq!(
            run1("Squeeze", 13, &[], &[x.clone(), i64s(&[])]).shape(),
            &[3, 2]
        );
        assert_eq!(
            run1("Squeeze", 13, &[], &[t(&[1], vec![true])]),
            Tensor::scalar(true)
        );
        let msg = fails("Squeeze", 13, &[], &[x.clone(), i64s(&[1])]);
        assert!(msg.contains("not 1"), "{msg}");
        let msg = fails("Squeeze", 13, &[], &[x.clone(), i64s(&[4])]);
        assert!(msg.contains("out of range"), "{msg}");

        let y = iota(&[3, 4]);
        assert_eq!(
            run1("Unsqueeze", 11, &[("axes", ints(&[0, 3]))], &[y.clone()]).shape(),
            &[1, 3, 4, 1]
        );
        assert_eq!(
            run1("Unsqueeze", 13, &[], &[y.clone(), i64s(&[-1, 1])]).shape(),
            &[3, 1, 4, 1]
        );
        assert_eq!(
            run1("Unsqueeze", 13, &[], &[Tensor::scalar(2.0f64), i64s(&[0])]),
            t(&[1], vec![2.0f64])
        );
        let msg = fails("Unsqueeze", 13, &[], &[y.clone(), i64s(&[1, 1])]);
        assert!(msg.contains("repeated"), "{msg}");
        let msg = fails("Unsqueeze", 13, &[], &[y.clone(), i64s(&[3])]);
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails("Unsqueeze", 11, &[], &[y]);
        assert!(msg.contains("axes"), "{msg}");
    }
}
