//! Node attributes in a form operators read without knowing about protobuf:
//! typed getters with defaults, and errors that name the node and attribute.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::collections::BTreeMap;

/// One attribute value.
#[derive(Debug, Clone)]
pub enum Attribute {
    /// A float.
    Float(f32),
    /// A list of floats.
    Floats(Vec<f32>),
    /// An integer.
    Int(i64),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A byte string (usually UTF-8).
    String(Vec<u8>),
    /// A list of byte strings.
    Strings(Vec<Vec<u8>>),
    /// A tensor.
    Tensor(Tensor),
    /// A list of tensors.
    Tensors(Vec<Tensor>),
    /// A subgraph, kept in its serialized protobuf form.
    Graph(Box<onnx_protobuf::GraphProto>),
    /// A list of subgraphs.
    Graphs(Vec<onnx_protobuf::GraphProto>),
    /// A subgraph the loader has converted into a body of ramify's graph IR.
    Body(std::sync::Arc<dyn super::Subgraph>),
    /// A type (Optional's `type`): the kind of value and its tensors'
    /// element type.
    Type(super::Kind, crate::tensor::DType),
    /// A kind operators never read (sparse tensors, types ramify cannot
    /// represent).
    Other(&'static str),
}

impl Attribute {
    fn kind(&self) -> &'static str {
        match self {
            Attribute::Float(_) => "float",
            Attribute::Floats(_) => "floats",
            Attribute::Int(_) => "int",
            Attribute::Ints(_) => "ints",
            Attribute::String(_) => "string",
            Attribute::Strings(_) => "strings",
            Attribute::Tensor(_) => "tensor",
            Attribute::Tensors(_) => "tensors",
            Attribute::Graph(_) => "graph",
            Attribute::Graphs(_) => "graphs",
            Attribute::Body(_) => "graph",
            Attribute::Type(..) => "type",
            Attribute::Other(k) => k,
        }
    }
}

/// The attributes of one node, with the node's name and operator for error messages.
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    node: String,
    op: String,
    values: BTreeMap<String, Attribute>,
}

impl Attributes {
    /// An attribute set for the node `node` of operator type `op`.
    pub fn new(node: &str, op: &str, values: BTreeMap<String, Attribute>) -> Self {
        Attributes {
            node: node.to_string(),
            op: op.to_string(),
            values,
        }
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The node's operator type.
    pub fn op(&self) -> &str {
        &self.op
    }

    /// Sets (or replaces) an attribute; used by graph rewrites such as fusions.
    pub fn insert(&mut self, name: &str, value: Attribute) {
        self.values.insert(name.to_string(), value);
    }

    /// The raw attribute, if present.
    pub fn get(&self, name: &str) -> Option<&Attribute> {
        self.values.get(name)
    }

    /// True if the attribute is present.
    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// An error about attribute `name`.
    pub fn error(&self, name: &str, reason: impl Into<String>) -> Error {
        Error::Attribute {
            node: self.node.clone(),
            op: self.op.clone(),
            attribute: name.to_string(),
            reason: reason.into(),
        }
    }

    fn wrong_kind(&self, name: &str, want: &str, got: &Attribute) -> Error {
        self.error(name, format!("expected {want}, found {}", got.kind()))
    }

    /// An integer attribute, if present.
    pub fn int_opt(&self, name: &str) -> Result<Option<i64>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attribute::Int(v)) => Ok(Some(*v)),
            Some(other) => Err(self.wrong_kind(name, "int", other)),
        }
    }

    /// An integer attribute, or `default`.
    pub fn int(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    /// An integer attribute that must be present.
    pub fn int_req(&self, name: &str) -> Result<i64> {
        self.int_opt(name)?
            .ok_or_else(|| self.error(name, "required but missing"))
    }

    /// A subgraph attribute converted to a body; required.
    pub fn body(&self, name: &str) -> Result<std::sync::Arc<dyn super::Subgraph>> {
        match self.get(name) {
            Some(Attribute::Body(b)) => Ok(b.clone()),
            None => Err(self.error(name, "required but missing")),
            Some(other) => Err(self.wrong_kind(name, "graph", other)),
        }
    }

    /// A type attribute (kind and element type), if present.
    pub fn value_type(&self, name: &str) -> Result<Option<(super::Kind, crate::tensor::DType)>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attribute::Type(k, d)) => Ok(Some((*k, *d))),
            Some(other) => Err(self.wrong_kind(name, "type", other)),
        }
    }

    /// A float attribute, if present.
    pub fn float_opt(&self, name: &str) -> Result<Option<f32>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attribute::Float(v)) => Ok(Some(*v)),
            Some(other) => Err(self.wrong_kind(name, "float", other)),
        }
    }

    /// A float attribute, or `default`.
    pub fn float(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.float_opt(name)?.unwrap_or(default))
    }

    /// An integer-list attribute, if present.
    pub fn ints_opt(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attribute::Ints(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.wrong_kind(name, "ints", other)),
        }
    }

    /// A float-list attribute, if present.
    pub fn floats_opt(&self, name: &str) -> Result<Option<Vec<f32>>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attribute::Floats(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.wrong_kind(name, "floats", other)),
        }
    }

    /// A string attribute (decoded as UTF-8, lossy), if present.
    pub fn string_opt(&self, name: &str) -> Result<Option<String>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attribute::String(v)) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            Some(other) => Err(self.wrong_kind(name, "string", other)),
        }
    }

    /// A string attribute, or `default`.
    pub fn string(&self, name: &str, default: &str) -> Result<String> {
        Ok(self
            .string_opt(name)?
            .unwrap_or_else(|| default.to_string()))
    }

    /// A string-list attribute, if present.
    pub fn strings_opt(&self, name: &str) -> Result<Option<Vec<String>>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attribute::Strings(v)) => Ok(Some(
                v.iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect(),
            )),
            Some(other) => Err(self.wrong_kind(name, "strings", other)),
        }
    }

    /// A tensor attribute, if present.
    pub fn tensor_opt(&self, name: &str) -> Result<Option<&Tensor>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attribute::Tensor(t)) => Ok(Some(t)),
            Some(other) => Err(self.wrong_kind(name, "tensor", other)),
        }
    }

    /// Names of all attributes present.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(|k| k.as_str())
    }
}
