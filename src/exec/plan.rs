//! A plan: the graph specialised to one set of input shapes (shapes inferred,
//! constants folded, dead nodes pruned, operators rebuilt with their
//! constants), with each node's FLOPs and each value's use count.

use crate::error::Result;
use crate::graph::{prune, specialize, Facts, Graph, ValueId};
use crate::ops::Fact;

/// Everything a run needs that depends only on the input shapes.
#[derive(Debug)]
pub struct Plan {
    /// The specialised graph; its nodes are in execution order.
    pub graph: Graph,
    /// What is known of every value.
    pub facts: Facts,
    /// FLOPs of each node, in `graph.nodes` order.
    pub flops: Vec<u64>,
    /// How many times each value is read by nodes or returned as an output.
    pub uses: Vec<u32>,
}

impl Plan {
    /// Specialises `base` to the given input facts.
    pub fn new(base: &Graph, inputs: &[(ValueId, Fact)]) -> Result<Plan> {
        let mut graph = base.clone();
        let facts = specialize(&mut graph, inputs, true)?;
        prune(&mut graph);
        graph.rebuild_ops()?;
        let flops = graph
            .nodes
            .iter()
            .map(|n| {
                let ins: Vec<Option<&Fact>> = n
                    .inputs
                    .iter()
                    .map(|i| i.and_then(|id| facts[id].as_ref()))
                    .collect();
                let outs: Vec<Fact> = n
                    .outputs
                    .iter()
                    .filter_map(|o| o.and_then(|id| facts[id].clone()))
                    .collect();
                n.op.flops(&ins, &outs)
            })
            .collect();
        let mut uses = vec![0u32; graph.values.len()];
        for n in &graph.nodes {
            for &i in n.inputs.iter().flatten() {
                uses[i] += 1;
            }
        }
        for &o in &graph.outputs {
            uses[o] += 1;
        }
        Ok(Plan {
            graph,
            facts,
            flops,
            uses,
        })
    }

    /// Total FLOPs of one run.
    pub fn total_flops(&self) -> u64 {
        self.flops.iter().sum()
    }
}
