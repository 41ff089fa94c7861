//! The seed's refinement: per boundary task, the first gain (tasks of its own
//! part joined to it by a critical edge) and second gains (the same per other
//! part); boundary tasks whose second minus first gain beats the threshold
//! move, in flow order, while the balance and stage-order limits allow;
//! iterations stop when one moves nothing, finds no new boundary task, or hits
//! the cap; the partition with the fewest critical cut edges is kept.

use super::task_graph::weight;
use super::{Iteration, Move, Partition, PartitionOptions, Refinement, TaskGraph};

/// Neighbour lists of every task, built once from the usable edges.
pub(super) struct Adjacency {
    /// Other ends of the critical edges at each task, one per edge.
    critical: Vec<Vec<usize>>,
    /// Distinct tasks joined to each task by a critical edge.
    linked: Vec<Vec<usize>>,
    /// Sources of the edges into each task.
    preds: Vec<Vec<usize>>,
    /// Targets of the edges out of each task.
    succs: Vec<Vec<usize>>,
}

impl Adjacency {
    /// The neighbour lists of `g`.
    pub(super) fn new(g: &TaskGraph) -> Adjacency {
        let n = g.tasks.len();
        let mut adj = Adjacency {
            critical: vec![Vec::new(); n],
            linked: vec![Vec::new(); n],
            preds: vec![Vec::new(); n],
            succs: vec![Vec::new(); n],
        };
        for e in g.usable_edges() {
            adj.preds[e.to].push(e.from);
            adj.succs[e.from].push(e.to);
            if e.critical {
                adj.critical[e.from].push(e.to);
                adj.critical[e.to].push(e.from);
            }
        }
        for (linked, critical) in adj.linked.iter_mut().zip(&adj.critical) {
            linked.clone_from(critical);
            linked.sort_unstable();
            linked.dedup();
        }
        adj
    }

    /// The gains of task `u` under `assignment` (every entry below `parts`):
    /// the first gain and, per part, the second gain (the entry of u's own
    /// part repeats the first gain).
    pub(super) fn gains(
        &self,
        assignment: &[usize],
        parts: usize,
        u: usize,
    ) -> (usize, Vec<usize>) {
        let mut second = vec![0; parts];
        for &v in self.linked.get(u).into_iter().flatten() {
            if let Some(s) = assignment.get(v).and_then(|&q| second.get_mut(q)) {
                *s += 1;
            }
        }
        let first = assignment
            .get(u)
            .and_then(|&p| second.get(p))
            .copied()
            .unwrap_or(0);
        (first, second)
    }
}

/// The refinement's working state.
struct State<'a> {
    g: &'a TaskGraph,
    adj: Adjacency,
    assignment: Vec<usize>,
    sizes: Vec<usize>,
    seconds: Vec<f64>,
    /// Largest seconds a part may reach through a move.
    limit: f64,
    threshold: i64,
    ordered: bool,
}

impl State<'_> {
    /// True when some part `q` gives `u` a gain difference above the
    /// threshold.
    fn is_candidate(&self, u: usize) -> bool {
        let (first, second) = self.adj.gains(&self.assignment, self.sizes.len(), u);
        second
            .iter()
            .enumerate()
            .any(|(q, &s)| q != self.assignment[u] && difference(s, first) > self.threshold)
    }

    /// The move of `u` with the largest gain difference (lowest part on a
    /// tie) among those above the threshold and allowed now.
    fn best_move(&self, u: usize) -> Option<Move> {
        let p = self.assignment[u];
        if self.sizes[p] <= 1 {
            return None;
        }
        let (first, second) = self.adj.gains(&self.assignment, self.sizes.len(), u);
        let mut best: Option<Move> = None;
        for (q, &s) in second.iter().enumerate() {
            let diff = difference(s, first);
            if q == p || diff <= self.threshold || !self.allowed(u, p, q) {
                continue;
            }
            if best
                .as_ref()
                .is_none_or(|b| diff > difference(b.second_gain, b.first_gain))
            {
                best = Some(Move {
                    task: u,
                    from: p,
                    to: q,
                    first_gain: first,
                    second_gain: s,
                });
            }
        }
        best
    }

    /// Whether moving `u` from `p` to `q` keeps the balance and stage order
    /// and cuts fewer critical edges (counted with multiplicity, which only
    /// differs from the gains when a hand-made graph repeats an edge).
    fn allowed(&self, u: usize, p: usize, q: usize) -> bool {
        let w = weight(self.g.tasks[u].seconds);
        if self.seconds[q] + w > self.limit {
            return false;
        }
        if self.ordered
            && (self.adj.preds[u].iter().any(|&v| self.assignment[v] > q)
                || self.adj.succs[u].iter().any(|&v| self.assignment[v] < q))
        {
            return false;
        }
        let ends = &self.adj.critical[u];
        let joined = ends.iter().filter(|&&v| self.assignment[v] == q).count();
        let split = ends.iter().filter(|&&v| self.assignment[v] == p).count();
        joined > split
    }

    /// Applies a move.
    fn apply(&mut self, m: &Move) {
        let w = weight(self.g.tasks[m.task].seconds);
        self.assignment[m.task] = m.to;
        self.sizes[m.from] -= 1;
        self.sizes[m.to] += 1;
        self.seconds[m.from] -= w;
        self.seconds[m.to] += w;
    }
}

/// `second - first`, saturating.
fn difference(second: usize, first: usize) -> i64 {
    let s = i64::try_from(second).unwrap_or(i64::MAX);
    let f = i64::try_from(first).unwrap_or(i64::MAX);
    s.saturating_sub(f)
}

/// The largest of `values` (0 for none).
fn largest(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

/// Refines `initial` by the seed's gain rule (see the module header and
/// [`PartitionOptions`]). Each iteration walks the boundary tasks that are
/// candidates at its start in ascending (flow) order, recomputes each one's
/// gains and applies its best allowed move; every move cuts fewer critical
/// edges, and at most `max_iterations` iterations run. An initial partition
/// that leaves a task without a valid part or a part empty is returned
/// unrefined.
pub fn refine(g: &TaskGraph, initial: Partition, options: &PartitionOptions) -> Refinement {
    let boundary = initial.boundary(g);
    let mut seen = vec![false; g.tasks.len()];
    for &u in &boundary {
        seen[u] = true;
    }
    let complete = initial.is_complete(g);
    // An incomplete partition may name absurd part counts: sum sparsely.
    let initial_seconds = if complete {
        initial.part_seconds(g)
    } else {
        let mut sums = std::collections::BTreeMap::new();
        for (t, &p) in initial.assignment.iter().enumerate().take(g.tasks.len()) {
            if p < initial.parts {
                *sums.entry(p).or_insert(0.0) += weight(g.tasks[t].seconds);
            }
        }
        sums.into_values().collect()
    };
    let mut history = vec![Iteration {
        moves: Vec::new(),
        cut: initial.cut(g),
        boundary: boundary.len(),
        new_boundary: boundary.len(),
        max_part_seconds: largest(&initial_seconds),
    }];
    let mut best = initial.clone();
    let mut best_iteration = 0;
    if complete {
        let balance = if options.balance.is_nan() {
            0.0
        } else {
            options.balance
        };
        let mut sizes = vec![0; initial.parts];
        for &p in &initial.assignment {
            sizes[p] += 1;
        }
        let mut state = State {
            g,
            adj: Adjacency::new(g),
            assignment: initial.assignment.clone(),
            sizes,
            seconds: initial_seconds.clone(),
            limit: if balance == f64::INFINITY {
                f64::INFINITY
            } else {
                // NaN only from -inf × 0: then no move may add seconds.
                let limit = (1.0 + balance) * largest(&initial_seconds);
                if limit.is_nan() {
                    0.0
                } else {
                    limit
                }
            },
            threshold: options.threshold.max(0),
            ordered: options.ordered,
        };
        let mut boundary = boundary;
        for iteration in 1..=options.max_iterations {
            let candidates: Vec<usize> = boundary
                .iter()
                .copied()
                .filter(|&u| state.is_candidate(u))
                .collect();
            let mut moves = Vec::new();
            for u in candidates {
                if let Some(m) = state.best_move(u) {
                    state.apply(&m);
                    moves.push(m);
                }
            }
            let current = Partition {
                parts: initial.parts,
                assignment: state.assignment.clone(),
            };
            boundary = current.boundary(g);
            let mut new_boundary = 0;
            for &u in &boundary {
                new_boundary += usize::from(!seen[u]);
                seen[u] = true;
            }
            state.seconds = current.part_seconds(g);
            let cut = current.cut(g);
            let stop = moves.is_empty() || new_boundary == 0;
            if cut.critical < history[best_iteration].cut.critical {
                best = current;
                best_iteration = iteration;
            }
            history.push(Iteration {
                moves,
                cut,
                boundary: boundary.len(),
                new_boundary,
                max_part_seconds: largest(&state.seconds),
            });
            if stop {
                break;
            }
        }
    }
    Refinement {
        initial,
        best,
        best_iteration,
        history,
    }
}
