//! The graph passes in their one order, named: QDQ recognition → prune (the
//! weights' DequantizeLinear nodes it left without readers, before folding
//! would dequantize them) → specialise (shape inference and constant
//! folding) → prune (dead nodes) → fuse → prune → rebuild operators.
//! A session runs it once at load ([`Stage::Load`]), and each plan runs it
//! again for its input shapes ([`Stage::Plan`]); a control-flow body goes
//! through both too, at load and for each set of its input facts.

use super::fuse::fuse_quantized;
use super::{fuse, prune, specialize, Facts, Graph, ValueId};
use crate::error::Result;
use crate::ir::Fact;

/// When the pipeline runs, which decides how strict inference is and which
/// passes take part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// At load, with the declared input types (shapes may be unknown, so an
    /// inference error leaves a value unknown); `fusion` turns the load-time
    /// fusions on.
    Load {
        /// Whether the fusion passes run.
        fusion: bool,
    },
    /// For one set of concrete input facts: inference errors are errors, and
    /// the graph was already fused at load.
    Plan,
}

/// Runs the passes for `stage` over `graph` given facts of its inputs, and
/// returns the facts inferred for every value (before pruning).
pub fn optimize(graph: &mut Graph, inputs: &[(ValueId, Fact)], stage: Stage) -> Result<Facts> {
    if stage == (Stage::Load { fusion: true }) {
        fuse_quantized(graph)?;
        prune(graph);
    }
    let facts = specialize(graph, inputs, stage == Stage::Plan)?;
    prune(graph);
    if stage == (Stage::Load { fusion: true }) {
        fuse(graph, &facts)?;
        prune(graph);
    }
    graph.rebuild_ops()?;
    Ok(facts)
}
