//! A Conv whose output only a Transpose(0, 2, 3, 1) reads (NCHW → NHWC, as
//! ConvNeXt's blocks do after their depthwise 7×7, and ConvNeXt's and
//! Swin's 4×4/4 patch stems, before the LayerNorm over channels) becomes
//! one Conv writing NHWC itself: the channel-blocked depthwise kernel sums
//! `[pixel][channel]` anyway, and the patch kernel's product is
//! position-major, so neither their transpose back into planes nor the
//! Transpose node's pass is run. The
//! Conv's hook (`accepts_fusion` with [`FusionKind::ChannelsLast`]) says
//! where its kernel writes that layout; the bits are those of the two nodes.

use super::{accepts, fuse_each, readers, sole_reader};
use crate::graph::{Facts, Graph};
use crate::ir::FusionKind;

/// The permutation that moves a 4-D tensor's channels last.
const CHANNELS_LAST: [i64; 4] = [0, 2, 3, 1];

/// Fuses every Conv → Transpose(0, 2, 3, 1) pair the Conv accepts; returns
/// the names of the changed Convs.
pub(super) fn fuse_channels_last(graph: &mut Graph, facts: &Facts) -> Vec<String> {
    fuse_each(graph, facts, try_fuse)
}

fn try_fuse(graph: &mut Graph, facts: &Facts, c: usize) -> Option<String> {
    let conv = &graph.nodes[c];
    if conv.op_type != "Conv" || !conv.domain.is_empty() {
        return None;
    }
    let y = conv.outputs.first().copied().flatten()?;
    // Read once, and not as a graph output (counted among the readers).
    if readers(graph)[y] != 1 {
        return None;
    }
    let t = sole_reader(graph, y)?;
    let tr = &graph.nodes[t];
    let perm = tr.attrs.ints_opt("perm").ok()??;
    if tr.op_type != "Transpose"
        || !tr.domain.is_empty()
        || tr.inputs.len() != 1
        || tr.inputs[0] != Some(y)
        || tr.outputs.len() != 1
        || perm.as_slice() != CHANNELS_LAST
    {
        return None;
    }
    let out = tr.outputs[0]?;
    if !accepts(graph, facts, c, FusionKind::ChannelsLast) {
        return None;
    }
    let node = &mut graph.nodes[c];
    node.fusion.channels_last = true;
    node.outputs[0] = Some(out);
    let name = node.name.clone();
    graph.nodes.remove(t);
    Some(name)
}
