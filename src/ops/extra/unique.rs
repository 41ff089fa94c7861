//! Unique: the distinct elements (or, with `axis`, the distinct slices along
//! that axis) of a tensor, sorted ascending (`sorted`, the default) or in
//! order of first occurrence, with the four outputs Y, indices (first
//! occurrence), inverse_indices and counts. NaNs compare equal to each other
//! and after every number. Any element type.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::unary::kernel::contiguous;
use crate::ops::util::{fact, input};
use crate::tensor::widths::{by_width, Bits, WidthVec};
use crate::tensor::{DType, Tensor};
use std::cmp::Ordering;

const OP: &str = "Unique";

#[derive(Debug)]
struct Unique {
    axis: Option<i64>,
    sorted: bool,
    outputs: usize,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    if ctx.num_outputs > 4 {
        return Err(Error::op(
            OP,
            format!("has at most 4 outputs, the node has {}", ctx.num_outputs),
        ));
    }
    Ok(Box::new(Unique {
        axis: ctx.attrs.int_opt("axis")?,
        sorted: ctx.attrs.int("sorted", 1)? != 0,
        outputs: ctx.num_outputs.max(1),
    }))
}

/// A total order over partially ordered values: NaN (a value unequal to
/// itself) equals NaN and sorts last.
#[allow(clippy::eq_op)]
fn total<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    a.partial_cmp(b).unwrap_or_else(|| (a != a).cmp(&(b != b)))
}

/// Groups of equal slices among `0..len` under `cmp`, each as (first
/// occurrence, members): in `cmp`'s order when `sorted`, else in order of
/// first occurrence. Not generic (the comparison comes as `&dyn`), so the
/// two sorts are compiled once, not once per element type.
#[inline(never)]
fn group_equal(
    len: usize,
    cmp: &dyn Fn(usize, usize) -> Ordering,
    sorted: bool,
) -> Vec<(usize, Vec<usize>)> {
    let mut order: Vec<usize> = (0..len).collect();
    // Stable: each group starts at its first occurrence.
    crate::order::sort_indices(&mut order, cmp);
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for &k in &order {
        match groups.last_mut() {
            Some((first, members)) if cmp(*first, k) == Ordering::Equal => members.push(k),
            _ => groups.push((k, vec![k])),
        }
    }
    if !sorted {
        crate::order::sort_by(&mut groups, |a, b| a.0.cmp(&b.0));
    }
    groups
}

/// The groups of equal slices of `x` viewed as `[outer, len, inner]`
/// along the middle axis (see [`group_equal`]). The only code compiled per
/// element type: the comparison.
fn groups_of<T: PartialOrd>(
    x: &[T],
    (outer, len, inner): (usize, usize, usize),
    sorted: bool,
) -> Vec<(usize, Vec<usize>)> {
    let key = |k: usize| {
        (0..outer).flat_map(move |o| {
            let at = (o * len + k) * inner;
            at..at + inner
        })
    };
    let cmp = |a: usize, b: usize| -> Ordering {
        key(a)
            .zip(key(b))
            .map(|(i, j)| total(&x[i], &x[j]))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    };
    group_equal(len, &cmp, sorted)
}

/// Y's elements: the first slice of each group, for every outer index.
/// Only moves elements, so compiled once per width.
fn gather<B: Bits>(
    x: &[B],
    groups: &[(usize, Vec<usize>)],
    (outer, len, inner): (usize, usize, usize),
) -> WidthVec {
    let mut y = Vec::with_capacity(outer * groups.len() * inner);
    for o in 0..outer {
        for (first, _) in groups {
            let at = (o * len + first) * inner;
            y.extend_from_slice(&x[at..at + inner]);
        }
    }
    B::vec(y)
}

fn i64s(v: Vec<i64>) -> Result<Tensor> {
    let n = v.len();
    Tensor::from_vec(&[n], v)
}

impl Operator for Unique {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        if let (Some(a), Some(s)) = (self.axis, &x.shape) {
            crate::ops::util::axis(OP, a, s.len())?;
        }
        let mut v = vec![Fact::unknown_shape(x.dtype)];
        v.extend(std::iter::repeat_n(Fact::unknown_shape(DType::I64), 3));
        v.truncate(self.outputs);
        Ok(v)
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        let n = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64;
        n * (64 - n.leading_zeros() as u64).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let axis = match self.axis {
            Some(a) => Some(crate::ops::util::axis(OP, a, x.shape().len())?),
            None => None,
        };
        if axis.is_some() && x.shape().is_empty() {
            return Err(Error::op(OP, "axis given for a scalar input"));
        }
        let s = x.shape();
        let dims = match axis {
            None => (1, s.iter().product(), 1),
            Some(ax) => (
                s[..ax].iter().product(),
                s[ax],
                s[ax + 1..].iter().product(),
            ),
        };
        let groups = crate::dispatch!(x, a => groups_of(&contiguous(a), dims, self.sorted));
        let mut inverse = vec![0i64; dims.1];
        for (u, (_, members)) in groups.iter().enumerate() {
            for &k in members {
                inverse[k] = u as i64;
            }
        }
        let indices = groups.iter().map(|g| g.0 as i64).collect();
        let counts = groups.iter().map(|g| g.1.len() as i64).collect();
        let y_shape = match axis {
            None => vec![groups.len()],
            Some(ax) => {
                let mut v = s.to_vec();
                v[ax] = groups.len();
                v
            }
        };
        let y = by_width!(x, sx => gather(sx, &groups, dims));
        let y = Tensor::from_width(OP, x.dtype(), &y_shape, y)?;
        let mut out = vec![y, i64s(indices)?, i64s(inverse)?, i64s(counts)?];
        out.truncate(self.outputs);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::{build_op, int};
    use crate::tensor::Tensor;

    fn unique(x: &Tensor, attrs: &[(&str, crate::ir::attributes::Attribute)]) -> Vec<Tensor> {
        let op = build_op("Unique", 11, attrs, &[], 1, 4).unwrap();
        op.run(&[Some(x)]).unwrap()
    }

    fn ints(t: &Tensor) -> Vec<i64> {
        t.to_i64_vec().unwrap()
    }

    #[test]
    fn spec_example_unsorted_and_sorted() {
        let x = Tensor::from_vec(&[6], vec![2f32, 1., 1., 3., 4., 3.]).unwrap();
        let o = unique(&x, &[("sorted", int(0))]);
        assert_eq!(o[0].to_f64_vec().unwrap(), [2., 1., 3., 4.]);
        assert_eq!(ints(&o[1]), [0, 1, 3, 4]);
        assert_eq!(ints(&o[2]), [0, 1, 1, 2, 3, 2]);
        assert_eq!(ints(&o[3]), [1, 2, 2, 1]);
        let o = unique(&x, &[]);
        assert_eq!(o[0].to_f64_vec().unwrap(), [1., 2., 3., 4.]);
        assert_eq!(ints(&o[1]), [1, 0, 3, 4]);
        assert_eq!(ints(&o[2]), [1, 0, 0, 2, 3, 2]);
        assert_eq!(ints(&o[3]), [2, 1, 2, 1]);
    }

    #[test]
    fn slices_along_an_axis() {
        // ONNX example: rows of [[1,0,0],[1,0,0],[2,3,4]].
        let x = Tensor::from_vec(&[3, 3], vec![1f32, 0., 0., 1., 0., 0., 2., 3., 4.]).unwrap();
        let o = unique(&x, &[("axis", int(0))]);
        assert_eq!(o[0].shape(), &[2, 3]);
        assert_eq!(o[0].to_f64_vec().unwrap(), [1., 0., 0., 2., 3., 4.]);
        assert_eq!(ints(&o[1]), [0, 2]);
        assert_eq!(ints(&o[2]), [0, 0, 1]);
        assert_eq!(ints(&o[3]), [2, 1]);
        // Columns (axis -1): [1,1,2], [0,0,3], [0,0,4] are distinct, sorted.
        let o = unique(&x, &[("axis", int(-1))]);
        assert_eq!(o[0].shape(), &[3, 3]);
        assert_eq!(
            o[0].to_f64_vec().unwrap(),
            [0., 0., 1., 0., 0., 1., 3., 4., 2.]
        );
        assert_eq!(ints(&o[1]), [1, 2, 0]);
        assert_eq!(ints(&o[2]), [2, 0, 1]);
    }

    #[test]
    fn nan_groups_last_and_bad_axis_errors() {
        let x = Tensor::from_vec(&[4], vec![f32::NAN, 1., f32::NAN, 0.]).unwrap();
        let o = unique(&x, &[]);
        let y = o[0].to_f64_vec().unwrap();
        assert_eq!(&y[..2], &[0., 1.]);
        assert!(y[2].is_nan() && y.len() == 3);
        assert_eq!(ints(&o[3]), [1, 1, 2]);
        let op = build_op("Unique", 11, &[("axis", int(2))], &[], 1, 4).unwrap();
        assert!(op
            .run(&[Some(&x)])
            .unwrap_err()
            .to_string()
            .contains("axis"));
    }
}
