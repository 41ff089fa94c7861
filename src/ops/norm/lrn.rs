//! `LRN`: local response normalization across channels,
//! `y = x / (bias + alpha / size · Σ x²)^beta` where the sum runs over the
//! channels `c - ⌊(size-1)/2⌋ ..= c + ⌈(size-1)/2⌉` clipped to the tensor.

use super::{check_float, check_rank, dispatch, Kernel, Out, Real};
use crate::error::Result;
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::unary::kernel::Float;
use crate::ops::util::{fact, input, out_len, par_rows};
use crate::tensor::recycle::take_or_default;
use crate::tensor::Tensor;

const OP: &str = "LRN";

/// A built LRN node.
#[derive(Debug, Clone, Copy)]
struct Lrn {
    alpha: f64,
    beta: f64,
    bias: f64,
    size: usize,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let size = a.int_req("size")?;
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s >= 1)
        .ok_or_else(|| a.error("size", format!("must be ≥ 1, found {size}")))?;
    Ok(Box::new(Lrn {
        alpha: a.float("alpha", 1e-4)? as f64,
        beta: a.float("beta", 0.75)? as f64,
        bias: a.float("bias", 1.0)? as f64,
        size,
    }))
}

struct LrnKernel {
    op: Lrn,
    c: usize,
    plane: usize,
}

impl Kernel for LrnKernel {
    fn compute<T: Float, C: Real>(&self, x: &[T]) -> Result<Out<T, C>> {
        let (c, plane) = (self.c, self.plane);
        // Every element is written below: a recycled buffer will do.
        let mut y = take_or_default::<T>(x.len());
        if x.is_empty() {
            return Ok(Out::y(y));
        }
        let before = (self.op.size - 1) / 2;
        let after = self.op.size - 1 - before;
        let scale = C::of(self.op.alpha / self.op.size as f64);
        let (bias, beta) = (C::of(self.op.bias), C::of(self.op.beta));
        par_rows(&mut y, plane, |first, chunk| {
            let mut acc = vec![C::zero(); plane];
            for (i, yo) in chunk.chunks_mut(plane).enumerate() {
                let p = first + i;
                let (n, ch) = (p / c, p % c);
                let lo = ch.saturating_sub(before);
                let hi = (ch + after).min(c - 1);
                acc.iter_mut().for_each(|a| *a = C::zero());
                for k in lo..=hi {
                    let xs = &x[(n * c + k) * plane..(n * c + k + 1) * plane];
                    for (a, &v) in acc.iter_mut().zip(xs) {
                        let v = C::from_elem(v);
                        *a = *a + v * v;
                    }
                }
                let xs = &x[p * plane..(p + 1) * plane];
                let base = acc.iter().map(|&s| bias + scale * s);
                for ((o, &v), d) in yo.iter_mut().zip(xs).zip(base) {
                    *o = (C::from_elem(v) / pow_beta(d, beta)).to_elem();
                }
            }
        });
        Ok(Out::y(y))
    }
}

impl Operator for Lrn {
    fn cost_class(&self) -> OpClass {
        OpClass::Window
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        check_float(OP, x)?;
        if let Some(s) = &x.shape {
            check_rank(OP, s, 2, "N, C, spatial...")?;
        }
        Ok(vec![x.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
            .saturating_mul(2 * self.size as u64 + 4)
            .max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let s = x.shape();
        check_rank(OP, s, 2, "N, C, spatial...")?;
        let k = LrnKernel {
            op: *self,
            c: s[1],
            plane: s[2..].iter().product(),
        };
        dispatch(OP, x, &k)
    }
}

/// `d^beta`, with the common exponents (0.75 is the default) as square
/// roots: several times faster than `powf` and within an ulp or two of it.
#[inline(always)]
fn pow_beta<C: Real>(d: C, beta: C) -> C {
    if beta == C::of(0.75) {
        let r = d.sqrt();
        r * r.sqrt()
    } else if beta == C::of(0.5) {
        d.sqrt()
    } else if beta == C::one() {
        d
    } else {
        d.powf(beta)
    }
}
