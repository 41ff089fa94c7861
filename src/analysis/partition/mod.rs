//! Partitioning of a model's tasks over several devices (a pipeline): an
//! initial split into contiguous stages of balanced time, then the boundary
//! refinement of seed 004, which moves boundary tasks between parts to cut
//! fewer critical flow relations, and keeps the best partition it met.

mod initial;
mod refine;
mod task_graph;

#[cfg(test)]
mod tests;

pub use initial::initial_split;
pub use refine::refine;
pub use task_graph::{Critical, Task, TaskEdge, TaskGraph};

use crate::error::{Error, Result};
use task_graph::weight;

/// Settings of [`partition`] and [`refine`].
#[derive(Debug, Clone)]
pub struct PartitionOptions {
    /// Number of parts (devices).
    pub parts: usize,
    /// A move needs `second gain - first gain > threshold` (a threshold
    /// below 0 acts as 0, so every move cuts fewer critical edges).
    pub threshold: i64,
    /// A move may not bring its target part above `(1 + balance)` times the
    /// initial split's largest part seconds; `f64::INFINITY` switches this
    /// off, NaN counts as 0.
    pub balance: f64,
    /// Keep the parts forward-only stages: every edge goes from a part to the
    /// same or a later part.
    pub ordered: bool,
    /// The most refinement iterations.
    pub max_iterations: usize,
}

impl Default for PartitionOptions {
    fn default() -> Self {
        PartitionOptions {
            parts: 2,
            threshold: 0,
            balance: 0.25,
            ordered: true,
            max_iterations: 1000,
        }
    }
}

/// What a partition cuts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutStats {
    /// Edges whose tasks lie in different parts.
    pub edges: usize,
    /// Bytes those edges carry.
    pub bytes: u64,
    /// How many of them are critical.
    pub critical: usize,
}

/// One boundary task moved by the refinement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The task moved.
    pub task: usize,
    /// Its part before the move.
    pub from: usize,
    /// Its part after the move.
    pub to: usize,
    /// Tasks of `from` joined to it by a critical edge, before the move.
    pub first_gain: usize,
    /// Tasks of `to` joined to it by a critical edge, before the move.
    pub second_gain: usize,
}

/// The state after one refinement iteration (or, first, the initial split).
#[derive(Debug, Clone)]
pub struct Iteration {
    /// The moves made, in order.
    pub moves: Vec<Move>,
    /// The cut after the moves.
    pub cut: CutStats,
    /// Number of boundary tasks after the moves.
    pub boundary: usize,
    /// Of those, the ones never boundary before (all of them for the
    /// initial split).
    pub new_boundary: usize,
    /// The largest part's seconds after the moves.
    pub max_part_seconds: f64,
}

/// An assignment of tasks to parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Number of parts.
    pub parts: usize,
    /// `assignment[task]` = part index, below `parts`.
    pub assignment: Vec<usize>,
}

impl Partition {
    /// The part of `task`, if it has a valid one.
    fn part_of(&self, task: usize) -> Option<usize> {
        self.assignment
            .get(task)
            .copied()
            .filter(|&p| p < self.parts)
    }

    /// The edges of `g` between different parts (edges with a task missing
    /// from the assignment are left out).
    pub fn cut(&self, g: &TaskGraph) -> CutStats {
        let mut cut = CutStats {
            edges: 0,
            bytes: 0,
            critical: 0,
        };
        for e in g.usable_edges() {
            if let (Some(a), Some(b)) = (self.part_of(e.from), self.part_of(e.to)) {
                if a != b {
                    cut.edges += 1;
                    cut.bytes = cut.bytes.saturating_add(e.bytes);
                    cut.critical += usize::from(e.critical);
                }
            }
        }
        cut
    }

    /// Total seconds of each part (negative or non-finite task seconds count
    /// as 0).
    pub fn part_seconds(&self, g: &TaskGraph) -> Vec<f64> {
        let mut seconds = vec![0.0; self.parts];
        for (t, task) in g.tasks.iter().enumerate() {
            if let Some(p) = self.part_of(t) {
                seconds[p] += weight(task.seconds);
            }
        }
        seconds
    }

    /// Total FLOPs of each part.
    pub fn part_flops(&self, g: &TaskGraph) -> Vec<u64> {
        let mut flops = vec![0u64; self.parts];
        for (t, task) in g.tasks.iter().enumerate() {
            if let Some(p) = self.part_of(t) {
                flops[p] = flops[p].saturating_add(task.flops);
            }
        }
        flops
    }

    /// The tasks of `part`, ascending.
    pub fn members(&self, part: usize) -> Vec<usize> {
        (0..self.assignment.len())
            .filter(|&t| self.assignment[t] == part)
            .collect()
    }

    /// The tasks with an edge to a task of another part, ascending.
    pub fn boundary(&self, g: &TaskGraph) -> Vec<usize> {
        let mut on = vec![false; g.tasks.len()];
        for e in g.usable_edges() {
            if let (Some(a), Some(b)) = (self.part_of(e.from), self.part_of(e.to)) {
                if a != b {
                    on[e.from] = true;
                    on[e.to] = true;
                }
            }
        }
        (0..on.len()).filter(|&t| on[t]).collect()
    }

    /// True when every task of `g` has a part and every part a task.
    fn is_complete(&self, g: &TaskGraph) -> bool {
        if self.assignment.len() != g.tasks.len() || self.parts > self.assignment.len() {
            return false;
        }
        let mut used = vec![false; self.parts];
        for &p in &self.assignment {
            match used.get_mut(p) {
                Some(u) => *u = true,
                None => return false,
            }
        }
        used.iter().all(|&u| u)
    }
}

/// The outcome of [`refine`].
#[derive(Debug, Clone)]
pub struct Refinement {
    /// The partition refinement started from.
    pub initial: Partition,
    /// The partition with the fewest critical cut edges met (the earliest
    /// on a tie).
    pub best: Partition,
    /// Index of `best` in `history`; 0 = the initial split.
    pub best_iteration: usize,
    /// `history[0]` describes the initial split (no moves); then one entry
    /// per iteration.
    pub history: Vec<Iteration>,
}

/// Splits `g` into `options.parts` parts: validates (`parts >= 1` and
/// `parts <=` the number of tasks, else [`Error::Config`]), then
/// [`initial_split`] and [`refine`].
pub fn partition(g: &TaskGraph, options: &PartitionOptions) -> Result<Refinement> {
    let (parts, tasks) = (options.parts, g.tasks.len());
    if parts == 0 {
        return Err(Error::Config(format!(
            "cannot partition {tasks} tasks into 0 parts: at least 1 part is needed"
        )));
    }
    if parts > tasks {
        return Err(Error::Config(format!(
            "cannot partition {tasks} tasks into {parts} parts: every part needs a task"
        )));
    }
    Ok(refine(g, initial_split(g, parts), options))
}
