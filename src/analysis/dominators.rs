//! The node-level dependency DAG of a graph (with a virtual source for the
//! graph inputs and a virtual sink for the outputs) and its immediate
//! post-dominators: the join of a fork is the fork's immediate post-dominator.

use crate::graph::Graph;

/// Dependency DAG over the nodes `0..n`, plus the source `n` and the sink `n + 1`.
#[derive(Debug, Clone)]
pub struct Dag {
    /// Number of real nodes.
    pub n: usize,
    /// Successors of each vertex (deduplicated, sorted).
    pub succ: Vec<Vec<usize>>,
    /// Predecessors of each vertex (deduplicated, sorted).
    pub pred: Vec<Vec<usize>>,
}

impl Dag {
    /// The virtual source (graph inputs).
    pub fn source(&self) -> usize {
        self.n
    }

    /// The virtual sink (graph outputs and unread results).
    pub fn sink(&self) -> usize {
        self.n + 1
    }

    /// Builds the DAG of a graph whose nodes are in topological order.
    /// Constants create no edges: they are available before anything runs.
    pub fn of(graph: &Graph) -> Dag {
        let n = graph.nodes.len();
        let (source, sink) = (n, n + 1);
        let mut producer = vec![None; graph.values.len()];
        for &i in &graph.inputs {
            producer[i] = Some(source);
        }
        for (i, node) in graph.nodes.iter().enumerate() {
            for &o in node.outputs.iter().flatten() {
                producer[o] = Some(i);
            }
        }
        let mut succ = vec![Vec::new(); n + 2];
        let mut pred = vec![Vec::new(); n + 2];
        let mut add = |a: usize, b: usize| {
            succ[a].push(b);
            pred[b].push(a);
        };
        for (i, node) in graph.nodes.iter().enumerate() {
            for &v in node.inputs.iter().flatten() {
                if !graph.is_constant(v) {
                    if let Some(p) = producer[v] {
                        add(p, i);
                    }
                }
            }
        }
        for &o in &graph.outputs {
            if let Some(p) = producer[o] {
                add(p, sink);
            }
        }
        for list in succ.iter_mut().chain(pred.iter_mut()) {
            list.sort_unstable();
            list.dedup();
        }
        for (v, list) in succ.iter_mut().enumerate().take(n) {
            if list.is_empty() {
                list.push(sink);
                pred[sink].push(v);
            }
        }
        Dag { n, succ, pred }
    }

    /// Topological rank: the source first, nodes in order, the sink last.
    fn rank(&self, v: usize) -> usize {
        if v == self.source() {
            0
        } else if v == self.sink() {
            self.n + 1
        } else {
            v + 1
        }
    }

    /// The immediate post-dominator of every vertex (the sink's is itself).
    pub fn post_dominators(&self) -> Vec<usize> {
        let sink = self.sink();
        let mut ipdom = vec![usize::MAX; self.n + 2];
        ipdom[sink] = sink;
        let order = std::iter::once(self.source()).chain(0..self.n).rev();
        for v in order {
            let mut acc: Option<usize> = None;
            for &s in &self.succ[v] {
                acc = Some(match acc {
                    None => s,
                    Some(a) => self.intersect(&ipdom, a, s),
                });
            }
            ipdom[v] = acc.unwrap_or(sink);
        }
        ipdom
    }

    fn intersect(&self, ipdom: &[usize], mut a: usize, mut b: usize) -> usize {
        while a != b {
            while self.rank(a) < self.rank(b) {
                a = ipdom[a];
            }
            while self.rank(b) < self.rank(a) {
                b = ipdom[b];
            }
        }
        a
    }
}
