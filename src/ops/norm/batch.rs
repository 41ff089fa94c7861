//! `BatchNormalization` in inference mode: `y = (x - mean) / sqrt(var + ε) ·
//! scale + B` folded into one multiply-add per element with per-channel
//! `a = scale / sqrt(var + ε)` and `b = B - mean · a`, precomputed at build
//! when the four parameters are constants. Opsets before 9 with `spatial=0`
//! take parameters per (channel, spatial position). A load-time fusion may
//! attach an activation (`activation` attribute), applied in the same pass.

use super::{check_float, check_rank, dispatch, epsilon, param, Kernel, Out, Real};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, FusionKind, InferInput, OpClass, Operator};
use crate::ops::gemm::fused::Activation;
use crate::ops::gemm::simd::multiversion;
use crate::ops::unary::kernel::Float;
use crate::ops::util::{fact, input, out_len, par_rows, takes_weighted_activation};
use crate::tensor::recycle::take_or_default;
use crate::tensor::Tensor;

const OP: &str = "BatchNormalization";

/// A built BatchNormalization node.
#[derive(Debug)]
struct BatchNorm {
    eps: f64,
    /// Per-channel `(a, b)` when scale, B, mean and var are constants.
    folded: Option<(Vec<f64>, Vec<f64>)>,
    /// Activation fused at load.
    act: Option<Activation>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    if a.int("training_mode", 0)? != 0 {
        return super::batch_train::build(ctx);
    }
    if ctx.num_outputs > 1 {
        return Err(Error::op(
            OP,
            format!(
                "has {} outputs; outputs beyond Y (running and saved mean/variance) exist only in training mode (training_mode=1 from opset 14)",
                ctx.num_outputs
            ),
        ));
    }
    let eps = epsilon(a, 1e-5)?;
    let consts: Option<Vec<&Tensor>> = (1..5).map(|i| ctx.constant(i)).collect();
    let folded = match consts {
        Some(c) => Some(fold(&c, eps)?),
        None => None,
    };
    let act = ctx.fusion.activation;
    Ok(Box::new(BatchNorm { eps, folded, act }))
}

/// Per-parameter-index `(a, b)` from scale, B, mean and var.
fn fold(p: &[&Tensor], eps: f64) -> Result<(Vec<f64>, Vec<f64>)> {
    let names = ["scale", "B", "input_mean", "input_var"];
    let v: Vec<Vec<f64>> = p
        .iter()
        .zip(names)
        .map(|(t, n)| param(OP, n, t))
        .collect::<Result<_>>()?;
    let n = v[0].len();
    for (vals, name) in v.iter().zip(names) {
        if vals.len() != n {
            return Err(Error::op(
                OP,
                format!("{name} has {} elements, scale has {n}", vals.len()),
            ));
        }
    }
    let a: Vec<f64> = (0..n).map(|i| v[0][i] / (v[3][i] + eps).sqrt()).collect();
    let b = (0..n).map(|i| v[1][i] - v[2][i] * a[i]).collect();
    Ok((a, b))
}

/// Per parameter: elements of X sharing it, and the parameter count. Each
/// sample of X holds `params · plane` elements.
fn layout(x: &[usize], params: usize) -> Result<(usize, usize)> {
    check_rank(OP, x, 2, "N, C, spatial...")?;
    let c = x[1];
    let s: usize = x[2..].iter().product();
    if params == c {
        Ok((s, c))
    } else if params == c * s {
        // `spatial=0` (opsets 1–8): one parameter per channel and position.
        Ok((1, c * s))
    } else {
        Err(Error::op(
            OP,
            format!("X {x:?} has {c} channels but the parameters have {params} elements"),
        ))
    }
}

struct BnKernel<'a> {
    a: &'a [f64],
    b: &'a [f64],
    plane: usize,
    act: Option<Activation>,
}

/// `y = f(x·a + b)` over one row, computed in `C`.
#[inline(always)]
fn affine_row<T: Float, C: Real>(y: &mut [T], x: &[T], a: C, b: C, f: impl Fn(C) -> C) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = f(C::from_elem(v) * a + b).to_elem();
    }
}

multiversion! {
    wide
    /// One row with the activation chosen outside the loop, so each loop is
    /// specialised (and the Relu one vectorises). Compiled for AVX2 with FMA
    /// and AVX-512 too: the GELU's fused multiply-adds are instructions
    /// there, not calls (a 64×56×56 BatchNormalization + Gelu took 4× as
    /// long with the calls).
    fn activated_row<T: Float, C: Real>(y: &mut [T], x: &[T], a: C, b: C, act: Option<Activation>) {
        match act {
            None => affine_row(y, x, a, b, |v| v),
            Some(Activation::Relu) => affine_row(y, x, a, b, |v| Activation::Relu.eval(v)),
            // A loop, not a closure: a closure is compiled apart from this
            // function's target features unless inlined, and the GELU's is
            // too large to be.
            Some(act) => {
                for (o, &v) in y.iter_mut().zip(x) {
                    *o = act.eval(C::from_elem(v) * a + b).to_elem();
                }
            }
        }
    }
}

impl Kernel for BnKernel<'_> {
    fn compute<T: Float, C: Real>(&self, x: &[T]) -> Result<Out<T, C>> {
        let a: Vec<C> = self.a.iter().map(|&v| C::of(v)).collect();
        let b: Vec<C> = self.b.iter().map(|&v| C::of(v)).collect();
        // Every element is written below: a recycled buffer needs no fill.
        let mut y = take_or_default::<T>(x.len());
        let (plane, p) = (self.plane.max(1), a.len().max(1));
        par_rows(&mut y, plane, |first, chunk| {
            let xs = &x[first * plane..first * plane + chunk.len()];
            for (i, (yo, xi)) in chunk.chunks_mut(plane).zip(xs.chunks(plane)).enumerate() {
                let c = (first + i) % p;
                activated_row(yo, xi, a[c], b[c], self.act);
            }
        });
        Ok(Out::y(y))
    }
}

impl Operator for BatchNorm {
    /// An activation, with a float32 constant scale.
    fn accepts_fusion(&self, kind: FusionKind, inputs: &[InferInput]) -> bool {
        takes_weighted_activation(kind, self.act, inputs)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Window
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        check_float(OP, x)?;
        for i in 1..5 {
            fact(OP, inputs, i)?;
        }
        if let (Some(s), Some((a, _))) = (&x.shape, &self.folded) {
            layout(s, a.len())?;
        }
        Ok(vec![x.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let per = if self.act.is_some() { 3 } else { 2 };
        out_len(outputs, 0).saturating_mul(per).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let owned;
        let (a, b) = match &self.folded {
            Some(f) => f,
            None => {
                let p: Vec<&Tensor> = (1..5)
                    .map(|i| input(OP, inputs, i))
                    .collect::<Result<_>>()?;
                owned = fold(&p, self.eps)?;
                &owned
            }
        };
        let (plane, _) = layout(x.shape(), a.len())?;
        let act = self.act;
        dispatch(OP, x, &BnKernel { a, b, plane, act })
    }
}
