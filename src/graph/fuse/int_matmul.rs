//! onnxruntime's dynamic quantization writes each linear layer out as
//! `MatMulInteger(Xq, Wq, xzp, wzp) → Cast(float) → Mul(·, s) [→ Add(b)]`,
//! with `s = Mul(x_scale, w_scale)`; this pass turns the chain into one
//! com.microsoft MatMulIntegerToFloat, which runs the int8 product with B
//! packed at build and applies the scale and bias as each tile is stored
//! (see `ops::contrib`), instead of three more passes over the product.
//!
//! The result has the unfused graph's bits: the operator computes
//! `f32(acc) · (a_scale · b_scale[j]) + bias[j]`, the same f32 operations
//! in the same order. When `s` is that Mul (read by the chain alone), its
//! operands become a_scale (the one-element one) and b_scale; any other
//! `s` becomes b_scale with a_scale 1 (exact).
//!
//! Conditions: B a constant 8-bit matrix with a constant zero point (one,
//! or one per column) or none; A's zero point one value or none; `s` one
//! float32 value or one per column (`[n]`, `[1, n]`); the bias, in either
//! operand order of the Add, a float32 constant of shape `[n]`. Every
//! intermediate is read once, by the chain, and is no graph output; the
//! product, the Mul and the Add all have the product's shape.

use super::gelu::producer;
use super::{add_constant, readers, Facts, Graph, ValueId};
use crate::ir::attributes::Attributes;
use crate::tensor::{DType, Tensor};
use std::collections::BTreeMap;

/// Fuses every eligible chain; returns the names of the rewritten
/// MatMulInteger nodes.
pub(super) fn fuse_integer_matmuls(graph: &mut Graph, facts: &Facts) -> Vec<String> {
    super::fuse_each(graph, facts, try_fuse)
}

/// Node `i`'s inputs when it is a default-domain `op` with one output.
fn inputs_of<'g>(graph: &'g Graph, i: usize, op: &str) -> Option<&'g [Option<ValueId>]> {
    let n = &graph.nodes[i];
    (n.op_type == op && n.domain.is_empty() && n.outputs.len() == 1).then_some(&n.inputs[..])
}

/// The node alone reading `v` (read once, no graph output) and its output.
fn sole_next(graph: &Graph, counts: &[usize], v: ValueId) -> Option<(usize, ValueId)> {
    if counts[v] != 1 || graph.outputs.contains(&v) {
        return None;
    }
    let r = super::sole_reader(graph, v)?;
    Some((r, graph.nodes[r].outputs.first().copied().flatten()?))
}

/// The other operand of two-input node `i` reading `v`.
fn other(graph: &Graph, i: usize, op: &str, v: ValueId) -> Option<ValueId> {
    match inputs_of(graph, i, op)? {
        [Some(a), Some(b)] if *a == v && *b != v => Some(*b),
        [Some(a), Some(b)] if *b == v && *a != v => Some(*a),
        _ => None,
    }
}

/// The shape of value `v` when its fact is known.
fn shape(facts: &Facts, v: ValueId) -> Option<&[usize]> {
    facts.get(v)?.as_ref()?.shape.as_deref()
}

fn dtype(facts: &Facts, v: ValueId) -> Option<DType> {
    Some(facts.get(v)?.as_ref()?.dtype)
}

/// Whether a parameter of shape `p` is one value (`[]`, `[1]`) or one per
/// column of `n` (`[n]`, `[1, n]`), as the operator takes it for a 2-D B.
fn per_column(p: &[usize], n: usize) -> bool {
    matches!(p, [] | [1]) || p == [n] || p == [1, n]
}

/// Whether `p` is one value of rank at most 1 (a_scale's shape).
fn one_value(p: &[usize]) -> bool {
    matches!(p, [] | [1])
}

fn try_fuse(graph: &mut Graph, facts: &Facts, mm: usize) -> Option<String> {
    let ins = inputs_of(graph, mm, "MatMulInteger")?;
    let (a, b) = (ins.first().copied()??, ins.get(1).copied()??);
    let (za, zb) = (ins.get(2).copied().flatten(), ins.get(3).copied().flatten());
    let acc = graph.nodes[mm].outputs[0]?;
    // B: a constant 8-bit matrix, its zero point constant (or absent).
    let bt = graph.constant(b)?;
    let [_, n] = <[usize; 2]>::try_from(bt.shape()).ok()?;
    let b_type = bt.dtype();
    if !matches!(b_type, DType::U8 | DType::I8) {
        return None;
    }
    if let Some(z) = zb {
        let zt = graph.constant(z)?;
        if zt.dtype() != b_type || !matches!(zt.shape(), [] | [1]) && zt.shape() != [n] {
            return None;
        }
    }
    let a_type = dtype(facts, a)?;
    if !matches!(a_type, DType::U8 | DType::I8) {
        return None;
    }
    if let Some(z) = za {
        if dtype(facts, z)? != a_type || !one_value(shape(facts, z)?) {
            return None;
        }
    }
    let out_shape = shape(facts, acc)?.to_vec();
    let counts = readers(graph);
    // Cast to float.
    let (cast, cast_out) = sole_next(graph, &counts, acc)?;
    if inputs_of(graph, cast, "Cast")? != [Some(acc)] || dtype(facts, cast_out)? != DType::F32 {
        return None;
    }
    // Mul by the scale product.
    let (mul, mut y) = sole_next(graph, &counts, cast_out)?;
    let s = other(graph, mul, "Mul", cast_out)?;
    if dtype(facts, s)? != DType::F32
        || !per_column(shape(facts, s)?, n)
        || shape(facts, y)? != out_shape
    {
        return None;
    }
    let mut removed = vec![cast, mul];
    // An optional bias Add.
    let mut bias = None;
    if let Some((add, add_out)) = sole_next(graph, &counts, y) {
        if let Some(bv) = other(graph, add, "Add", y) {
            let is_bias = graph
                .constant(bv)
                .is_some_and(|t| t.dtype() == DType::F32 && t.shape() == [n]);
            if is_bias && shape(facts, add_out) == Some(&out_shape[..]) {
                removed.push(add);
                bias = Some(bv);
                y = add_out;
            }
        }
    }
    // The scales: the Mul making `s` absorbed when the chain alone reads it.
    let (a_scale, b_scale) = match scale_mul(graph, facts, &counts, s, n) {
        Some((scale_node, sa, sb)) => {
            removed.push(scale_node);
            (sa, sb)
        }
        None => {
            let name = format!("{}.unit_scale", graph.nodes[mm].name);
            (add_constant(graph, name, Tensor::scalar(1f32)), s)
        }
    };
    let node = &mut graph.nodes[mm];
    node.op_type = "MatMulIntegerToFloat".into();
    node.domain = crate::ops::MS_DOMAIN.into();
    node.opset = 1;
    node.inputs = vec![Some(a), Some(b), Some(a_scale), Some(b_scale), za, zb, bias];
    while node.inputs.last() == Some(&None) {
        node.inputs.pop();
    }
    node.outputs = vec![Some(y)];
    node.attrs = Attributes::new(&node.name, "MatMulIntegerToFloat", BTreeMap::new());
    let name = node.name.clone();
    removed.sort_unstable_by(|x, y| y.cmp(x));
    for r in removed {
        graph.nodes.remove(r);
    }
    Some(name)
}

/// `s = Mul(p, q)` read only by the chain, one operand a single float32
/// value (a_scale) and the other one value or one per column (b_scale):
/// (the Mul's index, a_scale, b_scale).
fn scale_mul(
    graph: &Graph,
    facts: &Facts,
    counts: &[usize],
    s: ValueId,
    n: usize,
) -> Option<(usize, ValueId, ValueId)> {
    if counts[s] != 1 || graph.outputs.contains(&s) {
        return None;
    }
    let m = producer(graph, s)?;
    let [p, q] = match inputs_of(graph, m, "Mul")? {
        [Some(p), Some(q)] => [*p, *q],
        _ => return None,
    };
    let f32_shape = |v: ValueId| {
        (dtype(facts, v)? == DType::F32)
            .then(|| shape(facts, v))
            .flatten()
    };
    let (sp, sq) = (f32_shape(p)?, f32_shape(q)?);
    // The product's shape is the broadcast of the two: one of them is one
    // value, so it is the other's (or rank 1 when both are `[]`/`[1]`).
    if one_value(sp) && per_column(sq, n) {
        Some((m, p, q))
    } else if one_value(sq) && per_column(sp, n) {
        Some((m, q, p))
    } else {
        None
    }
}
