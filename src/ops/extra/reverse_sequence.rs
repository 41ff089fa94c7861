//! ReverseSequence: reverses the first `sequence_lens[b]` elements along the
//! time axis of every batch entry b (batch and time axes are 0 and 1, in
//! either order); later elements are copied unchanged. Any element type.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, out_len};
use crate::tensor::widths::{by_width, Bits, WidthVec};
use crate::tensor::{DType, Tensor};

const OP: &str = "ReverseSequence";

#[derive(Debug)]
struct ReverseSequence {
    batch_axis: usize,
    time_axis: usize,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let batch_axis = a.int("batch_axis", 1)?;
    let time_axis = a.int("time_axis", 0)?;
    if !matches!((batch_axis, time_axis), (0, 1) | (1, 0)) {
        return Err(a.error(
            "time_axis",
            format!(
                "batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 in some order"
            ),
        ));
    }
    Ok(Box::new(ReverseSequence {
        batch_axis: batch_axis as usize,
        time_axis: time_axis as usize,
    }))
}

/// [`reverse`] on one width's elements, as a [`WidthVec`].
fn reverse_width<B: Bits>(x: &[B], shape: &[usize], lens: &[usize], batch_axis: usize) -> WidthVec {
    B::vec(reverse(x, shape, lens, batch_axis))
}

/// Reverses row-major `x` of `shape` along the time axis (the one of axes 0
/// and 1 that is not `batch_axis`), the first `lens[b]` steps of batch b.
#[inline(never)]
fn reverse<B: Clone>(x: &[B], shape: &[usize], lens: &[usize], batch_axis: usize) -> Vec<B> {
    let (d0, d1) = (shape[0], shape[1]);
    let inner: usize = shape[2..].iter().product();
    let mut out = Vec::with_capacity(x.len());
    for i0 in 0..d0 {
        for i1 in 0..d1 {
            let (b, t) = if batch_axis == 0 { (i0, i1) } else { (i1, i0) };
            let len = lens[b];
            let from_t = if t < len { len - 1 - t } else { t };
            let (j0, j1) = if batch_axis == 0 {
                (i0, from_t)
            } else {
                (from_t, i1)
            };
            let at = (j0 * d1 + j1) * inner;
            out.extend_from_slice(&x[at..at + inner]);
        }
    }
    out
}

impl ReverseSequence {
    fn check(&self, x: &[usize], lens: &[usize]) -> Result<()> {
        if x.len() < 2 {
            return Err(Error::op(
                OP,
                format!("input must have rank ≥ 2, has shape {x:?}"),
            ));
        }
        if lens != [x[self.batch_axis]] {
            return Err(Error::op(
                OP,
                format!(
                    "sequence_lens has shape {lens:?}, expected [{}]",
                    x[self.batch_axis]
                ),
            ));
        }
        Ok(())
    }
}

impl Operator for ReverseSequence {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let l = fact(OP, inputs, 1)?;
        if !matches!(l.dtype, DType::I64 | DType::I32) {
            return Err(Error::op(
                OP,
                format!("sequence_lens must be int64, found {}", l.dtype),
            ));
        }
        if let (Some(xs), Some(ls)) = (&x.shape, &l.shape) {
            self.check(xs, ls)?;
        }
        Ok(vec![x.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let l = input(OP, inputs, 1)?;
        self.check(x.shape(), l.shape())?;
        let time_len = x.shape()[self.time_axis];
        let lens: Vec<usize> = l
            .to_i64_vec()?
            .into_iter()
            .map(|v| match usize::try_from(v) {
                Ok(v) if v <= time_len => Ok(v),
                _ => Err(Error::op(
                    OP,
                    format!("sequence length {v} is outside [0, {time_len}]"),
                )),
            })
            .collect::<Result<_>>()?;
        let b = self.batch_axis;
        // Only moves elements: once per width, not per element type.
        let v = by_width!(x, s => reverse_width(s, x.shape(), &lens, b));
        Ok(vec![Tensor::from_width(OP, x.dtype(), x.shape(), v)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::{int, run};
    use crate::tensor::Tensor;

    #[test]
    fn spec_examples_time_and_batch_major() {
        // ONNX example (time_axis 0, batch_axis 1), lens [4, 3, 2, 1].
        let x = Tensor::from_vec(&[4, 4], (0..16).map(|v| v as f32).collect::<Vec<_>>()).unwrap();
        let lens = Tensor::from_vec(&[4], vec![4i64, 3, 2, 1]).unwrap();
        let attrs = [("time_axis", int(0)), ("batch_axis", int(1))];
        let y = run("ReverseSequence", 10, &attrs, &[Some(&x), Some(&lens)]).unwrap();
        let want = [
            12., 9., 6., 3., 8., 5., 2., 7., 4., 1., 10., 11., 0., 13., 14., 15.,
        ];
        assert_eq!(y[0].to_f64_vec().unwrap(), want);
        // batch_axis 0, time_axis 1, lens [1, 2, 3, 4].
        let lens = Tensor::from_vec(&[4], vec![1i64, 2, 3, 4]).unwrap();
        let attrs = [("time_axis", int(1)), ("batch_axis", int(0))];
        let y = run("ReverseSequence", 10, &attrs, &[Some(&x), Some(&lens)]).unwrap();
        let want = [
            0., 1., 2., 3., 5., 4., 6., 7., 10., 9., 8., 11., 15., 14., 13., 12.,
        ];
        assert_eq!(y[0].to_f64_vec().unwrap(), want);
    }

    #[test]
    fn strings_and_bad_lengths() {
        let x = Tensor::from_vec(
            &[2, 2],
            vec!["a".to_string(), "b".into(), "c".into(), "d".into()],
        )
        .unwrap();
        let lens = Tensor::from_vec(&[2], vec![2i64, 0]).unwrap();
        let attrs = [("time_axis", int(1)), ("batch_axis", int(0))];
        let y = run("ReverseSequence", 10, &attrs, &[Some(&x), Some(&lens)]).unwrap();
        let want = Tensor::from_vec(
            &[2, 2],
            vec!["b".to_string(), "a".into(), "c".into(), "d".into()],
        )
        .unwrap();
        assert_eq!(y[0], want);
        let long = Tensor::from_vec(&[2], vec![3i64, 0]).unwrap();
        let e = run("ReverseSequence", 10, &attrs, &[Some(&x), Some(&long)]).unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
        let same = [("time_axis", int(1)), ("batch_axis", int(1))];
        assert!(run("ReverseSequence", 10, &same, &[Some(&x), Some(&lens)]).is_err());
    }
}
