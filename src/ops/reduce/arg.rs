//! ArgMax and ArgMin: the index of the largest / smallest element along one
//! axis, as int64. The first occurrence wins unless `select_last_index`
//! (opset 12) asks for the last; a NaN counts as the extreme, as in numpy.

use super::par_outputs;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::shape::num::{num_dispatch, Num};
use crate::ops::shape::{data, make, norm_axis, numel_of};
use crate::ops::util::{fact, input};
use crate::ops::Registrar;
use crate::tensor::{DType, Tensor};
use ndarray::ArrayD;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("ArgMax", 1, |c| build(c, true));
    r.add("ArgMin", 1, |c| build(c, false));
}

#[derive(Debug)]
struct Arg {
    max: bool,
    axis: i64,
    keepdims: bool,
    last: bool,
}

fn build(ctx: &BuildContext, max: bool) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    Ok(Box::new(Arg {
        max,
        axis: a.int("axis", 0)?,
        keepdims: a.int("keepdims", 1)? != 0,
        last: ctx.opset >= 12 && a.int("select_last_index", 0)? != 0,
    }))
}

impl Arg {
    fn name(&self) -> &'static str {
        if self.max {
            "ArgMax"
        } else {
            "ArgMin"
        }
    }

    fn out_shape(&self, s: &[usize]) -> Result<(usize, Vec<usize>)> {
        let axis = norm_axis(self.name(), self.axis, s.len())?;
        let mut out = s.to_vec();
        if self.keepdims {
            out[axis] = 1;
        } else {
            out.remove(axis);
        }
        Ok((axis, out))
    }
}

/// What the index search needs of an element: an order, and whether it is
/// NaN (which counts as the extreme).
trait Ordered: Copy + PartialOrd + Send + Sync {
    fn nan(self) -> bool;
}

impl<T: Num + Send + Sync> Ordered for T {
    #[inline(always)]
    fn nan(self) -> bool {
        self.is_nan()
    }
}

/// An element by its order key ([`Num::order_key`]) and NaN flag: the
/// search compares two non-NaN keys exactly as it compares their values
/// (equal values share a key), so one compiled search serves every type
/// but f32 and f16.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
struct Keyed {
    key: u64,
    nan: bool,
}

impl Ordered for Keyed {
    #[inline(always)]
    fn nan(self) -> bool {
        self.nan
    }
}

fn arg_typed<T: Num>(op: &Arg, a: &ArrayD<T>, axis: usize, out_shape: &[usize]) -> Result<Tensor> {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    let src = data(a);
    if t == TypeId::of::<f32>() || t == TypeId::of::<half::f16>() {
        return arg_search(op, &src, a.shape(), axis, out_shape);
    }
    let keys: Vec<Keyed> = src
        .iter()
        .map(|&v| Keyed {
            key: v.order_key(),
            nan: v.is_nan(),
        })
        .collect();
    arg_search(op, &keys, a.shape(), axis, out_shape)
}

/// The index of the extreme element along `axis` of the row-major `src`
/// of shape `s`, for every output position.
fn arg_search<E: Ordered>(
    op: &Arg,
    src: &[E],
    s: &[usize],
    axis: usize,
    out_shape: &[usize],
) -> Result<Tensor> {
    let len = s[axis];
    let inner: usize = s[axis + 1..].iter().product();
    let n = numel_of::<i64>(op.name(), out_shape)?;
    if len == 0 && n > 0 {
        return Err(Error::op(
            op.name(),
            format!("cannot take the {} of an empty axis {axis}", op.name()),
        ));
    }
    let mut out = vec![0i64; n];
    par_outputs(&mut out, len, |first, chunk| {
        for (k, o) in chunk.iter_mut().enumerate() {
            let p = first + k;
            let base = (p / inner) * len * inner + p % inner;
            let mut best = src[base];
            let mut bi = 0usize;
            for j in 1..len {
                let v = src[base + j * inner];
                if best.nan() {
                    if op.last && v.nan() {
                        bi = j;
                    }
                    continue;
                }
                let better = if v.nan() {
                    true
                } else if op.max {
                    v > best || (op.last && v == best)
                } else {
                    v < best || (op.last && v == best)
                };
                if better {
                    best = v;
                    bi = j;
                }
            }
            *o = bi as i64;
        }
    });
    make(op.name(), out_shape, out)
}

impl Operator for Arg {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name(), inputs, 0)?;
        if matches!(f.dtype, DType::Bool | DType::String) {
            return Err(Error::op(
                self.name(),
                format!("expected a numeric input, found {}", f.dtype),
            ));
        }
        Ok(vec![match &f.shape {
            Some(s) => Fact::new(DType::I64, self.out_shape(s)?.1),
            None => Fact::unknown_shape(DType::I64),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let n = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64;
        n.max(crate::ops::util::out_len(outputs, 0))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.name(), inputs, 0)?;
        let (axis, out) = self.out_shape(x.shape())?;
        Ok(vec![
            num_dispatch!(self.name(), x, a => arg_typed(self, a, axis, &out))?,
        ])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use crate::ir::attributes::Attribute;
    use crate::ops::shape::test_util::*;
    use half::f16;

    #[test]
    fn argmax_argmin_axes() {
        let x = t(&[2, 3], vec![2.0f32, 5.0, 5.0, 7.0, 1.0, 7.0]);
        assert_eq!(
            run1("ArgMax", 13, &[], &[x.clone()]),
            t(&[1, 3], vec![1i64, 0, 1])
        );
        assert_eq!(
            run1(
                "ArgMax",
                13,
                &[
                    ("axis", Attribute::Int(-1)),
                    ("keepdims", Attribute::Int(0))
                ],
                &[x.clone()]
            ),
            t(&[2], vec![1i64, 0])
        );
        assert_eq!(
            run1(
                "ArgMax",
                13,
                &[
                    ("axis", Attribute::Int(1)),
                    ("select_last_index", Attribute::Int(1))
                ],
                &[x.clone()]
            ),
            t(&[2, 1], vec![2i64, 2])
        );
        // select_last_index is ignored before opset 12.
        assert_eq!(
            run1(
                "ArgMax",
                11,
                &[
                    ("axis", Attribute::Int(1)),
                    ("select_last_index", Attribute::Int(1))
                ],
                &[x.clone()]
            ),
            t(&[2, 1], vec![1i64, 0])
        );
        assert_eq!(
            run1("ArgMin", 13, &[("axis", Attribute::Int(1))], &[x.clone()]),
            t(&[2, 1], vec![0i64, 1])
        );
        let xi = t(&[4], vec![3i32, -1, 9, -1]);
        assert_eq!(
            run1(
                "ArgMin",
                13,
                &[("select_last_index", Attribute::Int(1))],
                &[xi.clone()]
            ),
            t(&[1], vec![3i64])
        );
        assert_eq!(run1("ArgMin", 13, &[], &[xi]), t(&[1], vec![1i64]));
        let h = t(
            &[3],
            vec![f16::from_f32(0.5), f16::from_f32(-2.0), f16::from_f32(0.25)],
        );
        assert_eq!(
            run1("ArgMin", 13, &[("keepdims", Attribute::Int(0))], &[h]),
            crate::Tensor::scalar(1i64)
        );
    }

    /// The types searched by order key (f64, integers) pick the same
    /// indices as f32's direct search: NaN as the extreme, -0 equal to +0,
    /// first or last of equal values.
    #[test]
    fn keyed_types_match_the_direct_search() {
        let v = [0.0f32, -0.0, 3.0, f32::NAN, -7.0, 3.0, f32::NAN, -7.0, 0.0];
        let shape = [3, 3];
        for op in ["ArgMax", "ArgMin"] {
            for axis in [0i64, 1] {
                for last in [0i64, 1] {
                    let attrs = [
                        ("axis", Attribute::Int(axis)),
                        ("select_last_index", Attribute::Int(last)),
                    ];
                    let want = run1(op, 13, &attrs, &[t(&shape, v.to_vec())]);
                    let f64s: Vec<f64> = v.iter().map(|&x| x as f64).collect();
                    assert_eq!(run1(op, 13, &attrs, &[t(&shape, f64s)]), want, "{op} f64");
                    // Integers: NaN-free values with repeats and a sign change.
                    let ints = [0i64, -1, 3, 9, -7, 3, 9, -7, 0];
                    let want = run1(
                        op,
                        13,
                        &attrs,
                        &[t(&shape, ints.map(|x| x as f32).to_vec())],
                    );
                    assert_eq!(
                        run1(op, 13, &attrs, &[t(&shape, ints.to_vec())]),
                        want,
                        "{op} i64"
                    );
                    let bytes = ints.map(|x| (x + 7) as u8);
                    assert_eq!(
                        run1(op, 13, &attrs, &[t(&shape, bytes.to_vec())]),
                        want,
                        "{op} u8"
                    );
                }
            }
        }
    }

    #[test]
    fn nan_and_large() {
        let x = f32s(&[1.0, f32::NAN, 5.0, f32::NAN]);
        assert_eq!(run1("ArgMax", 13, &[], &[x.clone()]), t(&[1], vec![1i64]));
        assert_eq!(run1("ArgMin", 13, &[], &[x.clone()]), t(&[1], vec![1i64]));
        assert_eq!(
            run1(
                "ArgMax",
                13,
                &[("select_last_index", Attribute::Int(1))],
                &[x]
            ),
            t(&[1], vec![3i64])
        );
        // Big enough to run in parallel; compare with a naive argmax.
        let v: Vec<f64> = (0..300 * 200).map(|i| ((i * 37) % 101) as f64).collect();
        let y = run1(
            "ArgMax",
            13,
            &[("axis", Attribute::Int(0))],
            &[t(&[300, 200], v.clone())],
        );
        let got = y.to_i64_vec().unwrap();
        for c in 0..200 {
            let mut bi = 0;
            for r in 1..300 {
                if v[r * 200 + c] > v[bi * 200 + c] {
                    bi = r;
                }
            }
            assert_eq!(got[c], bi as i64);
        }
    }

    #[test]
    fn arg_errors() {
        let msg = fails(
            "ArgMax",
            13,
            &[("axis", Attribute::Int(2))],
            &[iota(&[2, 2])],
        );
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails(
            "ArgMax",
            13,
            &[("axis", Attribute::Int(1))],
            &[t(&[2, 0], Vec::<f32>::new())],
        );
        assert!(msg.contains("empty"), "{msg}");
        let msg = fails("ArgMin", 13, &[], &[t(&[1], vec![true])]);
        assert!(msg.contains("numeric"), "{msg}");
        let msg = fails("ArgMin", 13, &[], &[crate::Tensor::scalar(1.0f32)]);
        assert!(msg.contains("out of range"), "{msg}");
    }
}
