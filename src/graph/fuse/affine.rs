//! Per-channel affine folds: a `Mul` or `Add` by a constant that varies only
//! along the channel axis (a scalar, `[C,1,1]`, `[1,C,1,1]`...) folded into
//! the Conv or BatchNormalization that produces its input. Caffe2-era
//! exports such as DenseNet-121 write every batch norm as
//! BatchNormalization → Mul → Add; folded, the chain is one pass (or none,
//! after a Conv), which the activation fusion can then extend.

use super::{
    absorb, add_constant, const_f32, readers, set_weights_and_bias, sole_reader, take_f32,
};
use crate::graph::{Facts, Graph, ValueId};
use crate::tensor::Tensor;
use ndarray::Axis;

/// Which elementwise operation is folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mul,
    Add,
}

/// The values of constant `v`, one per channel, when `v` broadcast against
/// an output of rank `rank` with `channels` channels (axis 1) varies at most
/// along the channel axis and leaves the output's shape unchanged.
fn per_channel(graph: &Graph, v: ValueId, rank: usize, channels: usize) -> Option<Vec<f32>> {
    let c = const_f32(graph, Some(v))?;
    let shape = c.shape();
    if shape.len() > rank || rank < 2 {
        return None;
    }
    let lead = rank - shape.len();
    let mut along_channels = false;
    for (j, &d) in shape.iter().enumerate() {
        match (lead + j, d) {
            (_, 1) => {}
            (1, d) if d == channels => along_channels = true,
            _ => return None,
        }
    }
    let flat: Vec<f32> = c.iter().copied().collect();
    Some(if along_channels {
        flat
    } else {
        vec![flat[0]; channels]
    })
}

/// The Mul/Add node reading `y` (and nothing else reading it), its kind and
/// its other, constant, operand.
fn affine_reader(graph: &Graph, y: ValueId) -> Option<(usize, Kind, ValueId)> {
    if readers(graph)[y] != 1 {
        return None;
    }
    let r = sole_reader(graph, y)?;
    let node = &graph.nodes[r];
    let kind = match node.op_type.as_str() {
        "Mul" => Kind::Mul,
        "Add" => Kind::Add,
        _ => return None,
    };
    if !node.domain.is_empty() || node.inputs.len() != 2 || node.outputs.len() != 1 {
        return None;
    }
    let other = match (node.inputs[0], node.inputs[1]) {
        (Some(a), Some(b)) if a == y && b != y => b,
        (Some(a), Some(b)) if b == y && a != y => a,
        _ => return None,
    };
    graph.constant(other)?;
    Some((r, kind, other))
}

/// Conv → Mul/Add by a per-output-channel constant: the Mul scales W's
/// rows and the bias, the Add shifts the bias.
pub(super) fn try_fold_into_conv(graph: &mut Graph, conv: usize) -> Option<String> {
    let c = &graph.nodes[conv];
    if c.op_type != "Conv"
        || !c.domain.is_empty()
        || c.outputs.len() != 1
        || !c.fusion.kinds().is_empty()
    {
        return None;
    }
    let y = c.outputs[0]?;
    let w_in = (*c.inputs.get(1)?)?;
    let w_shape = graph.constant(w_in)?.array::<f32>()?.shape();
    let (cout, rank) = (*w_shape.first()?, w_shape.len());
    let (r, kind, k) = affine_reader(graph, y)?;
    let k = per_channel(graph, k, rank, cout)?;
    let mut b = match c.inputs.get(2).copied().flatten() {
        Some(v) => const_f32(graph, Some(v))?.iter().copied().collect(),
        None => vec![0.0; cout],
    };
    if b.len() != cout {
        return None;
    }
    let name = c.name.clone();
    let mut w_id = w_in;
    match kind {
        Kind::Mul => {
            let mut w2 = take_f32(graph, w_in)?;
            for (ch, mut rows) in w2.axis_iter_mut(Axis(0)).enumerate() {
                rows.mapv_inplace(|v| v * k[ch]);
            }
            b.iter_mut().zip(&k).for_each(|(b, k)| *b *= k);
            w_id = add_constant(graph, format!("{name}.scaled_weight"), Tensor::F32(w2));
        }
        Kind::Add => b.iter_mut().zip(&k).for_each(|(b, k)| *b += k),
    }
    set_weights_and_bias(graph, conv, w_id, "shifted_bias", b)?;
    absorb(graph, conv, r)
}

/// BatchNormalization → Mul/Add by a per-channel constant:
/// `(x̂·scale + B)·k = x̂·(scale·k) + B·k` and `x̂·scale + B + k`, so the
/// constant scale and B absorb it. Needs X's rank (from `facts`) to place
/// the channel axis.
pub(super) fn try_fold_into_batch_norm(
    graph: &mut Graph,
    facts: &Facts,
    bn: usize,
) -> Option<String> {
    let n = &graph.nodes[bn];
    if n.op_type != "BatchNormalization"
        || !n.domain.is_empty()
        || n.inputs.len() != 5
        || n.outputs.iter().skip(1).any(|o| o.is_some())
        || !n.fusion.kinds().is_empty()
        || n.attrs.int("training_mode", 0).ok()? != 0
        || n.attrs.int("spatial", 1).ok()? != 1
    {
        return None;
    }
    let rank = facts.get(n.inputs[0]?)?.as_ref()?.shape.as_ref()?.len();
    let y = n.outputs[0]?;
    let mut scale: Vec<f32> = const_f32(graph, n.inputs[1])?.iter().copied().collect();
    let mut bias: Vec<f32> = const_f32(graph, n.inputs[2])?.iter().copied().collect();
    let channels = scale.len();
    if bias.len() != channels {
        return None;
    }
    let (r, kind, k) = affine_reader(graph, y)?;
    let k = per_channel(graph, k, rank, channels)?;
    match kind {
        Kind::Mul => {
            scale.iter_mut().zip(&k).for_each(|(s, k)| *s *= k);
            bias.iter_mut().zip(&k).for_each(|(b, k)| *b *= k);
        }
        Kind::Add => bias.iter_mut().zip(&k).for_each(|(b, k)| *b += k),
    }
    let name = n.name.clone();
    let s_id = add_constant(
        graph,
        format!("{name}.folded_scale"),
        Tensor::from_vec(&[channels], scale).ok()?,
    );
    let b_id = add_constant(
        graph,
        format!("{name}.folded_b"),
        Tensor::from_vec(&[channels], bias).ok()?,
    );
    let node = &mut graph.nodes[bn];
    node.inputs[1] = Some(s_id);
    node.inputs[2] = Some(b_id);
    absorb(graph, bn, r)
}
