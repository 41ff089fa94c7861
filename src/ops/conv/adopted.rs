//! Conv weights the graph handed over ([`Operator::adopt_constant`]): the
//! operator holds W until a run has packed it in a layout that gives it
//! back exactly (the pointwise panels, the implicit-GEMM blocks), then lets
//! the original go, so that the weights live once, as the kernel reads
//! them. A later run on the same input shape takes the same kernel, which
//! reads only the packed weights; a run on another shape gets W unpacked
//! afresh, bit for bit.
//!
//! [`Operator::adopt_constant`]: crate::ir::Operator::adopt_constant

use super::choice::Algorithm;
use super::conv_op::{ConvPlan, Weights};
use super::im2col;
use super::implicit;
use super::{panels, pointwise};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::sync::{Arc, Mutex, MutexGuard};

/// The packed layout an adopted W was let go in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// Panels of the pointwise (1×1) GEMM, one matrix per group.
    Panels {
        /// The layer's groups.
        group: usize,
    },
    /// Panels of output channels of the small-plane pointwise kernel, one
    /// matrix per group.
    Columns {
        /// The layer's groups.
        group: usize,
    },
    /// Blocks of the implicit-GEMM kernel.
    Implicit,
    /// Winograd's transformed weights, which do not give W back: only for a
    /// model whose input shapes are fixed, so that every run takes the
    /// same transform.
    Winograd,
}

impl Form {
    /// The form a run of `p` on `algo` leaves W packed in, when that run
    /// reads W only in that form (so a later run on the same shape needs
    /// no original): the pointwise panels; im2col's panels where every
    /// chunk of the plane is at least a strip wide (a narrower last chunk
    /// runs on the engine, which reads W as it is); the implicit-GEMM
    /// blocks; Winograd's transforms.
    pub(super) fn left_by(algo: Algorithm, p: &ConvPlan) -> Option<Form> {
        match algo {
            Algorithm::Pointwise => Some(Form::Panels { group: p.group }),
            Algorithm::PointwiseColumns | Algorithm::Im2colColumns => {
                Some(Form::Columns { group: p.group })
            }
            Algorithm::Im2col { panels: true } if im2col::reads_only_packed(p) => {
                Some(Form::Panels { group: p.group })
            }
            Algorithm::Implicit => Some(Form::Implicit),
            Algorithm::Winograd(_) => Some(Form::Winograd),
            _ => None,
        }
    }
}

/// What the operator holds of an adopted W.
#[derive(Debug)]
struct Held {
    /// W's shape.
    shape: Vec<usize>,
    /// Whether every run has the same input shapes.
    fixed_shapes: bool,
    /// The original, until a run has packed it in a [`Form`].
    original: Option<Arc<Tensor>>,
    /// X's shape on the run that packed it, and the form.
    packed: Option<(Vec<usize>, Form)>,
}

/// An adopted W, if the graph handed one over.
#[derive(Debug, Default)]
pub(super) struct Adopted(Mutex<Option<Held>>);

/// The W a run without a W input computes with.
pub(super) enum RunWeights {
    /// The original: the run may pack it, then [`Adopted::packed`] says so.
    Original(Arc<Tensor>),
    /// Only the packed weights are needed (the same input shape as the
    /// packing run): an empty tensor stands for W, whose shape is given.
    Packed(Tensor, Vec<usize>),
    /// W unpacked from the packed weights for a run on another shape.
    Unpacked(Tensor),
}

impl Adopted {
    fn lock(&self) -> MutexGuard<'_, Option<Held>> {
        // A poisoned lock only means a run panicked; the state is intact.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the graph's handle to W when it is float32 (the packed kernels'
    /// type); true when held.
    pub(super) fn adopt(&self, value: &Arc<Tensor>, fixed_shapes: bool) -> bool {
        if !matches!(**value, Tensor::F32(_)) {
            return false;
        }
        let mut held = self.lock();
        match held.as_ref() {
            // Offered again (a second graph sharing the operator): only the
            // same tensor may be taken.
            Some(h) => h.original.as_ref().is_some_and(|o| Arc::ptr_eq(o, value)),
            None => {
                *held = Some(Held {
                    shape: value.shape().to_vec(),
                    fixed_shapes,
                    original: Some(value.clone()),
                    packed: None,
                });
                true
            }
        }
    }

    /// W for a run on input shape `x`, when the run has no W input.
    pub(super) fn for_run(&self, x: &[usize], weights: &Weights) -> Result<RunWeights> {
        let held = self.lock();
        let Some(h) = held.as_ref() else {
            return Err(Error::op("Conv", "input 1 (W) is missing"));
        };
        if let Some(w) = &h.original {
            return Ok(RunWeights::Original(w.clone()));
        }
        let Some((packed_x, form)) = &h.packed else {
            return Err(Error::Internal(
                "Conv: adopted weights were let go unpacked".into(),
            ));
        };
        if packed_x.as_slice() == x {
            let empty = Tensor::from_vec(&[0], Vec::<f32>::new())?;
            return Ok(RunWeights::Packed(empty, h.shape.clone()));
        }
        let m = h.shape.first().copied().unwrap_or(0);
        let k: usize = h.shape.iter().skip(1).product();
        let cache = match form {
            Form::Panels { .. } => &weights.panels,
            Form::Columns { .. } => &weights.columns,
            Form::Implicit => &weights.implicit,
            Form::Winograd => {
                return Err(Error::Internal(format!(
                    "Conv: W was let go for input shape {packed_x:?}, and a run has shape {x:?}"
                )))
            }
        };
        let Some(packed) = cache.packed() else {
            return Err(Error::Internal(
                "Conv: the packed weights of an adopted W are gone".into(),
            ));
        };
        let data = match *form {
            Form::Panels { group } => panels::unpack(group, m / group.max(1), k, packed),
            Form::Columns { group } => {
                pointwise::columns::unpack(group, m / group.max(1), k, packed)
            }
            Form::Implicit | Form::Winograd => implicit::unpack(m, k, packed),
        };
        Ok(RunWeights::Unpacked(Tensor::from_vec(&h.shape, data)?))
    }

    /// Packs the held original ahead of a run on input shape `x` (`pack`
    /// packs it and returns the form it left W in, if any), then lets it
    /// go as [`Adopted::packed`] does after such a run. Nothing happens
    /// when no original is held or W was packed already.
    pub(super) fn pack_ahead(&self, x: &[usize], pack: impl FnOnce(&Tensor) -> Option<Form>) {
        let original = match self.lock().as_ref() {
            Some(Held {
                original: Some(w),
                packed: None,
                ..
            }) => w.clone(),
            _ => return,
        };
        let form = pack(&original);
        self.packed(x, form);
    }

    /// After a run on input shape `x` with the original W: when that run
    /// packed W in `form`, the original goes.
    pub(super) fn packed(&self, x: &[usize], form: Option<Form>) {
        let Some(form) = form else {
            return;
        };
        if let Some(h) = self.lock().as_mut() {
            if h.original.is_some() && (form != Form::Winograd || h.fixed_shapes) {
                h.original = None;
                h.packed = Some((x.to_vec(), form));
            }
        }
    }
}
