//! `RotaryEmbedding` (opset 23): rotates the first `rotary_embedding_dim`
//! features of every head by position-dependent angles given as cos/sin
//! caches, either as two halves or as interleaved pairs; the rest of the head
//! is copied. Inputs are 4-D `[batch, heads, seq, head_size]` or 3-D
//! `[batch, seq, heads·head_size]` (with `num_heads`). The caches are
//! `[max_position, rot/2]` indexed by `position_ids`, or `[batch, seq, rot/2]`
//! without them; a size-1 batch or sequence axis of the ids or caches
//! broadcasts. Computed in f32 (f64 for double) with the ONNX reference's
//! rounding after every product and sum for f16/bf16.

use super::support::{check_float, dispatch, rt, same_type, slice, wrap, FloatKernel};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::norm::Real;
use crate::ops::unary::kernel::Float;
use crate::ops::util::{fact, input, opt_fact, opt_input, par_rows};
use crate::tensor::{DType, Element, Tensor};

const OP: &str = "RotaryEmbedding";

/// A built RotaryEmbedding node.
#[derive(Debug)]
struct Rotary {
    interleaved: bool,
    /// `rotary_embedding_dim` (0: the whole head).
    dim: usize,
    /// `num_heads` (0: not given).
    heads: usize,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    if !(3..=4).contains(&ctx.num_inputs) || ctx.num_outputs != 1 {
        return Err(Error::op(
            OP,
            format!(
                "takes 3 or 4 inputs and 1 output, found {} and {}",
                ctx.num_inputs, ctx.num_outputs
            ),
        ));
    }
    let count = |name: &str| -> Result<usize> {
        let v = a.int(name, 0)?;
        super::support::count_attr(a, name, v, 0)
    };
    Ok(Box::new(Rotary {
        interleaved: a.int("interleaved", 0)? != 0,
        dim: count("rotary_embedding_dim")?,
        heads: count("num_heads")?,
    }))
}

/// The sizes of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geom {
    b: usize,
    s: usize,
    h: usize,
    /// Head size.
    d: usize,
    /// Rotated features per head (even).
    rot: usize,
    /// Whether the input is 3-D `[batch, seq, hidden]`.
    rank3: bool,
    /// The batch and sequence extents of the position ids (with them) or
    /// of the 3-D caches (without), each 1 or the full size.
    idx: [usize; 2],
    /// Rows of a 2-D cache (with position ids), else 0.
    positions: Option<usize>,
}

impl Rotary {
    fn geom(
        &self,
        x: &[usize],
        cos: &[usize],
        sin: &[usize],
        ids: Option<&[usize]>,
    ) -> Result<Geom> {
        let (b, s, h, d, rank3) = match *x {
            [b, h, s, d] => (b, s, h, d, false),
            [b, s, hidden] => {
                if self.heads == 0 {
                    return Err(Error::op(OP, "num_heads is required for a 3-D input"));
                }
                if !hidden.is_multiple_of(self.heads) {
                    return Err(Error::op(
                        OP,
                        format!(
                            "hidden size {hidden} is not a multiple of num_heads {}",
                            self.heads
                        ),
                    ));
                }
                (b, s, self.heads, hidden / self.heads, true)
            }
            _ => {
                return Err(Error::op(
                    OP,
                    format!("input must be 3-D or 4-D, found shape {x:?}"),
                ))
            }
        };
        let rot = if self.dim == 0 { d } else { self.dim };
        if rot > d || !rot.is_multiple_of(2) {
            return Err(Error::op(
                OP,
                format!("rotary_embedding_dim {rot} must be even and at most the head size {d}"),
            ));
        }
        if cos != sin {
            return Err(Error::op(
                OP,
                format!("cos_cache {cos:?} and sin_cache {sin:?} differ in shape"),
            ));
        }
        let fits = |got: usize, full: usize| got == full || got == 1;
        let (idx, positions) = match ids {
            Some(p) => {
                let ok = matches!(*p, [pb, ps] if fits(pb, b) && fits(ps, s))
                    && matches!(*cos, [_, c] if c == rot / 2);
                if !ok {
                    return Err(Error::op(
                        OP,
                        format!(
                            "with position_ids {p:?} (want [{b}, {s}]) the caches must be \
                             [max_position, {}], found {cos:?}",
                            rot / 2
                        ),
                    ));
                }
                ([p[0], p[1]], Some(cos[0]))
            }
            None => {
                let ok = matches!(*cos, [cb, cs, c] if fits(cb, b) && fits(cs, s) && c == rot / 2);
                if !ok {
                    return Err(Error::op(
                        OP,
                        format!(
                            "without position_ids the caches must be [{b}, {s}, {}], found {cos:?}",
                            rot / 2
                        ),
                    ));
                }
                ([cos[0], cos[1]], None)
            }
        };
        Ok(Geom {
            b,
            s,
            h,
            d,
            rot,
            rank3,
            idx,
            positions,
        })
    }
}

impl Operator for Rotary {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let (cos, sin) = (fact(OP, inputs, 1)?, fact(OP, inputs, 2)?);
        let ids = opt_fact(inputs, 3);
        check_float(OP, x.dtype, false)?;
        same_type(OP, "cos_cache", cos.dtype, x.dtype)?;
        same_type(OP, "sin_cache", sin.dtype, x.dtype)?;
        if let Some(p) = ids {
            check_ids(p.dtype)?;
        }
        if let (Some(xs), Some(cs), Some(ss)) = (&x.shape, &cos.shape, &sin.shape) {
            match ids.map(|p| p.shape.as_deref()) {
                None => {
                    self.geom(xs, cs, ss, None)?;
                }
                Some(Some(ps)) => {
                    self.geom(xs, cs, ss, Some(ps))?;
                }
                Some(None) => {}
            }
        }
        Ok(vec![x.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // Two products and a sum per rotated element, about.
        3 * outputs.first().and_then(|f| f.len()).unwrap_or(0) as u64
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let (cos, sin) = (input(OP, inputs, 1)?, input(OP, inputs, 2)?);
        let ids = opt_input(inputs, 3);
        same_type(OP, "cos_cache", cos.dtype(), x.dtype())?;
        same_type(OP, "sin_cache", sin.dtype(), x.dtype())?;
        let g = self.geom(x.shape(), cos.shape(), sin.shape(), ids.map(|t| t.shape()))?;
        let rows = match ids {
            Some(t) => {
                check_ids(t.dtype())?;
                let max = g.positions.unwrap_or(0);
                let v = t.to_i64_vec()?;
                if let Some(bad) = v.iter().find(|&&p| p < 0 || p as u64 >= max as u64) {
                    return Err(Error::op(
                        OP,
                        format!("position id {bad} is outside the caches' 0..{max}"),
                    ));
                }
                v.into_iter().map(|p| p as usize).collect()
            }
            // Without ids, cache row (b, s) is simply row b·S' + s.
            None => (0..g.idx[0] * g.idx[1]).collect(),
        };
        let k = Kernel {
            g,
            x,
            cos,
            sin,
            rows,
            interleaved: self.interleaved,
        };
        dispatch(OP, x.dtype(), false, &k)
    }
}

fn check_ids(d: DType) -> Result<()> {
    if d != DType::I64 {
        return Err(Error::op(
            OP,
            format!("position_ids must be int64, found {d}"),
        ));
    }
    Ok(())
}

struct Kernel<'a> {
    g: Geom,
    x: &'a Tensor,
    cos: &'a Tensor,
    sin: &'a Tensor,
    /// Per (batch, seq) entry of the ids (or caches) grid, the cache row.
    rows: Vec<usize>,
    interleaved: bool,
}

impl FloatKernel for Kernel<'_> {
    fn go<T: Float + Element, C: Real>(&self) -> Result<Vec<Tensor>> {
        let g = self.g;
        let x = slice::<T>(OP, "input", self.x)?;
        let cos = slice::<T>(OP, "cos_cache", self.cos)?;
        let sin = slice::<T>(OP, "sin_cache", self.sin)?;
        let half = g.rot / 2;
        let mut out = vec![T::default(); x.len()];
        let pick = |i: usize, n: usize| if n == 1 { 0 } else { i };
        par_rows(&mut out, g.d, |first, chunk| {
            for (r, o) in chunk.chunks_mut(g.d.max(1)).enumerate() {
                let r = first + r;
                let (b, s) = if g.rank3 {
                    (r / (g.s * g.h), (r / g.h) % g.s)
                } else {
                    (r / (g.h * g.s), r % g.s)
                };
                let cell = pick(b, g.idx[0]) * g.idx[1] + pick(s, g.idx[1]);
                let c0 = self.rows[cell] * half;
                let (cr, sr) = (&cos[c0..c0 + half], &sin[c0..c0 + half]);
                let xr = &x[r * g.d..(r + 1) * g.d];
                o.copy_from_slice(xr);
                for i in 0..half {
                    let (i1, i2) = if self.interleaved {
                        (2 * i, 2 * i + 1)
                    } else {
                        (i, i + half)
                    };
                    let (x1, x2) = (C::from_elem(xr[i1]), C::from_elem(xr[i2]));
                    let (c, sn) = (C::from_elem(cr[i]), C::from_elem(sr[i]));
                    let re = rt::<T, C>(c * x1) - rt::<T, C>(sn * x2);
                    let im = rt::<T, C>(sn * x1) + rt::<T, C>(c * x2);
                    o[i1] = re.to_elem();
                    o[i2] = im.to_elem();
                }
            }
        });
        Ok(vec![wrap(OP, self.x.shape(), out)?])
    }
}

#[cfg(test)]
#[path = "rotary_tests.rs"]
mod tests;
