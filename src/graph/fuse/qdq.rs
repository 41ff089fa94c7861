//! QDQ recognition: in a model whose float operators sit between
//! DequantizeLinear and QuantizeLinear nodes (onnxruntime's QDQ format),
//! the groups that have an integer operator become it, so the data stays
//! 8-bit and runs on the int8 kernels:
//! - `DQ(x), DQ(w), [DQ(b)] → Conv → Q` becomes QLinearConv;
//! - `DQ(a), DQ(b) → Gemm [→ Q]` becomes com.microsoft QGemm (requantized,
//!   or float output when no Q follows);
//! - `DQ, DQ → Add (or two-input Sum) → Q` becomes QLinearAdd; `DQ… → Concat → Q`
//!   QLinearConcat; `DQ → GlobalAveragePool / AveragePool → Q` their
//!   QLinear forms;
//! - `DQ → MaxPool / Reshape / Flatten / Transpose / Squeeze / Unsqueeze →
//!   Q` with the same scale and zero point on both sides runs the operator
//!   on the 8-bit data directly (it only selects or moves values).
//!
//! Results: the integer operators compute exact sums and round once, where
//! the float graph rounds every partial sum in f32 before its final
//! rounding, so an element may differ by one quantization step (tested in
//! `tests/quantized.rs`). Biases are converted to int32 in units of
//! `x_scale · w_scale`, exactly when the model's bias scale is that
//! product (as onnxruntime's quantizer writes it).
//!
//! Runs before constant folding (which would turn the weights' DQ into
//! float constants); the DQ nodes left without readers are pruned.

use super::{add_constant, readers, Graph, ValueId};
use crate::tensor::{DType, Tensor};

/// A DequantizeLinear feeding a value: its quantized input, scale and zero
/// point, all but the input constant.
#[derive(Debug, Clone, Copy)]
struct Dq {
    data: ValueId,
    scale: ValueId,
    zero: ValueId,
}

impl Dq {
    /// (data, scale, zero point): how the QLinear operators take it.
    fn inputs(&self) -> [Option<ValueId>; 3] {
        [Some(self.data), Some(self.scale), Some(self.zero)]
    }
}

/// Fuses every recognised group; returns the names of the changed nodes.
pub(super) fn fuse_qdq(graph: &mut Graph) -> Vec<String> {
    let mut changed = Vec::new();
    let mut i = 0;
    while i < graph.nodes.len() {
        let node = &graph.nodes[i];
        let fused = if !node.domain.is_empty() {
            None
        } else {
            match node.op_type.as_str() {
                "Conv" if cfg!(feature = "ops-quant") => conv(graph, i),
                "Gemm" if cfg!(feature = "ops-contrib") => gemm(graph, i),
                // A two-input Sum is an Add (both broadcast the same way).
                "Add" | "Sum" => {
                    let integer = if cfg!(feature = "ops-contrib") {
                        add(graph, i)
                    } else {
                        None
                    };
                    integer.or_else(|| dequantizing_add(graph, i))
                }
                "Concat" if cfg!(feature = "ops-contrib") => concat(graph, i),
                "GlobalAveragePool" | "AveragePool" if cfg!(feature = "ops-contrib") => {
                    average_pool(graph, i)
                }
                "MaxPool" | "Reshape" | "Flatten" | "Transpose" | "Squeeze" | "Unsqueeze" => {
                    passthrough(graph, i)
                }
                _ => None,
            }
        };
        if let Some(name) = fused {
            changed.push(name);
        }
        i += 1;
    }
    changed
}

/// The node producing `v`.
fn producer(graph: &Graph, v: ValueId) -> Option<usize> {
    graph
        .nodes
        .iter()
        .position(|n| n.outputs.contains(&Some(v)))
}

/// The constant 8-bit tensor `v`, if it is one.
fn const8(graph: &Graph, v: ValueId) -> Option<&Tensor> {
    let t = graph.constant(v)?;
    matches!(t.dtype(), DType::U8 | DType::I8).then_some(t.as_ref())
}

/// The DequantizeLinear producing `v` (plain: no block size), with constant
/// scale and 8-bit zero point, and `scales` scale values (`None`: any).
fn dq_of(graph: &Graph, v: ValueId, per_tensor: bool) -> Option<Dq> {
    let node = &graph.nodes[producer(graph, v)?];
    if node.op_type != "DequantizeLinear" || !node.domain.is_empty() {
        return None;
    }
    if node.attrs.int("block_size", 0).ok()? != 0 {
        return None;
    }
    let (data, scale, zero) = (
        node.inputs.first()?.as_ref()?,
        node.inputs.get(1)?.as_ref()?,
        node.inputs.get(2)?.as_ref()?,
    );
    let s = graph.constant(*scale)?;
    let z = const8(graph, *zero)?;
    if s.dtype() != DType::F32 || s.len() != z.len() || (per_tensor && s.len() != 1) {
        return None;
    }
    Some(Dq {
        data: *data,
        scale: *scale,
        zero: *zero,
    })
}

/// A per-tensor DQ of non-constant 8-bit data (an activation).
fn activation(graph: &Graph, v: ValueId) -> Option<Dq> {
    let dq = dq_of(graph, v, true)?;
    graph.constant(dq.data).is_none().then_some(dq)
}

/// The nodes a fused group ends with, removed once the group is rewritten:
/// the QuantizeLinear, and a Relu before it when one is absorbed.
#[derive(Debug, Clone, Copy)]
struct Tail {
    q: usize,
    relu: Option<usize>,
}

/// The QuantizeLinear that alone reads `v` (per tensor, constant scale and
/// 8-bit zero point), directly or through a Relu that alone reads `v`:
/// (the nodes to remove, scale, zero point, output). A Relu is absorbed
/// only when the zero point is its type's lowest value: requantization then
/// clamps every negative value to it, as the Relu would have.
fn q_after(graph: &Graph, v: ValueId) -> Option<(Tail, ValueId, ValueId, ValueId)> {
    let (r, node) = sole_reader(graph, v)?;
    if node.op_type == "Relu" && node.domain.is_empty() {
        let relu_out = (*node.outputs.first()?)?;
        let (q, scale, zero, y) = q_direct(graph, relu_out)?;
        let lowest = match const8(graph, zero)? {
            z if z.dtype() == DType::U8 => z.as_bytes()?[0] == 0,
            z => z.as_bytes()?[0] == 0x80,
        };
        return lowest.then_some((Tail { q, relu: Some(r) }, scale, zero, y));
    }
    let (q, scale, zero, y) = q_direct(graph, v)?;
    Some((Tail { q, relu: None }, scale, zero, y))
}

/// The node that alone reads `v` (and `v` is not a graph output).
fn sole_reader(graph: &Graph, v: ValueId) -> Option<(usize, &crate::graph::Node)> {
    if readers(graph)[v] != 1 {
        return None;
    }
    let r = graph
        .nodes
        .iter()
        .position(|n| n.inputs.contains(&Some(v)))?;
    Some((r, &graph.nodes[r]))
}

/// [`q_after`] without a Relu: (its index, scale, zero point, output).
fn q_direct(graph: &Graph, v: ValueId) -> Option<(usize, ValueId, ValueId, ValueId)> {
    let (r, node) = sole_reader(graph, v)?;
    if node.op_type != "QuantizeLinear"
        || !node.domain.is_empty()
        || node.inputs.first() != Some(&Some(v))
    {
        return None;
    }
    let (scale, zero) = (node.inputs.get(1)?.as_ref()?, node.inputs.get(2)?.as_ref()?);
    let s = graph.constant(*scale)?;
    if s.dtype() != DType::F32 || s.len() != 1 || const8(graph, *zero)?.len() != 1 {
        return None;
    }
    Some((r, *scale, *zero, node.outputs.first()?.as_ref().copied()?))
}

fn f32s(graph: &Graph, v: ValueId) -> Option<Vec<f32>> {
    Some(graph.constant(v)?.array::<f32>()?.iter().copied().collect())
}

/// The type of the 8-bit constant `v`.
fn dtype(graph: &Graph, v: ValueId) -> Option<DType> {
    graph.constant(v).map(|t| t.dtype())
}

/// A bias (`DQ(int32 constant)` or a float constant, `n` values or one)
/// as int32 in units of `unit[j]`: `round(b / unit)`.
fn bias_ints(graph: &Graph, b: ValueId, unit: &[f64], n: usize) -> Option<Vec<i32>> {
    let values: Vec<f64> = match dq_bias(graph, b) {
        Some(v) => v,
        None => f32s(graph, b)?.into_iter().map(f64::from).collect(),
    };
    if values.len() != n && values.len() != 1 {
        return None;
    }
    (0..n)
        .map(|j| {
            let u = unit[if unit.len() == 1 { 0 } else { j }];
            let q = (values[if values.len() == 1 { 0 } else { j }] / u).round_ties_even();
            (u > 0.0 && q.abs() < i32::MAX as f64).then_some(q as i32)
        })
        .collect()
}

/// The float values `(b − zp) · s` of a DequantizeLinear of an int32
/// constant (as f32, what the graph computes).
fn dq_bias(graph: &Graph, v: ValueId) -> Option<Vec<f64>> {
    let node = &graph.nodes[producer(graph, v)?];
    if node.op_type != "DequantizeLinear" || !node.domain.is_empty() {
        return None;
    }
    let data = graph.constant((*node.inputs.first()?)?)?;
    let b: Vec<i32> = data.array::<i32>()?.iter().copied().collect();
    let s = f32s(graph, (*node.inputs.get(1)?)?)?;
    let z: Vec<i32> = match node.inputs.get(2).copied().flatten() {
        Some(z) => graph.constant(z)?.array::<i32>()?.iter().copied().collect(),
        None => vec![0],
    };
    if (s.len() != 1 && s.len() != b.len()) || (z.len() != 1 && z.len() != b.len()) {
        return None;
    }
    let pick = |v: &[i32], i: usize| v[if v.len() == 1 { 0 } else { i }];
    Some(
        (0..b.len())
            .map(|i| {
                ((pick(&b, i) - pick(&z, i)) as f32 * s[if s.len() == 1 { 0 } else { i }]) as f64
            })
            .collect(),
    )
}

/// Turns node `i` into `op_type` (domain, opset) with `inputs` and the
/// output `out`, removing the QuantizeLinear at `q` when given; returns the
/// node's name.
fn rewrite(
    graph: &mut Graph,
    i: usize,
    (op_type, domain, opset): (&str, &str, i64),
    inputs: Vec<Option<ValueId>>,
    out: Option<(Tail, ValueId)>,
) -> String {
    let node = &mut graph.nodes[i];
    node.op_type = op_type.to_string();
    node.domain = domain.to_string();
    node.opset = opset;
    node.inputs = inputs;
    let name = node.name.clone();
    if let Some((tail, y)) = out {
        node.outputs = vec![Some(y)];
        // The later node first, so the earlier index stays valid.
        let mut gone = [Some(tail.q), tail.relu];
        gone.sort_unstable_by(|a, b| b.cmp(a));
        for k in gone.into_iter().flatten() {
            graph.nodes.remove(k);
        }
    }
    name
}

/// [`rewrite`] into a com.microsoft operator that requantizes its output.
fn contrib(
    graph: &mut Graph,
    i: usize,
    op_type: &str,
    inputs: Vec<Option<ValueId>>,
    out: (Tail, ValueId),
) -> String {
    rewrite(
        graph,
        i,
        (op_type, crate::ops::MS_DOMAIN, 1),
        inputs,
        Some(out),
    )
}

fn conv(graph: &mut Graph, i: usize) -> Option<String> {
    let node = &graph.nodes[i];
    let x = activation(graph, (*node.inputs.first()?)?)?;
    let w = dq_of(graph, (*node.inputs.get(1)?)?, false)?;
    let wq = const8(graph, w.data)?;
    let m = *wq.shape().first()?;
    let ws = f32s(graph, w.scale)?;
    let w_dq = &graph.nodes[producer(graph, (*node.inputs.get(1)?)?)?];
    if ws.len() != 1 && (ws.len() != m || w_dq.attrs.int("axis", 1).ok()? != 0) {
        return None;
    }
    let (q, ys, yz, y) = q_after(graph, (*node.outputs.first()?)?)?;
    let xs = f32s(graph, x.scale)?[0] as f64;
    let unit: Vec<f64> = ws.iter().map(|&s| xs * s as f64).collect();
    let bias = match node.inputs.get(2).copied().flatten() {
        Some(b) => Some(bias_ints(graph, b, &unit, m)?),
        None => None,
    };
    let opset = node.opset.max(10);
    let name = node.name.clone();
    let mut inputs = [&x.inputs()[..], &w.inputs(), &[Some(ys), Some(yz)]].concat();
    if let Some(b) = bias {
        let t = Tensor::from_vec(&[m], b).ok()?;
        inputs.push(Some(add_constant(graph, format!("{name}.int32_bias"), t)));
    }
    Some(rewrite(
        graph,
        i,
        ("QLinearConv", "", opset),
        inputs,
        Some((q, y)),
    ))
}

fn gemm(graph: &mut Graph, i: usize) -> Option<String> {
    let node = &graph.nodes[i];
    let a = activation(graph, (*node.inputs.first()?)?)?;
    let b_in = (*node.inputs.get(1)?)?;
    let b = dq_of(graph, b_in, false)?;
    let bq = const8(graph, b.data)?;
    let trans_b = node.attrs.int("transB", 0).ok()? != 0;
    let (alpha, beta) = (
        node.attrs.float("alpha", 1.0).ok()?,
        node.attrs.float("beta", 1.0).ok()?,
    );
    if bq.shape().len() != 2 {
        return None;
    }
    let n = bq.shape()[usize::from(!trans_b)];
    let bs = f32s(graph, b.scale)?;
    let b_axis = graph.nodes[producer(graph, b_in)?]
        .attrs
        .int("axis", 1)
        .ok()?;
    if bs.len() != 1 && (bs.len() != n || b_axis != i64::from(!trans_b)) {
        return None;
    }
    let out = (*node.outputs.first()?)?;
    let requant = q_after(graph, out);
    let sa = f32s(graph, a.scale)?[0] as f64;
    let unit: Vec<f64> = bs
        .iter()
        .map(|&s| alpha as f64 * sa * s as f64 / beta as f64)
        .collect();
    let bias = match node.inputs.get(2).copied().flatten() {
        Some(c) => Some(bias_ints(graph, c, &unit, n)?),
        None => None,
    };
    let name = node.name.clone();
    let mut inputs = [a.inputs(), b.inputs()].concat();
    inputs.push(match bias {
        Some(c) => Some(add_constant(
            graph,
            format!("{name}.int32_bias"),
            Tensor::from_vec(&[n], c).ok()?,
        )),
        None => None,
    });
    if let Some((_, ys, yz, _)) = requant {
        inputs.extend([Some(ys), Some(yz)]);
    }
    Some(rewrite(
        graph,
        i,
        ("QGemm", crate::ops::MS_DOMAIN, 1),
        inputs,
        requant.map(|(q, _, _, y)| (q, y)),
    ))
}

/// The 8-bit type all of `zeros` share, if they do.
fn common_type(graph: &Graph, zeros: &[ValueId]) -> Option<DType> {
    let t = dtype(graph, *zeros.first()?)?;
    zeros
        .iter()
        .all(|&z| dtype(graph, z) == Some(t))
        .then_some(t)
}

fn add(graph: &mut Graph, i: usize) -> Option<String> {
    let node = &graph.nodes[i];
    if node.inputs.len() != 2 {
        return None;
    }
    let a = activation(graph, node.inputs[0]?)?;
    let b = activation(graph, node.inputs[1]?)?;
    let (q, ys, yz, y) = q_after(graph, (*node.outputs.first()?)?)?;
    common_type(graph, &[a.zero, b.zero, yz])?;
    let inputs = [&a.inputs()[..], &b.inputs(), &[Some(ys), Some(yz)]].concat();
    Some(contrib(graph, i, "QLinearAdd", inputs, (q, y)))
}

/// `DQ(a) → Add/Sum(·, b)` whose sum stays float (no QuantizeLinear
/// after it: the residual joins of onnxruntime's QOperator ResNets): the
/// add reads the 8-bit data itself ([`crate::ir::Fusion::dequantize`]), for
/// each operand whose per-tensor DQ has no other reader, one or both.
fn dequantizing_add(graph: &mut Graph, i: usize) -> Option<String> {
    let node = &graph.nodes[i];
    if !cfg!(feature = "ops-binary")
        || node.inputs.len() != 2
        || node.outputs.len() != 1
        || node.fusion != crate::ir::Fusion::NONE
    {
        return None;
    }
    let (a, b) = (node.inputs[0]?, node.inputs[1]?);
    if a == b {
        return None;
    }
    let count = readers(graph);
    let operand = |v: ValueId| -> [Option<ValueId>; 3] {
        match activation(graph, v) {
            Some(dq) if count[v] == 1 && float_output(graph, v) => dq.inputs(),
            _ => [Some(v), None, None],
        }
    };
    let (oa, ob) = (operand(a), operand(b));
    if oa[1].is_none() && ob[1].is_none() {
        return None;
    }
    let node = &mut graph.nodes[i];
    node.inputs = [oa, ob].concat();
    node.fusion.dequantize = true;
    Some(node.name.clone())
}

/// Whether the DequantizeLinear producing `v` writes float32 (its default:
/// the scale's type, checked by [`dq_of`]; opset 21's `output_dtype`
/// unset or FLOAT).
fn float_output(graph: &Graph, v: ValueId) -> bool {
    producer(graph, v)
        .is_some_and(|p| matches!(graph.nodes[p].attrs.int("output_dtype", 0), Ok(0 | 1)))
}

fn concat(graph: &mut Graph, i: usize) -> Option<String> {
    let node = &graph.nodes[i];
    let parts: Vec<Dq> = node
        .inputs
        .iter()
        .map(|v| activation(graph, (*v)?))
        .collect::<Option<_>>()?;
    let (q, ys, yz, y) = q_after(graph, (*node.outputs.first()?)?)?;
    let mut zeros: Vec<ValueId> = parts.iter().map(|p| p.zero).collect();
    zeros.push(yz);
    common_type(graph, &zeros)?;
    let mut inputs = vec![Some(ys), Some(yz)];
    for p in parts {
        inputs.extend(p.inputs());
    }
    Some(contrib(graph, i, "QLinearConcat", inputs, (q, y)))
}

fn average_pool(graph: &mut Graph, i: usize) -> Option<String> {
    let node = &graph.nodes[i];
    let x = activation(graph, (*node.inputs.first()?)?)?;
    let (q, ys, yz, y) = q_after(graph, (*node.outputs.first()?)?)?;
    common_type(graph, &[x.zero, yz])?;
    let op = if node.op_type == "AveragePool" {
        "QLinearAveragePool"
    } else {
        "QLinearGlobalAveragePool"
    };
    let inputs = [&x.inputs()[..], &[Some(ys), Some(yz)]].concat();
    Some(contrib(graph, i, op, inputs, (q, y)))
}

/// Whether two constants hold the same values and type.
fn same_constant(graph: &Graph, a: ValueId, b: ValueId) -> bool {
    match (graph.constant(a), graph.constant(b)) {
        (Some(x), Some(y)) => {
            x.dtype() == y.dtype() && x.shape() == y.shape() && x.as_bytes() == y.as_bytes()
        }
        _ => false,
    }
}

fn passthrough(graph: &mut Graph, i: usize) -> Option<String> {
    let node = &graph.nodes[i];
    let x = activation(graph, (*node.inputs.first()?)?)?;
    if node.outputs.iter().skip(1).any(Option::is_some) {
        return None;
    }
    let (q, ys, yz, y) = q_after(graph, (*node.outputs.first()?)?)?;
    if !same_constant(graph, x.scale, ys) || !same_constant(graph, x.zero, yz) {
        return None;
    }
    let mut inputs = node.inputs.clone();
    inputs[0] = Some(x.data);
    let (op_type, opset) = (node.op_type.clone(), node.opset);
    Some(rewrite(
        graph,
        i,
        (&op_type, "", opset),
        inputs,
        Some((q, y)),
    ))
}
