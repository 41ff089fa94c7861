//! The GELUs that exporters write out before opset 20 become one `Gelu`
//! node (opset 20), which runs a vectorised kernel (and can then be fused
//! into the producing MatMul, Gemm or Conv) instead of five to nine passes
//! over the tensor:
//! - the erf form, `x · ½ · (1 + erf(x / √2))`, as `Div(x, √2)` (or
//!   `Mul(x, 1/√2)`) → Erf → Add 1 and two Muls (`approximate = "none"`);
//! - the tanh form, `x · ½ · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`,
//!   with `x³` as `Pow(x, 3)` or two Muls (`approximate = "tanh"`; GPT-2's
//!   `gelu_new`, PyTorch's `GELU(approximate="tanh")`).
//!
//! The outer products recognised, after `1 + f` (f the Erf or the Tanh):
//! - `(x · (1 + f)) · ½` (PyTorch's `nn.GELU` export);
//! - `(x · ½) · (1 + f)` (Hugging Face's written-out GELUs);
//! - `x · ((1 + f) · ½)`.
//!
//! Every constant is a one-element float; either operand order of Add and
//! Mul matches. The chain's intermediates must be read by the chain alone
//! (not graph outputs), and `x` and the result float32 of one known shape.
//! The fused result differs from the unfused graph's by float rounding
//! only (the kernels are within a few ulp of the exact GELU; see
//! `ops::activation`).

use super::{const_f32, readers, Facts, Graph, ValueId};
use crate::ir::attributes::{Attribute, Attributes};
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

/// The input and output of node `i` when it is a default-domain `op` with
/// one input.
fn unary(graph: &Graph, i: usize, op: &str) -> Option<(ValueId, ValueId)> {
    let n = &graph.nodes[i];
    if n.op_type != op || !n.domain.is_empty() || n.inputs.len() != 1 {
        return None;
    }
    Some((n.inputs[0]?, n.outputs.first().copied().flatten()?))
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

fn try_fuse(graph: &mut Graph, facts: &Facts, i: usize) -> Option<String> {
    let counts = readers(graph);
    let Head {
        x,
        nodes: head,
        out,
        tanh,
    } = erf_head(graph, &counts, i).or_else(|| tanh_head(graph, &counts, i))?;
    let (last, tail) = halved_product(graph, &counts, x, out)?;
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
    let mut attrs = BTreeMap::new();
    if tanh {
        attrs.insert("approximate".to_string(), Attribute::String("tanh".into()));
    }
    node.attrs = Attributes::new(&node.name, "Gelu", attrs);
    let name = node.name.clone();
    let mut removed: Vec<usize> = head.into_iter().chain(tail).collect();
    removed.sort_unstable();
    removed.reverse();
    for r in removed {
        graph.nodes.remove(r);
    }
    Some(name)
}

/// The inner part of a GELU chain, up to its Erf or Tanh.
struct Head {
    /// The GELU's input.
    x: ValueId,
    /// The chain's nodes up to and including the Erf or Tanh.
    nodes: Vec<usize>,
    /// The Erf's or Tanh's output.
    out: ValueId,
    /// Whether it is the tanh form.
    tanh: bool,
}

/// The chain's head when node `e` is an Erf of `x / √2` (the quotient
/// read by the Erf alone).
fn erf_head(graph: &Graph, counts: &[usize], e: usize) -> Option<Head> {
    let (d, erf_out) = unary(graph, e, "Erf")?;
    let private = |v: ValueId| counts[v] == 1 && !graph.outputs.contains(&v);
    let div = private_producer(graph, d, &private)?;
    let x = scaled_input(graph, div)?;
    Some(Head {
        x,
        nodes: vec![div, e],
        out: erf_out,
        tanh: false,
    })
}

/// The tanh GELU's constants: `√(2/π)` and the cubic term's factor.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const CUBIC: f32 = 0.044_715;

/// The chain's head when node `t` is a Tanh of `√(2/π) · (x + 0.044715 ·
/// x³)`, with `x³` as `Pow(x, 3)`, `(x · x) · x` or `x · (x · x)`, every
/// intermediate read by the chain alone.
fn tanh_head(graph: &Graph, counts: &[usize], t: usize) -> Option<Head> {
    let (u, t_out) = unary(graph, t, "Tanh")?;
    let private = |v: ValueId| counts[v] == 1 && !graph.outputs.contains(&v);
    let scale = private_producer(graph, u, &private)?;
    let a = const_factor(graph, scale, SQRT_2_OVER_PI)?;
    let add = private_producer(graph, a, &private)?;
    let [p, q] = binary(graph, add, "Add")?;
    // One addend is x, the other 0.044715 · x³.
    let (x, cubic, m) = [(p, q), (q, p)].into_iter().find_map(|(x, w)| {
        let m = private_producer(graph, w, &private)?;
        let c = const_factor(graph, m, CUBIC)?;
        let cube = private_producer(graph, c, &private)?;
        cube_nodes(graph, cube, x, &private).map(|nodes| (x, nodes, m))
    })?;
    let mut nodes = vec![scale, add, m, t];
    nodes.extend(cubic);
    Some(Head {
        x,
        nodes,
        out: t_out,
        tanh: true,
    })
}

/// The producer of `v` when `v` is read by one node and is not a graph
/// output.
fn private_producer(
    graph: &Graph,
    v: ValueId,
    private: &impl Fn(ValueId) -> bool,
) -> Option<usize> {
    private(v).then(|| producer(graph, v)).flatten()
}

/// The other operand of Mul node `i` when one operand is the constant
/// `want`.
fn const_factor(graph: &Graph, i: usize, want: f32) -> Option<ValueId> {
    let [a, b] = binary(graph, i, "Mul")?;
    if is_const(graph, b, want) {
        Some(a)
    } else if is_const(graph, a, want) {
        Some(b)
    } else {
        None
    }
}

/// The nodes computing `x³` at node `i`: a `Pow(x, 3)`, or two Muls.
fn cube_nodes(
    graph: &Graph,
    i: usize,
    x: ValueId,
    private: &impl Fn(ValueId) -> bool,
) -> Option<Vec<usize>> {
    if let Some([b, e]) = binary(graph, i, "Pow") {
        return (b == x && is_const(graph, e, 3.0)).then(|| vec![i]);
    }
    let sq = other(binary(graph, i, "Mul")?, x)?;
    let j = private_producer(graph, sq, private)?;
    (binary(graph, j, "Mul")? == [x, x]).then(|| vec![i, j])
}

/// The GELU's outer product from `f` (the Erf's or the Tanh's output):
/// `1 + f` then `·x` and `·½` in one of the orders exporters write. The
/// last node and the others.
fn halved_product(
    graph: &Graph,
    counts: &[usize],
    x: ValueId,
    f: ValueId,
) -> Option<(usize, Vec<usize>)> {
    let (add, plus) = next(graph, counts, f)?;
    if !is_const(graph, other(binary(graph, add, "Add")?, f)?, 1.0) {
        return None;
    }
    let (m, m_out) = next(graph, counts, plus)?;
    let o = other(binary(graph, m, "Mul")?, plus)?;
    if o == x || is_const(graph, o, 0.5) {
        // (x · (1 + f)) · ½ or ((1 + f) · ½) · x
        let (m2, _) = next(graph, counts, m_out)?;
        let o2 = other(binary(graph, m2, "Mul")?, m_out)?;
        let ok = if o == x {
            is_const(graph, o2, 0.5)
        } else {
            o2 == x
        };
        ok.then(|| (m2, vec![add, m]))
    } else {
        // (x · ½) · (1 + f)
        if counts[o] != 1 || graph.outputs.contains(&o) {
            return None;
        }
        let h = producer(graph, o)?;
        let c = other(binary(graph, h, "Mul")?, x)?;
        is_const(graph, c, 0.5).then(|| (m, vec![add, h]))
    }
}
