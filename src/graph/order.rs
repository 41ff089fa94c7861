//! Topological ordering of the nodes, checking that every value a node reads
//! is produced somewhere and that no cycle exists.

use super::{Graph, ValueId};
use crate::error::{Error, Result};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Sorts `graph.nodes` so that every node comes after the producers of its
/// inputs, keeping the model's order where it allows. Errors name a node on a
/// cycle, or a value that nothing produces.
pub fn topological_sort(graph: &mut Graph) -> Result<()> {
    let n = graph.nodes.len();
    let mut producer: Vec<Option<usize>> = vec![None; graph.values.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        for &out in node.outputs.iter().flatten() {
            if producer[out].is_some() || graph.is_constant(out) || graph.inputs.contains(&out) {
                return Err(Error::InvalidModel(format!(
                    "value {:?} is produced more than once (again by node {:?})",
                    graph.name(out),
                    node.name
                )));
            }
            producer[out] = Some(i);
        }
    }
    let is_source = |v: ValueId| graph.is_constant(v) || graph.inputs.contains(&v);
    let mut pending = vec![0usize; n];
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in graph.nodes.iter().enumerate() {
        for &v in node.inputs.iter().flatten() {
            match producer[v] {
                Some(p) => {
                    pending[i] += 1;
                    consumers[p].push(i);
                }
                None if is_source(v) => {}
                None => {
                    return Err(Error::MissingValue {
                        node: node.name.clone(),
                        value: graph.name(v).to_string(),
                    })
                }
            }
        }
    }
    for &out in &graph.outputs {
        if producer[out].is_none() && !is_source(out) {
            return Err(Error::InvalidModel(format!(
                "graph output {:?} is produced by no node",
                graph.name(out)
            )));
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> =
        (0..n).filter(|&i| pending[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &c in &consumers[i] {
            pending[c] -= 1;
            if pending[c] == 0 {
                ready.push(Reverse(c));
            }
        }
    }
    if order.len() < n {
        let stuck = (0..n).find(|&i| pending[i] > 0).unwrap_or(0);
        return Err(Error::Cycle {
            node: graph.nodes[stuck].name.clone(),
        });
    }
    let mut slots: Vec<Option<super::Node>> = std::mem::take(&mut graph.nodes)
        .into_iter()
        .map(Some)
        .collect();
    graph.nodes = order.into_iter().filter_map(|i| slots[i].take()).collect();
    Ok(())
}
