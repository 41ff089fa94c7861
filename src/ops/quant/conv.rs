//! ConvInteger and QLinearConv: N-D grouped, strided, dilated, padded
//! convolution of zero-point-shifted 8-bit integers, accumulated exactly in
//! wrapping i32 by a direct kernel (padding contributes zero after the shift,
//! i.e. the input's zero point). QLinearConv adds the i32 bias and
//! requantizes with `x_scale · w_scale / y_scale`, per output channel when
//! `w_scale` is 1-D.

use super::conv_int8::{self, Prepared};
use super::matmul::requantize;
use super::{float_values, to_i32};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::conv::geom::{Window, WindowAttrs};
use crate::ops::util::{fact, input, opt_input, par_rows};
use crate::tensor::{DType, Tensor};

#[derive(Debug)]
struct QConv {
    name: &'static str,
    window: WindowAttrs,
    group: usize,
    /// QLinearConv (inputs x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B).
    linear: bool,
    /// The weights packed for the fast path, when constant at build.
    prepared: Option<Prepared>,
    /// QLinearConv's requantization scales, when constant at build.
    scale: Option<Vec<f32>>,
    /// QLinearConv's bias, when constant at build.
    bias: Option<Vec<i32>>,
}

fn build(ctx: &BuildContext, name: &'static str, linear: bool) -> Result<Box<dyn Operator>> {
    let g = ctx.attrs.int("group", 1)?;
    let group = usize::try_from(g)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| ctx.attrs.error("group", format!("must be ≥ 1, found {g}")))?;
    let (w_at, wz_at) = if linear { (3, 5) } else { (1, 3) };
    let wz_known = ctx.num_inputs <= wz_at || ctx.constant(wz_at).is_some();
    let prepared = match ctx.constant(w_at) {
        Some(w) if wz_known => conv_int8::prepare(w, ctx.constant(wz_at), group)?,
        _ => None,
    };
    // Per-channel constants converted once here instead of every run; a
    // malformed one is left to the run, which reports it.
    let constants: Vec<Option<&Tensor>> = (0..ctx.num_inputs).map(|i| ctx.constant(i)).collect();
    let m = ctx.constant(w_at).and_then(|w| w.shape().first().copied());
    let (scale, bias) = match m {
        Some(m) if linear => (
            output_scales(name, &constants, m).ok(),
            bias_of(name, &constants, m).ok().flatten(),
        ),
        _ => (None, None),
    };
    Ok(Box::new(QConv {
        name,
        window: WindowAttrs::parse(ctx.attrs, true)?,
        group,
        linear,
        prepared,
        scale,
        bias,
    }))
}

pub(super) fn build_conv_integer(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, "ConvInteger", false)
}

pub(super) fn build_qlinear_conv(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, "QLinearConv", true)
}

impl QConv {
    /// The fast path ([`conv_int8`]) for 2-D convolutions of contiguous
    /// data; `None` where it does not apply.
    fn run_fast(
        &self,
        inputs: &[Option<&Tensor>],
        (x, w): (&Tensor, &Tensor),
        (win, out_shape): (&Window, &[usize]),
        (xz, wz): (Option<&Tensor>, Option<&Tensor>),
    ) -> Result<Option<Tensor>> {
        let op = self.name;
        if win.rank() != 2 || !x.is_standard_layout() {
            return Ok(None);
        }
        let packed_now;
        let prep = match &self.prepared {
            Some(p) => p,
            None => {
                packed_now = conv_int8::prepare(w, wz, self.group)?;
                match &packed_now {
                    Some(p) => p,
                    None => return Ok(None),
                }
            }
        };
        let zero_x = match xz {
            None => 0,
            Some(z) => scalar_i32(op, z, "x zero point")?,
        };
        let m = w.shape()[0];
        let (scale_now, bias_now);
        let (bias, output) = if self.linear {
            let scale = match &self.scale {
                Some(s) => s,
                None => {
                    scale_now = output_scales(op, inputs, m)?;
                    &scale_now
                }
            };
            let bias = match &self.bias {
                Some(b) => Some(&b[..]),
                None => {
                    bias_now = bias_of(op, inputs, m)?;
                    bias_now.as_deref()
                }
            };
            let yz = input(op, inputs, 7)?;
            let output = conv_int8::Output::Quant {
                scale,
                zero: scalar_i32(op, yz, "y zero point")?,
                signed: yz.dtype() == DType::I8,
            };
            (bias, output)
        } else {
            (None, conv_int8::Output::Wide)
        };
        let conv = conv_int8::Conv {
            win,
            group: self.group,
            zero_x,
            bias,
            output,
        };
        conv.run(prep, x, out_shape).map(Some)
    }

    fn w_index(&self) -> usize {
        if self.linear {
            3
        } else {
            1
        }
    }

    /// The window and output shape for X and W shapes.
    fn plan(&self, x: &[usize], w: &[usize]) -> Result<(Window, Vec<usize>)> {
        let op = self.name;
        if x.len() < 3 || w.len() != x.len() {
            return Err(Error::op(
                op,
                format!("X {x:?} must have rank ≥ 3 and W {w:?} the same rank"),
            ));
        }
        let (c, m) = (x[1], w[0]);
        if c != w[1] * self.group || m % self.group != 0 {
            return Err(Error::op(
                op,
                format!(
                    "channels do not match: X {x:?}, W {w:?}, group {}",
                    self.group
                ),
            ));
        }
        let win = self.window.resolve(op, &x[2..], &w[2..], false)?;
        let mut out = vec![x[0], m];
        out.extend_from_slice(&win.output);
        Ok((win, out))
    }
}

/// The i32 convolution of shifted X [n, c, ...] with shifted W [m, c/g, ...].
fn conv_i32(win: &Window, group: usize, x: &[i32], xs: &[usize], w: &[i32], m: usize) -> Vec<i32> {
    let (c, r) = (xs[1], win.rank());
    let (cg, mg) = (c / group, m / group);
    let (in_len, out_len, k_len) = (win.in_len(), win.out_len(), win.kernel_len());
    let mut out = vec![0i32; xs[0] * m * out_len];
    par_rows(&mut out, out_len, |first, chunk| {
        let mut opos = vec![0usize; r];
        let mut kpos = vec![0usize; r];
        for (pi, plane) in chunk.chunks_mut(out_len.max(1)).enumerate() {
            let (n, oc) = ((first + pi) / m, (first + pi) % m);
            let g = oc / mg;
            for (o, dst) in plane.iter_mut().enumerate() {
                let mut f = o;
                for d in (0..r).rev() {
                    opos[d] = f % win.output[d];
                    f /= win.output[d];
                }
                let mut acc = 0i32;
                for kk in 0..k_len {
                    let mut f = kk;
                    for d in (0..r).rev() {
                        kpos[d] = f % win.kernel[d];
                        f /= win.kernel[d];
                    }
                    let mut at = 0usize;
                    let mut inside = true;
                    for d in 0..r {
                        let p = (opos[d] * win.strides[d] + kpos[d] * win.dilations[d]) as isize
                            - win.pad_begin[d] as isize;
                        if p < 0 || p >= win.input[d] as isize {
                            inside = false;
                            break;
                        }
                        at = at * win.input[d] + p as usize;
                    }
                    if !inside {
                        continue;
                    }
                    for ci in 0..cg {
                        let xv = x[(n * c + g * cg + ci) * in_len + at];
                        let wv = w[(oc * cg + ci) * k_len + kk];
                        acc = acc.wrapping_add(xv.wrapping_mul(wv));
                    }
                }
                *dst = acc;
            }
        }
    });
    out
}

/// `w - zp` with a per-tensor or per-output-channel zero point.
fn shift_w(op: &str, w: &Tensor, zp: Option<&Tensor>) -> Result<Vec<i32>> {
    let mut v = to_i32(op, w)?;
    if let Some(z) = zp {
        let zv = to_i32(op, z)?;
        let m = w.shape()[0];
        let per = v.len() / m.max(1);
        if zv.len() == 1 {
            v.iter_mut().for_each(|e| *e = e.wrapping_sub(zv[0]));
        } else if zv.len() == m && z.shape().len() == 1 {
            for (i, e) in v.iter_mut().enumerate() {
                *e = e.wrapping_sub(zv[i / per.max(1)]);
            }
        } else {
            return Err(Error::op(
                op,
                format!(
                    "w zero point must be a scalar or have shape [{m}], found {:?}",
                    z.shape()
                ),
            ));
        }
    }
    Ok(v)
}

fn shift_x(op: &str, x: &Tensor, zp: Option<&Tensor>) -> Result<Vec<i32>> {
    let mut v = to_i32(op, x)?;
    if let Some(z) = zp {
        let zv = to_i32(op, z)?;
        if zv.len() != 1 {
            return Err(Error::op(op, "x zero point must be a scalar"));
        }
        v.iter_mut().for_each(|e| *e = e.wrapping_sub(zv[0]));
    }
    Ok(v)
}

/// The single value of a scalar (or one-element) integer tensor.
fn scalar_i32(op: &str, t: &Tensor, what: &str) -> Result<i32> {
    let v = to_i32(op, t)?;
    match v[..] {
        [z] => Ok(z),
        _ => Err(Error::op(op, format!("{what} must be a scalar"))),
    }
}

/// QLinearConv's optional int32 bias B (input 8) of shape [m].
fn bias_of(op: &str, inputs: &[Option<&Tensor>], m: usize) -> Result<Option<Vec<i32>>> {
    let Some(b) = opt_input(inputs, 8) else {
        return Ok(None);
    };
    let bv = b.view::<i32>()?;
    if bv.len() != m || b.shape().len() != 1 {
        return Err(Error::op(op, format!("B must be int32 of shape [{m}]")));
    }
    Ok(Some(bv.iter().copied().collect()))
}

/// QLinearConv's requantization scales `x_scale · w_scale / y_scale` in
/// f32, as onnxruntime computes them: one, or one per output channel.
fn output_scales(op: &str, inputs: &[Option<&Tensor>], m: usize) -> Result<Vec<f32>> {
    let xs = float_values(op, input(op, inputs, 1)?)?;
    let ws = float_values(op, input(op, inputs, 4)?)?;
    let ys = float_values(op, input(op, inputs, 6)?)?;
    if xs.len() != 1 || ys.len() != 1 || !(ws.len() == 1 || ws.len() == m) {
        return Err(Error::op(
            op,
            "x_scale and y_scale must be scalars, w_scale a scalar or one per output channel",
        ));
    }
    Ok(ws
        .iter()
        .map(|&w| xs[0] as f32 * w as f32 / ys[0] as f32)
        .collect())
}

fn check8(op: &str, t: DType) -> Result<()> {
    if matches!(t, DType::U8 | DType::I8) {
        Ok(())
    } else {
        Err(Error::op(
            op,
            format!("expected uint8 or int8 data, found {t}"),
        ))
    }
}

impl Operator for QConv {
    fn cost_class(&self) -> OpClass {
        OpClass::Conv
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(self.name, inputs, 0)?;
        let w = fact(self.name, inputs, self.w_index())?;
        check8(self.name, x.dtype)?;
        check8(self.name, w.dtype)?;
        let dtype = if self.linear {
            let t = fact(self.name, inputs, 7)?.dtype;
            check8(self.name, t)?;
            t
        } else {
            DType::I32
        };
        let shape = match (&x.shape, &w.shape) {
            (Some(xs), Some(ws)) => Some(self.plan(xs, ws)?.1),
            _ => None,
        };
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype,
            shape,
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let w = inputs.get(self.w_index()).copied().flatten();
        let per: usize = w
            .and_then(|f| f.shape.as_ref())
            .map(|s| s[1..].iter().product())
            .unwrap_or(1);
        (2 * per as u64 * crate::ops::util::out_len(outputs, 0)).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name;
        let x = input(op, inputs, 0)?;
        let w = input(op, inputs, self.w_index())?;
        check8(op, x.dtype())?;
        check8(op, w.dtype())?;
        let (win, out_shape) = self.plan(x.shape(), w.shape())?;
        let m = w.shape()[0];
        let (xz, wz) = if self.linear {
            (Some(input(op, inputs, 2)?), Some(input(op, inputs, 5)?))
        } else {
            (opt_input(inputs, 2), opt_input(inputs, 3))
        };
        if let Some(y) = self.run_fast(inputs, (x, w), (&win, &out_shape), (xz, wz))? {
            return Ok(vec![y]);
        }
        let xv = shift_x(op, x, xz)?;
        let wv = shift_w(op, w, wz)?;
        let mut acc = conv_i32(&win, self.group, &xv, x.shape(), &wv, m);
        if !self.linear {
            return Ok(vec![Tensor::from_vec(&out_shape, acc)?]);
        }
        let plane = win.out_len();
        if let Some(b) = opt_input(inputs, 8) {
            let bv = b.view::<i32>()?;
            if bv.len() != m || b.shape().len() != 1 {
                return Err(Error::op(op, format!("B must be int32 of shape [{m}]")));
            }
            let bv: Vec<i32> = bv.iter().copied().collect();
            for (i, e) in acc.iter_mut().enumerate() {
                *e = e.wrapping_add(bv[(i / plane.max(1)) % m]);
            }
        }
        let xs = float_values(op, input(op, inputs, 1)?)?;
        let ws_t = input(op, inputs, 4)?;
        let ws = float_values(op, ws_t)?;
        let ys = float_values(op, input(op, inputs, 6)?)?;
        if xs.len() != 1 || ys.len() != 1 || !(ws.len() == 1 || ws.len() == m) {
            return Err(Error::op(
                op,
                "x_scale and y_scale must be scalars, w_scale a scalar or one per output channel",
            ));
        }
        let st = ws_t.dtype();
        let scales: Vec<f64> = ws
            .iter()
            .map(|&w| super::round_to(st, super::round_to(st, xs[0] * w) / ys[0]))
            .collect();
        let yz = input(op, inputs, 7)?;
        let zv = to_i32(op, yz)?;
        if zv.len() != 1 {
            return Err(Error::op(op, "y zero point must be a scalar"));
        }
        let out = requantize(
            op,
            &acc,
            |i| {
                scales[if scales.len() == 1 {
                    0
                } else {
                    (i / plane.max(1)) % m
                }]
            },
            |_| zv[0] as f64,
            yz.dtype(),
            &out_shape,
        )?;
        Ok(vec![out])
    }
}

/// The naive kernel and shifts, for the fast path's tests.
#[cfg(test)]
pub(super) mod tests_support {
    use super::*;

    /// `x − zp` as i32 (any 8-bit type).
    pub(crate) fn shifted(x: &Tensor, zp: i32) -> Vec<i32> {
        to_i32("test", x)
            .unwrap()
            .into_iter()
            .map(|v| v - zp)
            .collect()
    }

    pub(crate) fn naive_i32(
        win: &Window,
        group: usize,
        x: &[i32],
        xs: &[usize],
        w: &[i32],
        m: usize,
    ) -> Vec<i32> {
        conv_i32(win, group, x, xs, w, m)
    }
}
