//! QLinearAveragePool: AveragePool over an 8-bit tensor, NCHW or
//! (`channels_last = 1`) NHWC, any number of spatial dims. The window
//! geometry (pads, `auto_pad`, strides, `ceil_mode`) is the one Conv and the
//! float pools share. As in onnxruntime, each input is dequantized
//! (`sx·(x−zx)` in f32), summed over the window's valid positions, divided
//! by the window's size (`count_include_pad`: the whole kernel) and
//! quantized with `round_half_even(v / sy + zy)` saturated.

use super::{check8, range8, scalar_scale, scalar_zp, tensor8};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::conv::geom::{Window, WindowAttrs};
use crate::ops::util::{fact, input, out_len};
use crate::tensor::Tensor;

const OP: &str = "QLinearAveragePool";

#[derive(Debug)]
struct QLinearAvgPool {
    window: WindowAttrs,
    ceil_mode: bool,
    count_include_pad: bool,
    channels_last: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let window = WindowAttrs::parse(a, false)?;
    if window.kernel.is_none() {
        return Err(a.error("kernel_shape", "required but missing"));
    }
    Ok(Box::new(QLinearAvgPool {
        window,
        ceil_mode: a.int("ceil_mode", 0)? != 0,
        count_include_pad: a.int("count_include_pad", 0)? != 0,
        channels_last: a.int("channels_last", 0)? != 0,
    }))
}

impl QLinearAvgPool {
    /// The window over X's spatial dims and the output shape.
    fn plan(&self, x: &[usize]) -> Result<(Window, Vec<usize>)> {
        if x.len() < 3 {
            return Err(Error::op(
                OP,
                format!("X must have rank ≥ 3, found shape {x:?}"),
            ));
        }
        let r = x.len();
        let spatial = if self.channels_last {
            &x[1..r - 1]
        } else {
            &x[2..]
        };
        let kernel = self.window.kernel.as_deref().unwrap_or(&[]);
        let win = self.window.resolve(OP, spatial, kernel, self.ceil_mode)?;
        let mut out = vec![x[0]];
        if self.channels_last {
            out.extend_from_slice(&win.output);
            out.push(x[r - 1]);
        } else {
            out.push(x[1]);
            out.extend_from_slice(&win.output);
        }
        Ok((win, out))
    }
}

/// Row-major coordinates of flat index `i` within `dims`.
fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        out[d] = i % dims[d].max(1);
        i /= dims[d].max(1);
    }
}

impl Operator for QLinearAvgPool {
    fn cost_class(&self) -> OpClass {
        OpClass::Window
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        check8(OP, "X", x.dtype)?;
        let shape = match &x.shape {
            Some(s) => Some(self.plan(s)?.1),
            None => None,
        };
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: x.dtype,
            shape,
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let k = self.window.kernel.as_ref().map_or(1, |k| {
            k.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
        });
        out_len(outputs, 0).saturating_mul(k).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let t = x.dtype();
        let (lo, hi) = range8(OP, t)?;
        let sx = scalar_scale(OP, inputs, 1, "x_scale")?;
        let zx = scalar_zp(OP, inputs, 2, t, "x_zero_point")?;
        let sy = scalar_scale(OP, inputs, 3, "y_scale")?;
        let zy = scalar_zp(OP, inputs, 4, t, "y_zero_point")?;
        let (win, out_shape) = self.plan(x.shape())?;
        let xs = x.shape();
        let (n, c) = if self.channels_last {
            (xs[0], xs[xs.len() - 1])
        } else {
            (xs[0], xs[1])
        };
        let (in_plane, out_plane, r) = (win.in_len(), win.out_len(), win.rank());
        // Dequantized values by byte (onnxruntime dequantizes through a
        // table too): `sx·(v − zx)` of each code.
        let signed = t == crate::tensor::DType::I8;
        let table: [f32; 256] = std::array::from_fn(|b| {
            let v = if signed {
                b as u8 as i8 as i32
            } else {
                b as i32
            };
            sx * (v - zx) as f32
        });
        let bytes = x
            .as_bytes()
            .ok_or_else(|| Error::op(OP, "X must be contiguous"))?;
        // Strides of a channel and of a spatial position, in X and in Y.
        let (ch_in, pos_in, ch_out, pos_out) = if self.channels_last {
            (1, c, 1, c)
        } else {
            (in_plane, 1, out_plane, 1)
        };
        let kernel_size: usize = win.kernel.iter().product();
        let mut out = vec![0i32; n * c * out_plane];
        let (mut opos, mut start, mut end, mut pos) =
            (vec![0; r], vec![0; r], vec![0; r], vec![0; r]);
        // The window's input offsets of one output position, row-major:
        // the order of each output's sum.
        let mut offsets = Vec::new();
        for o in 0..out_plane {
            unravel(o, &win.output, &mut opos);
            let mut count = 1usize;
            for d in 0..r {
                let s = (opos[d] * win.strides[d]) as isize - win.pad_begin[d] as isize;
                let e = (s + win.kernel[d] as isize).min(win.input[d] as isize);
                start[d] = s.max(0) as usize;
                end[d] = e.max(s.max(0)) as usize;
                count *= end[d] - start[d];
            }
            offsets.clear();
            if count > 0 {
                pos.copy_from_slice(&start);
                'window: loop {
                    let p = pos
                        .iter()
                        .zip(&win.input)
                        .fold(0, |p, (&i, &dim)| p * dim + i);
                    offsets.push(p * pos_in);
                    for d in (0..r).rev() {
                        pos[d] += 1;
                        if pos[d] < end[d] {
                            continue 'window;
                        }
                        pos[d] = start[d];
                    }
                    break;
                }
            }
            let size = if self.count_include_pad {
                kernel_size
            } else {
                count
            };
            let quantize = |sum: f32| {
                let q = (sum / size as f32 / sy + zy as f32).round_ties_even();
                q.clamp(lo as f32, hi as f32) as i32
            };
            for b in 0..n {
                let x_img = &bytes[b * c * in_plane..][..c * in_plane];
                let y_img = &mut out[b * c * out_plane..][..c * out_plane];
                // Eight channels at a time: eight independent sums, each in
                // the window's order.
                let mut ch = 0;
                while ch + 8 <= c {
                    let mut sums = [0f32; 8];
                    for &off in &offsets {
                        for (j, s) in sums.iter_mut().enumerate() {
                            *s += table[x_img[(ch + j) * ch_in + off] as usize];
                        }
                    }
                    for (j, &s) in sums.iter().enumerate() {
                        y_img[(ch + j) * ch_out + o * pos_out] = quantize(s);
                    }
                    ch += 8;
                }
                for ch in ch..c {
                    let sum = offsets
                        .iter()
                        .fold(0f32, |s, &off| s + table[x_img[ch * ch_in + off] as usize]);
                    y_img[ch * ch_out + o * pos_out] = quantize(sum);
                }
            }
        }
        Ok(vec![tensor8(OP, t, &out_shape, out)?])
    }
}
