//! Subgraph attributes (the bodies of If, Loop and Scan): each GraphProto is
//! converted into a [`Body`] of the graph IR, which the session's
//! [`BodyBinder`] makes runnable, and the outer-scope names the bodies read
//! become the node's implicit inputs, so that ordering, value lifetimes and
//! pruning see the dependency.

use super::model::convert_graph;
use crate::error::Result;
use crate::graph::{Body, BodyBinder};
use crate::ir::Subgraph;
use onnx_protobuf::{attribute_proto::AttributeType, AttributeProto};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

fn is_graph(a: &AttributeProto) -> bool {
    match a.type_.enum_value() {
        Ok(AttributeType::GRAPH) => true,
        Ok(AttributeType::UNDEFINED) | Err(_) => a.g.is_some(),
        Ok(_) => false,
    }
}

/// Converted subgraph attributes by name, and the node's implicit inputs.
type Subgraphs = (Vec<(String, Arc<dyn Subgraph>)>, Vec<String>);

/// Removes the GRAPH attributes from `protos` and converts them, each made
/// runnable by `binder`. Returns the bodies by attribute name, and the
/// node's implicit inputs: the union, in first-use order, of the
/// outer-scope names the bodies read.
pub(super) fn take_subgraphs(
    protos: &mut Vec<AttributeProto>,
    opsets: &HashMap<String, i64>,
    base: Option<&Path>,
    binder: &dyn BodyBinder,
) -> Result<Subgraphs> {
    if !protos.iter().any(is_graph) {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut implicit: Vec<String> = Vec::new();
    let mut bodies = Vec::new();
    let (graphs, rest): (Vec<_>, Vec<_>) = std::mem::take(protos).into_iter().partition(is_graph);
    *protos = rest;
    for mut a in graphs {
        let Some(g) = a.g.take() else {
            // Left for the attribute conversion to report.
            protos.push(a);
            continue;
        };
        let (graph, free) = convert_graph(g, opsets, base, true, binder)?;
        let formal = graph.inputs.len() - free.len();
        let outer = free
            .iter()
            .map(|name| match implicit.iter().position(|n| n == name) {
                Some(k) => k,
                None => {
                    implicit.push(name.clone());
                    implicit.len() - 1
                }
            })
            .collect();
        bodies.push((
            a.name.clone(),
            Body {
                graph,
                formal,
                outer,
                implicit: 0,
            },
        ));
    }
    let bound = bodies
        .into_iter()
        .map(|(name, mut b)| {
            b.implicit = implicit.len();
            Ok((name, binder.bind(b)?))
        })
        .collect::<Result<_>>()?;
    Ok((bound, implicit))
}
