//! Residual connections fused into a convolution: `Conv → Add/Sum(conv
//! output, other)` becomes one Conv that takes `other` as a fourth input
//! (its fusion's `residual`) and adds it to each output block right after the
//! bias, while the block is still in cache, instead of a separate pass that
//! reads both tensors again. An activation after the Add then fuses into
//! the Conv as usual, applied after the addition. Float32 only, with both
//! addends of the output's exact shape (no broadcasting).

use super::{accepts, readers, Facts, Graph};
use crate::ir::FusionKind;
use crate::tensor::DType;

/// Fuses every eligible residual Add into its Conv; returns the names of
/// the changed Conv nodes.
pub(super) fn fuse_residual_adds(graph: &mut Graph, facts: &Facts) -> Vec<String> {
    super::fuse_each(graph, facts, try_fuse)
}

/// Whether value `v` is a float32 tensor of exactly `shape`.
fn f32_of_shape(facts: &Facts, v: usize, shape: &[usize]) -> bool {
    matches!(facts.get(v), Some(Some(f)) if f.dtype == DType::F32 && f.shape.as_deref() == Some(shape))
}

/// Index of the producer (a Conv) of input `k` of the Add at `add`, when
/// it can take the Add: its output read by the Add alone, and its operator
/// accepting a residual (see `Conv::accepts_fusion`).
fn fusable_conv(
    graph: &Graph,
    facts: &Facts,
    add: usize,
    k: usize,
    readers: &[usize],
) -> Option<usize> {
    let v = graph.nodes[add].inputs[k]?;
    if readers[v] != 1 {
        return None;
    }
    let c = graph
        .nodes
        .iter()
        .position(|n| n.outputs.first() == Some(&Some(v)))?;
    accepts(graph, facts, c, FusionKind::Residual).then_some(c)
}

fn try_fuse(graph: &mut Graph, facts: &Facts, add: usize) -> Option<String> {
    let node = &graph.nodes[add];
    if !matches!(node.op_type.as_str(), "Add" | "Sum")
        || !node.domain.is_empty()
        || node.inputs.len() != 2
        || node.outputs.len() != 1
    {
        return None;
    }
    let out = node.outputs[0]?;
    let shape = facts.get(out)?.as_ref()?.shape.clone()?;
    let (a, b) = (node.inputs[0]?, node.inputs[1]?);
    if a == b || ![a, b, out].iter().all(|&v| f32_of_shape(facts, v, &shape)) {
        return None;
    }
    // Of two fusable Convs, the later one takes the Add: the other side is
    // then usually ready when it runs.
    let readers = readers(graph);
    let (conv, other) = [(0, b), (1, a)]
        .into_iter()
        .filter_map(|(k, other)| Some((fusable_conv(graph, facts, add, k, &readers)?, other)))
        .max_by_key(|&(c, _)| c)?;
    let mut node = graph.nodes.remove(conv);
    node.inputs.resize(3, None);
    node.inputs.push(Some(other));
    node.fusion.residual = true;
    node.outputs[0] = Some(out);
    let name = node.name.clone();
    // The Conv takes the Add's place: after both addends' producers, and
    // before every reader of the sum.
    let add = if conv < add { add - 1 } else { add };
    graph.nodes[add] = node;
    Some(name)
}
