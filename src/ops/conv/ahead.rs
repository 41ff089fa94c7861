//! Conv's weights packed ahead of the first run ([`Operator::prepare`]).
//! When a plan is built for a known X shape, an adopted W is packed in the
//! form the kernel chosen for that shape reads, by the same packing calls
//! that kernel's first run would make, into the same caches; the original
//! then goes, before the run's activations and scratch exist. So the peak
//! memory holds one form of each W plus one original at a time, and the
//! first run does not pay for packing. The outputs are those of a run that
//! packed W itself, bit for bit.
//!
//! [`Operator::prepare`]: crate::ir::Operator::prepare

use super::choice::Algorithm;
use super::conv_op::{ConvPlan, Weights};
use super::{implicit, panels, pointwise};
use crate::ops::gemm::checked_product;

impl Weights {
    /// Packs W (`w`, f32) in the form `algo` reads on plan `p`, into the
    /// cache that kernel reads it from; false when `algo` reads W as it
    /// lies (nothing to pack).
    pub(super) fn pack_ahead(&self, algo: Algorithm, p: &ConvPlan, w: &[f32]) -> bool {
        match algo {
            Algorithm::Pointwise => {
                let pack = || panels::pack(p.group, p.mg(), p.cg(), w);
                self.panels.with(true, pack, |_| ());
            }
            Algorithm::PointwiseColumns => {
                let pack = || pointwise::columns::pack(p.group, p.mg(), p.cg(), w);
                self.columns.with(true, pack, |_| ());
            }
            #[cfg(target_arch = "x86_64")]
            Algorithm::Im2colColumns => {
                let pack = || super::im2col_columns::pack(p, w);
                self.columns.with(true, pack, |_| ());
            }
            Algorithm::Im2col { panels: true } => {
                let Ok(kk) = checked_product("Conv", &[p.cg(), p.win.kernel_len()]) else {
                    return false;
                };
                self.panels
                    .with(true, || panels::pack(p.group, p.mg(), kk, w), |_| ());
            }
            Algorithm::Implicit => {
                self.implicit.with(true, || implicit::pack(p, w), |_| ());
            }
            Algorithm::Winograd(algo) => {
                let mut fresh = None;
                self.winograd.get(algo, true, p, w, &mut fresh);
            }
            _ => return false,
        }
        true
    }
}
