//! `MeanVarianceNormalization` (`(x - mean) / (std + 1e-9)` over `axes`,
//! default `[0, 2, 3]`; X is permuted so the reduced axes are innermost) and
//! `LpNormalization` (`x / ‖x‖_p` along one axis, p = 1 or 2; 0 where the
//! norm is 0).

use super::rows::{normalize, stats, Affine};
use super::{check_float, dispatch, Kernel, Out, Real};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::unary::kernel::Float;
use crate::ops::util::{axes, axis, fact, input, out_len, par_rows};
use crate::tensor::recycle::take_or_default;
use crate::tensor::Tensor;
use ndarray::{ArrayViewD, IxDyn};

const MVN: &str = "MeanVarianceNormalization";
const LP: &str = "LpNormalization";

/// A built MeanVarianceNormalization node.
#[derive(Debug)]
struct Mvn {
    axes: Vec<i64>,
}

pub(super) fn build_mvn(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let axes = ctx.attrs.ints_opt("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    Ok(Box::new(Mvn { axes }))
}

impl Mvn {
    /// The permutation putting kept axes first and reduced axes last, and
    /// the number of reduced axes.
    fn perm(&self, rank: usize) -> Result<(Vec<usize>, usize)> {
        let mut red = axes(MVN, &self.axes, rank)?;
        red.sort_unstable();
        red.dedup();
        let mut perm: Vec<usize> = (0..rank).filter(|a| !red.contains(a)).collect();
        perm.extend(&red);
        Ok((perm, red.len()))
    }
}

struct MvnKernel<'a> {
    shape: &'a [usize],
    perm: Vec<usize>,
    reduced: usize,
}

impl Kernel for MvnKernel<'_> {
    fn compute<T: Float, C: Real>(&self, x: &[T]) -> Result<Out<T, C>> {
        let bad = |e| Error::op(MVN, format!("internal shape error: {e}"));
        let identity = self.perm.iter().enumerate().all(|(i, &p)| i == p);
        let pshape: Vec<usize> = self.perm.iter().map(|&p| self.shape[p]).collect();
        let kept = pshape.len() - self.reduced;
        let rows: usize = pshape[..kept].iter().product();
        let len: usize = pshape[kept..].iter().product();
        let xv = ArrayViewD::from_shape(IxDyn(self.shape), x).map_err(bad)?;
        let xp: Vec<T> = if identity {
            x.to_vec()
        } else {
            xv.permuted_axes(IxDyn(&self.perm))
                .as_standard_layout()
                .iter()
                .copied()
                .collect()
        };
        let eps = C::of(1e-9);
        let st: Vec<(C, C)> = stats::<T, C>(&xp, rows, len, true)
            .into_iter()
            .map(|(m, v)| (m, C::one() / (v.sqrt() + eps)))
            .collect();
        let y = normalize(&xp, len, &st, &Affine::none());
        if identity {
            return Ok(Out::y(y));
        }
        let mut inv = vec![0; self.perm.len()];
        for (i, &p) in self.perm.iter().enumerate() {
            inv[p] = i;
        }
        let yv = ArrayViewD::from_shape(IxDyn(&pshape), &y[..]).map_err(bad)?;
        let back = yv.permuted_axes(IxDyn(&inv));
        Ok(Out::y(back.as_standard_layout().iter().copied().collect()))
    }
}

impl Operator for Mvn {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(MVN, inputs, 0)?;
        check_float(MVN, x)?;
        if let Some(s) = &x.shape {
            self.perm(s.len())?;
        }
        Ok(vec![x.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0).saturating_mul(8).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(MVN, inputs, 0)?;
        let (perm, reduced) = self.perm(x.shape().len())?;
        let k = MvnKernel {
            shape: x.shape(),
            perm,
            reduced,
        };
        dispatch(MVN, x, &k)
    }
}

/// A built LpNormalization node.
#[derive(Debug)]
struct Lp {
    axis: i64,
    p: i64,
}

pub(super) fn build_lp(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let p = ctx.attrs.int("p", 2)?;
    if p != 1 && p != 2 {
        return Err(ctx.attrs.error("p", format!("must be 1 or 2, found {p}")));
    }
    Ok(Box::new(Lp {
        axis: ctx.attrs.int("axis", -1)?,
        p,
    }))
}

struct LpKernel {
    outer: usize,
    n: usize,
    inner: usize,
    p: i64,
}

impl Kernel for LpKernel {
    fn compute<T: Float, C: Real>(&self, x: &[T]) -> Result<Out<T, C>> {
        let (n, inner) = (self.n, self.inner);
        let block = n * inner;
        // Every element is written below: a recycled buffer will do.
        let mut y = take_or_default::<T>(x.len());
        if x.is_empty() || self.outer == 0 {
            return Ok(Out::y(y));
        }
        let l2 = self.p == 2;
        par_rows(&mut y, block, |first, chunk| {
            let mut norm = vec![C::zero(); inner];
            for (i, yo) in chunk.chunks_mut(block).enumerate() {
                let xs = &x[(first + i) * block..(first + i + 1) * block];
                norm.iter_mut().for_each(|v| *v = C::zero());
                // Each norm sums along the axis in order, one thread per block.
                for xr in xs.chunks(inner) {
                    for (s, &v) in norm.iter_mut().zip(xr) {
                        let v = C::from_elem(v);
                        *s = *s + if l2 { v * v } else { v.abs() };
                    }
                }
                if l2 {
                    norm.iter_mut().for_each(|v| *v = v.sqrt());
                }
                for (yr, xr) in yo.chunks_mut(inner).zip(xs.chunks(inner)) {
                    for ((o, &v), &d) in yr.iter_mut().zip(xr).zip(&norm) {
                        // A zero norm gives 0, not 0/0 (as ONNX's reference).
                        *o = if d == C::zero() {
                            C::zero().to_elem()
                        } else {
                            (C::from_elem(v) / d).to_elem()
                        };
                    }
                }
            }
        });
        Ok(Out::y(y))
    }
}

impl Operator for Lp {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(LP, inputs, 0)?;
        check_float(LP, x)?;
        if let Some(s) = &x.shape {
            axis(LP, self.axis, s.len())?;
        }
        Ok(vec![x.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0).saturating_mul(3).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(LP, inputs, 0)?;
        let s = x.shape();
        let a = axis(LP, self.axis, s.len())?;
        let k = LpKernel {
            outer: s[..a].iter().product(),
            n: s.get(a).copied().unwrap_or(1),
            inner: s[(a + 1).min(s.len())..].iter().product(),
            p: self.p,
        };
        dispatch(LP, x, &k)
    }
}
