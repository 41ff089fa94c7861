//! The erf GELU that exporters write out before opset 20, `x · ½ ·
//! (1 + erf(x / √2))` as `Div(x, √2)` (or `Mul(x, 1/√2)`) → Erf → Add 1 and
//! two Muls, becomes one `Gelu` node (opset 20, `approximate = "none"`),
//! which runs a vectorised kernel instead of five passes over the tensor
//! and a scalar `erf`. The Mul orders recognised:
//! - `(x · (erf + 1)) · ½` (PyTorch's `nn.GELU` export);
//! - `(x · ½) · (1 + erf)` (Hugging Face's `gelu` written out);
//! - `x · ((1 + erf) · ½)`.
//!
//! Every constant is a one-element float; either operand order of Add and
//! Mul matches. The chain's intermediates must be read by the chain alone
//! (not graph outputs), and `x` and the result float32 of one known shape.
//! The fused result differs from the unfused graph's by float rounding
//! only (the kernel is within a few ulp of the exact GELU; see
//! `ops::activation`).

use super::{const_f32, readers, Facts, Graph, ValueId};
use crate::ir::attributes::Attributes;
use crate::tensor::DType;
use std::collections::BTreeMap;

/// Fuses every erf GELU chain; returns the names of the new Gelu nodes.
pub(super) fn fuse_gelus(graph: &mut Graph, facts: &Facts) -> Vec<String> {
    super::fuse_each(graph, facts, try_fuse)
}

/// The value of a one-element float32 constant.
pub(super) fn scalar(graph: &Graph, v: ValueId) -> Option<f32> {
    let c = const_f32(graph, Some(v))?;
    (c.len() == 1).then(|| c.iter().copied().next()).flatten()
}

/// Whether constant `v` is `want` within a relative 1e-6.
fn is_const(graph: &Graph, v: ValueId, want: f32) -> bool {
    scalar(graph, v).is_some_and(|c| (c - want).abs() <= 1e-6 * want.abs())
}

/// Index of the node producing `v`.
pub(super) fn producer(graph: &Graph, v: ValueId) -> Option<usize> {
    graph
        .nodes
        .iter()
        .position(|n| n.outputs.contains(&Some(v)))
}

/// Node `i` when it is a default-domain `op` with two present inputs and
/// one output.
fn binary(graph: &Graph, i: usize, op: &str) -> Option<[ValueId; 2]> {
    let n = &graph.nodes[i];
    if n.op_type != op || !n.domain.is_empty() || n.outputs.len() != 1 || n.inputs.len() != 2 {
        return None;
    }
    Some([n.inputs[0]?, n.inputs[1]?])
}

/// The other input of a two-input node that reads `v`.
fn other(inputs: [ValueId; 2], v: ValueId) -> Option<ValueId> {
    if inputs[0] == v {
        Some(inputs[1])
    } else if inputs[1] == v {
        Some(inputs[0])
    } else {
        None
    }
}

/// The sole reader of `v` (read once, not a graph output) and its output.
fn next(graph: &Graph, counts: &[usize], v: ValueId) -> Option<(usize, ValueId)> {
    if counts[v] != 1 || graph.outputs.contains(&v) {
        return None;
    }
    let r = graph
        .nodes
        .iter()
        .position(|n| n.inputs.contains(&Some(v)))?;
    Some((r, graph.nodes[r].outputs.first().copied().flatten()?))
}

/// `x` when node `i` computes `x / √2` or `x · (1/√2)`.
fn scaled_input(graph: &Graph, i: usize) -> Option<ValueId> {
    if let Some([x, c]) = binary(graph, i, "Div") {
        return is_const(graph, c, std::f32::consts::SQRT_2).then_some(x);
    }
    let [a, b] = binary(graph, i, "Mul")?;
    let k = std::f32::consts::FRAC_1_SQRT_2;
    if is_const(graph, b, k) {
        Some(a)
    } else if is_const(graph, a, k) {
        Some(b)
    } else {
        None
    }
}

fn try_fuse(graph: &mut Graph, facts: &Facts, e: usize) -> Option<String> {
    let erf = &graph.nodes[e];
    if erf.op_type != "Erf" || !erf.domain.is_empty() || erf.inputs.len() != 1 {
        return None;
    }
    let counts = readers(graph);
    let d = erf.inputs[0]?;
    let erf_out = erf.outputs.first().copied().flatten()?;
    if counts[d] != 1 || graph.outputs.contains(&d) {
        return None;
    }
    let div = producer(graph, d)?;
    let x = scaled_input(graph, div)?;
    let (add, plus) = next(graph, &counts, erf_out)?;
    if !is_const(graph, other(binary(graph, add, "Add")?, erf_out)?, 1.0) {
        return None;
    }
    let (m, m_out) = next(graph, &counts, plus)?;
    let o = other(binary(graph, m, "Mul")?, plus)?;
    let (last, removed) = if o == x || is_const(graph, o, 0.5) {
        // (x · (1 + erf)) · ½ or ((1 + erf) · ½) · x
        let (m2, _) = next(graph, &counts, m_out)?;
        let want = if o == x { None } else { Some(x) };
        let o2 = other(binary(graph, m2, "Mul")?, m_out)?;
        let ok = match want {
            None => is_const(graph, o2, 0.5),
            Some(x) => o2 == x,
        };
        ok.then_some((m2, vec![div, e, add, m]))?
    } else {
        // (x · ½) · (1 + erf)
        if counts[o] != 1 || graph.outputs.contains(&o) {
            return None;
        }
        let h = producer(graph, o)?;
        let c = other(binary(graph, h, "Mul")?, x)?;
        is_const(graph, c, 0.5).then_some((m, vec![div, e, add, h]))?
    };
    let y = graph.nodes[last].outputs[0]?;
    let f32_shape = |v: ValueId| match facts.get(v) {
        Some(Some(f)) if f.dtype == DType::F32 => f.shape.clone(),
        _ => None,
    };
    let shape = f32_shape(x)?;
    if f32_shape(y) != Some(shape) {
        return None;
    }
    let node = &mut graph.nodes[last];
    node.op_type = "Gelu".into();
    node.domain = String::new();
    node.opset = 20;
    node.inputs = vec![Some(x)];
    node.attrs = Attributes::new(&node.name, "Gelu", BTreeMap::new());
    let name = node.name.clone();
    let mut removed = removed;
    removed.sort_unstable();
    removed.reverse();
    for r in removed {
        graph.nodes.remove(r);
    }
    Some(name)
}
