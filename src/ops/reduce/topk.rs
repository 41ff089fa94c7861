//! TopK: the k largest (or smallest) elements along an axis and their int64
//! indices. `k` is an attribute at opset 1 and an input from opset 10;
//! `largest` and `sorted` come at opset 11. Equal values keep index order;
//! NaN counts as larger than every number. The output is always sorted
//! (allowed when `sorted` is 0, where the order is unspecified).

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::shape::num::{num_dispatch, Num};
use crate::ops::shape::{data, int_scalar, make, norm_axis, numel_of};
use crate::ops::util::{fact, input, par_rows};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, Bits, WidthVec};
use crate::tensor::{DType, Tensor};
use ndarray::ArrayD;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("TopK", 1, build);
}

const OP: &str = "TopK";

#[derive(Debug)]
struct TopK {
    axis: i64,
    /// `k` from the attribute (opset 1).
    k_attr: Option<i64>,
    largest: bool,
}

fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let k_attr = if ctx.opset < 10 {
        Some(a.int_req("k")?)
    } else {
        None
    };
    let largest = ctx.opset < 11 || a.int("largest", 1)? != 0;
    Ok(Box::new(TopK {
        axis: a.int("axis", -1)?,
        k_attr,
        largest,
    }))
}

impl TopK {
    fn shape(&self, s: &[usize], k: i64) -> Result<(usize, usize, Vec<usize>)> {
        let axis = norm_axis(OP, self.axis, s.len())?;
        let k = usize::try_from(k)
            .ok()
            .filter(|&k| k <= s[axis])
            .ok_or_else(|| {
                Error::op(
                    OP,
                    format!(
                        "k = {k} is out of range for axis {axis} of length {}",
                        s[axis]
                    ),
                )
            })?;
        let mut out = s.to_vec();
        out[axis] = k;
        Ok((axis, k, out))
    }
}

/// Keeps the `k` preferred entries of `line` in order: entries are
/// (order key, index) pairs, already inverted for `largest`, so ascending
/// order is preference and ties go by index. Not generic: the selection and
/// the sort are compiled once for every element type.
#[inline(never)]
fn select_line(line: &mut Vec<(u64, usize)>, k: usize) {
    if k < line.len() {
        line.select_nth_unstable(k);
        line.truncate(k);
    }
    line.sort_unstable();
}

/// Every element's order key (see [`Num::order_key`]), inverted for
/// `largest` so that the preferred element gets the smallest key: the only
/// code compiled per element type.
fn order_keys<T: Num>(a: &ArrayD<T>, largest: bool) -> Vec<u64> {
    let flip = if largest { u64::MAX } else { 0 };
    data(a).iter().map(|v| v.order_key() ^ flip).collect()
}

/// The top `k` of every line along the middle axis of `[outer, len,
/// inner]` keys: per output (in the output's row-major order), the source
/// element's offset and its index along the axis.
#[inline(never)]
fn select_all(
    keys: &[u64],
    (outer, len, inner): (usize, usize, usize),
    k: usize,
) -> Vec<(usize, i64)> {
    let block = k * inner;
    let mut pairs: Vec<(usize, i64)> = vec![(0, 0); outer * block];
    if !pairs.is_empty() {
        par_rows(&mut pairs, block, |first, chunk| {
            let mut line: Vec<(u64, usize)> = Vec::with_capacity(len);
            for (b, dst) in chunk.chunks_mut(block).enumerate() {
                let base = (first + b) * len * inner;
                for i in 0..inner {
                    let at = |j: usize| base + j * inner + i;
                    line.clear();
                    line.extend((0..len).map(|j| (keys[at(j)], j)));
                    select_line(&mut line, k);
                    for (r, &(_, j)) in line.iter().enumerate() {
                        dst[r * inner + i] = (at(j), j as i64);
                    }
                }
            }
        });
    }
    pairs
}

/// The selected values: only moves elements, so compiled once per width.
fn gather<B: Bits>(src: &[B], picks: &[(usize, i64)]) -> WidthVec {
    B::vec(picks.iter().map(|&(o, _)| src[o].clone()).collect())
}

impl TopK {
    fn k_value(&self, value: Option<&Tensor>) -> Result<Option<i64>> {
        match (self.k_attr, value) {
            (Some(k), _) => Ok(Some(k)),
            (None, Some(t)) => Ok(Some(int_scalar(OP, t, "k")?)),
            (None, None) => Ok(None),
        }
    }
}

impl Operator for TopK {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(OP, inputs, 0)?;
        if matches!(f.dtype, DType::Bool | DType::String) {
            return Err(Error::op(
                OP,
                format!("expected a numeric input, found {}", f.dtype),
            ));
        }
        if self.k_attr.is_none() {
            fact(OP, inputs, 1)?;
        }
        let k = self.k_value(inputs.get(1).and_then(|x| x.value))?;
        Ok(match (&f.shape, k) {
            (Some(s), Some(k)) => {
                let (_, _, out) = self.shape(s, k)?;
                vec![Fact::new(f.dtype, out.clone()), Fact::new(DType::I64, out)]
            }
            _ => vec![
                Fact::unknown_shape(f.dtype),
                Fact::unknown_shape(DType::I64),
            ],
        })
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let n = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64;
        let k = crate::ops::util::out_len(outputs, 0);
        // Selection over the input plus sorting the k kept per line.
        (n + k * (64 - k.leading_zeros() as u64)).max(k)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let kt = if self.k_attr.is_none() {
            Some(input(OP, inputs, 1)?)
        } else {
            None
        };
        let k = self
            .k_value(kt)?
            .ok_or_else(|| Error::op(OP, "internal error: k unknown"))?;
        let (axis, k, out) = self.shape(x.shape(), k)?;
        numel_of::<i64>(OP, &out)?;
        let keys = num_dispatch!(OP, x, a => Ok(order_keys(a, self.largest)))?;
        let s = x.shape();
        let dims = (
            s[..axis].iter().product(),
            s[axis],
            s[axis + 1..].iter().product(),
        );
        let picks = select_all(&keys, dims, k);
        let values = by_width!(x, src => gather(src, &picks));
        let indices: Vec<i64> = picks.iter().map(|&(_, j)| j).collect();
        Ok(vec![
            Tensor::from_width(OP, x.dtype(), &out, values)?,
            make(OP, &out, indices)?,
        ])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use crate::ir::attributes::Attribute;
    use crate::ops::shape::test_util::*;

    fn topk(
        attrs: &[(&str, Attribute)],
        x: &crate::Tensor,
        k: i64,
        opset: i64,
    ) -> crate::Result<Vec<crate::Tensor>> {
        run_n(
            "TopK",
            opset,
            attrs,
            &[Some(x.clone()), Some(i64s(&[k]))],
            2,
        )
    }

    #[test]
    fn topk_spec_example() {
        let x = iota(&[3, 4]);
        let y = topk(&[], &x, 3, 11).unwrap();
        assert_eq!(
            y[0],
            t(
                &[3, 3],
                vec![3.0f32, 2.0, 1.0, 7.0, 6.0, 5.0, 11.0, 10.0, 9.0]
            )
        );
        assert_eq!(y[1], t(&[3, 3], vec![3i64, 2, 1, 3, 2, 1, 3, 2, 1]));
        let y = topk(
            &[("largest", Attribute::Int(0)), ("axis", Attribute::Int(0))],
            &x,
            2,
            11,
        )
        .unwrap();
        assert_eq!(
            y[0],
            t(&[2, 4], vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
        );
        assert_eq!(y[1], t(&[2, 4], vec![0i64, 0, 0, 0, 1, 1, 1, 1]));
        // Opset 1: k attribute.
        let y = run_n(
            "TopK",
            1,
            &[("k", Attribute::Int(1))],
            &[Some(x.clone())],
            2,
        )
        .unwrap();
        assert_eq!(y[0], t(&[3, 1], vec![3.0f32, 7.0, 11.0]));
    }

    #[test]
    fn topk_ties_nan_and_naive() {
        let x = t(&[6], vec![1i32, 3, 3, 2, 3, 0]);
        let y = topk(&[], &x, 4, 11).unwrap();
        assert_eq!(y[0], t(&[4], vec![3i32, 3, 3, 2]));
        assert_eq!(y[1], t(&[4], vec![1i64, 2, 4, 3]));
        let y = topk(&[("largest", Attribute::Int(0))], &x, 3, 11).unwrap();
        assert_eq!(y[1], t(&[3], vec![5i64, 0, 3]));
        let xf = f32s(&[1.0, f32::NAN, 2.0]);
        let y = topk(&[], &xf, 2, 11).unwrap();
        assert_eq!(y[1], t(&[2], vec![1i64, 2]));
        let y = topk(&[("largest", Attribute::Int(0))], &xf, 3, 11).unwrap();
        assert_eq!(y[1], t(&[3], vec![0i64, 2, 1]));
        // k = 0 and k = length.
        assert_eq!(topk(&[], &x, 0, 11).unwrap()[0].shape(), &[0]);
        assert_eq!(
            topk(&[], &x, 6, 11).unwrap()[1],
            t(&[6], vec![1i64, 2, 4, 3, 0, 5])
        );
        // A larger case against a naive stable sort.
        let v: Vec<f64> = (0..50 * 400).map(|i| ((i * 7919) % 97) as f64).collect();
        let x = t(&[50, 400], v.clone());
        let y = topk(&[("axis", Attribute::Int(1))], &x, 10, 11).unwrap();
        let got = y[1].to_i64_vec().unwrap();
        for r in 0..50 {
            let mut idx: Vec<usize> = (0..400).collect();
            idx.sort_by(|&a, &b| v[r * 400 + b].partial_cmp(&v[r * 400 + a]).unwrap());
            let want: Vec<i64> = idx[..10].iter().map(|&i| i as i64).collect();
            assert_eq!(&got[r * 10..(r + 1) * 10], want.as_slice());
        }
    }

    #[test]
    fn topk_errors() {
        let x = iota(&[2, 3]);
        assert!(topk(&[], &x, 4, 11)
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert!(topk(&[], &x, -1, 11)
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert!(topk(&[("axis", Attribute::Int(2))], &x, 1, 11)
            .unwrap_err()
            .to_string()
            .contains("axis"));
        let e = run_n("TopK", 11, &[], &[Some(x.clone()), Some(f32s(&[1.0]))], 2).unwrap_err();
        assert!(e.to_string().contains("integer"), "{e}");
        let e = run_n(
            "TopK",
            11,
            &[],
            &[Some(t(&[1], vec![true])), Some(i64s(&[1]))],
            2,
        )
        .unwrap_err();
        assert!(e.to_string().contains("numeric"), "{e}");
    }
}
