//! How many threads each operator of a multi-thread run splits its work
//! for: all of the lane's, unless its own measured times show that one
//! thread runs it faster. Splitting a small operator costs more than it
//! gains (handing tasks over, waking or reaching the other worker, the
//! join), and where the host starves a core, a split waits at its join for
//! the starved thread; either shows up in the node's measured time on the
//! lane's threads, which is then compared with its time on one.
//!
//! The choice only decides the thread count an operator splits for, which
//! changes where its outputs are cut, never how an element is computed, so
//! outputs stay bit-identical whichever count runs. Each node tries the
//! count it did not choose once every [`EXPLORE_EVERY`] runs (nodes take
//! turns, so one run explores few of them), so that both times stay
//! current when the load changes.

use super::Plan;

/// A node runs on the thread count it did not choose once in this many
/// runs.
pub(super) const EXPLORE_EVERY: u64 = 16;

/// The threads node `i` of `plan` splits its work for on a lane of
/// `threads` threads, in the plan's `run`-th run (see [`choose`]).
pub(super) fn node_threads(plan: &Plan, i: usize, threads: usize, run: u64) -> usize {
    if threads <= 1 {
        return threads;
    }
    if choose(
        plan.measured_seconds(i, 1),
        plan.measured_seconds(i, threads),
        explores(run, i),
    ) {
        1
    } else {
        threads
    }
}

/// Whether node `i` tries the count it did not choose in the `run`-th
/// run: once in [`EXPLORE_EVERY`] runs, nodes taking turns.
fn explores(run: u64, i: usize) -> bool {
    run.wrapping_add(i as u64) % EXPLORE_EVERY == EXPLORE_EVERY - 1
}

/// Whether a node runs on one thread, given its measured seconds on one
/// thread (`one`) and on the lane's (`many`), on an exploring run or not:
/// first on the lane's threads until that time is known, then once on
/// one thread; from then on on whichever is faster (the lane's on a tie),
/// or on the other on an exploring run.
pub(super) fn choose(one: Option<f64>, many: Option<f64>, explore: bool) -> bool {
    match (one, many) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(one), Some(many)) => (one < many) != explore,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_the_lanes_threads_first_then_one() {
        assert!(!choose(None, None, false));
        assert!(!choose(Some(1e-6), None, false), "the lane's time first");
        assert!(choose(None, Some(1e-3), false), "then one thread's");
    }

    #[test]
    fn takes_the_faster_and_explores_the_other() {
        // A small operator: splitting costs more than it gains.
        assert!(choose(Some(10e-6), Some(14e-6), false));
        assert!(!choose(Some(10e-6), Some(14e-6), true));
        // A large one: two threads win.
        assert!(!choose(Some(100e-6), Some(55e-6), false));
        assert!(choose(Some(100e-6), Some(55e-6), true));
        // A tie keeps the lane's threads.
        assert!(!choose(Some(20e-6), Some(20e-6), false));
    }

    #[test]
    fn exploring_runs_take_turns_over_the_nodes() {
        // Of EXPLORE_EVERY consecutive runs, each node explores in exactly
        // one, and in any run only every EXPLORE_EVERY-th node does.
        for i in 0..40 {
            assert_eq!((0..EXPLORE_EVERY).filter(|&r| explores(r, i)).count(), 1);
        }
        for run in 0..40 {
            let n = (0..64).filter(|&i| explores(run, i)).count();
            assert_eq!(n as u64, 64 / EXPLORE_EVERY);
        }
    }
}
