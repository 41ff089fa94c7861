//! DeformConv (opsets 19 and 22): a grouped convolution whose kernel taps are
//! moved by learned fractional offsets (deformable convolution v1, with the
//! optional `mask` of v2). X is `[N, C, D1..Dr]`, W `[oC, C/group, k1..kr]`,
//! `offset` `[N, offset_group·∏k·r, O1..Or]` (per offset group and kernel
//! tap, one displacement per spatial axis, outermost axis first), `mask`
//! `[N, offset_group·∏k, O1..Or]` (default ones) and B `[oC]` (default zeros).
//!
//! Tap `k` of output position `o` samples X at
//! `o·stride − pad_begin + k·dilation + offset`, by multilinear interpolation
//! between the 2^r surrounding pixels, each pixel outside the input counting
//! as zero (ONNX's reference: GridSample with `align_corners=1` and zero
//! padding; torchvision's `deform_conv2d`); a position that is not finite
//! samples zero. The samples, scaled by the mask, form the im2col matrix of
//! each batch entry, which the shared GEMM engine multiplies by W per group.
//! f32 and f64 compute in their own type, f16 and bf16 through f32.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::gemm::engine::{Batched, GemmFloat, Mat};
use crate::ops::gemm::{checked_product, from_f32_vec, to_f32_vec};
use crate::ops::parallel::SendPtr;
use crate::ops::util::{fact, input, opt_fact, opt_input, par_rows};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const OP: &str = "DeformConv";
/// Spatial axes at most (each sample reads 2^r pixels).
const MAX_SPATIAL: usize = 8;

#[derive(Debug)]
struct DeformConv {
    dilations: Option<Vec<i64>>,
    group: i64,
    kernel_shape: Option<Vec<i64>>,
    offset_group: i64,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let group = a.int("group", 1)?;
    if group < 1 {
        return Err(a.error("group", format!("must be at least 1, found {group}")));
    }
    let offset_group = a.int("offset_group", 1)?;
    if offset_group < 1 {
        return Err(a.error(
            "offset_group",
            format!("must be at least 1, found {offset_group}"),
        ));
    }
    Ok(Box::new(DeformConv {
        dilations: a.ints_opt("dilations")?,
        group,
        kernel_shape: a.ints_opt("kernel_shape")?,
        offset_group,
        pads: a.ints_opt("pads")?,
        strides: a.ints_opt("strides")?,
    }))
}

/// The checked geometry of one call.
#[derive(Debug, Clone, PartialEq)]
struct Geom {
    n: usize,
    c: usize,
    oc: usize,
    group: usize,
    offset_group: usize,
    input: Vec<usize>,
    kernel: Vec<usize>,
    output: Vec<usize>,
    stride: Vec<usize>,
    dil: Vec<usize>,
    pad: Vec<usize>,
}

impl Geom {
    fn taps(&self) -> usize {
        self.kernel.iter().product()
    }
    fn out_len(&self) -> usize {
        self.output.iter().product()
    }
    fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.oc];
        s.extend(&self.output);
        s
    }
}

fn list(name: &str, v: Option<&[i64]>, len: usize, default: i64, min: i64) -> Result<Vec<usize>> {
    let v = v.map(<[i64]>::to_vec).unwrap_or_else(|| vec![default; len]);
    if v.len() != len {
        return Err(Error::op(
            OP,
            format!("{name} has {} values, expected {len}", v.len()),
        ));
    }
    v.iter()
        .map(|&x| match usize::try_from(x) {
            Ok(u) if x >= min => Ok(u),
            _ => Err(Error::op(OP, format!("{name} has invalid value {x}"))),
        })
        .collect()
}

fn expect_shape(what: &str, got: &[usize], want: &[usize]) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::op(
            OP,
            format!("{what} must have shape {want:?}, found {got:?}"),
        ))
    }
}

impl DeformConv {
    /// Checks X, W and the attributes; computes the output spatial shape.
    fn geom(&self, x: &[usize], w: &[usize]) -> Result<Geom> {
        if x.len() < 3 {
            return Err(Error::op(
                OP,
                format!("X must be [N, C, D1, ...] with at least one spatial axis, found {x:?}"),
            ));
        }
        let r = x.len() - 2;
        if r > MAX_SPATIAL {
            return Err(Error::op(
                OP,
                format!("X {x:?} has {r} spatial axes; at most {MAX_SPATIAL} are supported"),
            ));
        }
        if w.len() != x.len() {
            return Err(Error::op(
                OP,
                format!("W {w:?} must have the rank of X {x:?}"),
            ));
        }
        let kernel = w[2..].to_vec();
        if let Some(k) = &self.kernel_shape {
            if list("kernel_shape", Some(k), r, 1, 1)? != kernel {
                return Err(Error::op(
                    OP,
                    format!("kernel_shape {k:?} does not match W's spatial shape {kernel:?}"),
                ));
            }
        }
        let (group, offset_group) = (self.group as usize, self.offset_group as usize);
        let (n, c, oc) = (x[0], x[1], w[0]);
        if w[1].checked_mul(group) != Some(c) || !oc.is_multiple_of(group) {
            return Err(Error::op(
                OP,
                format!(
                    "X has {c} channels and W {w:?}: with group {group}, C must be \
                     W[1]·group and oC a multiple of group"
                ),
            ));
        }
        if !c.is_multiple_of(offset_group) {
            return Err(Error::op(
                OP,
                format!("{c} input channels are not divisible by offset_group {offset_group}"),
            ));
        }
        let stride = list("strides", self.strides.as_deref(), r, 1, 1)?;
        let dil = list("dilations", self.dilations.as_deref(), r, 1, 1)?;
        let pad = list("pads", self.pads.as_deref(), 2 * r, 0, 0)?;
        let mut output = Vec::with_capacity(r);
        for i in 0..r {
            let span = kernel[i]
                .checked_sub(1)
                .and_then(|k| k.checked_mul(dil[i]))
                .and_then(|s| s.checked_add(1));
            let padded = x[2 + i]
                .checked_add(pad[i])
                .and_then(|s| s.checked_add(pad[r + i]));
            match (span, padded) {
                (Some(s), Some(p)) if p >= s => output.push((p - s) / stride[i] + 1),
                _ => {
                    return Err(Error::op(
                        OP,
                        format!(
                            "the kernel {kernel:?} (dilations {dil:?}) does not fit the padded \
                             input {:?} on axis {i}",
                            &x[2..]
                        ),
                    ))
                }
            }
        }
        let g = Geom {
            n,
            c,
            oc,
            group,
            offset_group,
            input: x[2..].to_vec(),
            kernel,
            output,
            stride,
            dil,
            pad,
        };
        // Every buffer the kernel allocates must be addressable.
        let taps = checked_product(OP, &g.kernel)?;
        let o = checked_product(OP, &g.output)?;
        checked_product(OP, &[n, oc, o])?;
        checked_product(OP, &[c, taps, o, 1 << r])?;
        checked_product(OP, &[n, offset_group, taps, r.max(1), o])?;
        checked_product(OP, x)?;
        Ok(g)
    }

    /// The expected shapes of offset and mask.
    fn side_shapes(g: &Geom) -> (Vec<usize>, Vec<usize>) {
        let r = g.input.len();
        let taps = g.offset_group * g.taps();
        let mut off = vec![g.n, taps * r];
        off.extend(&g.output);
        let mut mask = vec![g.n, taps];
        mask.extend(&g.output);
        (off, mask)
    }
}

/// One interpolation corner: the input offset (within a channel) and weight.
type Corner = (usize, f64);

/// For every (offset group, tap, output position), the 2^r corners it reads
/// (corners outside the input left out), for batch entry `b`.
fn corners(g: &Geom, offset: &[f64], mask: Option<&[f64]>, b: usize) -> Vec<Vec<Corner>> {
    let r = g.input.len();
    let (taps, o_len) = (g.taps(), g.out_len());
    let in_strides = crate::ops::shape::strides(&g.input);
    let mut out = Vec::with_capacity(g.offset_group * taps * o_len);
    let mut kidx = vec![0usize; r];
    let mut oidx = vec![0usize; r];
    let mut lo = vec![0i64; r];
    let mut frac = vec![0f64; r];
    for og in 0..g.offset_group {
        for t in 0..taps {
            unravel(t, &g.kernel, &mut kidx);
            // Offsets of this group and tap: r planes of o_len values.
            let plane0 = ((b * g.offset_group + og) * taps + t) * r * o_len;
            let m0 = ((b * g.offset_group + og) * taps + t) * o_len;
            for o in 0..o_len {
                unravel(o, &g.output, &mut oidx);
                let scale = mask.map_or(1.0, |m| m[m0 + o]);
                let mut inside = true;
                for d in 0..r {
                    let p = (oidx[d] * g.stride[d] + kidx[d] * g.dil[d]) as f64 - g.pad[d] as f64
                        + offset[plane0 + d * o_len + o];
                    // Beyond one pixel outside, every corner is outside.
                    if !(p > -1.0 && p < g.input[d] as f64) {
                        inside = false;
                        break;
                    }
                    let f = p.floor();
                    lo[d] = f as i64;
                    frac[d] = p - f;
                }
                let mut list = Vec::new();
                if inside {
                    for corner in 0..1usize << r {
                        let mut at = 0usize;
                        let mut w = scale;
                        let mut ok = true;
                        for d in 0..r {
                            let hi = (corner >> (r - 1 - d)) & 1 == 1;
                            let i = lo[d] + i64::from(hi);
                            if i < 0 || i >= g.input[d] as i64 {
                                ok = false;
                                break;
                            }
                            at += i as usize * in_strides[d];
                            w *= if hi { frac[d] } else { 1.0 - frac[d] };
                        }
                        if ok && w != 0.0 {
                            list.push((at, w));
                        }
                    }
                }
                out.push(list);
            }
        }
    }
    out
}

/// The multi-index of flat index `i` in `dims` (row-major).
fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for (o, &d) in out.iter_mut().zip(dims).rev() {
        *o = i % d;
        i /= d;
    }
}

/// Converts f64 weights to the compute type.
trait Compute: GemmFloat {
    fn of(v: f64) -> Self;
}
impl Compute for f32 {
    fn of(v: f64) -> f32 {
        v as f32
    }
}
impl Compute for f64 {
    fn of(v: f64) -> f64 {
        v
    }
}

/// The deformable convolution on row-major data of the compute type.
fn deform<T: Compute>(
    g: &Geom,
    x: &[T],
    w: &[T],
    offset: &[f64],
    mask: Option<&[f64]>,
    bias: Option<&[T]>,
) -> Vec<T> {
    let (taps, o_len) = (g.taps(), g.out_len());
    let plane: usize = g.input.iter().product();
    let c_per_og = g.c / g.offset_group;
    let (cg, ocg) = (g.c / g.group, g.oc / g.group);
    let kk = cg * taps;
    let mut out = vec![T::zero(); g.n * g.oc * o_len];
    let mut col = vec![T::zero(); g.c * taps * o_len];
    for b in 0..g.n {
        let cs = corners(g, offset, mask, b);
        let xb = &x[b * g.c * plane..(b + 1) * g.c * plane];
        // Row (c, t) of the column matrix: channel c sampled at tap t.
        par_rows(&mut col, o_len, |first, chunk| {
            for (i, row) in chunk.chunks_mut(o_len.max(1)).enumerate() {
                let (c, t) = ((first + i) / taps, (first + i) % taps);
                let src = &xb[c * plane..(c + 1) * plane];
                let base = ((c / c_per_og) * taps + t) * o_len;
                for (o, v) in row.iter_mut().enumerate() {
                    let mut acc = 0.0f64;
                    for &(at, wt) in &cs[base + o] {
                        acc += wt * src[at].to_f64().unwrap_or(0.0);
                    }
                    *v = T::of(acc);
                }
            }
        });
        let ob = &mut out[b * g.oc * o_len..(b + 1) * g.oc * o_len];
        let cp = SendPtr(ob.as_mut_ptr());
        let a = |grp: usize| Mat::row_major(w.as_ptr(), kk).offset(grp * ocg * kk);
        let bm = |grp: usize| Mat::row_major(col.as_ptr(), o_len).offset(grp * kk * o_len);
        let cm = |grp: usize| cp.offset(grp * ocg * o_len);
        let job = Batched {
            batches: g.group,
            m: ocg,
            n: o_len,
            k: kk,
            alpha: T::one(),
            a: &a,
            b: &bm,
            c: &cm,
            epilogue: None,
        };
        assert!(
            w.len() >= g.oc * kk && col.len() >= g.group * kk * o_len && ob.len() >= g.oc * o_len
        );
        // SAFETY: W is oC×kk, the column matrix group·kk×o_len and this
        // batch's output oC×o_len (checked above); the outputs of distinct
        // groups are disjoint row ranges.
        unsafe { job.run() };
        if let Some(bias) = bias {
            for (row, &bv) in ob.chunks_mut(o_len.max(1)).zip(bias) {
                row.iter_mut().for_each(|v| *v = *v + bv);
            }
        }
    }
    out
}

fn f64_data(t: &Tensor) -> Result<Vec<f64>> {
    t.to_f64_vec()
}

impl Operator for DeformConv {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        if !x.dtype.is_float() {
            return Err(Error::op(
                OP,
                format!("expected floating-point X, found {}", x.dtype),
            ));
        }
        let w = fact(OP, inputs, 1)?;
        let off = fact(OP, inputs, 2)?;
        let b = opt_fact(inputs, 3);
        let m = opt_fact(inputs, 4);
        for f in [Some(w), Some(off), b, m].into_iter().flatten() {
            if f.dtype != x.dtype {
                return Err(Error::op(
                    OP,
                    format!("all inputs must be {}, found {}", x.dtype, f.dtype),
                ));
            }
        }
        let (Some(xs), Some(ws)) = (&x.shape, &w.shape) else {
            return Ok(vec![Fact::unknown_shape(x.dtype)]);
        };
        let g = self.geom(xs, ws)?;
        let (off_shape, mask_shape) = Self::side_shapes(&g);
        if let Some(s) = &off.shape {
            expect_shape("offset", s, &off_shape)?;
        }
        if let Some(s) = m.and_then(|m| m.shape.as_ref()) {
            expect_shape("mask", s, &mask_shape)?;
        }
        if let Some(s) = b.and_then(|b| b.shape.as_ref()) {
            expect_shape("B", s, &[g.oc])?;
        }
        Ok(vec![Fact::new(x.dtype, g.out_shape())])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // 2 per multiply-add of the product, and per sampled column entry
        // about 2·2^r for the interpolation.
        let w = inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|f| f.shape.clone());
        let x = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.shape.clone());
        let out = outputs.first().and_then(|f| f.len()).unwrap_or(0) as u64;
        match (x, w) {
            (Some(x), Some(w)) if w.len() >= 2 && x.len() >= 3 => {
                let per_out: u64 = w[1..].iter().map(|&d| d as u64).product();
                let r = (x.len() - 2).min(16) as u32;
                let taps: u64 = w[2..].iter().map(|&d| d as u64).product();
                let oc = (w[0] as u64).max(1);
                let cols = out / oc * (x[1] as u64) * taps;
                (2 * per_out)
                    .saturating_mul(out)
                    .saturating_add(cols.saturating_mul(2u64 << r))
            }
            _ => out,
        }
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Conv
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let w = input(OP, inputs, 1)?;
        let off = input(OP, inputs, 2)?;
        let b = opt_input(inputs, 3);
        let m = opt_input(inputs, 4);
        let dt = x.dtype();
        if !dt.is_float() {
            return Err(Error::op(
                OP,
                format!("expected floating-point X, found {dt}"),
            ));
        }
        for t in [Some(w), Some(off), b, m].into_iter().flatten() {
            if t.dtype() != dt {
                return Err(Error::op(
                    OP,
                    format!("all inputs must be {dt}, found {}", t.dtype()),
                ));
            }
        }
        let g = self.geom(x.shape(), w.shape())?;
        let (off_shape, mask_shape) = Self::side_shapes(&g);
        expect_shape("offset", off.shape(), &off_shape)?;
        if let Some(m) = m {
            expect_shape("mask", m.shape(), &mask_shape)?;
        }
        if let Some(b) = b {
            expect_shape("B", b.shape(), &[g.oc])?;
        }
        let offset = f64_data(off)?;
        let mask = m.map(f64_data).transpose()?;
        let shape = g.out_shape();
        let out = if dt == DType::F64 {
            let v = |t: &Tensor| t.to_f64_vec();
            let bias = b.map(v).transpose()?;
            let y = deform(
                &g,
                &v(x)?,
                &v(w)?,
                &offset,
                mask.as_deref(),
                bias.as_deref(),
            );
            Tensor::F64(
                ArrayD::from_shape_vec(IxDyn(&shape), y)
                    .map_err(|_| Error::op(OP, "internal error: output shape"))?,
            )
        } else {
            let v = |t: &Tensor| to_f32_vec(OP, t);
            let bias = b.map(v).transpose()?;
            let y = deform(
                &g,
                &v(x)?,
                &v(w)?,
                &offset,
                mask.as_deref(),
                bias.as_deref(),
            );
            from_f32_vec(OP, x, &shape, y)?
        };
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{build_op, infer_and_run, int, ints, rand_vec};

    /// Bilinear sample of a zero-padded 2-D plane (the reference's GridSample).
    fn sample(x: &[f64], h: usize, w: usize, py: f64, px: f64) -> f64 {
        let (y0, x0) = (py.floor(), px.floor());
        let mut s = 0.0;
        for (dy, wy) in [(0.0, 1.0 - (py - y0)), (1.0, py - y0)] {
            for (dx, wx) in [(0.0, 1.0 - (px - x0)), (1.0, px - x0)] {
                let (yy, xx) = (y0 + dy, x0 + dx);
                if yy >= 0.0 && xx >= 0.0 && (yy as usize) < h && (xx as usize) < w {
                    s += wy * wx * x[yy as usize * w + xx as usize];
                }
            }
        }
        s
    }

    /// A literal 2-D transcription of the ONNX reference loops.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        x: &[f64],
        xs: [usize; 4],
        w: &[f64],
        ws: [usize; 4],
        off: &[f64],
        mask: Option<&[f64]>,
        bias: Option<&[f64]>,
        group: usize,
        og: usize,
        pads: [usize; 4],
        strides: [usize; 2],
        dil: [usize; 2],
    ) -> (Vec<f64>, [usize; 4]) {
        let [n, c, h, wd] = xs;
        let [oc, cg, kh, kw] = ws;
        let oh = (h + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) / strides[0] + 1;
        let ow = (wd + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) / strides[1] + 1;
        let ocg = oc / group;
        let cpo = c / og;
        let mut out = vec![0.0; n * oc * oh * ow];
        for b in 0..n {
            for o in 0..oc {
                for i in 0..oh {
                    for j in 0..ow {
                        let mut acc = bias.map_or(0.0, |bv| bv[o]);
                        for ci in 0..cg {
                            let ch = (o / ocg) * cg + ci;
                            let gi = ch / cpo;
                            for ki in 0..kh {
                                for kj in 0..kw {
                                    let t = ki * kw + kj;
                                    let oi = |d: usize| {
                                        ((((b * og + gi) * kh * kw + t) * 2 + d) * oh + i) * ow + j
                                    };
                                    let py = (i * strides[0] + ki * dil[0]) as f64 - pads[0] as f64
                                        + off[oi(0)];
                                    let px = (j * strides[1] + kj * dil[1]) as f64 - pads[1] as f64
                                        + off[oi(1)];
                                    let plane = &x[(b * c + ch) * h * wd..][..h * wd];
                                    let m = mask.map_or(1.0, |m| {
                                        m[(((b * og + gi) * kh * kw + t) * oh + i) * ow + j]
                                    });
                                    acc += w[((o * cg + ci) * kh + ki) * kw + kj]
                                        * m
                                        * sample(plane, h, wd, py, px);
                                }
                            }
                        }
                        out[((b * oc + o) * oh + i) * ow + j] = acc;
                    }
                }
            }
        }
        (out, [n, oc, oh, ow])
    }

    fn t32(shape: &[usize], v: &[f64]) -> Tensor {
        Tensor::from_vec(shape, v.iter().map(|&x| x as f32).collect()).unwrap()
    }

    #[allow(clippy::too_many_arguments)]
    fn check_case(
        xs: [usize; 4],
        ws: [usize; 4],
        group: usize,
        og: usize,
        pads: [usize; 4],
        strides: [usize; 2],
        dil: [usize; 2],
        with_mask: bool,
        with_bias: bool,
        seed: u64,
    ) {
        let f = |n: usize, s: u64, scale: f64| -> Vec<f64> {
            rand_vec(n, s).iter().map(|&v| v as f64 * scale).collect()
        };
        let x = f(xs.iter().product(), seed, 1.0);
        let w = f(ws.iter().product(), seed + 1, 1.0);
        let (kh, kw) = (ws[2], ws[3]);
        let oh = (xs[2] + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) / strides[0] + 1;
        let ow = (xs[3] + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) / strides[1] + 1;
        let off_shape = [xs[0], og * kh * kw * 2, oh, ow];
        let mask_shape = [xs[0], og * kh * kw, oh, ow];
        // Offsets up to ±3 pixels: many taps land partly or wholly outside.
        let off = f(off_shape.iter().product(), seed + 2, 3.0);
        let mask = f(mask_shape.iter().product(), seed + 3, 1.0);
        let bias = f(ws[0], seed + 4, 1.0);
        let (want, out_shape) = naive(
            &x,
            xs,
            &w,
            ws,
            &off,
            with_mask.then_some(&mask[..]),
            with_bias.then_some(&bias[..]),
            group,
            og,
            pads,
            strides,
            dil,
        );
        let attrs = [
            ("group", int(group as i64)),
            ("offset_group", int(og as i64)),
            ("pads", ints(&pads.map(|p| p as i64))),
            ("strides", ints(&strides.map(|p| p as i64))),
            ("dilations", ints(&dil.map(|p| p as i64))),
        ];
        let op = build_op("DeformConv", 22, &attrs, &[], 5, 1).unwrap();
        let (xt, wt, ot) = (t32(&xs, &x), t32(&ws, &w), t32(&off_shape, &off));
        let (mt, bt) = (t32(&mask_shape, &mask), t32(&[ws[0]], &bias));
        let y = infer_and_run(
            op.as_ref(),
            &[
                Some(&xt),
                Some(&wt),
                Some(&ot),
                with_bias.then_some(&bt),
                with_mask.then_some(&mt),
            ],
        )
        .unwrap()
        .remove(0);
        assert_eq!(y.shape(), &out_shape);
        let got = y.to_f64_vec().unwrap();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 + 1e-4 * b.abs(),
                "element {i}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn matches_the_reference_loops() {
        check_case(
            [1, 1, 3, 3],
            [1, 1, 2, 2],
            1,
            1,
            [0; 4],
            [1, 1],
            [1, 1],
            false,
            false,
            1,
        );
        check_case(
            [2, 4, 5, 6],
            [6, 2, 3, 2],
            2,
            2,
            [1, 0, 2, 1],
            [2, 1],
            [1, 2],
            true,
            true,
            7,
        );
        check_case(
            [1, 6, 4, 4],
            [3, 6, 1, 3],
            1,
            3,
            [0, 1, 0, 1],
            [1, 2],
            [1, 1],
            true,
            false,
            9,
        );
        check_case(
            [1, 4, 7, 5],
            [4, 1, 3, 3],
            4,
            1,
            [1; 4],
            [3, 2],
            [2, 1],
            false,
            true,
            11,
        );
    }

    #[test]
    fn zero_offsets_are_an_ordinary_convolution_and_f64_f16_agree() {
        // With zero offsets, DeformConv is Conv: a 1-channel 3×3 input and a
        // 2×2 kernel of ones sum each window.
        let x = Tensor::from_vec(&[1, 1, 3, 3], (0..9).map(|v| v as f64).collect()).unwrap();
        let w = Tensor::from_vec(&[1, 1, 2, 2], vec![1.0f64; 4]).unwrap();
        let off = Tensor::from_vec(&[1, 8, 2, 2], vec![0.0f64; 32]).unwrap();
        let op = build_op("DeformConv", 19, &[], &[], 3, 1).unwrap();
        let y = infer_and_run(op.as_ref(), &[Some(&x), Some(&w), Some(&off)])
            .unwrap()
            .remove(0);
        assert_eq!(
            y,
            Tensor::from_vec(&[1, 1, 2, 2], vec![8.0f64, 12.0, 20.0, 24.0]).unwrap()
        );
        // Half the offset moves every tap half a pixel right: the average of
        // neighbours (and zero beyond the right edge).
        let mut o = vec![0.0f64; 32];
        for t in 0..4 {
            for p in 0..4 {
                o[(t * 2 + 1) * 4 + p] = 0.5;
            }
        }
        let off = Tensor::from_vec(&[1, 8, 2, 2], o).unwrap();
        let y = infer_and_run(op.as_ref(), &[Some(&x), Some(&w), Some(&off)])
            .unwrap()
            .remove(0);
        assert_eq!(
            y,
            Tensor::from_vec(&[1, 1, 2, 2], vec![10.0f64, 9.5, 22.0, 18.5]).unwrap()
        );
        let h = |t: &Tensor| {
            Tensor::from_vec(
                t.shape(),
                t.to_f64_vec()
                    .unwrap()
                    .into_iter()
                    .map(half::f16::from_f64)
                    .collect(),
            )
            .unwrap()
        };
        let y16 = infer_and_run(op.as_ref(), &[Some(&h(&x)), Some(&h(&w)), Some(&h(&off))])
            .unwrap()
            .remove(0);
        assert_eq!(y16.dtype(), DType::F16);
        assert_eq!(y16.to_f64_vec().unwrap(), y.to_f64_vec().unwrap());
    }

    #[test]
    fn one_dimensional_and_empty_batches() {
        // 1-D: X [1, 1, 4], kernel 2, offset +1 on every tap: y[o] = x[o+1] + x[o+2].
        let x = Tensor::from_vec(&[1, 1, 4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let w = Tensor::from_vec(&[1, 1, 2], vec![1.0f32, 1.0]).unwrap();
        let off = Tensor::from_vec(&[1, 2, 3], vec![1.0f32; 6]).unwrap();
        let op = build_op("DeformConv", 22, &[], &[], 3, 1).unwrap();
        let y = infer_and_run(op.as_ref(), &[Some(&x), Some(&w), Some(&off)])
            .unwrap()
            .remove(0);
        assert_eq!(
            y,
            Tensor::from_vec(&[1, 1, 3], vec![5.0f32, 7.0, 4.0]).unwrap()
        );
        let x = Tensor::from_vec(&[0, 1, 4], Vec::<f32>::new()).unwrap();
        let off = Tensor::from_vec(&[0, 2, 3], Vec::<f32>::new()).unwrap();
        let y = op.run(&[Some(&x), Some(&w), Some(&off)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[0, 1, 3]);
    }

    #[test]
    fn non_finite_offsets_sample_zero() {
        let x = Tensor::from_vec(&[1, 1, 2, 2], vec![1.0f32; 4]).unwrap();
        let w = Tensor::from_vec(&[1, 1, 1, 1], vec![1.0f32]).unwrap();
        let off = Tensor::from_vec(
            &[1, 2, 2, 2],
            vec![f32::NAN, 0.0, f32::INFINITY, 1e30, 0.0, 0.0, 0.0, 0.0],
        )
        .unwrap();
        let op = build_op("DeformConv", 22, &[], &[], 3, 1).unwrap();
        let y = op.run(&[Some(&x), Some(&w), Some(&off)]).unwrap().remove(0);
        assert_eq!(
            y,
            Tensor::from_vec(&[1, 1, 2, 2], vec![0.0f32, 1.0, 0.0, 0.0]).unwrap()
        );
    }

    #[test]
    fn bad_shapes_and_attributes_are_errors() {
        let x = Tensor::from_vec(&[1, 2, 3, 3], vec![0.0f32; 18]).unwrap();
        let w = Tensor::from_vec(&[2, 2, 2, 2], vec![0.0f32; 16]).unwrap();
        let off = Tensor::from_vec(&[1, 8, 2, 2], vec![0.0f32; 32]).unwrap();
        let run = |attrs: &[(&str, crate::ir::attributes::Attribute)], ins: &[Option<&Tensor>]| {
            let op = build_op("DeformConv", 22, attrs, &[], 5, 1)?;
            infer_and_run(op.as_ref(), ins)
        };
        assert!(run(&[], &[Some(&x), Some(&w), Some(&off)]).is_ok());
        // Offset of the wrong size, or for two offset groups.
        let bad_off = Tensor::from_vec(&[1, 8, 3, 3], vec![0.0f32; 72]).unwrap();
        assert!(run(&[], &[Some(&x), Some(&w), Some(&bad_off)]).is_err());
        assert!(run(
            &[("offset_group", int(2))],
            &[Some(&x), Some(&w), Some(&off)]
        )
        .is_err());
        assert!(run(
            &[("offset_group", int(3))],
            &[Some(&x), Some(&w), Some(&off)]
        )
        .is_err());
        assert!(run(
            &[("offset_group", int(0))],
            &[Some(&x), Some(&w), Some(&off)]
        )
        .is_err());
        // Group mismatch, kernel_shape mismatch, kernel larger than the input.
        assert!(run(&[("group", int(2))], &[Some(&x), Some(&w), Some(&off)]).is_err());
        assert!(run(&[("group", int(-1))], &[Some(&x), Some(&w), Some(&off)]).is_err());
        assert!(run(
            &[("kernel_shape", ints(&[3, 3]))],
            &[Some(&x), Some(&w), Some(&off)]
        )
        .is_err());
        let big_w = Tensor::from_vec(&[1, 2, 4, 1], vec![0.0f32; 8]).unwrap();
        assert!(run(&[], &[Some(&x), Some(&big_w), Some(&off)]).is_err());
        assert!(run(
            &[("strides", ints(&[0, 1]))],
            &[Some(&x), Some(&w), Some(&off)]
        )
        .is_err());
        assert!(run(
            &[("pads", ints(&[1, 1]))],
            &[Some(&x), Some(&w), Some(&off)]
        )
        .is_err());
        assert!(run(
            &[("dilations", ints(&[-1, 1]))],
            &[Some(&x), Some(&w), Some(&off)]
        )
        .is_err());
        assert!(run(
            &[("dilations", ints(&[i64::MAX, 1]))],
            &[Some(&x), Some(&w), Some(&off)]
        )
        .is_err());
        // Bias and mask of the wrong shape; mixed types; integer input; rank 2.
        let b3 = Tensor::from_vec(&[3], vec![0.0f32; 3]).unwrap();
        assert!(run(&[], &[Some(&x), Some(&w), Some(&off), Some(&b3)]).is_err());
        let m = Tensor::from_vec(&[1, 4, 2, 1], vec![0.0f32; 8]).unwrap();
        assert!(run(&[], &[Some(&x), Some(&w), Some(&off), None, Some(&m)]).is_err());
        let off64 = Tensor::from_vec(&[1, 8, 2, 2], vec![0.0f64; 32]).unwrap();
        assert!(run(&[], &[Some(&x), Some(&w), Some(&off64)]).is_err());
        let xi = Tensor::from_vec(&[1, 2, 3, 3], vec![0i32; 18]).unwrap();
        assert!(run(&[], &[Some(&xi), Some(&w), Some(&off)]).is_err());
        let x2 = Tensor::from_vec(&[1, 2], vec![0.0f32; 2]).unwrap();
        assert!(run(&[], &[Some(&x2), Some(&w), Some(&off)]).is_err());
        // Too many spatial axes is an error, not an overflow.
        let deep = vec![1usize; 2 + 70];
        let xd = Tensor::from_vec(&deep, vec![0.0f32]).unwrap();
        assert!(run(&[], &[Some(&xd), Some(&xd), Some(&xd)]).is_err());
        assert!(run(&[], &[Some(&x), Some(&w)]).is_err());
    }
}
