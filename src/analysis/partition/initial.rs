//! The initial split: contiguous ranges of the topological task order,
//! chosen by dynamic programming to minimise the largest range's seconds
//! (the pipeline's bottleneck), then, among the splits within 1e-9 relative
//! of that optimum, the one cutting the fewest critical edges. (This stands in
//! for the seed's clustering and random moves; contiguous ranges make every
//! edge go from a part to the same or a later part.)

use super::task_graph::weight;
use super::{Partition, TaskGraph};

/// Marks "no value" in the tables.
const NONE: usize = usize::MAX;

/// Splits `g` into `parts` non-empty contiguous ranges of its task order
/// with the smallest possible largest range seconds, preferring fewer
/// critical cut edges among such splits. `parts` outside `1..=tasks` is
/// clamped into it (an empty graph gives one part and no assignment).
/// Takes O(parts × tasks) memory and at worst O(parts × tasks²) time.
pub fn initial_split(g: &TaskGraph, parts: usize) -> Partition {
    let n = g.tasks.len();
    let k = parts.clamp(1, n.max(1));
    let mut prefix = vec![0.0; n + 1];
    for (i, task) in g.tasks.iter().enumerate() {
        prefix[i + 1] = prefix[i] + weight(task.seconds);
    }
    let (bottleneck, fallback) = min_bottleneck(&prefix, k);
    let limit = bottleneck + bottleneck * 1e-9;
    let preferred = fewest_critical_cuts(g, &prefix, k, limit);
    let assignment = [preferred, fallback]
        .into_iter()
        .flatten()
        .find_map(|ends| assign(&ends, n))
        .unwrap_or_else(|| (0..n).map(|t| t * k / n.max(1)).collect());
    Partition {
        parts: k,
        assignment,
    }
}

/// The smallest bottleneck of `k` ranges and the range starts of one split
/// reaching it (None if the table could not be walked back).
fn min_bottleneck(prefix: &[f64], k: usize) -> (f64, Option<Vec<usize>>) {
    let n = prefix.len() - 1;
    let w = n + 1;
    let mut best = vec![f64::INFINITY; (k + 1) * w];
    let mut parent = vec![NONE; (k + 1) * w];
    for i in 1..=n {
        best[w + i] = prefix[i];
        parent[w + i] = 0;
    }
    for j in 2..=k {
        for i in j..=n {
            let mut b = f64::INFINITY;
            for t in (j - 1..i).rev() {
                let last = prefix[i] - prefix[t];
                // `last` only grows as t falls: nothing better remains.
                if last >= b {
                    break;
                }
                let candidate = best[(j - 1) * w + t].max(last);
                if candidate < b {
                    b = candidate;
                    parent[j * w + i] = t;
                }
            }
            best[j * w + i] = b;
        }
    }
    (best[k * w + n], starts(&parent, k, n))
}

/// The range starts of the split with every range at most `limit` seconds
/// that cuts the fewest critical edges (None if none was found).
fn fewest_critical_cuts(g: &TaskGraph, prefix: &[f64], k: usize, limit: f64) -> Option<Vec<usize>> {
    let n = prefix.len() - 1;
    let w = n + 1;
    // Per task, the targets of its critical edges, sorted.
    let mut targets: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in g.forward_edges().filter(|e| e.critical) {
        targets[e.from].push(e.to);
    }
    for t in &mut targets {
        t.sort_unstable();
    }
    let mut cost = vec![NONE; (k + 1) * w];
    let mut parent = vec![NONE; (k + 1) * w];
    cost[0] = 0;
    for j in 1..=k {
        for i in j..=n {
            // Critical edges from the range [t, i) to tasks at i or later:
            // the ones this range's end cuts (earlier ends cut the others).
            let mut leaving = 0;
            for t in (j - 1..i).rev() {
                let range = prefix[i] - prefix[t];
                if range.is_nan() || range > limit {
                    break;
                }
                leaving += targets[t].len() - targets[t].partition_point(|&to| to < i);
                let before = cost[(j - 1) * w + t];
                if before != NONE && before + leaving < cost[j * w + i] {
                    cost[j * w + i] = before + leaving;
                    parent[j * w + i] = t;
                }
            }
        }
    }
    starts(&parent, k, n)
}

/// Walks a parent table back from `(k, n)`: the start of each range.
fn starts(parent: &[usize], k: usize, n: usize) -> Option<Vec<usize>> {
    let w = n + 1;
    let mut starts = vec![0; k];
    let mut i = n;
    for j in (1..=k).rev() {
        let t = *parent.get(j * w + i)?;
        if t >= i {
            return None;
        }
        starts[j - 1] = t;
        i = t;
    }
    (i == 0).then_some(starts)
}

/// The assignment of `n` tasks from range starts (None unless the ranges are
/// non-empty, ascending and start at 0).
fn assign(starts: &[usize], n: usize) -> Option<Vec<usize>> {
    let mut assignment = Vec::with_capacity(n);
    for (p, &s) in starts.iter().enumerate() {
        let end = starts.get(p + 1).copied().unwrap_or(n);
        if s != assignment.len() || end <= s || end > n {
            return None;
        }
        assignment.extend(std::iter::repeat_n(p, end - s));
    }
    (assignment.len() == n).then_some(assignment)
}
