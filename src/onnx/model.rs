//! ModelProto → [`Graph`]: IR version and opset checks, initializers (IR 3
//! models that list them among the inputs included), declared input and output
//! types, and nodes with their operators built.

use super::attributes::convert_attributes;
use super::framing::check_framing;
use super::subgraph::take_subgraphs;
use super::tensor_proto::tensor_from_proto;
use crate::error::{Error, Result};
use crate::graph::{
    topological_sort, BodyBinder, Declared, Dim, Graph, ModelMetadata, Node, Value, ValueId,
};
use crate::ir::attributes::Attribute;
use crate::ir::{Fusion, Kind};
use crate::tensor::DType;
use onnx_protobuf::{
    tensor_shape_proto::dimension::Value as DimValue, type_proto::Value as TypeValue, GraphProto,
    Message, ModelProto, TypeProto, ValueInfoProto,
};
use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

/// Oldest ONNX IR version accepted.
pub const MIN_IR_VERSION: i64 = 3;
/// Newest ONNX IR version accepted.
pub const MAX_IR_VERSION: i64 = 14;

/// Loads a model file; external data is read relative to the file's folder.
/// `bodies` makes the runnable form of each control-flow body (the
/// executor's, which the session passes down).
pub fn load_model_file(path: &Path, bodies: &dyn BodyBinder) -> Result<Graph> {
    build(read_model_proto(path)?, path.parent(), bodies)
}

/// Reads and parses a model file into its protobuf message, with the same
/// checks as [`load_model_file`] (not a directory, not empty, sound framing).
pub(crate) fn read_model_proto(path: &Path) -> Result<ModelProto> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.is_dir() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "it is a directory, not a model file",
        )));
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let source = || format!("file {}", path.display());
    if len == 0 {
        return Err(empty(&source()));
    }
    check_framing(&mut reader).map_err(|e| naming(e, &source()))?;
    ModelProto::parse_from_reader(&mut reader)
        .map_err(|e| naming(Error::Malformed(e.to_string()), &source()))
}

/// Loads a model from bytes. Models with external data need a file path.
/// `bodies` is as for [`load_model_file`].
pub fn load_model_bytes(bytes: &[u8], bodies: &dyn BodyBinder) -> Result<Graph> {
    let source = || format!("memory buffer of {} bytes", bytes.len());
    if bytes.is_empty() {
        return Err(empty("memory buffer"));
    }
    check_framing(&mut std::io::Cursor::new(bytes)).map_err(|e| naming(e, &source()))?;
    let proto = ModelProto::parse_from_bytes(bytes)
        .map_err(|e| naming(Error::Malformed(e.to_string()), &source()))?;
    build(proto, None, bodies)
}

/// The error for a model of zero bytes.
fn empty(source: &str) -> Error {
    Error::InvalidModel(format!("the model is empty ({source} with 0 bytes)"))
}

/// Adds where malformed bytes came from (a file, a memory buffer) to the message.
fn naming(e: Error, source: &str) -> Error {
    match e {
        Error::Malformed(m) => Error::Malformed(format!("{m} (in the {source})")),
        other => other,
    }
}

fn declared(v: &ValueInfoProto) -> Result<Option<Declared>> {
    let Some(tp) = v.type_.as_ref() else {
        return Ok(None);
    };
    declared_type(tp, &v.name, 0)
}

/// The declared type of value `name`: a tensor type, a sequence of tensors,
/// or an optional tensor or sequence (`depth` counts the wrappers seen).
pub(super) fn declared_type(tp: &TypeProto, name: &str, depth: usize) -> Result<Option<Declared>> {
    let unsupported = |what: &str| {
        Error::UnsupportedType(format!(
            "value {name:?} is {what} (maps, sparse tensors and nested sequences or optionals are not supported)"
        ))
    };
    let wrap = |inner: Option<&TypeProto>, kind: Kind| -> Result<Option<Declared>> {
        if depth > 0 {
            return Err(unsupported("a nested sequence or optional"));
        }
        let Some(inner) = inner else {
            return Ok(None);
        };
        let Some(d) = declared_type(inner, name, depth + 1)? else {
            return Ok(None);
        };
        let kind = match (kind, d.kind) {
            (Kind::Sequence, Kind::Tensor) => Kind::Sequence,
            (_, Kind::Tensor) => Kind::OptionalTensor,
            (_, Kind::Sequence) => Kind::OptionalSequence,
            _ => return Err(unsupported("a nested sequence or optional")),
        };
        Ok(Some(Declared {
            dtype: d.dtype,
            kind,
            dims: None,
        }))
    };
    let tt = match &tp.value {
        Some(TypeValue::TensorType(tt)) => tt,
        Some(TypeValue::SequenceType(s)) => {
            let d = wrap(s.elem_type.as_ref(), Kind::Sequence)?;
            return match d {
                Some(d) if d.kind != Kind::Sequence => Err(unsupported("a sequence of optionals")),
                d => Ok(d),
            };
        }
        Some(TypeValue::OptionalType(o)) => {
            // A sequence inside an optional is one level deeper.
            let inner = o.elem_type.as_ref();
            if let Some(TypeValue::SequenceType(s)) = inner.and_then(|i| i.value.as_ref()) {
                if depth > 0 {
                    return Err(unsupported("a nested sequence or optional"));
                }
                let d = s
                    .elem_type
                    .as_ref()
                    .map(|e| declared_type(e, name, depth + 2))
                    .transpose()?
                    .flatten();
                return match d {
                    Some(d) if d.kind == Kind::Tensor => Ok(Some(Declared {
                        dtype: d.dtype,
                        kind: Kind::OptionalSequence,
                        dims: None,
                    })),
                    Some(_) => Err(unsupported("a nested sequence or optional")),
                    None => Ok(None),
                };
            }
            return wrap(inner, Kind::OptionalTensor);
        }
        Some(TypeValue::MapType(_)) => return Err(unsupported("a map")),
        Some(TypeValue::SparseTensorType(_)) => return Err(unsupported("a sparse tensor")),
        Some(_) => return Err(unsupported("of an unknown type kind")),
        None => return Ok(None),
    };
    if tt.elem_type == 0 {
        return Ok(None);
    }
    let dtype = DType::from_onnx_code(tt.elem_type).map_err(|_| {
        Error::UnsupportedType(format!(
            "{} (value {:?})",
            crate::tensor::onnx_type_name(tt.elem_type),
            name
        ))
    })?;
    let dims = tt.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(DimValue::DimValue(n)) if *n >= 0 => Dim::Fixed(*n as usize),
                Some(DimValue::DimParam(p)) => Dim::Symbolic(p.clone()),
                _ => Dim::Symbolic(String::new()),
            })
            .collect()
    });
    Ok(Some(Declared {
        dtype,
        kind: Kind::Tensor,
        dims,
    }))
}

struct Values {
    ids: HashMap<String, ValueId>,
    list: Vec<Value>,
}

impl Values {
    fn id(&mut self, name: &str) -> ValueId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.list.len();
        self.list.push(Value {
            name: name.to_string(),
            declared: None,
        });
        self.ids.insert(name.to_string(), id);
        id
    }
}

fn build(mut model: ModelProto, base: Option<&Path>, bodies: &dyn BodyBinder) -> Result<Graph> {
    if model.ir_version == 0 && model.graph.is_none() && model.opset_import.is_empty() {
        return Err(Error::InvalidModel(
            "the model is empty: no IR version, operator sets or graph".into(),
        ));
    }
    if !(MIN_IR_VERSION..=MAX_IR_VERSION).contains(&model.ir_version) {
        return Err(Error::InvalidModel(format!(
            "IR version {} is not supported (ramify reads {MIN_IR_VERSION} to {MAX_IR_VERSION})",
            model.ir_version
        )));
    }
    // Every import is kept, also of domains ramify does not implement: tools
    // (onnxruntime's quantization pre-processing among them) leave imports
    // that no node uses. A node in such a domain fails when its operator is
    // built, naming the operator, its domain and opset.
    let mut opsets: HashMap<String, i64> = HashMap::new();
    for o in &model.opset_import {
        let domain = if o.domain == "ai.onnx" {
            ""
        } else {
            o.domain.as_str()
        };
        opsets.insert(domain.to_string(), o.version);
    }
    if opsets.is_empty() {
        return Err(Error::InvalidModel(
            "the model imports no operator set".into(),
        ));
    }
    let g = model
        .graph
        .take()
        .ok_or_else(|| Error::InvalidModel("the model has no graph".into()))?;
    let metadata = metadata(&model, &g);
    let (mut graph, _) = convert_graph(g, &opsets, base, false, bodies)?;
    graph.metadata = Arc::new(metadata);
    Ok(graph)
}

/// The model's self-description (read before the graph is consumed).
fn metadata(model: &ModelProto, g: &GraphProto) -> ModelMetadata {
    ModelMetadata {
        producer_name: model.producer_name.clone(),
        producer_version: model.producer_version.clone(),
        domain: model.domain.clone(),
        model_version: model.model_version,
        ir_version: model.ir_version,
        description: model.doc_string.clone(),
        graph_name: g.name.clone(),
        graph_description: g.doc_string.clone(),
        custom: model
            .metadata_props
            .iter()
            .map(|p| (p.key.clone(), p.value.clone()))
            .collect(),
    }
}

/// Converts one GraphProto (the model's graph or a subgraph) into a [`Graph`]
/// in topological order. For a subgraph (`subgraph`), the names it reads but
/// does not define refer to the enclosing scope: they are appended to
/// `graph.inputs` after the declared inputs and returned. In the model's
/// graph they are errors that the topological sort reports. Each body of a
/// control-flow node is converted the same way and made runnable by `bodies`.
pub(super) fn convert_graph(
    mut g: GraphProto,
    opsets: &HashMap<String, i64>,
    base: Option<&Path>,
    subgraph: bool,
    bodies: &dyn BodyBinder,
) -> Result<(Graph, Vec<String>)> {
    if !g.sparse_initializer.is_empty() {
        return Err(Error::UnsupportedType("sparse initializers".into()));
    }
    let mut values = Values {
        ids: HashMap::new(),
        list: Vec::new(),
    };
    let mut constants = Vec::new();
    for mut init in std::mem::take(&mut g.initializer) {
        if init.name.is_empty() {
            return Err(Error::InvalidModel("an initializer has no name".into()));
        }
        let id = values.id(&init.name);
        let t = tensor_from_proto(&mut init, base)?;
        drop(init);
        if constants.len() <= id {
            constants.resize(id + 1, None);
        }
        constants[id] = Some(Arc::new(t));
    }
    let mut inputs = Vec::new();
    for vi in &g.input {
        let id = values.id(&vi.name);
        values.list[id].declared = declared(vi)?;
        let is_initializer = constants.get(id).is_some_and(|c| c.is_some());
        if !is_initializer && !inputs.contains(&id) {
            inputs.push(id);
        }
    }
    if g.output.is_empty() {
        return Err(Error::InvalidModel("the graph declares no outputs".into()));
    }
    let mut outputs = Vec::new();
    for vi in &g.output {
        let id = values.id(&vi.name);
        values.list[id].declared = declared(vi)?;
        outputs.push(id);
    }
    let mut raw_nodes = Vec::with_capacity(g.node.len());
    for (i, mut np) in std::mem::take(&mut g.node).into_iter().enumerate() {
        let name = if np.name.is_empty() {
            format!(
                "{}_{}",
                np.op_type,
                np.output.first().cloned().unwrap_or_else(|| i.to_string())
            )
        } else {
            np.name.clone()
        };
        let domain = if np.domain == "ai.onnx" {
            String::new()
        } else {
            np.domain.clone()
        };
        let opset = *opsets.get(&domain).ok_or_else(|| {
            Error::InvalidModel(format!(
                "node {name:?} ({}) uses domain {:?}, which the model does not import",
                np.op_type, np.domain
            ))
        })?;
        let (subgraphs, implicit) = take_subgraphs(&mut np.attribute, opsets, base, bodies)?;
        let mut attrs = convert_attributes(&mut np.attribute, base, &name, &np.op_type)?;
        for (attr, body) in subgraphs {
            attrs.insert(&attr, Attribute::Body(body));
        }
        let mut ins: Vec<Option<ValueId>> = np
            .input
            .iter()
            .map(|n| (!n.is_empty()).then(|| values.id(n)))
            .collect();
        ins.extend(implicit.iter().map(|n| Some(values.id(n))));
        let outs: Vec<Option<ValueId>> = np
            .output
            .iter()
            .map(|n| (!n.is_empty()).then(|| values.id(n)))
            .collect();
        raw_nodes.push((name, np.op_type, domain, opset, ins, outs, attrs));
    }
    constants.resize(values.list.len(), None);
    let mut defined = vec![false; values.list.len()];
    for &id in &inputs {
        defined[id] = true;
    }
    for (id, c) in constants.iter().enumerate() {
        defined[id] |= c.is_some();
    }
    for &id in raw_nodes.iter().flat_map(|n| n.5.iter().flatten()) {
        defined[id] = true;
    }
    let free: Vec<ValueId> = (0..values.list.len())
        .filter(|&id| subgraph && !defined[id])
        .collect();
    let free_names = free
        .iter()
        .map(|&id| values.list[id].name.clone())
        .collect();
    inputs.extend(free);
    let mut graph = Graph {
        values: values.list,
        nodes: Vec::new(),
        inputs,
        outputs,
        constants,
        released: Vec::new(),
        metadata: Default::default(),
    };
    for (name, op_type, domain, opset, inputs, outputs, attrs) in raw_nodes {
        let (op, built_with_consts) = graph.build_op_for(
            &op_type,
            &domain,
            opset,
            &inputs,
            outputs.len(),
            &attrs,
            &Fusion::NONE,
        )?;
        graph.nodes.push(Node {
            name,
            op_type,
            domain,
            opset,
            inputs,
            outputs,
            attrs,
            fusion: Fusion::NONE,
            op,
            built_with_consts,
        });
    }
    topological_sort(&mut graph)?;
    Ok((graph, free_names))
}
