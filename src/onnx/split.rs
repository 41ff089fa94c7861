//! Splitting a model file into part models. The caller says which part
//! computes each value of the runtime's optimised graph; every ONNX node then
//! goes to the part that computes its result (a node a fusion absorbed is
//! copied into every part that reads its result), nodes whose results were
//! folded to constants are left out and their results become initializers, and each
//! part becomes a valid ONNX model whose inputs and outputs are the values
//! that cross the cut, with their names kept.

use super::model::read_model_proto;
use super::tensor_proto::{tensor_from_proto, tensor_to_proto};
use crate::error::{Error, Result};
use crate::ir::Fact;
use crate::tensor::Tensor;
use onnx_protobuf::{
    tensor_shape_proto::{dimension::Value as DimValue, Dimension},
    type_proto::{Tensor as TensorType, Value as TypeValue},
    GraphProto, Message, ModelProto, NodeProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use protobuf::MessageField;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// What the splitter needs to know of the runtime's optimised graph.
#[derive(Debug, Clone, Copy)]
pub struct SplitSpec<'a> {
    /// The number of parts.
    pub parts: usize,
    /// The part that computes each value (by name) of the optimised graph.
    pub part_of: &'a HashMap<String, usize>,
    /// The values the optimised graph holds as constants (initializers and
    /// folded results), by name.
    pub constants: &'a HashMap<String, Arc<Tensor>>,
    /// The element type and shape of the values that may cross between
    /// parts, by name.
    pub facts: &'a HashMap<String, Fact>,
}

/// One part of a split model.
#[derive(Debug, Clone)]
pub struct PartModel {
    /// The part's index: parts run in this order, each reading only model
    /// inputs and values of earlier parts.
    pub index: usize,
    /// The serialized ONNX model.
    pub model: Vec<u8>,
    /// Its inputs: model inputs and values earlier parts compute.
    pub inputs: Vec<String>,
    /// Its outputs: values later parts read, and model outputs.
    pub outputs: Vec<String>,
    /// How many ONNX nodes it holds.
    pub nodes: usize,
}

/// Splits the model file at `path` into `spec.parts` part models.
///
/// Errors when a part would read a value a later part computes (the parts
/// must be ordered, as a pipeline runs them), when a value crossing the cut
/// has no known type, or when a model output is a constant.
pub fn split_model_file(path: &Path, spec: &SplitSpec) -> Result<Vec<PartModel>> {
    let model = read_model_proto(path)?;
    split_model(&model, path.parent(), spec)
}

/// Splits a parsed model; external initializers are read relative to `base`.
pub(crate) fn split_model(
    model: &ModelProto,
    base: Option<&Path>,
    spec: &SplitSpec,
) -> Result<Vec<PartModel>> {
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| Error::InvalidModel("the model has no graph".into()))?;
    let order = node_order(&graph.node)?;
    let reads: Vec<Vec<String>> = graph.node.iter().map(reads_of).collect();
    let parts_of = assign(graph, &order, &reads, spec);
    // Where each name is computed (a node a fusion absorbed may be in
    // several parts), and which parts read it.
    let mut defined_in: HashMap<&str, BTreeSet<usize>> = HashMap::new();
    let mut readers: HashMap<&str, BTreeSet<usize>> = HashMap::new();
    for (i, node) in graph.node.iter().enumerate() {
        for &p in &parts_of[i] {
            for o in node.output.iter().filter(|o| !o.is_empty()) {
                defined_in.entry(o).or_default().insert(p);
            }
            for r in &reads[i] {
                readers.entry(r).or_default().insert(p);
            }
        }
    }
    let sources = Sources {
        initializers: graph
            .initializer
            .iter()
            .map(|t| (t.name.as_str(), t))
            .collect(),
        model_inputs: graph.input.iter().map(|v| v.name.as_str()).collect(),
        base,
        spec,
    };
    let model_outputs: Vec<&str> = graph.output.iter().map(|v| v.name.as_str()).collect();
    for name in &model_outputs {
        if !defined_in.contains_key(name) && !sources.model_inputs.contains(name) {
            return Err(Error::Config(format!(
                "cannot split the model: its output {name:?} is a constant, which no part computes"
            )));
        }
    }
    (0..spec.parts)
        .map(|p| {
            let members: Vec<usize> = order
                .iter()
                .copied()
                .filter(|&i| parts_of[i].contains(&p))
                .collect();
            let mut g = GraphProto::new();
            g.name = format!("{}_part{p}", graph.name);
            let mut seen = HashSet::new();
            let mut inputs = Vec::new();
            for &i in &members {
                for r in &reads[i] {
                    let defined = defined_in.get(r.as_str());
                    if defined.is_some_and(|d| d.contains(&p)) || !seen.insert(r.as_str()) {
                        continue;
                    }
                    let first = defined.and_then(|d| d.first().copied());
                    sources.provide(r, p, first, &mut g, &mut inputs)?;
                }
                g.node.push(graph.node[i].clone());
            }
            if model.ir_version < 4 {
                // Before IR 4 every initializer is also a graph input.
                let listed: Vec<ValueInfoProto> =
                    g.initializer.iter().map(initializer_info).collect();
                g.input.extend(listed);
            }
            let mut outputs = Vec::new();
            for &i in &members {
                for o in graph.node[i].output.iter().filter(|o| !o.is_empty()) {
                    // Read by a later part that does not compute it too.
                    let here = &defined_in[o.as_str()];
                    let later = readers
                        .get(o.as_str())
                        .is_some_and(|parts| parts.iter().any(|&q| q > p && !here.contains(&q)));
                    let owner = here.first() == Some(&p);
                    if later || (owner && model_outputs.contains(&o.as_str())) {
                        g.output.push(sources.value_info(o)?);
                        outputs.push(o.clone());
                    }
                }
            }
            let mut m = ModelProto::new();
            m.ir_version = model.ir_version;
            m.opset_import = model.opset_import.clone();
            m.functions = model.functions.clone();
            m.producer_name = "ramify partition".into();
            m.graph = MessageField::some(g);
            let bytes = m
                .write_to_bytes()
                .map_err(|e| Error::Internal(format!("serializing part {p}: {e}")))?;
            Ok(PartModel {
                index: p,
                model: bytes,
                inputs,
                outputs,
                nodes: members.len(),
            })
        })
        .collect()
}

/// Where a part's reads come from.
struct Sources<'a> {
    initializers: HashMap<&'a str, &'a TensorProto>,
    model_inputs: HashSet<&'a str>,
    base: Option<&'a Path>,
    spec: &'a SplitSpec<'a>,
}

impl Sources<'_> {
    /// Adds what part `p` needs to read `name` (computed by part `defined`,
    /// if any): an initializer, or a graph input.
    fn provide(
        &self,
        name: &str,
        p: usize,
        defined: Option<usize>,
        g: &mut GraphProto,
        inputs: &mut Vec<String>,
    ) -> Result<()> {
        if let Some(init) = self.initializers.get(name) {
            g.initializer.push(self.inline(init)?);
        } else if let Some(t) = self.spec.constants.get(name) {
            g.initializer.push(tensor_to_proto(t, name));
        } else if defined.is_some_and(|q| q < p) || self.model_inputs.contains(name) {
            g.input.push(self.value_info(name)?);
            inputs.push(name.to_string());
        } else if let Some(q) = defined {
            return Err(Error::Config(format!(
                "part {p} reads {name:?}, which the later part {q} computes: the parts are not in pipeline order"
            )));
        } else {
            return Err(Error::InvalidModel(format!(
                "no node, initializer or input provides {name:?}"
            )));
        }
        Ok(())
    }

    /// An initializer with its data inline (external data read in).
    fn inline(&self, init: &TensorProto) -> Result<TensorProto> {
        if init.external_data.is_empty() {
            return Ok(init.clone());
        }
        let t = tensor_from_proto(&mut init.clone(), self.base)?;
        Ok(tensor_to_proto(&t, &init.name))
    }

    /// The declared type of a value crossing the cut.
    fn value_info(&self, name: &str) -> Result<ValueInfoProto> {
        let fact = self.spec.facts.get(name).ok_or_else(|| {
            Error::Config(format!(
                "{name:?} crosses between parts but its type is not known"
            ))
        })?;
        // Stages pass tensors to one another: a sequence or optional cannot
        // cross between parts.
        if fact.kind != crate::ir::Kind::Tensor {
            return Err(Error::ValueKind {
                what: format!("{name:?}, which crosses between parts,"),
                actual: fact.kind.to_string(),
                expected: crate::ir::Kind::Tensor.to_string(),
            });
        }
        Ok(value_info(name, fact))
    }
}

/// A tensor value's name, element type and (when known) shape.
fn value_info(name: &str, fact: &Fact) -> ValueInfoProto {
    let mut tensor = TensorType::new();
    tensor.elem_type = fact.dtype.onnx_code();
    if let Some(shape) = &fact.shape {
        tensor.shape = MessageField::some(shape_proto(shape.iter().map(|&d| d as i64)));
    }
    typed(name, tensor)
}

/// The graph-input entry of an initializer (for IR versions before 4).
fn initializer_info(t: &TensorProto) -> ValueInfoProto {
    let mut tensor = TensorType::new();
    tensor.elem_type = t.data_type;
    tensor.shape = MessageField::some(shape_proto(t.dims.iter().copied()));
    typed(&t.name, tensor)
}

/// A shape of fixed dimensions.
fn shape_proto(dims: impl Iterator<Item = i64>) -> TensorShapeProto {
    let mut s = TensorShapeProto::new();
    s.dim = dims
        .map(|d| {
            let mut dim = Dimension::new();
            dim.value = Some(DimValue::DimValue(d));
            dim
        })
        .collect();
    s
}

/// A value info of a tensor type.
fn typed(name: &str, tensor: TensorType) -> ValueInfoProto {
    let mut ty = TypeProto::new();
    ty.value = Some(TypeValue::TensorType(tensor));
    let mut v = ValueInfoProto::new();
    v.name = name.to_string();
    v.type_ = MessageField::some(ty);
    v
}

/// The parts of every ONNX node, decided from the last node to the first:
/// the one part that computes its result in the optimised graph; for a node
/// a fusion absorbed, every part that reads its result (it is computed again
/// there rather than handed across, since its result is not a value of the
/// optimised graph); none for a node whose results were folded or are unused.
fn assign(
    graph: &GraphProto,
    order: &[usize],
    reads: &[Vec<String>],
    spec: &SplitSpec,
) -> Vec<BTreeSet<usize>> {
    let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, r) in reads.iter().enumerate() {
        for name in r {
            readers.entry(name).or_default().push(i);
        }
    }
    let mut parts: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); graph.node.len()];
    for &i in order.iter().rev() {
        let outs: Vec<&str> = graph.node[i]
            .output
            .iter()
            .filter(|o| !o.is_empty())
            .map(String::as_str)
            .collect();
        let computed = outs
            .iter()
            .filter_map(|o| spec.part_of.get(*o))
            .min()
            .copied();
        parts[i] = match computed {
            Some(p) => BTreeSet::from([p]),
            None if outs.iter().all(|o| spec.constants.contains_key(*o)) => BTreeSet::new(),
            None => outs
                .iter()
                .flat_map(|o| readers.get(o).into_iter().flatten())
                .flat_map(|&r| parts[r].iter().copied())
                .collect(),
        };
    }
    parts
}

/// The names a node reads: its inputs and what its subgraphs read from the
/// enclosing scope.
fn reads_of(node: &NodeProto) -> Vec<String> {
    let mut names: Vec<String> = node
        .input
        .iter()
        .filter(|i| !i.is_empty())
        .cloned()
        .collect();
    for a in &node.attribute {
        for g in a.g.as_ref().into_iter().chain(&a.graphs) {
            for name in outer_reads(g) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// The names a subgraph reads that it does not define itself.
fn outer_reads(g: &GraphProto) -> Vec<String> {
    let mut defined: HashSet<&str> = g.input.iter().map(|v| v.name.as_str()).collect();
    defined.extend(g.initializer.iter().map(|t| t.name.as_str()));
    for n in &g.node {
        defined.extend(n.output.iter().map(String::as_str));
    }
    let mut found = Vec::new();
    for n in &g.node {
        for name in reads_of(n) {
            if !defined.contains(name.as_str()) && !found.contains(&name) {
                found.push(name);
            }
        }
    }
    found
}

/// The nodes in a topological order (the file's order where it is one).
fn node_order(nodes: &[NodeProto]) -> Result<Vec<usize>> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            producer.insert(o, i);
        }
    }
    let preds: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            reads_of(n)
                .iter()
                .filter_map(|r| producer.get(r.as_str()).copied())
                .collect()
        })
        .collect();
    // Depth-first, iteratively: a node is emitted after all its producers.
    let mut state = vec![0u8; nodes.len()]; // 0 new, 1 open, 2 done
    let mut order = Vec::with_capacity(nodes.len());
    for root in 0..nodes.len() {
        let mut stack = vec![(root, 0usize)];
        while let Some((i, k)) = stack.pop() {
            if k == 0 {
                match state[i] {
                    2 => continue,
                    1 => {
                        return Err(Error::InvalidModel(format!(
                            "the graph has a cycle through node {:?}",
                            nodes[i].name
                        )))
                    }
                    _ => state[i] = 1,
                }
            }
            if let Some(&p) = preds[i].get(k) {
                stack.push((i, k + 1));
                if state[p] != 2 {
                    stack.push((p, 0));
                }
            } else {
                state[i] = 2;
                order.push(i);
            }
        }
    }
    Ok(order)
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
