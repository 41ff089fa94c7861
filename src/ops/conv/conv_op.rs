//! `Conv`: N-D grouped, strided, dilated, padded convolution with optional
//! bias and fused activation. 1×1 stride-1 unpadded kernels are one GEMM on X
//! as it lies; depthwise convolutions (one input channel per group) use a
//! direct kernel, and so do 2-D layers with at most four input channels
//! (RGB stems) on AVX-512 machines, and grouped 2-D layers of several channels
//! per group (ResNeXt) on x86-64 with AVX2; 3×3 stride-1 kernels with enough channels and output
//! tiles go through Winograd F(4×4, 3×3) or F(2×2, 3×3), except where an AVX2
//! machine's implicit-GEMM kernel is faster (few output channels); that kernel
//! also takes the other 2-D stride-1 layers there; non-overlapping 2-D
//! layers (kernel = stride, unpadded: patch embeddings) are a copy of the
//! patches and one product by the packed weights on x86-64; everything else is im2col
//! followed by a GEMM per group. A residual Add fused in at load (input 3,
//! the node's `Fusion::residual`) is added to each output block after the bias and
//! before the activation.

use super::adopted::{Adopted, Form, RunWeights};
use super::choice::{choose, Algorithm, Choices};
use super::geom::{Window, WindowAttrs};
use super::implicit::{self, PackCache};
#[cfg(target_arch = "x86_64")]
use super::patches::PatchCache;
use super::winograd::{self, WeightCache};
use super::{check_bias, finish_row, parse_group, run_f32_into, run_float, FloatKernel};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, FusionKind, InferInput, OpClass, Operator};
use crate::ops::gemm::checked_product;
use crate::ops::gemm::engine::{Batched, Block, GemmFloat, Mat};
use crate::ops::gemm::fused::Activation;
use crate::ops::parallel::SendPtr;
use crate::ops::util::{
    as_f32, as_f32_mut, fact, input, is_f32_constant, opt_fact, opt_input, par_spans,
    takes_weighted_activation,
};
use crate::tensor::{DType, Tensor};
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
    /// Whether Y is written `[N, spatial..., M]` (a fused Transpose that
    /// moved the channels last).
    channels_last: bool,
    /// W's packed and transformed forms, kept across runs when W is a
    /// constant of the graph.
    weights: Weights,
    /// The kernel chosen for each input shape seen.
    choices: Choices,
    /// W when the graph handed it over: held until a run packs it.
    adopted: Adopted,
}

/// The forms of W the kernels pack or transform it into, each filled on
/// the first run that takes its kernel and kept when W is a constant.
#[derive(Debug, Default)]
pub(super) struct Weights {
    /// Whether W is a constant of the graph (its forms can be kept).
    pub constant: bool,
    /// W transformed for the Winograd path.
    pub winograd: WeightCache,
    /// W packed for the implicit-GEMM path.
    pub implicit: PackCache,
    /// W packed for the AVX2 panel GEMM (1×1 and im2col paths, which pack
    /// it alike).
    pub panels: PackCache,
    /// W transposed for the channel-blocked depthwise kernel (tap-major;
    /// x86-64 only).
    #[cfg(target_arch = "x86_64")]
    pub depthwise: PackCache,
    /// W packed for the pointwise kernel of small planes (panels of output
    /// channels per input channel).
    pub columns: PackCache,
    /// W packed for the non-overlapping (patch) path (x86-64 only).
    #[cfg(target_arch = "x86_64")]
    pub patches: PatchCache,
}

impl Weights {
    /// Empty forms, kept across runs when `constant`.
    pub(super) fn new(constant: bool) -> Weights {
        Weights {
            constant,
            ..Weights::default()
        }
    }
}

/// What every Conv kernel reads: the plan, X, W, the optional bias and
/// residual, the fused activation and the node's forms of W.
pub(super) struct ConvArgs<'a, T> {
    /// The sizes of the call.
    pub p: &'a ConvPlan,
    /// X, row-major.
    pub x: &'a [T],
    /// W, row-major (empty when only its packed forms are read).
    pub w: &'a [T],
    /// The bias, one value per output channel.
    pub b: Option<&'a [T]>,
    /// The fused residual, laid out like Y.
    pub z: Option<&'a [T]>,
    /// The fused activation, after the bias and the residual.
    pub act: Option<Activation>,
    /// The node's packed and transformed forms of W.
    pub weights: &'a Weights,
}

impl<'a, T: 'static> ConvArgs<'a, T> {
    /// The activation for kernels without a residual stage: none when
    /// there is a residual, which [`add_residual`] adds before it.
    pub(super) fn inner_act(&self) -> Option<Activation> {
        if self.z.is_some() {
            None
        } else {
            self.act
        }
    }

    /// The same arguments as f32 slices, when `T` is f32.
    pub(super) fn as_f32(&self) -> Option<ConvArgs<'a, f32>> {
        let opt = |v: Option<&'a [T]>| match v {
            Some(v) => as_f32(v).map(Some),
            None => Some(None),
        };
        Some(ConvArgs {
            p: self.p,
            x: as_f32(self.x)?,
            w: as_f32(self.w)?,
            b: opt(self.b)?,
            z: opt(self.z)?,
            act: self.act,
            weights: self.weights,
        })
    }
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Conv {
        window: WindowAttrs::parse(ctx.attrs, true)?,
        group: parse_group(ctx.attrs)?,
        act: ctx.fusion.activation,
        residual: ctx.fusion.residual,
        channels_last: ctx.fusion.channels_last,
        weights: Weights::new(ctx.constant(1).is_some()),
        choices: Choices::default(),
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
                    && !self.channels_last
            }
            FusionKind::ChannelsLast => self.writes_pixels(inputs),
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
        Ok(vec![Fact::new(x.dtype, self.y_shape(&p))])
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
        let y = self.run_to(inputs, None)?;
        Ok(vec![
            y.ok_or_else(|| Error::op(OP, "no output was computed"))?
        ])
    }

    fn writes_into(&self, inputs: &[Option<&Fact>]) -> bool {
        // Channels-last output is a transpose of the planes the kernels
        // write; only planes go straight into a caller's buffer.
        !self.channels_last
            && inputs
                .first()
                .copied()
                .flatten()
                .is_some_and(|f| f.dtype == DType::F32)
    }

    fn run_into(&self, inputs: &[Option<&Tensor>], out: &mut [f32]) -> Result<Option<Vec<Tensor>>> {
        Ok(self.run_to(inputs, Some(out))?.map(|y| vec![y]))
    }

    fn adopt_constant(&self, slot: usize, value: &Arc<Tensor>, fixed_shapes: bool) -> bool {
        slot == 1 && self.weights.constant && self.adopted.adopt(value, fixed_shapes)
    }

    /// Packs an adopted W for a float32 X of known shape, as the first run
    /// on that shape would (see `ahead.rs`).
    fn prepare(&self, inputs: &[Option<&Fact>]) {
        let fact = |i: usize| inputs.get(i).copied().flatten();
        let Some(x) = fact(0)
            .filter(|f| f.dtype == DType::F32)
            .and_then(|f| f.shape.as_deref())
        else {
            return;
        };
        let bias = fact(2).and_then(|f| f.shape.as_deref());
        // As in `run`: panels packed by an earlier shape keep W.
        let panels_empty = self.weights.panels.packed().is_none();
        self.adopted.pack_ahead(x, |w| {
            let Tensor::F32(data) = w else {
                return None;
            };
            let p = plan(&self.window, self.group, x, w.shape(), bias).ok()?;
            let algo = self.choices.get(x, w.shape(), true, || choose(&p, true));
            if !self.weights.pack_ahead(algo, &p, data.as_slice()?) {
                return None;
            }
            Form::left_by(algo, &p).filter(|f| panels_empty || !matches!(f, Form::Panels { .. }))
        });
    }
}

impl Conv {
    /// Y's shape for plan `p`: its output shape, the channels moved last
    /// where the node writes them so.
    fn y_shape(&self, p: &ConvPlan) -> Vec<usize> {
        let mut s = p.out_shape.clone();
        if self.channels_last && s.len() >= 2 {
            let m = s.remove(1);
            s.push(m);
        }
        s
    }

    /// Whether the node may write Y channels last for these inputs: a 2-D
    /// f32 layer of known shapes and constant W, without a residual, whose
    /// kernel writes that layout directly: the channel-blocked depthwise
    /// kernel (see `depthwise::takes_pixels`) or the patch kernel (whose
    /// product is position-major); elsewhere the planes would be
    /// transposed after all, as a Transpose node would.
    fn writes_pixels(&self, inputs: &[InferInput]) -> bool {
        if self.channels_last || self.residual || !is_f32_constant(inputs, 1) || inputs.len() > 3 {
            return false;
        }
        let shape = |i: usize| {
            inputs
                .get(i)
                .and_then(|h| h.fact)
                .filter(|f| f.dtype == DType::F32)
                .and_then(|f| f.shape.clone())
        };
        let (Some(x), Some(w)) = (shape(0), shape(1)) else {
            return false;
        };
        let b = match inputs.get(2) {
            Some(h) if h.fact.is_some() || h.value.is_some() => match shape(2) {
                Some(b) => Some(b),
                None => return false,
            },
            _ => None,
        };
        let Ok(p) = plan(&self.window, self.group, &x, &w, b.as_deref()) else {
            return false;
        };
        x.len() == 4
            && match choose(&p, true) {
                Algorithm::Depthwise => super::depthwise::takes_pixels(&p, self.act),
                Algorithm::Patches => true,
                _ => false,
            }
    }

    /// Runs the node: into `out` when given and the types allow it
    /// (`Ok(None)`: every element of `out` written), else into a new
    /// tensor.
    fn run_to(
        &self,
        inputs: &[Option<&Tensor>],
        out: Option<&mut [f32]>,
    ) -> Result<Option<Tensor>> {
        let x = input(OP, inputs, 0)?;
        if let Some(w) = opt_input(inputs, 1) {
            return Ok(self.run_with(inputs, x, w, w.shape(), out)?.0);
        }
        // W was adopted from the graph (`adopt_constant`).
        let weights = self.adopted.for_run(x.shape(), &self.weights)?;
        let y = match weights {
            RunWeights::Original(w) => {
                // W goes with the run that packed the panels: where an
                // earlier run (on a shape whose last im2col chunk still
                // read W) packed them, W stays, as it always did.
                let panels_empty = self.weights.panels.packed().is_none();
                let (y, p, algo) = self.run_with(inputs, x, &w, w.shape(), out)?;
                let form = Form::left_by(algo, &p)
                    .filter(|f| panels_empty || !matches!(f, Form::Panels { .. }));
                self.adopted.packed(x.shape(), form);
                y
            }
            RunWeights::Packed(empty, shape) => self.run_with(inputs, x, &empty, &shape, out)?.0,
            RunWeights::Unpacked(w) => self.run_with(inputs, x, &w, w.shape(), out)?.0,
        };
        Ok(y)
    }

    /// Runs on X and W (whose shape is `w_shape`: W is empty when only
    /// packed weights are read) with the node's other inputs, into `out`
    /// when given and X and W are f32 (no tensor returned), else into a
    /// new Y; returns that, the plan it ran and the kernel that ran it.
    fn run_with(
        &self,
        inputs: &[Option<&Tensor>],
        x: &Tensor,
        w: &Tensor,
        w_shape: &[usize],
        out: Option<&mut [f32]>,
    ) -> Result<(Option<Tensor>, ConvPlan, Algorithm)> {
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
        // `run_float` computes in f64 on f64 data and in f32 on the rest.
        let f32 = x.dtype() != DType::F64;
        let algo = self
            .choices
            .get(x.shape(), w_shape, f32, || choose(&p, f32));
        let k = ConvKernel {
            p: &p,
            op: self,
            algo,
        };
        let shape = self.y_shape(&p);
        if let Some(out) = out.filter(|_| !self.channels_last) {
            let into =
                |x: &[f32], w: &[f32], b: Option<&[f32]>, z: Option<&[f32]>, y: &mut [f32]| {
                    k.planes(&k.args(x, w, b, z), y)
                };
            if run_f32_into(OP, x, w, b, z, &shape, out, into)? {
                return Ok((None, p, algo));
            }
        }
        let y = run_float(OP, &k, x, w, b, z, &shape)?;
        Ok((Some(y), p, algo))
    }
}

/// Whether a window is 1×1, stride 1 and unpadded: a product by X as it lies.
pub(super) fn is_pointwise(win: &Window) -> bool {
    win.kernel_len() == 1
        && win.strides.iter().all(|&s| s == 1)
        && win.pad_begin.iter().chain(&win.pad_end).all(|&v| v == 0)
}

/// The Conv kernel for one plan, on the algorithm chosen for it.
struct ConvKernel<'a> {
    p: &'a ConvPlan,
    op: &'a Conv,
    algo: Algorithm,
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
        let a = self.args(x, w, b, z);
        if self.op.channels_last {
            return self.compute_pixels(&a, y);
        }
        self.planes(&a, &mut y)?;
        Ok(y)
    }
}

impl ConvKernel<'_> {
    /// The arguments of one run on these inputs.
    fn args<'a, T: GemmFloat>(
        &'a self,
        x: &'a [T],
        w: &'a [T],
        b: Option<&'a [T]>,
        z: Option<&'a [T]>,
    ) -> ConvArgs<'a, T> {
        ConvArgs {
            p: self.p,
            x,
            w,
            b,
            z,
            act: self.op.act,
            weights: &self.op.weights,
        }
    }

    /// Y as planes (`[N, M, spatial...]`) into `y` (every element written),
    /// on the chosen kernel.
    fn planes<T: GemmFloat>(&self, a: &ConvArgs<T>, y: &mut [T]) -> Result<()> {
        if y.is_empty() {
            return Ok(());
        }
        let y32 = |y: &mut [T], run: &dyn Fn(&ConvArgs<f32>, &mut [f32])| {
            let (Some(a), Some(y)) = (a.as_f32(), as_f32_mut(y)) else {
                unreachable!("{:?} is chosen for f32 data only", self.algo);
            };
            run(&a, y);
        };
        match self.algo {
            Algorithm::BiasOnly => bias_only(a, y),
            Algorithm::Depthwise => super::depthwise::depthwise(a, y),
            Algorithm::Pointwise => y32(y, &super::pointwise::run),
            Algorithm::PointwiseColumns => y32(y, &super::pointwise::columns::run),
            Algorithm::PointwiseGemm => pointwise_gemm(a, y),
            Algorithm::Patches => y32(y, &super::patches::run),
            Algorithm::Direct(isa) => y32(y, &|a, y| super::direct::run(a, isa, y)),
            Algorithm::Grouped(isa) => y32(y, &|a, y| super::grouped::run(a, isa, y)),
            Algorithm::Winograd(algo) => winograd::winograd(algo, a, y),
            #[cfg(target_arch = "x86_64")]
            Algorithm::Im2colColumns => y32(y, &super::im2col_columns::run),
            #[cfg(not(target_arch = "x86_64"))]
            Algorithm::Im2colColumns => unreachable!("chosen on x86-64 only"),
            Algorithm::Implicit => y32(y, &implicit::run),
            Algorithm::Im2col { panels } => super::im2col::im2col_gemm(a, panels, y)?,
        }
        Ok(())
    }

    /// Y channels last into `y` (of Y's length): the depthwise kernel
    /// writes that layout where it can; elsewhere the planes are computed
    /// as without the fusion and transposed, as the Transpose node did.
    fn compute_pixels<T: GemmFloat>(&self, a: &ConvArgs<T>, mut y: Vec<T>) -> Result<Vec<T>> {
        if let (Some(a32), Some(y32)) = (a.as_f32(), as_f32_mut(&mut y)) {
            let written = match self.algo {
                Algorithm::Depthwise => super::depthwise::depthwise_pixels(&a32, y32),
                Algorithm::Patches => super::patches::run_pixels(&a32, y32),
                _ => false,
            };
            if written {
                return Ok(y);
            }
        }
        let mut planes = T::take_buffer(y.len());
        self.planes(a, &mut planes)?;
        let (n, m) = (self.p.n, self.p.m);
        let plane = self.p.win.out_len();
        for ni in 0..n {
            let from = &planes[ni * m * plane..(ni + 1) * m * plane];
            let to = &mut y[ni * m * plane..(ni + 1) * m * plane];
            for (oc, src) in from.chunks_exact(plane).enumerate() {
                for (p, &v) in src.iter().enumerate() {
                    to[p * m + oc] = v;
                }
            }
        }
        crate::tensor::recycle::give_back(planes);
        Ok(y)
    }
}

/// No input channels (or taps): the output is the bias alone, then the
/// residual and the activation.
fn bias_only<T: GemmFloat>(a: &ConvArgs<T>, y: &mut [T]) {
    y.fill(T::zero());
    let out_len = a.p.win.out_len();
    for (i, row) in y.chunks_mut(out_len).enumerate() {
        let zr = a.z.map(|z| &z[i * out_len..(i + 1) * out_len]);
        finish_row(row, a.b.map(|b| b[i % a.p.m]), zr, a.act);
    }
}

/// `y += z`, then the activation, over the whole output (for the kernels
/// that do not take the residual themselves).
pub(super) fn add_residual<T: GemmFloat>(y: &mut [T], z: Option<&[T]>, act: Option<Activation>) {
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

/// 1×1, stride-1, unpadded: Y[n, g] = W[g] · X[n, g] with X as it lies,
/// on the GEMM engine.
pub(super) fn pointwise_gemm<T: GemmFloat>(a: &ConvArgs<T>, y: &mut [T]) {
    let ConvArgs {
        p, x, w, b, z, act, ..
    } = *a;
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
