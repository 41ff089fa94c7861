//! Selection operators: Trilu (triangular masks), NonZero and Compress (whose
//! output shapes depend on the data), and CumSum.

use super::num::{num_dispatch, Num};
use super::{
    data, int_scalar, linear_map, make, movement_flops, norm_axis, numel_of, strides, unravel,
};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, opt_input, par_rows};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, Bits};
use crate::tensor::{DType, Tensor};
use ndarray::ArrayD;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Trilu", 14, build_trilu);
    r.add("NonZero", 9, build_nonzero);
    r.add("Compress", 9, build_compress);
    r.add("CumSum", 11, build_cumsum);
}

const TRILU: &str = "Trilu";

#[derive(Debug)]
struct Trilu {
    upper: bool,
}

fn build_trilu(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Trilu {
        upper: ctx.attrs.int("upper", 1)? != 0,
    }))
}

fn trilu(x: &Tensor, upper: bool, k: i64) -> Result<Tensor> {
    let shape = x.shape();
    let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let v = by_width!(x, s => {
        let mut out = s.to_vec();
        trilu_bits(&mut out, rows, cols, upper, k);
        Bits::vec(out)
    });
    Tensor::from_width(TRILU, x.dtype(), shape, v)
}

/// Trilu on bits: zeroes the elements of each `rows × cols` matrix outside
/// the kept triangle.
#[inline(never)]
fn trilu_bits<B: Default + Send>(out: &mut [B], rows: usize, cols: usize, upper: bool, k: i64) {
    if rows * cols == 0 {
        return;
    }
    par_rows(out, cols, |first, chunk| {
        for (r, row) in chunk.chunks_mut(cols).enumerate() {
            let i = ((first + r) % rows) as i64;
            for (j, v) in row.iter_mut().enumerate() {
                let d = j as i64 - i;
                let keep = if upper { d >= k } else { d <= k };
                if !keep {
                    *v = B::default();
                }
            }
        }
    });
}

impl Operator for Trilu {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(TRILU, inputs, 0)?;
        if let Some(s) = &f.shape {
            if s.len() < 2 {
                return Err(Error::op(
                    TRILU,
                    format!("expected rank 2 or more, found shape {s:?}"),
                ));
            }
        }
        Ok(vec![f.clone()])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(TRILU, inputs, 0)?;
        if x.shape().len() < 2 {
            return Err(Error::op(
                TRILU,
                format!("expected rank 2 or more, found shape {:?}", x.shape()),
            ));
        }
        let k = match opt_input(inputs, 1) {
            Some(t) => int_scalar(TRILU, t, "k")?,
            None => 0,
        };
        Ok(vec![trilu(x, self.upper, k)?])
    }
}

/// Which elements of `t` are non-zero (true, non-empty strings, NaN counts).
fn nonzero_mask(op: &str, t: &Tensor) -> Result<Vec<bool>> {
    fn numeric<T: Num>(a: &ArrayD<T>) -> Result<Vec<bool>> {
        Ok(a.iter().map(|v| v.to_f64() != 0.0).collect())
    }
    match t {
        Tensor::Bool(a) => Ok(a.iter().copied().collect()),
        Tensor::String(a) => Ok(a.iter().map(|s| !s.is_empty()).collect()),
        other => num_dispatch!(op, other, a => numeric(a)),
    }
}

const NONZERO: &str = "NonZero";

#[derive(Debug)]
struct NonZero;

fn build_nonzero(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(NonZero))
}

/// Coordinates of the non-zero elements, `[rank, count]` (a scalar counts as rank 1).
fn nonzero(t: &Tensor) -> Result<Tensor> {
    let mask = nonzero_mask(NONZERO, t)?;
    let shape: Vec<usize> = if t.shape().is_empty() {
        vec![1]
    } else {
        t.shape().to_vec()
    };
    let count = mask.iter().filter(|&&b| b).count();
    let rank = shape.len();
    let mut out = vec![0i64; numel_of::<i64>(NONZERO, &[rank, count])?];
    let positions = mask
        .iter()
        .enumerate()
        .filter(|(_, &b)| b)
        .map(|(flat, _)| flat);
    for (j, flat) in positions.enumerate() {
        for (d, c) in unravel(flat, &shape).into_iter().enumerate() {
            out[d * count + j] = c as i64;
        }
    }
    make(NONZERO, &[rank, count], out)
}

impl Operator for NonZero {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        fact(NONZERO, inputs, 0)?;
        Ok(vec![match inputs[0].value {
            Some(v) => Fact::of(&nonzero(v)?),
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
        n.max(movement_flops(inputs, outputs))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![nonzero(input(NONZERO, inputs, 0)?)?])
    }
}

const COMPRESS: &str = "Compress";

#[derive(Debug)]
struct Compress {
    axis: Option<i64>,
}

fn build_compress(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Compress {
        axis: ctx.attrs.int_opt("axis")?,
    }))
}

impl Compress {
    /// Output shape and, per output dimension, the offset map.
    fn plan(&self, shape: &[usize], cond: &Tensor) -> Result<(Vec<usize>, Vec<Vec<usize>>)> {
        let Tensor::Bool(c) = cond else {
            return Err(Error::op(
                COMPRESS,
                format!("condition must be bool, found {}", cond.dtype()),
            ));
        };
        if c.ndim() != 1 {
            return Err(Error::op(
                COMPRESS,
                format!("condition must be 1-D, found shape {:?}", c.shape()),
            ));
        }
        let (dims, axis): (Vec<usize>, usize) = match self.axis {
            None => (vec![shape.iter().product()], 0),
            Some(a) => (shape.to_vec(), norm_axis(COMPRESS, a, shape.len())?),
        };
        let len = dims[axis];
        let st = strides(&dims);
        let mut picked = Vec::new();
        for (i, &b) in c.iter().enumerate() {
            if b {
                if i >= len {
                    return Err(Error::op(
                        COMPRESS,
                        format!("condition selects index {i}, beyond the axis length {len}"),
                    ));
                }
                picked.push(i * st[axis]);
            }
        }
        let mut out = dims.clone();
        out[axis] = picked.len();
        let maps = (0..dims.len())
            .map(|d| {
                if d == axis {
                    picked.clone()
                } else {
                    linear_map(dims[d], 0, st[d] as isize)
                }
            })
            .collect();
        Ok((out, maps))
    }
}

impl Operator for Compress {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(COMPRESS, inputs, 0)?;
        let c = fact(COMPRESS, inputs, 1)?;
        if c.dtype != DType::Bool {
            return Err(Error::op(
                COMPRESS,
                format!("condition must be bool, found {}", c.dtype),
            ));
        }
        Ok(vec![match (&f.shape, inputs[1].value) {
            (Some(s), Some(cond)) => Fact::new(f.dtype, self.plan(s, cond)?.0),
            _ => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(COMPRESS, inputs, 0)?;
        let (out, maps) = self.plan(x.shape(), input(COMPRESS, inputs, 1)?)?;
        Ok(vec![super::move_tensor(COMPRESS, x, &out, &maps)?])
    }
}

const CUMSUM: &str = "CumSum";

#[derive(Debug)]
struct CumSum {
    exclusive: bool,
    reverse: bool,
}

fn build_cumsum(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(CumSum {
        exclusive: ctx.attrs.int("exclusive", 0)? != 0,
        reverse: ctx.attrs.int("reverse", 0)? != 0,
    }))
}

fn cumsum_typed<T: Num>(
    a: &ArrayD<T>,
    axis: usize,
    exclusive: bool,
    reverse: bool,
) -> Result<ArrayD<T>> {
    let s = a.shape().to_vec();
    let src = data(a);
    let len = s[axis];
    let inner: usize = s[axis + 1..].iter().product();
    let block = len * inner;
    let mut out = vec![T::from_acc(T::zero()); src.len()];
    if block > 0 {
        par_rows(&mut out, block, |first, chunk| {
            for (b, dst) in chunk.chunks_mut(block).enumerate() {
                let base = (first + b) * block;
                for i in 0..inner {
                    let mut acc = T::zero();
                    for step in 0..len {
                        let k = if reverse { len - 1 - step } else { step };
                        let at = k * inner + i;
                        let v = src[base + at].acc();
                        if exclusive {
                            dst[at] = T::from_acc(acc);
                            acc = T::add(acc, v);
                        } else {
                            acc = T::add(acc, v);
                            dst[at] = T::from_acc(acc);
                        }
                    }
                }
            }
        });
    }
    super::make_array(CUMSUM, &s, out)
}

impl Operator for CumSum {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(CUMSUM, inputs, 0)?;
        let a = fact(CUMSUM, inputs, 1)?;
        if !matches!(a.dtype, DType::I32 | DType::I64) {
            return Err(Error::op(
                CUMSUM,
                format!("axis must be int32 or int64, found {}", a.dtype),
            ));
        }
        if matches!(f.dtype, DType::Bool | DType::String) {
            return Err(Error::op(
                CUMSUM,
                format!("expected a numeric input, found {}", f.dtype),
            ));
        }
        Ok(vec![f.clone()])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(CUMSUM, inputs, 0)?;
        let axis = int_scalar(CUMSUM, input(CUMSUM, inputs, 1)?, "axis")?;
        let axis = norm_axis(CUMSUM, axis, x.shape().len())?;
        Ok(vec![
            crate::numeric_map!(CUMSUM, x, a => cumsum_typed(a, axis, self.exclusive, self.reverse)?)?,
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
    fn trilu_upper_lower_k() {
        let x = iota(&[3, 4]);
        let naive = |upper: bool, k: i64| -> Vec<f64> {
            (0..12)
                .map(|p| {
                    let (i, j) = ((p / 4) as i64, (p % 4) as i64);
                    let keep = if upper { j - i >= k } else { j - i <= k };
                    if keep {
                        p as f64
                    } else {
                        0.0
                    }
                })
                .collect()
        };
        for upper in [0, 1] {
            for k in [-4i64, -1, 0, 1, 2, 5] {
                let y = run1(
                    "Trilu",
                    14,
                    &[("upper", Attribute::Int(upper))],
                    &[x.clone(), Tensor::scalar(k)],
                );
                assert_eq!(
                    y.to_f64_vec().unwrap(),
                    naive(upper == 1, k),
                    "upper {upper} k {k}"
                );
            }
        }
        // Batched, default k, bool data.
        let b = t(&[2, 2, 2], vec![true; 8]);
        let y = run1("Trilu", 14, &[("upper", Attribute::Int(0))], &[b]);
        assert_eq!(
            y,
            t(
                &[2, 2, 2],
                vec![true, false, true, true, true, false, true, true]
            )
        );
        let y = run1("Trilu", 14, &[], &[t(&[0, 3], Vec::<i32>::new())]);
        assert_eq!(y.shape(), &[0, 3]);
        let msg = fails("Trilu", 14, &[], &[t(&[3], vec![1i32; 3])]);
        assert!(msg.contains("rank 2"), "{msg}");
    }

    #[test]
    fn nonzero_cases() {
        let x = t(&[2, 2], vec![1.0f32, 0.0, 1.0, 1.0]);
        assert_eq!(
            run1("NonZero", 13, &[], &[x]),
            t(&[2, 3], vec![0i64, 1, 1, 0, 0, 1])
        );
        let x = t(&[3], vec!["".to_string(), "a".to_string(), "b".to_string()]);
        assert_eq!(run1("NonZero", 13, &[], &[x]), t(&[1, 2], vec![1i64, 2]));
        assert_eq!(
            run1("NonZero", 13, &[], &[Tensor::scalar(5u8)]),
            t(&[1, 1], vec![0i64])
        );
        assert_eq!(
            run1("NonZero", 13, &[], &[t(&[2], vec![false, false])]).shape(),
            &[1, 0]
        );
        assert_eq!(
            run1("NonZero", 13, &[], &[t(&[1], vec![f32::NAN])]),
            t(&[1, 1], vec![0i64])
        );
    }

    #[test]
    fn compress_cases() {
        let x = iota(&[3, 2]);
        let c = t(&[2], vec![false, true]);
        let y = run1(
            "Compress",
            11,
            &[("axis", Attribute::Int(0))],
            &[x.clone(), c.clone()],
        );
        assert_eq!(y, t(&[1, 2], vec![2.0f32, 3.0]));
        let y = run1(
            "Compress",
            11,
            &[("axis", Attribute::Int(-1))],
            &[x.clone(), c.clone()],
        );
        assert_eq!(y, t(&[3, 1], vec![1.0f32, 3.0, 5.0]));
        let y = run1(
            "Compress",
            11,
            &[],
            &[x.clone(), t(&[5], vec![false, true, false, false, true])],
        );
        assert_eq!(y, t(&[2], vec![1.0f32, 4.0]));
        // Longer condition is fine while its extra entries are false.
        let y = run1(
            "Compress",
            11,
            &[("axis", Attribute::Int(1))],
            &[x.clone(), t(&[3], vec![true, false, false])],
        );
        assert_eq!(y.shape(), &[3, 1]);
        let msg = fails(
            "Compress",
            11,
            &[("axis", Attribute::Int(1))],
            &[x.clone(), t(&[3], vec![true, false, true])],
        );
        assert!(msg.contains("beyond"), "{msg}");
        let msg = fails("Compress", 11, &[], &[x.clone(), t(&[2], vec![1i64, 0])]);
        assert!(msg.contains("bool"), "{msg}");
        let msg = fails("Compress", 11, &[("axis", Attribute::Int(2))], &[x, c]);
        assert!(msg.contains("out of range"), "{msg}");
    }

    fn naive_cumsum(x: &[f64], exclusive: bool, reverse: bool) -> Vec<f64> {
        let n = x.len();
        (0..n)
            .map(|i| {
                (0..n)
                    .filter(|&j| {
                        let before = if reverse { j > i } else { j < i };
                        before || (!exclusive && j == i)
                    })
                    .map(|j| x[j])
                    .sum()
            })
            .collect()
    }

    #[test]
    fn cumsum_variants() {
        let x = t(&[5], vec![1.0f64, 2.0, 3.0, 4.0, 5.0]);
        let xv = x.to_f64_vec().unwrap();
        for ex in [0, 1] {
            for rev in [0, 1] {
                let y = run1(
                    "CumSum",
                    14,
                    &[
                        ("exclusive", Attribute::Int(ex)),
                        ("reverse", Attribute::Int(rev)),
                    ],
                    &[x.clone(), Tensor::scalar(0i32)],
                );
                assert_eq!(
                    y.to_f64_vec().unwrap(),
                    naive_cumsum(&xv, ex == 1, rev == 1)
                );
            }
        }
        let m = t(&[2, 3], vec![1i64, 2, 3, 4, 5, 6]);
        let y = run1("CumSum", 11, &[], &[m.clone(), t(&[1], vec![1i64])]);
        assert_eq!(y, t(&[2, 3], vec![1i64, 3, 6, 4, 9, 15]));
        let y = run1("CumSum", 11, &[], &[m.clone(), Tensor::scalar(-2i64)]);
        assert_eq!(y, t(&[2, 3], vec![1i64, 2, 3, 5, 7, 9]));
        let y = run1(
            "CumSum",
            11,
            &[],
            &[t(&[2], vec![200u8, 100]), Tensor::scalar(0i64)],
        );
        assert_eq!(y, t(&[2], vec![200u8, 44]));
        let msg = fails("CumSum", 11, &[], &[m.clone(), Tensor::scalar(2i64)]);
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails("CumSum", 11, &[], &[m, Tensor::scalar(0.0f32)]);
        assert!(msg.contains("int32"), "{msg}");
        let msg = fails(
            "CumSum",
            11,
            &[],
            &[t(&[1], vec![true]), Tensor::scalar(0i64)],
        );
        assert!(msg.contains("numeric"), "{msg}");
    }
}
