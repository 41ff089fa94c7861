//! A plan: the graph specialised to one set of input shapes (shapes inferred,
//! constants folded, dead nodes pruned, operators rebuilt with their
//! constants), with each node's FLOPs, its estimated single-thread time and
//! its measured times at each thread count, each value's use count, the
//! concatenations its producers write in place, and the fork structure the
//! executor walks.

use super::joins::Joins;
use crate::analysis::{find_structure, CostModel, Structure};
use crate::error::{Error, Result};
use crate::graph::pipeline::{optimize, Stage};
use crate::graph::{Facts, Graph, ValueId};
use crate::ir::Fact;
use crate::sched::fork::{smooth_into, ForkMemory};
use crate::sched::SoloMemory;
use crate::tensor::budget;
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
    /// Measured nanoseconds of each node on 1..=`slots` threads (smoothed;
    /// 0 = none yet), node-major.
    measured: Vec<AtomicU64>,
    /// Thread counts measured per node.
    slots: usize,
    /// Runs finished, the exploring runs, and each fork's measured cost of
    /// forking in parallel (a parallel fork's wall time less the makespan
    /// its pools' node times account for: waking the pools' threads,
    /// handing the results back). The first run is a warm-up (freshly
    /// allocated buffers fault in, caches are cold) and neither its node
    /// times nor its fork overheads are recorded, so that one cold outlier
    /// cannot steer the makespan check for good.
    pub forks: ForkMemory,
    /// For a plan without forks: its measured run times on the caller's
    /// thread and on the pool (see [`SoloMemory`]).
    pub solo: SoloMemory,
    /// How many times each value is read by nodes or returned as an output.
    pub uses: Vec<u32>,
    /// Forks, siblings and the step tree.
    pub structure: Structure,
    /// The memory budget in force for this plan's runs, in bytes.
    pub memory_limit: usize,
    /// Per node: whether an output's shape is unknown ahead, so that the
    /// executor infers it from the actual inputs and checks it against the
    /// budget before the kernel allocates.
    pub check_at_run: Vec<bool>,
    /// Concatenations whose inputs' producers write straight into them.
    pub joins: Joins,
}

impl Plan {
    /// Specialises `base` to the given input facts; node times are kept for
    /// runs on up to `max_threads` threads. Every value whose shape is known
    /// must fit `memory_limit` bytes, and so must the intermediate values
    /// live at once in execution order.
    pub fn new(
        base: &Graph,
        inputs: &[(ValueId, Fact)],
        cost: &CostModel,
        max_threads: usize,
        memory_limit: usize,
    ) -> Result<Plan> {
        Plan::at_stage(base, inputs, Stage::Plan, cost, max_threads, memory_limit)
    }

    /// A plan for inputs of varying shapes, specialised on what `inputs`
    /// say of them (their types, say): inference leaves unknown what it
    /// cannot know ([`Stage::Load`] without fusion: `base` is fused
    /// already), and the executor infers those nodes' outputs from the
    /// actual inputs when it runs them.
    pub fn generic(
        base: &Graph,
        inputs: &[(ValueId, Fact)],
        cost: &CostModel,
        max_threads: usize,
        memory_limit: usize,
    ) -> Result<Plan> {
        let stage = Stage::Load { fusion: false };
        Plan::at_stage(base, inputs, stage, cost, max_threads, memory_limit)
    }

    fn at_stage(
        base: &Graph,
        inputs: &[(ValueId, Fact)],
        stage: Stage,
        cost: &CostModel,
        max_threads: usize,
        memory_limit: usize,
    ) -> Result<Plan> {
        let mut graph = base.clone();
        let facts = budget::with_limit(memory_limit, || optimize(&mut graph, inputs, stage))?;
        check_live_bytes(&graph, &facts, memory_limit)?;
        let check_at_run: Vec<bool> = graph
            .nodes
            .iter()
            .map(|n| {
                n.outputs
                    .iter()
                    .flatten()
                    .any(|&id| facts[id].as_ref().is_none_or(|f| f.shape.is_none()))
            })
            .collect();
        // Each node prepares for its input shapes (packing constant
        // weights, in node order, so that one original at a time lives
        // beside its packed form), and gives its FLOPs at them.
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
                n.op.prepare(&ins);
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
        let joins = Joins::find(&graph, &facts, &uses, &check_at_run);
        let structure = find_structure(&graph);
        let forks = ForkMemory::new(structure.forks.len());
        let slots = max_threads.clamp(1, MAX_MEASURED_THREADS);
        let measured = (0..graph.nodes.len() * slots)
            .map(|_| AtomicU64::new(0))
            .collect();
        Ok(Plan {
            graph,
            facts,
            flops,
            estimate,
            measured,
            slots,
            forks,
            solo: SoloMemory::default(),
            uses,
            structure,
            memory_limit,
            check_at_run,
            joins,
        })
    }

    /// Total FLOPs of one run.
    pub fn total_flops(&self) -> u64 {
        self.flops.iter().sum()
    }

    /// Records a run of node `i` on `threads` threads that took `nanos`
    /// (smoothed with the earlier ones). Thread counts beyond the plan's
    /// slots, and the runs before the first has finished, are not kept.
    pub fn record(&self, i: usize, threads: usize, nanos: u64) {
        if let Some(slot) = self.slot(i, threads) {
            // One run counts at most twice the time known so far: a node
            // that waited for a pool's sleeping thread to wake (the first
            // after a fork, 0.3-1 ms in a VM) would otherwise double its
            // estimate, and a fork that then runs in parallel never runs
            // the node on that thread count again to correct it.
            let known = slot.load(Ordering::Relaxed);
            let nanos = if known > 0 {
                nanos.min(known.saturating_mul(2))
            } else {
                nanos
            };
            if self.forks.warmed() {
                smooth_into(slot, nanos);
            }
        }
    }

    fn slot(&self, i: usize, threads: usize) -> Option<&AtomicU64> {
        if threads == 0 || threads > self.slots {
            return None;
        }
        self.measured.get(i * self.slots + threads - 1)
    }

    fn measured_seconds(&self, i: usize, threads: usize) -> Option<f64> {
        match self.slot(i, threads)?.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(ns as f64 * 1e-9),
        }
    }

    /// Seconds of node `i` on `threads` threads: measured there when it
    /// has been; else a measurement at another thread count (one thread
    /// first) rescaled by `speedup`; else the cost model's estimate divided
    /// by `speedup(threads)`. `speedup(k)` is how much faster an operator
    /// runs on k threads than on one.
    pub fn node_seconds_at(&self, i: usize, threads: usize, speedup: &dyn Fn(usize) -> f64) -> f64 {
        if let Some(t) = self.measured_seconds(i, threads) {
            return t;
        }
        let single = (1..=self.slots)
            .find_map(|k| self.measured_seconds(i, k).map(|t| t * speedup(k)))
            .unwrap_or(self.estimate[i]);
        single / speedup(threads).max(f64::MIN_POSITIVE)
    }

    /// t_i of each sibling of fork `f`: the sum of its nodes' single-thread
    /// times (see [`node_seconds_at`](Self::node_seconds_at)).
    pub fn sibling_times(&self, f: usize, speedup: &dyn Fn(usize) -> f64) -> Vec<f64> {
        (0..self.structure.forks[f].siblings.len())
            .map(|s| self.sibling_seconds_at(f, s, 1, speedup))
            .collect()
    }

    /// Seconds of sibling `s` of fork `f` run on `threads` threads (see
    /// [`node_seconds_at`](Self::node_seconds_at)).
    pub fn sibling_seconds_at(
        &self,
        f: usize,
        s: usize,
        threads: usize,
        speedup: &dyn Fn(usize) -> f64,
    ) -> f64 {
        self.structure.forks[f].siblings.get(s).map_or(0.0, |sib| {
            sib.nodes
                .iter()
                .map(|&i| self.node_seconds_at(i, threads, speedup))
                .sum()
        })
    }
}

/// Node times are kept for runs on at most this many threads.
pub const MAX_MEASURED_THREADS: usize = 64;

/// Checks that the intermediate values live at once, run in the graph's
/// order with each value freed after its last reader, fit `limit` bytes.
/// Values of unknown shape count nothing here: the executor checks them one
/// by one when their shapes are known.
fn check_live_bytes(graph: &Graph, facts: &Facts, limit: usize) -> Result<()> {
    let bytes = |id: ValueId| -> u128 {
        facts[id]
            .as_ref()
            .and_then(|f| f.shape.as_ref().map(|s| (f.dtype, s)))
            .map_or(0, |(dtype, shape)| {
                budget::tensor_bytes(dtype, shape).unwrap_or(u128::MAX)
            })
    };
    let mut last_reader = vec![usize::MAX; graph.values.len()];
    for (i, n) in graph.nodes.iter().enumerate() {
        for &id in n.inputs.iter().flatten() {
            last_reader[id] = i;
        }
    }
    let mut freed_after: Vec<Vec<ValueId>> = vec![Vec::new(); graph.nodes.len()];
    for (id, &i) in last_reader.iter().enumerate() {
        if i != usize::MAX && !graph.outputs.contains(&id) && !graph.is_constant(id) {
            freed_after[i].push(id);
        }
    }
    let mut live: u128 = graph.inputs.iter().map(|&id| bytes(id)).sum();
    for (i, n) in graph.nodes.iter().enumerate() {
        for &id in n.outputs.iter().flatten() {
            live = live.saturating_add(bytes(id));
        }
        if live > limit as u128 {
            return Err(Error::PlanMemory {
                node: n.name.clone(),
                op: n.op_type.clone(),
                bytes: live,
                limit,
            });
        }
        for &id in &freed_after[i] {
            live = live.saturating_sub(bytes(id));
        }
    }
    Ok(())
}
