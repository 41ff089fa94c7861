//! The global pools: `GlobalAveragePool`, `GlobalMaxPool`, `GlobalLpPool`.
//! Each (n, c) plane is contiguous, so each output is one reduction over a
//! slice with eight independent lanes (vectorisable, and in a fixed order so
//! results do not depend on the thread count); planes run in parallel.

use super::{parse_p, wrap};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::gemm::{contiguous, from_f32_vec, to_f32_vec};
use crate::ops::util::{fact, input, MIN_PARALLEL_GRAIN};
use crate::tensor::Tensor;
use num_traits::Float;

/// Which global pool.
#[derive(Debug, Clone, Copy, PartialEq)]
enum GKind {
    Avg,
    Max,
    Lp(f64),
}

/// A built global pool node.
#[derive(Debug)]
struct Global {
    kind: GKind,
}

pub(super) fn build_avg(_: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Global { kind: GKind::Avg }))
}

pub(super) fn build_max(_: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Global { kind: GKind::Max }))
}

pub(super) fn build_lp(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Global {
        kind: GKind::Lp(parse_p(ctx)?),
    }))
}

/// Sums `map(x)` over `v` in eight lanes (`add` combines), then the
/// lanes pairwise and the tail in order.
#[inline(always)]
fn lanes<T: Copy>(v: &[T], init: T, map: impl Fn(T) -> T, add: impl Fn(T, T) -> T) -> T {
    let mut acc = [init; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            acc[i] = add(acc[i], map(c[i]));
        }
    }
    let a = add(add(acc[0], acc[4]), add(acc[1], acc[5]));
    let b = add(add(acc[2], acc[6]), add(acc[3], acc[7]));
    tail.iter().fold(add(a, b), |s, &x| add(s, map(x)))
}

/// Average of each of the `planes` contiguous planes of `x`.
pub(super) fn plane_averages<T: Float + Send + Sync>(x: &[T], planes: usize) -> Vec<T> {
    Global { kind: GKind::Avg }.compute(x, planes)
}

/// Maximum of each of the `planes` contiguous planes of `x`.
pub(super) fn plane_maxima<T: Float + Send + Sync>(x: &[T], planes: usize) -> Vec<T> {
    Global { kind: GKind::Max }.compute(x, planes)
}

/// Lp norm of each of the `planes` contiguous planes of `x`.
pub(super) fn plane_norms<T: Float + Send + Sync>(x: &[T], planes: usize, p: f64) -> Vec<T> {
    Global { kind: GKind::Lp(p) }.compute(x, planes)
}

impl Global {
    fn name(&self) -> &'static str {
        match self.kind {
            GKind::Avg => "GlobalAveragePool",
            GKind::Max => "GlobalMaxPool",
            GKind::Lp(_) => "GlobalLpPool",
        }
    }

    fn out_shape(&self, x: &[usize]) -> Result<Vec<usize>> {
        if x.len() < 2 {
            return Err(Error::op(
                self.name(),
                format!("X must have rank ≥ 2 (N, C, spatial...), found shape {x:?}"),
            ));
        }
        let mut s = x.to_vec();
        s[2..].iter_mut().for_each(|d| *d = 1);
        Ok(s)
    }

    /// One plane's result.
    #[inline]
    fn reduce<T: Float>(&self, v: &[T]) -> T {
        match self.kind {
            GKind::Avg => {
                let s = lanes(v, T::zero(), |x| x, |a, b| a + b);
                s / T::from(v.len()).unwrap_or_else(T::one)
            }
            GKind::Max => {
                // `max` ignores NaN like the windowed MaxPool.
                lanes(
                    v,
                    T::neg_infinity(),
                    |x| x,
                    |a, b| if b > a { b } else { a },
                )
            }
            GKind::Lp(2.0) => {
                let s = lanes(v, T::zero(), |x| x * x, |a, b| a + b);
                s.sqrt()
            }
            GKind::Lp(1.0) => lanes(v, T::zero(), |x| x.abs(), |a, b| a + b),
            GKind::Lp(p) => {
                let pt = T::from(p).unwrap_or_else(T::one);
                let s = lanes(v, T::zero(), |x| x.abs().powf(pt), |a, b| a + b);
                s.powf(T::from(1.0 / p).unwrap_or_else(T::one))
            }
        }
    }

    fn compute<T: Float + Send + Sync>(&self, x: &[T], planes: usize) -> Vec<T> {
        let mut y = vec![T::zero(); planes];
        if planes == 0 {
            return y;
        }
        let len = x.len() / planes;
        if x.len() >= MIN_PARALLEL_GRAIN && crate::ops::util::op_threads() > 1 && planes > 1 {
            let min = (MIN_PARALLEL_GRAIN / len.max(1)).max(1);
            let per = planes
                .div_ceil(crate::ops::parallel::task_count(
                    planes,
                    crate::ops::util::op_threads(),
                ))
                .max(min);
            crate::ops::parallel::par_chunks(&mut y, per, |t, chunk| {
                for (j, o) in chunk.iter_mut().enumerate() {
                    let i = t * per + j;
                    *o = self.reduce(&x[i * len..(i + 1) * len]);
                }
            });
        } else {
            for (i, o) in y.iter_mut().enumerate() {
                *o = self.reduce(&x[i * len..(i + 1) * len]);
            }
        }
        y
    }
}

impl Operator for Global {
    fn cost_class(&self) -> OpClass {
        OpClass::Window
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(self.name(), inputs, 0)?;
        if !x.dtype.is_float() {
            return Err(Error::op(
                self.name(),
                format!("expected a floating-point input, found {}", x.dtype),
            ));
        }
        Ok(vec![match &x.shape {
            Some(s) => Fact::new(x.dtype, self.out_shape(s)?),
            None => Fact::unknown_shape(x.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0)
            .max(1) as u64
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name();
        let x = input(op, inputs, 0)?;
        let out = self.out_shape(x.shape())?;
        let planes = out.iter().product();
        let y = match x {
            Tensor::F32(a) => wrap(op, &out, self.compute(&contiguous(a), planes))?,
            Tensor::F64(a) => wrap(op, &out, self.compute(&contiguous(a), planes))?,
            Tensor::F16(_) | Tensor::BF16(_) => {
                let xs = to_f32_vec(op, x)?;
                from_f32_vec(op, x, &out, self.compute(&xs, planes))?
            }
            other => {
                return Err(Error::op(
                    op,
                    format!("expected a floating-point input, found {}", other.dtype()),
                ))
            }
        };
        Ok(vec![y])
    }
}
