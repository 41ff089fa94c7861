//! AttributeProto → [`Attribute`]: every attribute kind, including old models
//! that leave the `type` field unset.

use super::model::declared_type;
use super::tensor_proto::tensor_from_proto;
use crate::error::{Error, Result};
use crate::ir::attributes::{Attribute, Attributes};
use onnx_protobuf::{attribute_proto::AttributeType, AttributeProto};
use std::collections::BTreeMap;
use std::path::Path;

/// The kind of an attribute, guessed from its filled fields when `type` is unset.
fn kind_of(a: &AttributeProto) -> Option<AttributeType> {
    match a.type_.enum_value() {
        Ok(AttributeType::UNDEFINED) | Err(_) => {}
        Ok(t) => return Some(t),
    }
    Some(if a.t.is_some() {
        AttributeType::TENSOR
    } else if a.g.is_some() {
        AttributeType::GRAPH
    } else if !a.floats.is_empty() {
        AttributeType::FLOATS
    } else if !a.ints.is_empty() {
        AttributeType::INTS
    } else if !a.strings.is_empty() {
        AttributeType::STRINGS
    } else if !a.tensors.is_empty() {
        AttributeType::TENSORS
    } else if !a.graphs.is_empty() {
        AttributeType::GRAPHS
    } else if !a.s.is_empty() {
        AttributeType::STRING
    } else if a.f != 0.0 {
        AttributeType::FLOAT
    } else {
        // An unset scalar: int and float zero read the same either way.
        return None;
    })
}

fn convert_one(a: &mut AttributeProto, base: Option<&Path>, node: &str) -> Result<Attribute> {
    let missing = |what: &str| {
        Error::InvalidModel(format!(
            "node {node:?}: attribute {:?} is of type {what} but carries none",
            a.name
        ))
    };
    Ok(match kind_of(a) {
        None => Attribute::Int(a.i),
        Some(AttributeType::FLOAT) => Attribute::Float(a.f),
        Some(AttributeType::INT) => Attribute::Int(a.i),
        Some(AttributeType::STRING) => Attribute::String(std::mem::take(&mut a.s)),
        Some(AttributeType::FLOATS) => Attribute::Floats(std::mem::take(&mut a.floats)),
        Some(AttributeType::INTS) => Attribute::Ints(std::mem::take(&mut a.ints)),
        Some(AttributeType::STRINGS) => Attribute::Strings(std::mem::take(&mut a.strings)),
        Some(AttributeType::TENSOR) => match a.t.as_mut() {
            Some(t) => Attribute::Tensor(tensor_from_proto(t, base)?),
            None => return Err(missing("tensor")),
        },
        Some(AttributeType::TENSORS) => Attribute::Tensors(
            a.tensors
                .iter_mut()
                .map(|t| tensor_from_proto(t, base))
                .collect::<Result<_>>()?,
        ),
        Some(AttributeType::GRAPH) => match a.g.take() {
            Some(g) => Attribute::Graph(Box::new(g)),
            None => return Err(missing("graph")),
        },
        Some(AttributeType::GRAPHS) => Attribute::Graphs(std::mem::take(&mut a.graphs)),
        Some(AttributeType::SPARSE_TENSOR) | Some(AttributeType::SPARSE_TENSORS) => {
            Attribute::Other("sparse tensor")
        }
        Some(AttributeType::TYPE_PROTO) => {
            match a.tp.as_ref().map(|tp| declared_type(tp, &a.name, 0)) {
                Some(Ok(Some(d))) => Attribute::Type(d.kind, d.dtype),
                _ => Attribute::Other("type proto"),
            }
        }
        Some(AttributeType::TYPE_PROTOS) => Attribute::Other("type protos"),
        Some(AttributeType::UNDEFINED) => Attribute::Other("undefined"),
    })
}

/// Converts a node's attribute protos. References to function attributes
/// (`ref_attr_name`) are refused: ramify has no model-local functions.
pub(crate) fn convert_attributes(
    protos: &mut [AttributeProto],
    base: Option<&Path>,
    node: &str,
    op: &str,
) -> Result<Attributes> {
    let mut map = BTreeMap::new();
    for a in protos.iter_mut() {
        if !a.ref_attr_name.is_empty() {
            return Err(Error::InvalidModel(format!(
                "node {node:?}: attribute {:?} refers to a function attribute outside a function",
                a.name
            )));
        }
        let v = convert_one(a, base, node)?;
        map.insert(a.name.clone(), v);
    }
    Ok(Attributes::new(node, op, map))
}
