//! Attention's score normalisation, `Softmax(MatMul / √d + mask)` as the
//! exporters write it, fused into the Softmax: the scaling Div (or Mul) by
//! a one-element constant and the additive mask Add become the Softmax's
//! fusion (`scale`, `mask`) and its second input (see `ops::activation`), which applies them row by row
//! while the row is in cache instead of two passes over the score tensor.
//! Recognised: `Softmax(Add(Div|Mul(s, c), mask))`, `Softmax(Div|Mul(s, c))`
//! and `Softmax(Add(s, mask))`, Add and Mul in either operand order.
//!
//! Conditions: Softmax at opset ≥ 13 along the last axis; every value
//! float32 of known shape; the intermediates read by the chain alone; the
//! scaled scores of the Softmax's shape and the mask broadcasting to it
//! with the same last dimension. The scale and mask are applied with the
//! same f32 operations as the separate nodes, so only the Softmax kernel's
//! own rounding differs from the unfused graph.

use super::gelu::{producer, scalar};
use super::{accepts, readers, Facts, Graph, ValueId};
use crate::ir::{FusionKind, Scale};
use crate::tensor::DType;

/// Fuses every eligible scale/mask chain into its Softmax; returns the
/// names of the changed Softmax nodes.
pub(super) fn fuse_softmax_inputs(graph: &mut Graph, facts: &Facts) -> Vec<String> {
    super::fuse_each(graph, facts, try_fuse)
}

/// The shape of float32 value `v`, when known.
fn f32_shape(facts: &Facts, v: ValueId) -> Option<Vec<usize>> {
    match facts.get(v) {
        Some(Some(f)) if f.dtype == DType::F32 => f.shape.clone(),
        _ => None,
    }
}

/// Whether a mask of shape `m` broadcasts to `x` keeping the last axis.
fn mask_fits(m: &[usize], x: &[usize]) -> bool {
    m.len() <= x.len()
        && m.last() == x.last()
        && m.iter()
            .rev()
            .zip(x.iter().rev())
            .all(|(&a, &b)| a == b || a == 1)
}

/// Node `i`'s two inputs when it is a default-domain `op` with one output.
fn binary(graph: &Graph, i: usize, op: &str) -> Option<[ValueId; 2]> {
    let n = &graph.nodes[i];
    if n.op_type != op || !n.domain.is_empty() || n.outputs.len() != 1 || n.inputs.len() != 2 {
        return None;
    }
    Some([n.inputs[0]?, n.inputs[1]?])
}

/// The producer of `v` when `v` is read once (by the chain) and is no graph
/// output.
fn private_producer(graph: &Graph, counts: &[usize], v: ValueId) -> Option<usize> {
    if counts[v] != 1 || graph.outputs.contains(&v) {
        return None;
    }
    producer(graph, v)
}

/// `(s, c, divide)` when node `i` is `s / c` or `s · c` with `c` a
/// one-element constant.
fn scaling(graph: &Graph, i: usize) -> Option<(ValueId, f32, bool)> {
    if let Some([s, c]) = binary(graph, i, "Div") {
        return Some((s, scalar(graph, c)?, true));
    }
    let [a, b] = binary(graph, i, "Mul")?;
    match (scalar(graph, a), scalar(graph, b)) {
        (_, Some(c)) if graph.constant(a).is_none() => Some((a, c, false)),
        (Some(c), _) if graph.constant(b).is_none() => Some((b, c, false)),
        _ => None,
    }
}

fn try_fuse(graph: &mut Graph, facts: &Facts, sm: usize) -> Option<String> {
    // The Softmax's operator checks its opset, axis and inputs.
    if !accepts(graph, facts, sm, FusionKind::Scale) || !accepts(graph, facts, sm, FusionKind::Mask)
    {
        return None;
    }
    let v = graph.nodes[sm].inputs[0]?;
    let shape = f32_shape(facts, v)?;
    let counts = readers(graph);
    let p = private_producer(graph, &counts, v)?;
    let mut removed = vec![p];
    let (mut scores, mut mask) = (v, None);
    if let Some([a, b]) = binary(graph, p, "Add") {
        // The scores are the addend of the full shape produced by a scaling
        // node when there is one, else the first full-shape addend.
        let full = |u: ValueId| f32_shape(facts, u).as_deref() == Some(&shape[..]);
        let scaled = |u: ValueId| {
            private_producer(graph, &counts, u).is_some_and(|q| scaling(graph, q).is_some())
        };
        let (s, m) = if full(b) && scaled(b) && !scaled(a) {
            (b, a)
        } else if full(a) {
            (a, b)
        } else if full(b) {
            (b, a)
        } else {
            return None;
        };
        if !mask_fits(&f32_shape(facts, m)?, &shape) {
            return None;
        }
        scores = s;
        mask = Some(m);
    } else {
        removed.clear();
    }
    let mut scale = None;
    if let Some(q) = private_producer(graph, &counts, scores) {
        if let Some((s, c, divide)) = scaling(graph, q) {
            if f32_shape(facts, s).as_deref() == Some(&shape[..]) {
                scale = Some((c, divide));
                scores = s;
                removed.push(q);
            }
        }
    }
    if scale.is_none() && mask.is_none() {
        return None;
    }
    let node = &mut graph.nodes[sm];
    node.inputs = vec![Some(scores)];
    if let Some((factor, divide)) = scale {
        node.fusion.scale = Some(Scale { factor, divide });
    }
    if let Some(m) = mask {
        node.inputs.push(Some(m));
        node.fusion.mask = true;
    }
    let name = node.name.clone();
    removed.sort_unstable();
    removed.reverse();
    for r in removed {
        graph.nodes.remove(r);
    }
    Some(name)
}
