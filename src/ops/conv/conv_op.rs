//! `Conv`: N-D grouped, strided, dilated, padded convolution with optional
//! bias and fused activation. 1×1 stride-1 unpadded kernels are one GEMM on X
//! as it lies; depthwise convolutions (one input channel per group) use a
//! direct kernel, and so do 2-D layers with at most four input channels
//! (RGB stems) on AVX-512 machines; 3×3 stride-1 kernels with enough channels and output
//! tiles go through Winograd F(4×4, 3×3) or F(2×2, 3×3), except where an AVX2
//! machine's implicit-GEMM kernel is faster (few output channels); that kernel
//! also takes the other 2-D stride-1 layers there; non-overlapping 2-D
//! layers (kernel = stride, unpadded: patch embeddings) are a copy of the
//! patches and one product by the packed weights on x86-64; everything else is im2col
//! followed by a GEMM per group. A residual Add fused in at load (input 3,
//! the node's `Fusion::residual`) is added to each output block after the bias and
//! before the activation.

use super::adopted::{Adopted, Form, RunWeights};
use super::geom::{Window, WindowAttrs};
use super::implicit::{self, PackCache};
use super::patches::PatchCache;
use super::winograd::{self, WeightCache};
use super::{check_bias, finish_row, parse_group, run_float, FloatKernel};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, FusionKind, InferInput, OpClass, Operator};
use crate::ops::gemm::checked_product;
use crate::ops::gemm::engine::{Batched, Block, GemmFloat, Mat};
use crate::ops::gemm::fused::Activation;
use crate::ops::parallel::SendPtr;
use crate::ops::util::{
    fact, input, is_f32_constant, opt_fact, opt_input, par_spans, takes_weighted_activation,
};
use crate::tensor::Tensor;
use std::sync::Arc;

const OP: &str = "Conv";

/// A built Conv node.
#[derive(Debug)]
struct Conv {
    window: WindowAttrs,
    group: usize,
    act: Option<Activation>,
    /// Whether input 3 is an addend of Y's shape (a fused residual Add).
    residual: bool,
    /// Whether W is a constant of the graph (its transforms can be kept).
    w_constant: bool,
    /// W transformed for the Winograd path, on the first run that takes it.
    winograd_weights: WeightCache,
    /// W packed for the implicit-GEMM path, on the first run that takes it.
    implicit_weights: PackCache,
    /// W packed for the AVX2 panel GEMM (1×1 and im2col paths, which pack
    /// it alike), on the first run that takes it.
    panel_weights: PackCache,
    /// W packed for the non-overlapping (patch) path, on the first run
    /// that takes it.
    patch_weights: PatchCache,
    /// W when the graph handed it over: held until a run packs it.
    adopted: Adopted,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Conv {
        window: WindowAttrs::parse(ctx.attrs, true)?,
        group: parse_group(ctx.attrs)?,
        act: ctx.fusion.activation,
        residual: ctx.fusion.residual,
        w_constant: ctx.constant(1).is_some(),
        winograd_weights: WeightCache::default(),
        implicit_weights: PackCache::default(),
        panel_weights: PackCache::default(),
        patch_weights: PatchCache::default(),
        adopted: Adopted::default(),
    }))
}

/// The sizes of one Conv call.
#[derive(Debug, Clone)]
pub(super) struct ConvPlan {
    /// Batch size.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Output channels.
    pub m: usize,
    /// Groups.
    pub group: usize,
    /// The resolved window.
    pub win: Window,
    /// Output shape `[n, m, spatial...]`.
    pub out_shape: Vec<usize>,
}

impl ConvPlan {
    /// Input channels per group.
    pub(super) fn cg(&self) -> usize {
        self.c / self.group
    }
    /// Output channels per group.
    pub(super) fn mg(&self) -> usize {
        self.m / self.group
    }
}

/// Checks the shapes of X, W and B against the attributes and resolves the window.
pub(super) fn plan(
    window: &WindowAttrs,
    group: usize,
    x: &[usize],
    w: &[usize],
    b: Option<&[usize]>,
) -> Result<ConvPlan> {
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
    let (n, c, m) = (x[0], x[1], w[0]);
    let expect_c = w[1]
        .checked_mul(group)
        .ok_or_else(|| Error::op(OP, "channel count overflows"))?;
    if c != expect_c {
        return Err(Error::op(
            OP,
            format!(
                "X has {c} channels but W {w:?} with group {group} expects {expect_c} (W.shape[1]·group)"
            ),
        ));
    }
    if m % group != 0 {
        return Err(Error::op(
            OP,
            format!("group {group} does not divide the {m} output channels of W {w:?}"),
        ));
    }
    if let Some(k) = &window.kernel {
        if k.as_slice() != &w[2..] {
            return Err(Error::op(
                OP,
                format!(
                    "kernel_shape {k:?} differs from W's spatial dims {:?}",
                    &w[2..]
                ),
            ));
        }
    }
    check_bias(OP, b, m)?;
    let win = window.resolve(OP, &x[2..], &w[2..], false)?;
    let mut out_shape = vec![n, m];
    out_shape.extend_from_slice(&win.output);
    checked_product(OP, &out_shape)?;
    Ok(ConvPlan {
        n,
        c,
        m,
        group,
        win,
        out_shape,
    })
}

impl Operator for Conv {
    fn cost_class(&self) -> OpClass {
        OpClass::Conv
    }

    /// An activation or a residual addend, with float32 constant weights
    /// (the residual as input 3, so at most three inputs before it).
    fn accepts_fusion(&self, kind: FusionKind, inputs: &[InferInput]) -> bool {
        match kind {
            FusionKind::Activation => takes_weighted_activation(kind, self.act, inputs),
            FusionKind::Residual => {
                is_f32_constant(inputs, 1)
                    && inputs.len() <= 3
                    && !self.residual
                    && self.act.is_none()
            }
            _ => false,
        }
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
        let p = plan(&self.window, self.group, xs, ws, bs)?;
        if self.residual {
            let z = fact(OP, inputs, 3)?;
            let fits = z.dtype == x.dtype && z.shape.as_ref().is_none_or(|s| *s == p.out_shape);
            if !fits {
                return Err(Error::op(
                    OP,
                    format!(
                        "the fused residual (input 3) is {} {:?}, expected {} {:?} like the output",
                        z.dtype, z.shape, x.dtype, p.out_shape
                    ),
                ));
            }
        }
        Ok(vec![Fact::new(x.dtype, p.out_shape)])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let w = inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|f| f.shape.clone());
        let out = outputs.first().and_then(|f| f.len()).unwrap_or(0) as u64;
        let per_out = match w {
            // Each output sums W.shape[1]·prod(kernel) products.
            Some(w) => w
                .iter()
                .skip(1)
                .fold(1u64, |a, &d| a.saturating_mul(d as u64)),
            None => 1,
        };
        let bias = inputs.get(2).copied().flatten().map_or(0, |_| out);
        let act = self.act.map_or(0, |_| out);
        let residual = if self.residual { out } else { 0 };
        out.saturating_mul(per_out)
            .saturating_mul(2)
            .saturating_add(bias)
            .saturating_add(act)
            .saturating_add(residual)
            .max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        if let Some(w) = opt_input(inputs, 1) {
            return Ok(vec![self.run_with(inputs, x, w, w.shape())?.0]);
        }
        // W was adopted from the graph (`adopt_constant`).
        let weights =
            self.adopted
                .for_run(x.shape(), &self.panel_weights, &self.implicit_weights)?;
        let y = match weights {
            RunWeights::Original(w) => {
                let before = self.packed_forms();
                let (y, p) = self.run_with(inputs, x, &w, w.shape())?;
                let after = self.packed_forms();
                let winograd_before = before.2;
                let panels_only = is_pointwise(&p.win) || super::im2col::reads_only_packed(&p);
                let form = if panels_only && after.0 && !before.0 {
                    Some(Form::Panels { group: p.group })
                } else if after.1 && !before.1 {
                    Some(Form::Implicit)
                } else if after.2 && !winograd_before {
                    Some(Form::Winograd)
                } else {
                    None
                };
                self.adopted.packed(x.shape(), form);
                y
            }
            RunWeights::Packed(empty, shape) => self.run_with(inputs, x, &empty, &shape)?.0,
            RunWeights::Unpacked(w) => self.run_with(inputs, x, &w, w.shape())?.0,
        };
        Ok(vec![y])
    }

    fn adopt_constant(&self, slot: usize, value: &Arc<Tensor>, fixed_shapes: bool) -> bool {
        slot == 1 && self.w_constant && self.adopted.adopt(value, fixed_shapes)
    }
}

impl Conv {
    /// Runs on X and W (whose shape is `w_shape`: W is empty when only
    /// packed weights are read) with the node's other inputs; returns Y
    /// and the plan it ran.
    fn run_with(
        &self,
        inputs: &[Option<&Tensor>],
        x: &Tensor,
        w: &Tensor,
        w_shape: &[usize],
    ) -> Result<(Tensor, ConvPlan)> {
        let b = opt_input(inputs, 2);
        let z = if self.residual {
            Some(input(OP, inputs, 3)?)
        } else {
            None
        };
        let p = plan(
            &self.window,
            self.group,
            x.shape(),
            w_shape,
            b.map(|b| b.shape()),
        )?;
        let k = ConvKernel { p: &p, op: self };
        let y = run_float(OP, &k, x, w, b, z, &p.out_shape)?;
        Ok((y, p))
    }

    /// Whether the pointwise/im2col panels, the implicit-GEMM blocks and
    /// the Winograd transforms hold packed weights.
    fn packed_forms(&self) -> (bool, bool, bool) {
        (
            self.panel_weights.packed().is_some(),
            self.implicit_weights.packed().is_some(),
            self.winograd_weights.filled(),
        )
    }
}

/// Whether a window is 1×1, stride 1 and unpadded: a product by X as it lies.
fn is_pointwise(win: &Window) -> bool {
    win.kernel_len() == 1
        && win.strides.iter().all(|&s| s == 1)
        && win.pad_begin.iter().chain(&win.pad_end).all(|&v| v == 0)
}

/// The Conv kernel for one plan.
struct ConvKernel<'a> {
    p: &'a ConvPlan,
    op: &'a Conv,
}

impl FloatKernel for ConvKernel<'_> {
    fn compute<T: GemmFloat>(
        &self,
        x: &[T],
        w: &[T],
        b: Option<&[T]>,
        z: Option<&[T]>,
    ) -> Result<Vec<T>> {
        let p = self.p;
        let len = checked_product(OP, &p.out_shape)?;
        // Every path below writes every element: a recycled buffer needs no
        // zero-fill.
        let mut y = T::take_buffer(len);
        if len == 0 {
            return Ok(y);
        }
        let win = &p.win;
        let act = self.op.act;
        // Kernels without a residual stage leave it and the activation to
        // a pass over Y after them.
        let inner_act = if z.is_some() { None } else { act };
        let pointwise = is_pointwise(win);
        if p.cg() == 0 || win.kernel_len() == 0 {
            // No input channels (or taps): the output is the bias alone.
            y.fill(T::zero());
            let out_len = win.out_len();
            for (i, row) in y.chunks_mut(out_len).enumerate() {
                let zr = z.map(|z| &z[i * out_len..(i + 1) * out_len]);
                finish_row(row, b.map(|b| b[i % p.m]), zr, act);
            }
        } else if p.cg() == 1 && p.group > 1 {
            super::depthwise::depthwise(p, x, w, b, inner_act, &mut y);
            add_residual(&mut y, z, act);
        } else if pointwise {
            let cache = &self.op.panel_weights;
            if !super::pointwise::try_pointwise(
                p,
                x,
                w,
                b,
                z,
                act,
                &mut y,
                cache,
                self.op.w_constant,
            ) {
                pointwise_gemm(p, x, w, b, z, act, &mut y);
            }
        } else if super::patches::try_patches(
            p,
            x,
            w,
            b,
            z,
            act,
            &mut y,
            &self.op.patch_weights,
            self.op.w_constant,
        ) {
            // A non-overlapping (patch-embedding) layer on the packed GEMM.
        } else if super::direct::try_direct(p, x, w, b, inner_act, &mut y) {
            // A few-channel layer on the AVX-512 direct kernel.
            add_residual(&mut y, z, act);
        } else if let Some(algo) = winograd::choose(p).filter(|_| !implicit::preferred(p)) {
            let mut fresh = None;
            let cache = &self.op.winograd_weights;
            let u = cache.get(algo, self.op.w_constant, p, w, &mut fresh);
            winograd::winograd(algo, p, u, x, b, z, act, &mut y);
        } else if implicit::try_implicit(
            p,
            x,
            w,
            b,
            z,
            act,
            &mut y,
            &self.op.implicit_weights,
            self.op.w_constant,
        ) {
            // A stride-1 layer on the AVX2 implicit-GEMM kernel.
        } else {
            let cache = &self.op.panel_weights;
            super::im2col::im2col_gemm(p, x, w, b, z, act, &mut y, cache, self.op.w_constant)?;
        }
        Ok(y)
    }
}

/// `y += z`, then the activation, over the whole output (for the kernels
/// that do not take the residual themselves).
fn add_residual<T: GemmFloat>(y: &mut [T], z: Option<&[T]>, act: Option<Activation>) {
    if let Some(z) = z {
        par_spans(y, |start, span| {
            finish_row(span, None, Some(&z[start..start + span.len()]), act)
        });
    }
}

/// Bias, residual and activation on each block the GEMM engine finishes; C
/// of batch `bi` starts at output channel `first_row(bi)` of plane length
/// `plane`, and `z` (the residual, if any) is laid out like `y`.
#[allow(clippy::too_many_arguments)]
pub(super) fn epilogue<'a, T: GemmFloat>(
    y: SendPtr<T>,
    plane: usize,
    m: usize,
    b: Option<&'a [T]>,
    z: Option<&'a [T]>,
    act: Option<Activation>,
    first_row: impl Fn(usize) -> usize + Sync + 'a,
) -> impl Fn(Block) + Sync + 'a {
    move |blk: Block| {
        let row0 = first_row(blk.batch);
        for r in blk.r0..blk.r1 {
            let row = row0 + r;
            let (at, len) = (row * plane + blk.c0, blk.c1 - blk.c0);
            // SAFETY: the block's rows and columns lie inside this batch's C,
            // which the engine hands to exactly one task.
            let out = unsafe { y.slice(at, len) };
            finish_row(out, b.map(|b| b[row % m]), z.map(|z| &z[at..at + len]), act);
        }
    }
}

/// 1×1, stride-1, unpadded: Y[n, g] = W[g] · X[n, g] with X as it lies.
pub(super) fn pointwise_gemm<T: GemmFloat>(
    p: &ConvPlan,
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    z: Option<&[T]>,
    act: Option<Activation>,
    y: &mut [T],
) {
    let (cg, mg, group, plane) = (p.cg(), p.mg(), p.group, p.win.out_len());
    let yp = SendPtr(y.as_mut_ptr());
    let (c, m) = (p.c, p.m);
    let a = |bi: usize| Mat::row_major(w.as_ptr(), cg).offset((bi % group) * mg * cg);
    let bm = |bi: usize| {
        Mat::row_major(x.as_ptr(), plane).offset(((bi / group) * c + (bi % group) * cg) * plane)
    };
    let cm = |bi: usize| yp.offset(((bi / group) * m + (bi % group) * mg) * plane);
    let ep = epilogue(yp, plane, m, b, z, act, |bi| {
        (bi / group) * m + (bi % group) * mg
    });
    let needs_ep = b.is_some() || z.is_some() || act.is_some();
    let job = Batched {
        batches: p.n * group,
        m: mg,
        n: plane,
        k: cg,
        alpha: T::one(),
        a: &a,
        b: &bm,
        c: &cm,
        epilogue: if needs_ep { Some(&ep) } else { None },
    };
    // SAFETY: X is n×c×plane, W is m×cg, Y is n×m×plane; each batch's
    // matrices lie inside them and the C of distinct batches are disjoint.
    unsafe { job.run() };
}
