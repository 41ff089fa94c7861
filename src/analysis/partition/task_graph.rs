//! The task graph the partitioner works on: one task per graph node (in the
//! graph's topological order), one edge per producer/consumer pair with the
//! bytes it carries, and the marking of critical edges.

use crate::graph::{Facts, Graph, ValueId};
use std::collections::{BTreeMap, BTreeSet};

/// One unit of work to place on a device: a node of the graph.
#[derive(Debug, Clone)]
pub struct Task {
    /// The node's name.
    pub name: String,
    /// Estimated single-thread time in seconds (negative or non-finite
    /// values count as 0 wherever the partitioner adds them up).
    pub seconds: f64,
    /// Estimated floating-point operations.
    pub flops: u64,
}

/// A flow relation: `from` produces values that `to` reads.
#[derive(Debug, Clone)]
pub struct TaskEdge {
    /// The producing task (index into [`TaskGraph::tasks`]).
    pub from: usize,
    /// The consuming task; `from < to` in a well-formed graph.
    pub to: usize,
    /// The names of the values carried, each once.
    pub values: Vec<String>,
    /// Total size in bytes of those values (0 for each one of unknown size).
    pub bytes: u64,
    /// Whether the relation is critical (the seed's "key relation").
    pub critical: bool,
}

/// Tasks in a topological order and the flow relations between them: every
/// edge has `from < to`. Edges that break this, or name a task that does not
/// exist, or join a task to itself, are ignored by the partitioner.
#[derive(Debug, Clone, Default)]
pub struct TaskGraph {
    /// The tasks.
    pub tasks: Vec<Task>,
    /// The flow relations.
    pub edges: Vec<TaskEdge>,
}

/// Which edges [`TaskGraph::mark_critical`] marks critical.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Critical {
    /// Edges carrying more than this many bytes.
    Bytes(u64),
    /// The edges of the longest path, weighted by task seconds.
    Path,
}

/// A task's seconds as the partitioner counts them: negative or non-finite
/// values count as 0.
pub(super) fn weight(seconds: f64) -> f64 {
    if seconds.is_finite() && seconds > 0.0 {
        seconds
    } else {
        0.0
    }
}

impl TaskGraph {
    /// Builds the task graph of `graph`: nodes = `graph.nodes` in order
    /// (`seconds[i]` and `flops[i]` belong to node `i`; missing entries count
    /// as 0); an edge per distinct (producer node, consumer node) pair,
    /// listing the value names carried and the sum of their byte sizes from
    /// `facts` (0 if the fact or its shape is unknown); graph inputs and
    /// constants make no edges. The graph should be topologically sorted; a
    /// value read by a node at or before its producer makes no edge. Edges are
    /// ordered by `(from, to)` and then marked by [`Self::mark_critical`].
    pub fn from_graph(
        graph: &Graph,
        facts: &Facts,
        seconds: &[f64],
        flops: &[u64],
        critical: Critical,
    ) -> TaskGraph {
        let count = graph.values.len();
        let mut producer: Vec<Option<usize>> = vec![None; count];
        for (i, node) in graph.nodes.iter().enumerate() {
            for &v in node.outputs.iter().flatten() {
                if let Some(slot) = producer.get_mut(v) {
                    slot.get_or_insert(i);
                }
            }
        }
        let mut source = vec![false; count];
        for &v in &graph.inputs {
            if let Some(s) = source.get_mut(v) {
                *s = true;
            }
        }
        for (v, s) in source.iter_mut().enumerate() {
            *s |= graph.is_constant(v);
        }
        let mut carried: BTreeMap<(usize, usize), BTreeSet<ValueId>> = BTreeMap::new();
        for (j, node) in graph.nodes.iter().enumerate() {
            for &v in node.inputs.iter().flatten() {
                if source.get(v).copied().unwrap_or(true) {
                    continue;
                }
                if let Some(Some(i)) = producer.get(v) {
                    if *i < j {
                        carried.entry((*i, j)).or_default().insert(v);
                    }
                }
            }
        }
        let edges = carried
            .into_iter()
            .map(|((from, to), values)| TaskEdge {
                from,
                to,
                bytes: values
                    .iter()
                    .fold(0u64, |sum, &v| sum.saturating_add(value_bytes(facts, v))),
                values: values
                    .iter()
                    .map(|&v| {
                        graph
                            .values
                            .get(v)
                            .map(|x| x.name.clone())
                            .unwrap_or_default()
                    })
                    .collect(),
                critical: false,
            })
            .collect();
        let tasks = graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| Task {
                name: node.name.clone(),
                seconds: seconds.get(i).copied().unwrap_or(0.0),
                flops: flops.get(i).copied().unwrap_or(0),
            })
            .collect();
        let mut g = TaskGraph { tasks, edges };
        g.mark_critical(critical);
        g
    }

    /// Marks edges critical (and every other edge not critical):
    /// `Bytes(n)`: edges with `bytes > n`; `Path`: the edges of the longest
    /// path by task seconds (ties broken by lowest index, both for the last
    /// task and for each task's predecessor on the path).
    pub fn mark_critical(&mut self, critical: Critical) {
        match critical {
            Critical::Bytes(limit) => {
                for e in &mut self.edges {
                    e.critical = e.bytes > limit;
                }
            }
            Critical::Path => {
                let on_path = self.longest_path();
                for e in &mut self.edges {
                    e.critical = on_path.contains(&(e.from, e.to));
                }
            }
        }
    }

    /// The `(from, to)` pairs along the longest path by task seconds.
    fn longest_path(&self) -> BTreeSet<(usize, usize)> {
        let n = self.tasks.len();
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
        for e in self.forward_edges() {
            preds[e.to].push(e.from);
        }
        let mut length = vec![0.0; n];
        let mut prev: Vec<Option<usize>> = vec![None; n];
        for v in 0..n {
            preds[v].sort_unstable();
            let mut best: Option<usize> = None;
            for &u in &preds[v] {
                if best.is_none_or(|b| length[u] > length[b]) {
                    best = Some(u);
                }
            }
            length[v] = weight(self.tasks[v].seconds) + best.map_or(0.0, |b| length[b]);
            prev[v] = best;
        }
        let mut end: Option<usize> = None;
        for v in 0..n {
            if end.is_none_or(|e| length[v] > length[e]) {
                end = Some(v);
            }
        }
        let mut path = BTreeSet::new();
        let mut v = end;
        while let Some(to) = v {
            // prev[to] < to, so this walk ends.
            v = prev[to];
            if let Some(from) = v {
                path.insert((from, to));
            }
        }
        path
    }

    /// The edges the partitioner uses: both tasks exist and `from < to`.
    pub(super) fn forward_edges(&self) -> impl Iterator<Item = &TaskEdge> {
        let n = self.tasks.len();
        self.edges.iter().filter(move |e| e.from < e.to && e.to < n)
    }

    /// Edges joining two distinct existing tasks, in either direction.
    pub(super) fn usable_edges(&self) -> impl Iterator<Item = &TaskEdge> {
        let n = self.tasks.len();
        self.edges
            .iter()
            .filter(move |e| e.from != e.to && e.from < n && e.to < n)
    }
}

/// Byte size of value `v` from its fact; 0 when unknown.
fn value_bytes(facts: &Facts, v: ValueId) -> u64 {
    let Some(Some(fact)) = facts.get(v) else {
        return 0;
    };
    let Some(shape) = &fact.shape else {
        return 0;
    };
    shape.iter().fold(fact.dtype.size_of() as u64, |bytes, &d| {
        bytes.saturating_mul(d as u64)
    })
}
