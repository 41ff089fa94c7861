//! STFT (opset 17): the short-time Fourier transform of a real (`[B, T,
//! 1]`) or complex (`[B, T, 2]`) signal. Frames of `frame_length` samples
//! start every `frame_step` samples (`1 + (T - frame_length) / frame_step`
//! frames), are multiplied by `window` (default all ones) and transformed;
//! the output is `[B, frames, bins, 2]` with `bins = frame_length / 2 + 1`
//! when `onesided` (the default) and `frame_length` otherwise.

use super::fft::{Plan, C};
use super::int_input;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::quant::{float_tensor, float_values};
use crate::ops::shape::numel_of;
use crate::ops::util::{const_value, fact, input, opt_fact, opt_input, par_rows};
use crate::tensor::Tensor;

const OP: &str = "STFT";

#[derive(Debug)]
struct Stft {
    onesided: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Stft {
        onesided: ctx.attrs.int("onesided", 1)? != 0,
    }))
}

/// Frame geometry: step, length, frame count, bins, and the output shape.
#[derive(Debug, Clone, PartialEq)]
struct Frames {
    step: usize,
    len: usize,
    count: usize,
    bins: usize,
    out_shape: Vec<usize>,
}

impl Stft {
    fn frames(
        &self,
        x: &[usize],
        step: i64,
        window: Option<&[usize]>,
        frame_length: Option<i64>,
    ) -> Result<Frames> {
        if x.len() != 3 || !(x[2] == 1 || x[2] == 2) {
            return Err(Error::op(
                OP,
                format!("signal must have shape [batch, length, 1 or 2], found {x:?}"),
            ));
        }
        if step < 1 {
            return Err(Error::op(
                OP,
                format!("frame_step must be positive, found {step}"),
            ));
        }
        let win = match window {
            Some([w]) => Some(*w),
            Some(other) => {
                return Err(Error::op(
                    OP,
                    format!("window must be 1-D, found shape {other:?}"),
                ))
            }
            None => None,
        };
        let len = match (frame_length, win) {
            (Some(l), Some(w)) if l != w as i64 => {
                return Err(Error::op(
                    OP,
                    format!("window of length {w} does not match frame_length {l}"),
                ))
            }
            (Some(l), _) => l,
            (None, Some(w)) => w as i64,
            (None, None) => x[1] as i64,
        };
        if len < 1 || len > x[1] as i64 {
            return Err(Error::op(
                OP,
                format!(
                    "frame_length {len} must be positive and at most the signal length {}",
                    x[1]
                ),
            ));
        }
        let (len, step) = (len as usize, usize::try_from(step).unwrap_or(usize::MAX));
        let count = 1 + (x[1] - len) / step;
        let bins = if self.onesided { len / 2 + 1 } else { len };
        let out_shape = vec![x[0], count, bins, 2];
        numel_of::<f64>(OP, &out_shape)?;
        Ok(Frames {
            step,
            len,
            count,
            bins,
            out_shape,
        })
    }
}

impl Operator for Stft {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        fact(OP, inputs, 1)?;
        if !x.dtype.is_float() {
            return Err(Error::op(
                OP,
                format!("expected a floating-point signal, found {}", x.dtype),
            ));
        }
        let step = const_value(inputs, 1)
            .map(|t| int_input(OP, t, "frame_step"))
            .transpose()?;
        let len_known = opt_fact(inputs, 3).is_none() || const_value(inputs, 3).is_some();
        let len = const_value(inputs, 3)
            .map(|t| int_input(OP, t, "frame_length"))
            .transpose()?;
        let window = match opt_fact(inputs, 2) {
            Some(f) => f.shape.as_deref().map(Some),
            None => Some(None),
        };
        Ok(vec![match (&x.shape, step, window) {
            (Some(s), Some(step), Some(w)) if len_known => {
                Fact::new(x.dtype, self.frames(s, step, w, len)?.out_shape)
            }
            _ => Fact::unknown_shape(x.dtype),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let Some(s) = outputs.first().and_then(|f| f.shape.as_ref()) else {
            return 0;
        };
        let n = s.get(2).copied().unwrap_or(0) as u64 * 2;
        let frames = s.iter().take(2).product::<usize>() as u64;
        frames
            .saturating_mul(n)
            .saturating_mul(20 + 5 * (64 - n.leading_zeros() as u64))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let xt = input(OP, inputs, 0)?;
        let step = int_input(OP, input(OP, inputs, 1)?, "frame_step")?;
        let wt = opt_input(inputs, 2);
        let len = opt_input(inputs, 3)
            .map(|t| int_input(OP, t, "frame_length"))
            .transpose()?;
        let f = self.frames(xt.shape(), step, wt.map(|w| w.shape()), len)?;
        let window = match wt {
            Some(w) => float_values(OP, w)?,
            None => vec![1.0; f.len],
        };
        let x = float_values(OP, xt)?;
        let (t_len, cin) = (xt.shape()[1], xt.shape()[2]);
        let row = f.bins * 2;
        let mut out = vec![0.0f64; f.out_shape.iter().product()];
        if row > 0 && f.count > 0 {
            let plan = Plan::new(f.len);
            par_rows(&mut out, row, |first, chunk| {
                let mut buf = vec![C::default(); f.len];
                let mut scratch = plan.scratch();
                for (k, y) in chunk.chunks_mut(row).enumerate() {
                    let (b, fr) = ((first + k) / f.count, (first + k) % f.count);
                    let start = b * t_len + fr * f.step;
                    for (t, v) in buf.iter_mut().enumerate() {
                        let p = (start + t) * cin;
                        let im = if cin == 2 { x[p + 1] } else { 0.0 };
                        *v = C::new(x[p] * window[t], im * window[t]);
                    }
                    plan.forward(&mut buf, &mut scratch);
                    for (bin, v) in buf.iter().take(f.bins).enumerate() {
                        y[2 * bin] = v.re;
                        y[2 * bin + 1] = v.im;
                    }
                }
            });
        }
        Ok(vec![float_tensor(OP, xt.dtype(), &f.out_shape, out)?])
    }
}
