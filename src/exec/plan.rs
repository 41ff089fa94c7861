//! A plan: the graph specialised to one set of input shapes (shapes inferred,
//! constants folded, dead nodes pruned, operators rebuilt with their
//! constants), with each node's FLOPs and estimated single-thread time, each
//! value's use count, and the fork structure the executor walks.

use crate::analysis::{find_structure, CostModel, Structure};
use crate::error::Result;
use crate::graph::{prune, specialize, Facts, Graph, ValueId};
use crate::ops::Fact;
use std::sync::atomic::{AtomicU64, Ordering};

/// Everything a run needs that depends only on the input shapes.
#[derive(Debug)]
pub struct Plan {
    /// The specialised graph; its nodes are in execution order.
    pub graph: Graph,
    /// What is known of every value.
    pub facts: Facts,
    /// FLOPs of each node, in `graph.nodes` order.
    pub flops: Vec<u64>,
    /// Estimated single-thread seconds of each node from the cost model.
    pub estimate: Vec<f64>,
    /// Measured single-thread nanoseconds of each node (smoothed; 0 = none yet).
    measured: Vec<AtomicU64>,
    /// How many times each value is read by nodes or returned as an output.
    pub uses: Vec<u32>,
    /// Forks, siblings and the step tree.
    pub structure: Structure,
}

impl Plan {
    /// Specialises `base` to the given input facts.
    pub fn new(base: &Graph, inputs: &[(ValueId, Fact)], cost: &CostModel) -> Result<Plan> {
        let mut graph = base.clone();
        let facts = specialize(&mut graph, inputs, true)?;
        prune(&mut graph);
        graph.rebuild_ops()?;
        let flops: Vec<u64> = graph
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
        let estimate = graph
            .nodes
            .iter()
            .zip(&flops)
            .map(|(n, &f)| cost.node_seconds(n, f))
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
        let structure = find_structure(&graph);
        let measured = (0..graph.nodes.len()).map(|_| AtomicU64::new(0)).collect();
        Ok(Plan {
            graph,
            facts,
            flops,
            estimate,
            measured,
            uses,
            structure,
        })
    }

    /// Total FLOPs of one run.
    pub fn total_flops(&self) -> u64 {
        self.flops.iter().sum()
    }

    /// Records a single-thread measurement of node `i` (smoothed).
    pub fn record(&self, i: usize, nanos: u64) {
        let slot = &self.measured[i];
        let old = slot.load(Ordering::Relaxed);
        let new = if old == 0 {
            nanos
        } else {
            (old * 3 + nanos) / 4
        };
        slot.store(new.max(1), Ordering::Relaxed);
    }

    /// Single-thread seconds of node `i`: measured when available, else estimated.
    pub fn node_seconds(&self, i: usize) -> f64 {
        match self.measured[i].load(Ordering::Relaxed) {
            0 => self.estimate[i],
            ns => ns as f64 * 1e-9,
        }
    }

    /// t_i of each sibling of fork `f`: the sum of its nodes' times.
    pub fn sibling_times(&self, f: usize) -> Vec<f64> {
        self.structure.forks[f]
            .siblings
            .iter()
            .map(|s| s.nodes.iter().map(|&i| self.node_seconds(i)).sum())
            .collect()
    }
}
