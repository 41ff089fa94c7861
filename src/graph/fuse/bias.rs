//! A linear layer's bias, `Add(MatMul(x, W), b)` as the exporters write
//! `nn.Linear` on inputs of rank above 2, fused into the MatMul: the bias
//! becomes input 2 and the node's fusion gets `bias` (see
//! `ops::gemm`), added to each output block while it is in cache instead
//! of a second pass over the product. The activation fusion that runs
//! after it can then extend the MatMul further (a GELU or Relu).
//!
//! Conditions: a default-domain MatMul whose float32 output (of known
//! shape) is read by the Add alone and is no graph output; the other
//! addend a float32 constant with one value per output column (shape
//! `[n]`, or `[1, …, 1, n]` of rank at most the output's), so the sum keeps
//! the product's shape. Either operand order of the Add matches; the fused
//! sum `v + b` has the same bits as the separate Add.

use super::gelu::producer;
use super::{accepts, const_f32, readers, Facts, Graph, ValueId};
use crate::ir::FusionKind;
use crate::tensor::DType;

/// Fuses every eligible bias Add into its MatMul; returns the names of the
/// changed MatMul nodes.
pub(super) fn fuse_matmul_biases(graph: &mut Graph, facts: &Facts) -> Vec<String> {
    super::fuse_each(graph, facts, try_fuse)
}

/// The shape of float32 value `v`, when known.
fn f32_shape(facts: &Facts, v: ValueId) -> Option<Vec<usize>> {
    match facts.get(v) {
        Some(Some(f)) if f.dtype == DType::F32 => f.shape.clone(),
        _ => None,
    }
}

/// The fusable MatMul producing `v`, when `v` is its float32 output of
/// known shape, read once (by the Add) and no graph output.
fn fusable_matmul(graph: &Graph, facts: &Facts, v: ValueId) -> Option<(usize, Vec<usize>)> {
    if readers(graph)[v] != 1 || graph.outputs.contains(&v) {
        return None;
    }
    let p = producer(graph, v)?;
    if !accepts(graph, facts, p, FusionKind::Bias) {
        return None;
    }
    Some((p, f32_shape(facts, v)?))
}

/// Whether constant `b` holds one float32 value per column of an output of
/// shape `out`, broadcasting to it without changing it.
fn is_column_bias(graph: &Graph, b: ValueId, out: &[usize]) -> bool {
    let Some(c) = const_f32(graph, Some(b)) else {
        return false;
    };
    let shape = c.shape();
    let Some((&n, lead)) = shape.split_last() else {
        return false;
    };
    out.last() == Some(&n) && shape.len() <= out.len() && lead.iter().all(|&d| d == 1)
}

fn try_fuse(graph: &mut Graph, facts: &Facts, add: usize) -> Option<String> {
    let node = &graph.nodes[add];
    if node.op_type != "Add"
        || !node.domain.is_empty()
        || node.inputs.len() != 2
        || node.outputs.len() != 1
    {
        return None;
    }
    let (a, b) = (node.inputs[0]?, node.inputs[1]?);
    let out = node.outputs[0]?;
    let (mm, bias) = [(a, b), (b, a)].into_iter().find_map(|(p, q)| {
        let (mm, shape) = fusable_matmul(graph, facts, p)?;
        is_column_bias(graph, q, &shape).then_some((mm, q))
    })?;
    let node = &mut graph.nodes[mm];
    node.inputs.push(Some(bias));
    node.fusion.bias = true;
    node.outputs[0] = Some(out);
    let name = node.name.clone();
    graph.nodes.remove(add);
    Some(name)
}
