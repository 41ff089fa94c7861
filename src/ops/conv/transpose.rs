//! `ConvTranspose`: the gradient of Conv with respect to its input. Per image
//! and group, a GEMM gives every (output channel, kernel offset) row times
//! every input position, then col2im adds those rows into the output planes,
//! one plane per task in a fixed order.

use super::geom::{AutoPad, Window, WindowAttrs};
use super::lines::Lines;
use super::{check_bias, finish_row, parse_group, run_float, FloatKernel};
use crate::error::{Error, Result};
use crate::ir::attributes::Attributes;
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::gemm::checked_product;
use crate::ops::gemm::engine::{Batched, GemmFloat, Mat};
use crate::ops::gemm::fused::Activation;
use crate::ops::parallel::SendPtr;
use crate::ops::util::{fact, input, opt_fact, opt_input, par_rows};
use crate::tensor::Tensor;

const OP: &str = "ConvTranspose";

/// A built ConvTranspose node.
#[derive(Debug)]
struct ConvTranspose {
    window: WindowAttrs,
    group: usize,
    output_padding: Option<Vec<usize>>,
    output_shape: Option<Vec<usize>>,
    act: Option<Activation>,
}

fn non_negative(attrs: &Attributes, name: &str) -> Result<Option<Vec<usize>>> {
    match attrs.ints_opt(name)? {
        None => Ok(None),
        Some(v) => v
            .iter()
            .map(|&x| {
                usize::try_from(x)
                    .map_err(|_| attrs.error(name, format!("values must be ≥ 0, found {v:?}")))
            })
            .collect::<Result<Vec<_>>>()
            .map(Some),
    }
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(ConvTranspose {
        window: WindowAttrs::parse(ctx.attrs, true)?,
        group: parse_group(ctx.attrs)?,
        output_padding: non_negative(ctx.attrs, "output_padding")?,
        output_shape: non_negative(ctx.attrs, "output_shape")?,
        act: ctx.fusion.activation,
    }))
}

/// The sizes of one ConvTranspose call.
#[derive(Debug, Clone)]
struct Plan {
    n: usize,
    c: usize,
    m: usize,
    group: usize,
    /// The window seen from the output: `input` holds the output spatial
    /// dims, `output` the input's, so that `valid_range` gives, for a kernel
    /// offset, the input positions that land inside the output.
    win: Window,
    out_shape: Vec<usize>,
}

impl ConvTranspose {
    fn plan(&self, x: &[usize], w: &[usize], b: Option<&[usize]>) -> Result<Plan> {
        if x.len() < 3 {
            return Err(Error::op(
                OP,
                format!("X must have rank ≥ 3 (N, C, spatial...), found shape {x:?}"),
            ));
        }
        if w.len() != x.len() {
            return Err(Error::op(
                OP,
                format!("W has shape {w:?}, expected rank {} like X {x:?}", x.len()),
            ));
        }
        let r = x.len() - 2;
        let (n, c, group) = (x[0], x[1], self.group);
        if w[0] != c {
            return Err(Error::op(
                OP,
                format!(
                    "X has {c} channels but W {w:?} expects {} (W.shape[0])",
                    w[0]
                ),
            ));
        }
        if c % group != 0 {
            return Err(Error::op(
                OP,
                format!("group {group} does not divide the {c} input channels"),
            ));
        }
        let m = w[1]
            .checked_mul(group)
            .ok_or_else(|| Error::op(OP, "channel count overflows"))?;
        let kernel = &w[2..];
        if let Some(k) = &self.window.kernel {
            if k.as_slice() != kernel {
                return Err(Error::op(
                    OP,
                    format!("kernel_shape {k:?} differs from W's spatial dims {kernel:?}"),
                ));
            }
        }
        check_bias(OP, b, m)?;
        let len_check = |name: &str, v: &Option<Vec<usize>>, want: &[usize]| -> Result<()> {
            match v {
                Some(v) if !want.contains(&v.len()) => Err(Error::op(
                    OP,
                    format!(
                        "{name} has {} values, expected {r} for {r} spatial dimensions",
                        v.len()
                    ),
                )),
                _ => Ok(()),
            }
        };
        let wa = &self.window;
        len_check("strides", &wa.strides, &[r])?;
        len_check("dilations", &wa.dilations, &[r])?;
        len_check("pads", &wa.pads, &[2 * r])?;
        len_check("output_padding", &self.output_padding, &[r])?;
        // output_shape may also list N and C first.
        len_check("output_shape", &self.output_shape, &[r, r + 2])?;
        let strides = wa.strides.clone().unwrap_or_else(|| vec![1; r]);
        let dilations = wa.dilations.clone().unwrap_or_else(|| vec![1; r]);
        let out_pad = self.output_padding.clone().unwrap_or_else(|| vec![0; r]);
        let requested = self
            .output_shape
            .as_ref()
            .map(|v| v[v.len() - r..].to_vec());
        let overflow = || Error::op(OP, "output size overflows");
        let (mut pad_begin, mut pad_end, mut out) = (vec![0; r], vec![0; r], vec![0; r]);
        for i in 0..r {
            let inp = x[2 + i];
            if kernel[i] == 0 {
                return Err(Error::op(OP, format!("kernel dimension {i} is 0")));
            }
            let dk = (kernel[i] - 1)
                .checked_mul(dilations[i])
                .and_then(|v| v.checked_add(1))
                .ok_or_else(overflow)?;
            // Extent of the full (unpadded) result.
            let full = inp
                .saturating_sub(1)
                .checked_mul(strides[i])
                .and_then(|v| v.checked_add(out_pad[i]))
                .and_then(|v| v.checked_add(dk))
                .ok_or_else(overflow)?;
            let target = match (&requested, wa.auto_pad) {
                (Some(req), _) => Some(req[i]),
                (None, AutoPad::SameUpper | AutoPad::SameLower) => {
                    Some(inp.checked_mul(strides[i]).ok_or_else(overflow)?)
                }
                _ => None,
            };
            match target {
                Some(t) => {
                    // A negative total padding leaves the extra outputs at
                    // the end holding only the bias.
                    let total = full.saturating_sub(t);
                    let (b, e) = if wa.auto_pad == AutoPad::SameUpper {
                        (total / 2, total - total / 2)
                    } else {
                        (total - total / 2, total / 2)
                    };
                    pad_begin[i] = b;
                    pad_end[i] = e;
                    out[i] = t;
                }
                None => {
                    let (b, e) = match (&wa.pads, wa.auto_pad) {
                        (Some(p), AutoPad::NotSet) => (p[i], p[i + r]),
                        _ => (0, 0),
                    };
                    out[i] = full.checked_sub(b).and_then(|v| v.checked_sub(e)).ok_or_else(|| {
                        Error::op(
                            OP,
                            format!(
                                "pads {b} + {e} exceed the output extent {full} along spatial axis {i}"
                            ),
                        )
                    })?;
                    pad_begin[i] = b;
                    pad_end[i] = e;
                }
            }
        }
        let mut out_shape = vec![n, m];
        out_shape.extend_from_slice(&out);
        checked_product(OP, &out_shape)?;
        Ok(Plan {
            n,
            c,
            m,
            group,
            win: Window {
                input: out,
                kernel: kernel.to_vec(),
                strides,
                dilations,
                pad_begin,
                pad_end,
                output: x[2..].to_vec(),
            },
            out_shape,
        })
    }
}

impl Operator for ConvTranspose {
    fn cost_class(&self) -> OpClass {
        OpClass::Conv
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let w = fact(OP, inputs, 1)?;
        let b = opt_fact(inputs, 2);
        super::check_types(OP, x.dtype, w.dtype, b.map(|b| b.dtype))?;
        let (Some(xs), Some(ws)) = (&x.shape, &w.shape) else {
            return Ok(vec![Fact::unknown_shape(x.dtype)]);
        };
        let bs = b.and_then(|f| f.shape.as_deref());
        let p = self.plan(xs, ws, bs)?;
        Ok(vec![Fact::new(x.dtype, p.out_shape)])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // Every input element meets W.shape[1]·prod(kernel) weights.
        let x = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64;
        let w = inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|f| f.shape.clone());
        let per_in = w.map_or(1, |w| {
            w.iter()
                .skip(1)
                .fold(1u64, |a, &d| a.saturating_mul(d as u64))
        });
        let out = outputs.first().and_then(|f| f.len()).unwrap_or(0) as u64;
        let bias = inputs.get(2).copied().flatten().map_or(0, |_| out);
        let act = self.act.map_or(0, |_| out);
        x.saturating_mul(per_in)
            .saturating_mul(2)
            .saturating_add(bias)
            .saturating_add(act)
            .max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let w = input(OP, inputs, 1)?;
        let b = opt_input(inputs, 2);
        let p = self.plan(x.shape(), w.shape(), b.map(|b| b.shape()))?;
        let k = Kernel {
            p: &p,
            act: self.act,
        };
        Ok(vec![run_float(OP, &k, x, w, b, None, &p.out_shape)?])
    }
}

struct Kernel<'a> {
    p: &'a Plan,
    act: Option<Activation>,
}

impl FloatKernel for Kernel<'_> {
    fn compute<T: GemmFloat>(
        &self,
        x: &[T],
        w: &[T],
        b: Option<&[T]>,
        _z: Option<&[T]>,
    ) -> Result<Vec<T>> {
        let p = self.p;
        let win = &p.win;
        let len = checked_product(OP, &p.out_shape)?;
        let mut y = vec![T::zero(); len];
        if len == 0 {
            return Ok(y);
        }
        let (cg, mg, group, m) = (p.c / p.group, p.m / p.group, p.group, p.m);
        let (in_plane, out_plane, klen) = (win.out_len(), win.in_len(), win.kernel_len());
        let rows = checked_product(OP, &[mg, klen])?;
        let col_len = checked_product(OP, &[group, rows, in_plane])?;
        let mut col = vec![T::zero(); col_len];
        let lines = Lines::new(win);
        let step = lines.step();
        for ni in 0..p.n {
            if cg > 0 && in_plane > 0 {
                let xi = Mat::row_major(x.as_ptr(), in_plane).offset(ni * p.c * in_plane);
                let cp = SendPtr(col.as_mut_ptr());
                // col[g] (rows × in_plane) = W[g]ᵀ (rows × cg) · X[ni, g] (cg × in_plane).
                let a = |g: usize| Mat::row_major(w.as_ptr(), rows).offset(g * cg * rows).t();
                let bm = |g: usize| xi.offset(g * cg * in_plane);
                let cm = |g: usize| cp.offset(g * rows * in_plane);
                let job = Batched {
                    batches: group,
                    m: rows,
                    n: in_plane,
                    k: cg,
                    alpha: T::one(),
                    a: &a,
                    b: &bm,
                    c: &cm,
                    epilogue: None,
                };
                // SAFETY: W is c×rows, X's image ni is c×in_plane, col is
                // group×rows×in_plane; the C of distinct groups are disjoint.
                unsafe { job.run() };
            }
            let yi = &mut y[ni * m * out_plane..(ni + 1) * m * out_plane];
            let col = &col;
            par_rows(yi, out_plane, |first, chunk| {
                for (r, out) in chunk.chunks_mut(out_plane).enumerate() {
                    let oc = first + r;
                    out.fill(T::zero());
                    if cg > 0 {
                        // Rows (oc's group, oc's index in it, k) of col.
                        let base = ((oc / mg) * rows + (oc % mg) * klen) * in_plane;
                        for k in 0..klen {
                            let src = &col[base + k * in_plane..base + (k + 1) * in_plane];
                            // Lines run over input positions (the window's
                            // "output") and land in the output plane.
                            lines.for_each(k, |ii, oo, len| {
                                for (j, &s) in src[ii..ii + len].iter().enumerate() {
                                    let d = &mut out[oo + j * step];
                                    *d = *d + s;
                                }
                            });
                        }
                    }
                    finish_row(out, b.map(|b| b[oc]), None, self.act);
                }
            });
        }
        Ok(y)
    }
}
