//! The row normalizations: `InstanceNormalization` (rows are (n, c) planes),
//! `LayerNormalization` and `RMSNormalization` (rows are everything from
//! `axis` on), `GroupNormalization` (rows are (n, group) blocks; scale and
//! bias per group in opset 18, per channel from opset 21).

use super::rows::{normalize, stats, Affine};
use super::{check_float, check_len, check_rank, dispatch, epsilon, param, Kernel, Out, Real};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::unary::kernel::Float;
use crate::ops::util::{axis, fact, input, opt_input, out_len};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

/// Which row normalization.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Instance,
    Layer,
    Rms,
    /// `per_channel`: scale/bias have C elements (opset 21) rather than G.
    Group {
        groups: usize,
        per_channel: bool,
    },
}

/// A built row-normalization node.
#[derive(Debug)]
struct RowNorm {
    op: &'static str,
    kind: Kind,
    eps: f64,
    axis: i64,
    num_outputs: usize,
}

pub(super) fn build_instance(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    row_norm(ctx, "InstanceNormalization", Kind::Instance, 0)
}

pub(super) fn build_layer(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs.int("axis", -1)?;
    row_norm(ctx, "LayerNormalization", Kind::Layer, a)
}

pub(super) fn build_rms(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs.int("axis", -1)?;
    row_norm(ctx, "RMSNormalization", Kind::Rms, a)
}

pub(super) fn build_group(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let g = ctx.attrs.int_req("num_groups")?;
    let groups = usize::try_from(g).ok().filter(|&g| g >= 1).ok_or_else(|| {
        ctx.attrs
            .error("num_groups", format!("must be ≥ 1, found {g}"))
    })?;
    let kind = Kind::Group {
        groups,
        per_channel: ctx.opset >= 21,
    };
    row_norm(ctx, "GroupNormalization", kind, 0)
}

fn row_norm(
    ctx: &BuildContext,
    op: &'static str,
    kind: Kind,
    axis: i64,
) -> Result<Box<dyn Operator>> {
    let max_outputs = if kind == Kind::Layer { 3 } else { 1 };
    if ctx.num_outputs > max_outputs {
        return Err(Error::op(
            op,
            format!(
                "has {} outputs, at most {max_outputs} allowed",
                ctx.num_outputs
            ),
        ));
    }
    Ok(Box::new(RowNorm {
        op,
        kind,
        eps: epsilon(ctx.attrs, 1e-5)?,
        axis,
        num_outputs: ctx.num_outputs.max(1),
    }))
}

/// The row decomposition of one X shape.
struct Plan {
    rows: usize,
    len: usize,
    /// Shape of the Mean / InvStdDev outputs (LayerNormalization).
    stats_shape: Vec<usize>,
}

impl RowNorm {
    fn plan(&self, x: &[usize]) -> Result<Plan> {
        let (rows, len, stats_shape) = match self.kind {
            Kind::Layer | Kind::Rms => {
                check_rank(self.op, x, 1, "the normalized axes need a dimension")?;
                let a = axis(self.op, self.axis, x.len())?;
                let rows = x[..a].iter().product();
                let mut ss = x[..a].to_vec();
                ss.resize(x.len(), 1);
                (rows, x[a..].iter().product(), ss)
            }
            Kind::Instance => {
                check_rank(self.op, x, 2, "N, C, spatial...")?;
                (x[0] * x[1], x[2..].iter().product(), vec![])
            }
            Kind::Group { groups, .. } => {
                check_rank(self.op, x, 2, "N, C, spatial...")?;
                if !x[1].is_multiple_of(groups) {
                    return Err(Error::op(
                        self.op,
                        format!(
                            "num_groups {groups} does not divide the {} channels of X {x:?}",
                            x[1]
                        ),
                    ));
                }
                let s: usize = x[2..].iter().product();
                (x[0] * groups, x[1] / groups * s, vec![])
            }
        };
        Ok(Plan {
            rows,
            len,
            stats_shape,
        })
    }

    /// The affine layout and its parameters (as f64) for X of shape `x`.
    fn affine(&self, x: &[usize], scale: &Tensor, bias: Option<&Tensor>) -> Result<Affine<f64>> {
        let op = self.op;
        let sv = param(op, "scale", scale)?;
        let bv = bias.map(|b| param(op, "B", b)).transpose()?;
        match self.kind {
            Kind::Layer | Kind::Rms => {
                let a = axis(op, self.axis, x.len())?;
                let inner = &x[a..];
                let s = expand(op, "scale", sv, scale.shape(), inner)?;
                let b = match (bv, bias) {
                    (Some(v), Some(b)) => Some(expand(op, "B", v, b.shape(), inner)?),
                    _ => None,
                };
                Ok(Affine {
                    scale: Some(s),
                    bias: b,
                    period: 1,
                    stride: 0,
                    block: 1,
                })
            }
            Kind::Instance => {
                let c = x[1];
                check_len(op, "scale", scale.shape(), c)?;
                if let Some(b) = bias {
                    check_len(op, "B", b.shape(), c)?;
                }
                Ok(Affine {
                    scale: Some(sv),
                    bias: bv,
                    period: c,
                    stride: 1,
                    block: usize::MAX,
                })
            }
            Kind::Group {
                groups,
                per_channel,
            } => {
                let (c, s): (usize, usize) = (x[1], x[2..].iter().product());
                let want = if per_channel { c } else { groups };
                check_len(op, "scale", scale.shape(), want)?;
                if let Some(b) = bias {
                    check_len(op, "bias", b.shape(), want)?;
                }
                let (stride, block) = if per_channel {
                    (c / groups, s)
                } else {
                    (1, usize::MAX)
                };
                Ok(Affine {
                    scale: Some(sv),
                    bias: bv,
                    period: groups,
                    stride,
                    block,
                })
            }
        }
    }

    fn needs_bias(&self) -> bool {
        matches!(self.kind, Kind::Instance | Kind::Group { .. })
    }
}

/// Broadcasts parameter values of shape `from` to the normalized shape `to`.
fn expand(op: &str, name: &str, v: Vec<f64>, from: &[usize], to: &[usize]) -> Result<Vec<f64>> {
    let bad = || {
        Error::op(
            op,
            format!("{name} of shape {from:?} does not broadcast to the normalized shape {to:?}"),
        )
    };
    let mut from = from.to_vec();
    while from.len() > to.len() && from[0] == 1 {
        from.remove(0);
    }
    let a = ArrayD::from_shape_vec(IxDyn(&from), v).map_err(|_| bad())?;
    let b = a.broadcast(IxDyn(to)).ok_or_else(bad)?;
    Ok(b.iter().copied().collect())
}

/// The kernel of one run.
struct RowKernel<'a> {
    plan: &'a Plan,
    aff: &'a Affine<f64>,
    eps: f64,
    center: bool,
    stats_out: usize,
}

impl Kernel for RowKernel<'_> {
    fn compute<T: Float, C: Real>(&self, x: &[T]) -> Result<Out<T, C>> {
        let p = self.plan;
        let st = stats::<T, C>(x, p.rows, p.len, self.center);
        let eps = C::of(self.eps);
        let ms: Vec<(C, C)> = st
            .iter()
            .map(|&(m, v)| (m, C::one() / (v + eps).sqrt()))
            .collect();
        let cv = |v: &Option<Vec<f64>>| v.as_ref().map(|v| v.iter().map(|&x| C::of(x)).collect());
        let aff = Affine {
            scale: cv(&self.aff.scale),
            bias: cv(&self.aff.bias),
            period: self.aff.period,
            stride: self.aff.stride,
            block: self.aff.block,
        };
        let y = normalize(x, p.len, &ms, &aff);
        let mut out = Out::y(y);
        if self.stats_out >= 1 {
            out.stats
                .push((p.stats_shape.clone(), ms.iter().map(|m| m.0).collect()));
        }
        if self.stats_out >= 2 {
            out.stats
                .push((p.stats_shape.clone(), ms.iter().map(|m| m.1).collect()));
        }
        Ok(out)
    }
}

impl Operator for RowNorm {
    fn cost_class(&self) -> OpClass {
        OpClass::Window
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(self.op, inputs, 0)?;
        check_float(self.op, x)?;
        fact(self.op, inputs, 1)?;
        if self.needs_bias() {
            fact(self.op, inputs, 2)?;
        }
        let stats_type = if x.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let mut v = vec![x.clone()];
        let ss = match &x.shape {
            Some(s) => Some(self.plan(s)?.stats_shape),
            None => None,
        };
        for _ in 1..self.num_outputs {
            v.push(Fact {
                kind: crate::ir::Kind::Tensor,
                dtype: stats_type,
                shape: ss.clone(),
            });
        }
        Ok(v)
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0).saturating_mul(8).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.op, inputs, 0)?;
        let scale = input(self.op, inputs, 1)?;
        let bias = if self.needs_bias() {
            Some(input(self.op, inputs, 2)?)
        } else if self.kind == Kind::Layer {
            opt_input(inputs, 2)
        } else {
            None
        };
        let plan = self.plan(x.shape())?;
        let aff = self.affine(x.shape(), scale, bias)?;
        let k = RowKernel {
            plan: &plan,
            aff: &aff,
            eps: self.eps,
            center: self.kind != Kind::Rms,
            stats_out: self.num_outputs - 1,
        };
        dispatch(self.op, x, &k)
    }
}
