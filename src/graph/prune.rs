//! Dead-node removal: drops nodes whose outputs no graph output depends on,
//! and constants nothing reads any more.

use super::Graph;

/// Removes nodes that do not contribute to any graph output and constants
/// that no remaining node or output reads. Nodes must be in topological order.
pub fn prune(graph: &mut Graph) {
    let mut live = vec![false; graph.values.len()];
    for &o in &graph.outputs {
        live[o] = true;
    }
    let mut keep = vec![false; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate().rev() {
        if node.outputs.iter().flatten().any(|&o| live[o]) {
            keep[i] = true;
            for &v in node.inputs.iter().flatten() {
                live[v] = true;
            }
        }
    }
    let mut k = keep.into_iter();
    graph.nodes.retain(|_| k.next().unwrap_or(false));
    for (id, c) in graph.constants.iter_mut().enumerate() {
        if !live[id] {
            *c = None;
        }
    }
    for (id, f) in graph.released.iter_mut().enumerate() {
        if !live.get(id).copied().unwrap_or(false) {
            *f = None;
        }
    }
}
