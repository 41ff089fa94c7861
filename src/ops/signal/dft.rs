//! DFT (opsets 17 and 20): the discrete Fourier transform of a real
//! (`[..., 1]`) or complex (`[..., 2]`) signal along one axis, as ONNX's
//! reference defines it on numpy's FFTs: forward (`fft`, or `rfft`-like with
//! `onesided`), inverse (`ifft`), and with both `inverse` and `onesided` the
//! real inverse of a one-sided spectrum (`irfft`, output `[..., 1]`).
//! `dft_length` zero-pads or truncates the signal. The axis is an attribute
//! before opset 20 (default 1) and an optional input from opset 20 (default
//! -2); it may not be the last (real/imaginary) axis.

use super::fft::{Plan, C};
use super::int_input;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::quant::{float_tensor, float_values};
use crate::ops::shape::numel_of;
use crate::ops::util::{const_value, fact, input, opt_fact, opt_input, par_rows};
use crate::tensor::Tensor;

const OP: &str = "DFT";

#[derive(Debug)]
struct Dft {
    inverse: bool,
    onesided: bool,
    /// The axis attribute before opset 20; `None` reads input 2.
    axis_attr: Option<i64>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    Ok(Box::new(Dft {
        inverse: a.int("inverse", 0)? != 0,
        onesided: a.int("onesided", 0)? != 0,
        axis_attr: if ctx.opset < 20 {
            Some(a.int("axis", 1)?)
        } else {
            None
        },
    }))
}

/// The geometry of one transform.
#[derive(Debug, Clone, PartialEq)]
struct Spec {
    axis: usize,
    /// Transform length.
    n: usize,
    /// Output length along the axis.
    bins: usize,
    /// Whether the output is complex (last axis 2) rather than real.
    complex_out: bool,
    out_shape: Vec<usize>,
}

impl Dft {
    fn spec(&self, x: &[usize], dft_length: Option<i64>, axis: Option<i64>) -> Result<Spec> {
        let r = x.len();
        if r < 2 || !(x[r - 1] == 1 || x[r - 1] == 2) {
            return Err(Error::op(
                OP,
                format!("input must have rank ≥ 2 and a last axis of 1 (real) or 2 (complex), found {x:?}"),
            ));
        }
        let a = self.axis_attr.or(axis).unwrap_or(-2);
        let norm = if a < 0 { a + r as i64 } else { a };
        if norm < 0 || norm > r as i64 - 2 {
            return Err(Error::op(
                OP,
                format!("axis {a} is out of range for a signal of rank {r} (the last axis holds real and imaginary parts)"),
            ));
        }
        let axis = norm as usize;
        let irfft = self.inverse && self.onesided;
        let n = match dft_length {
            Some(d) => d,
            None if irfft => 2 * (x[axis] as i64 - 1),
            None => x[axis] as i64,
        };
        if n < 1 {
            return Err(Error::op(
                OP,
                format!("the transform length must be positive, found {n}"),
            ));
        }
        let n = usize::try_from(n).map_err(|_| Error::op(OP, "dft_length is too large"))?;
        let bins = if self.onesided && !self.inverse {
            n / 2 + 1
        } else {
            n
        };
        let mut out_shape = x.to_vec();
        out_shape[axis] = bins;
        out_shape[r - 1] = if irfft { 1 } else { 2 };
        numel_of::<f64>(OP, &out_shape)?;
        Ok(Spec {
            axis,
            n,
            bins,
            complex_out: !irfft,
            out_shape,
        })
    }

    fn axis_input(&self) -> Option<usize> {
        self.axis_attr.is_none().then_some(2)
    }
}

/// Runs one transform of every line of `x` (shape `shape`) along `s.axis`.
fn transform(x: &[f64], shape: &[usize], s: &Spec, inverse: bool) -> Vec<f64> {
    let r = shape.len();
    let outer: usize = shape[..s.axis].iter().product();
    let len = shape[s.axis];
    let inner: usize = shape[s.axis + 1..r - 1].iter().product();
    let cin = shape[r - 1];
    let cout = if s.complex_out { 2 } else { 1 };
    let row = s.bins * inner * cout;
    let mut out = vec![0.0f64; outer * row];
    if row == 0 {
        return out;
    }
    let plan = Plan::new(s.n);
    let irfft = !s.complex_out;
    let at = |o: usize, t: usize, i: usize| -> C {
        if t >= len {
            return C::default();
        }
        let b = ((o * len + t) * inner + i) * cin;
        C::new(x[b], if cin == 2 { x[b + 1] } else { 0.0 })
    };
    par_rows(&mut out, row, |first, chunk| {
        let mut buf = vec![C::default(); plan.len()];
        let mut scratch = plan.scratch();
        for (k, y) in chunk.chunks_mut(row).enumerate() {
            let o = first + k;
            for i in 0..inner {
                if irfft {
                    // The Hermitian spectrum of the first n/2 + 1 values.
                    let half = s.n / 2 + 1;
                    for (f, v) in buf.iter_mut().enumerate() {
                        *v = if f < half {
                            at(o, f, i)
                        } else {
                            at(o, s.n - f, i).conj()
                        };
                    }
                } else {
                    for (t, v) in buf.iter_mut().enumerate() {
                        *v = at(o, t, i);
                    }
                }
                if inverse {
                    plan.inverse(&mut buf, &mut scratch);
                } else {
                    plan.forward(&mut buf, &mut scratch);
                }
                for (f, v) in buf.iter().take(s.bins).enumerate() {
                    let p = (f * inner + i) * cout;
                    y[p] = v.re;
                    if cout == 2 {
                        y[p + 1] = v.im;
                    }
                }
            }
        }
    });
    out
}

/// The value of an optional integer scalar input.
fn opt_int(t: Option<&Tensor>, what: &str) -> Result<Option<i64>> {
    t.map(|t| int_input(OP, t, what)).transpose()
}

impl Operator for Dft {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        if !x.dtype.is_float() {
            return Err(Error::op(
                OP,
                format!("expected a floating-point signal, found {}", x.dtype),
            ));
        }
        // A length or axis given by a non-constant input leaves the shape unknown.
        let mut known = true;
        let mut value = |i: usize, what: &str| -> Result<Option<i64>> {
            if opt_fact(inputs, i).is_none() {
                return Ok(None);
            }
            known &= const_value(inputs, i).is_some();
            opt_int(const_value(inputs, i), what)
        };
        let len = value(1, "dft_length")?;
        let axis = match self.axis_input() {
            Some(i) => value(i, "axis")?,
            None => None,
        };
        Ok(vec![match &x.shape {
            Some(s) if known => Fact::new(x.dtype, self.spec(s, len, axis)?.out_shape),
            _ => Fact::unknown_shape(x.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let n = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0)
            .max(outputs.first().and_then(|f| f.len()).unwrap_or(0)) as u64;
        // About 5 n log2 n for an FFT; Bluestein lengths cost a few times more.
        n.saturating_mul(20 + 5 * (64 - n.leading_zeros() as u64))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let xt = input(OP, inputs, 0)?;
        let len = opt_int(opt_input(inputs, 1), "dft_length")?;
        let axis = match self.axis_input() {
            Some(i) => opt_int(opt_input(inputs, i), "axis")?,
            None => None,
        };
        let spec = self.spec(xt.shape(), len, axis)?;
        let x = float_values(OP, xt)?;
        let out = transform(&x, xt.shape(), &spec, self.inverse);
        Ok(vec![float_tensor(OP, xt.dtype(), &spec.out_shape, out)?])
    }
}
