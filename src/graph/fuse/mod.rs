//! Load-time fusions: BatchNormalization folded into the Conv before it,
//! per-channel Mul/Add folded into the Conv or BatchNormalization before
//! them ([`affine`]), and simple activations (Relu, LeakyRelu, Clip, Sigmoid,
//! HardSwish, Tanh, the erf Gelu) fused into the Conv, Gemm, MatMul,
//! BatchNormalization, Add or Sum that produces their input, so the activation is applied while the
//! output is still in cache; before that, residual Adds fused into the
//! Conv producing one addend ([`residual`]). Transformer chains: the erf
//! GELU written out as Div/Erf/Add/Mul/Mul becomes one Gelu ([`gelu`]);
//! attention's scale and mask fold into the Softmax ([`softmax`]); a
//! linear layer's bias Add folds into its MatMul ([`bias`]), which can then
//! take the activation (GELU included) too. Dynamically quantized linear
//! layers (`MatMulInteger → Cast → Mul [→ Add]`) become one
//! MatMulIntegerToFloat ([`int_matmul`]). A depthwise or patch-embedding
//! Conv read only by a Transpose(0, 2, 3, 1) writes NHWC itself
//! ([`channels_last`]).
//! Apart from that, only float32 data is fused.

mod affine;
mod bias;
mod channels_last;
mod gelu;
mod int_matmul;
mod qdq;
mod residual;
mod softmax;

use super::{Facts, Graph, Value, ValueId};
use crate::error::Result;
use crate::ir::{Activation, FusionKind, InferInput};
use crate::tensor::Tensor;
use ndarray::{ArrayD, Axis};
use std::sync::Arc;

/// How many times each value is read (by nodes or as a graph output).
fn readers(graph: &Graph) -> Vec<usize> {
    let mut n = vec![0; graph.values.len()];
    for node in &graph.nodes {
        for &i in node.inputs.iter().flatten() {
            n[i] += 1;
        }
    }
    for &o in &graph.outputs {
        n[o] += 1;
    }
    n
}

/// Index of the node reading `v` (when exactly one node does).
fn sole_reader(graph: &Graph, v: ValueId) -> Option<usize> {
    let mut found = None;
    for (i, node) in graph.nodes.iter().enumerate() {
        if node.inputs.contains(&Some(v)) {
            if found.is_some() {
                return None;
            }
            found = Some(i);
        }
    }
    found
}

fn add_constant(graph: &mut Graph, name: String, t: Tensor) -> ValueId {
    graph.values.push(Value {
        name,
        declared: None,
    });
    graph.constants.push(Some(Arc::new(t)));
    graph.values.len() - 1
}

fn const_f32(graph: &Graph, v: Option<ValueId>) -> Option<ArrayD<f32>> {
    graph.constant(v?)?.array::<f32>().cloned()
}

/// The f32 values of constant `v`, to be changed into a new constant for
/// the one node that reads it: moved out of the graph when that node is its
/// only reader and nothing else holds it (no copy, so the old weights do
/// not stay resident beside the new ones), else copied. Call it only once
/// the fold can no longer fail: a moved constant is gone from the graph.
fn take_f32(graph: &mut Graph, v: ValueId) -> Option<ArrayD<f32>> {
    if readers(graph)[v] == 1 {
        if let Some(held) = graph.constants.get_mut(v).and_then(Option::take) {
            match Arc::try_unwrap(held) {
                Ok(Tensor::F32(a)) => return Some(a),
                Ok(other) => graph.constants[v] = Some(Arc::new(other)),
                Err(shared) => graph.constants[v] = Some(shared),
            }
        }
    }
    const_f32(graph, Some(v))
}

/// Recognises QDQ groups as integer operators ([`qdq`]) and rebuilds
/// them; runs before constant folding.
pub fn fuse_quantized(graph: &mut Graph) -> Result<()> {
    let changed = qdq::fuse_qdq(graph);
    rebuild(graph, changed)
}

/// Runs every fusion and rebuilds the operators of changed nodes. `facts`
/// (from [`super::specialize`]) tell the ranks the per-channel folds need.
pub fn fuse(graph: &mut Graph, facts: &Facts) -> Result<()> {
    let mut changed = fold_batch_norms(graph);
    changed.extend(fold_channel_affines(graph, facts));
    changed.extend(residual::fuse_residual_adds(graph, facts));
    if cfg!(feature = "ops-contrib") {
        changed.extend(int_matmul::fuse_integer_matmuls(graph, facts));
    }
    // The new Gelu nodes get their operator now: the activation fusion
    // below asks it what it computes.
    let gelus = gelu::fuse_gelus(graph, facts);
    rebuild(graph, gelus)?;
    changed.extend(softmax::fuse_softmax_inputs(graph, facts));
    changed.extend(bias::fuse_matmul_biases(graph, facts));
    changed.extend(fuse_activations(graph, facts));
    // Last, on the rebuilt operators: a Conv writing channels last takes
    // no activation or residual after it, and its hook asks which
    // activation it now applies.
    rebuild(graph, changed)?;
    let moved = channels_last::fuse_channels_last(graph, facts);
    rebuild(graph, moved)
}

/// Rebuilds the operators of the named nodes (once each).
fn rebuild(graph: &mut Graph, mut names: Vec<String>) -> Result<()> {
    crate::order::sort_by(&mut names, |a, b| a.cmp(b));
    names.dedup();
    for name in names {
        if let Some(i) = graph.nodes.iter().position(|n| n.name == name) {
            let (op, mask) = graph.build_op(&graph.nodes[i])?;
            graph.nodes[i].op = op;
            graph.nodes[i].built_with_consts = mask;
        }
    }
    Ok(())
}

/// Per-channel Mul/Add chains folded into the Conv or BatchNormalization
/// producing them, each node absorbing as many as follow it.
fn fold_channel_affines(graph: &mut Graph, facts: &Facts) -> Vec<String> {
    let mut changed = Vec::new();
    let mut i = 0;
    while i < graph.nodes.len() {
        let folded = affine::try_fold_into_conv(graph, i)
            .or_else(|| affine::try_fold_into_batch_norm(graph, facts, i));
        match folded {
            Some(name) => changed.push(name),
            None => i += 1,
        }
    }
    changed
}

/// Conv → BatchNormalization (inference, constant parameters, the Conv's
/// output read only by the BN) becomes one Conv with scaled weights and bias.
fn fold_batch_norms(graph: &mut Graph) -> Vec<String> {
    let mut changed = Vec::new();
    let mut i = 0;
    while i < graph.nodes.len() {
        if let Some(name) = try_fold_bn(graph, i) {
            changed.push(name);
        } else {
            i += 1;
        }
    }
    changed
}

fn try_fold_bn(graph: &mut Graph, conv: usize) -> Option<String> {
    let c = &graph.nodes[conv];
    if c.op_type != "Conv" || !c.domain.is_empty() || c.outputs.len() != 1 {
        return None;
    }
    let y = c.outputs[0]?;
    if readers(graph)[y] != 1 {
        return None;
    }
    let bn_index = sole_reader(graph, y)?;
    let bn = &graph.nodes[bn_index];
    if bn.op_type != "BatchNormalization"
        || bn.inputs.first() != Some(&Some(y))
        || bn.inputs.len() != 5
        || bn.outputs.iter().skip(1).any(|o| o.is_some())
        || bn.attrs.int("training_mode", 0).ok()? != 0
    {
        return None;
    }
    let eps = bn.attrs.float("epsilon", 1e-5).ok()?;
    let w_in = (*c.inputs.get(1)?)?;
    let cout = *graph.constant(w_in)?.array::<f32>()?.shape().first()?;
    let params: Vec<ArrayD<f32>> = (1..5)
        .map(|k| const_f32(graph, bn.inputs[k]))
        .collect::<Option<_>>()?;
    if params.iter().any(|p| p.len() != cout) {
        return None;
    }
    let flat = |a: &ArrayD<f32>| a.iter().copied().collect::<Vec<f32>>();
    let (scale, bias, mean, var) = (
        flat(&params[0]),
        flat(&params[1]),
        flat(&params[2]),
        flat(&params[3]),
    );
    let b = match c.inputs.get(2).copied().flatten() {
        Some(v) => flat(&const_f32(graph, Some(v))?),
        None => vec![0.0; cout],
    };
    if b.len() != cout {
        return None;
    }
    let s: Vec<f32> = (0..cout)
        .map(|k| scale[k] / (var[k] + eps).sqrt())
        .collect();
    let b2: Vec<f32> = (0..cout)
        .map(|k| (b[k] - mean[k]) * s[k] + bias[k])
        .collect();
    let conv_name = c.name.clone();
    let mut w2 = take_f32(graph, w_in)?;
    for (k, mut slice) in w2.axis_iter_mut(Axis(0)).enumerate() {
        slice.mapv_inplace(|x| x * s[k]);
    }
    let w_id = add_constant(graph, format!("{conv_name}.folded_weight"), Tensor::F32(w2));
    set_weights_and_bias(graph, conv, w_id, "folded_bias", b2)?;
    absorb(graph, conv, bn_index)
}

/// Gives Conv node `conv` the weights `w_id` and a new constant bias `b`
/// (named after the node and `tag`).
fn set_weights_and_bias(
    graph: &mut Graph,
    conv: usize,
    w_id: ValueId,
    tag: &str,
    b: Vec<f32>,
) -> Option<()> {
    let name = format!("{}.{tag}", graph.nodes[conv].name);
    let b_id = add_constant(graph, name, Tensor::from_vec(&[b.len()], b).ok()?);
    let node = &mut graph.nodes[conv];
    node.inputs.truncate(1);
    node.inputs.push(Some(w_id));
    node.inputs.push(Some(b_id));
    Some(())
}

/// Removes node `r` (the sole reader of `producer`'s output) and hands its
/// output to `producer`; returns the producer's name.
fn absorb(graph: &mut Graph, producer: usize, r: usize) -> Option<String> {
    let out = graph.nodes[r].outputs[0];
    graph.nodes[producer].outputs[0] = out;
    let name = graph.nodes[producer].name.clone();
    graph.nodes.remove(r);
    Some(name)
}

/// Runs `try_fuse` at every node index, the same index again after a
/// rewrite (which may have removed or moved nodes before it); returns the
/// names `try_fuse` reported for its rewrites.
fn fuse_each(
    graph: &mut Graph,
    facts: &Facts,
    try_fuse: fn(&mut Graph, &Facts, usize) -> Option<String>,
) -> Vec<String> {
    let mut changed = Vec::new();
    let mut i = 0;
    while i < graph.nodes.len() {
        match try_fuse(graph, facts, i) {
            Some(name) => changed.push(name),
            None => i += 1,
        }
    }
    changed
}

/// An operator that accepts an activation (Conv, Gemm, MatMul,
/// BatchNormalization, two-input Add/Sum on float32 data; see their
/// `accepts_fusion`) → an activation operator (`as_activation`), the
/// producer's output read only by it, becomes one node carrying the
/// activation in its [`Fusion`](crate::ir::Fusion).
fn fuse_activations(graph: &mut Graph, facts: &Facts) -> Vec<String> {
    fuse_each(graph, facts, try_fuse_activation)
}

/// The inputs of node `n` as its operator's fusion hooks see them: the
/// fact of each present input (`None` where unknown or absent) and its
/// value when constant.
fn hook_inputs<'a>(graph: &'a Graph, facts: &'a Facts, n: usize) -> Vec<InferInput<'a>> {
    graph.nodes[n]
        .inputs
        .iter()
        .map(|i| InferInput {
            fact: i.and_then(|id| facts.get(id)?.as_ref()),
            value: i.and_then(|id| graph.constant(id)).map(|t| t.as_ref()),
        })
        .collect()
}

/// Whether node `n`'s operator accepts a fusion of `kind` (the node's
/// single output not yet carrying one).
fn accepts(graph: &Graph, facts: &Facts, n: usize, kind: FusionKind) -> bool {
    let node = &graph.nodes[n];
    node.outputs.len() == 1
        && !node.fusion.has(kind)
        && node.op.accepts_fusion(kind, &hook_inputs(graph, facts, n))
}

/// The activation node `a` computes, when a producer may apply it instead:
/// every present input's fact known (so that an absent input is told from
/// an unknown one) and the operator's hook naming the activation.
fn activation_of(graph: &Graph, facts: &Facts, a: usize) -> Option<Activation> {
    let inputs = hook_inputs(graph, facts, a);
    let known = graph.nodes[a]
        .inputs
        .iter()
        .zip(&inputs)
        .all(|(i, h)| i.is_none() || h.fact.is_some() || h.value.is_some());
    if !known || graph.nodes[a].outputs.len() != 1 {
        return None;
    }
    graph.nodes[a].op.as_activation(&inputs)
}

fn try_fuse_activation(graph: &mut Graph, facts: &Facts, p: usize) -> Option<String> {
    if !accepts(graph, facts, p, FusionKind::Activation) {
        return None;
    }
    let y = graph.nodes[p].outputs[0]?;
    if readers(graph)[y] != 1 {
        return None;
    }
    let a = sole_reader(graph, y)?;
    if graph.nodes[a].inputs.first() != Some(&Some(y)) {
        return None;
    }
    let act = activation_of(graph, facts, a)?;
    let out = graph.nodes[a].outputs.first().copied().flatten()?;
    let node = &mut graph.nodes[p];
    node.fusion.activation = Some(act);
    node.outputs[0] = Some(out);
    let name = node.name.clone();
    graph.nodes.remove(a);
    Some(name)
}
