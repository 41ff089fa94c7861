//! Whether a plan without parallel forks runs on the caller's thread or on its
//! pool.
//!
//! Such a plan has no siblings to spread: more threads can only split its
//! operators, and each split wakes the pool's threads and waits for them. For a
//! small model that costs more than it saves. So, in `adaptive` mode, where a
//! run on the pool takes under [`POOL_COST_BOUND`] per node (a generous bound
//! on what the pool's wake-ups and waits cost one node, beyond which they
//! cannot be what makes the run slow and a run on one thread would only be
//! slower), the scheduler times whole runs both ways (the caller's thread
//! alone, and the pool the load band allows), taking them in turn until each
//! has [`FIRST_RUNS`] runs (one cold run must not decide), then keeps the
//! faster; the caller's thread counts as faster only by more than a tenth (the
//! pool is what the caller asked for, and a noisy pair of runs should not turn
//! it down). Every [`EXPLORE_EVERY`]-th run takes the other way so that both
//! times stay current, except where the caller's thread is the slower by more
//! than a quarter (a large model on one thread): it is retried only every
//! [`EXPLORE_RARELY`]-th run, so that exploring costs little. The outputs do
//! not depend on the choice: every kernel gives the same bits on any number of
//! threads.

use super::fork::{smooth_into, EXPLORE_EVERY, EXPLORE_RARELY};
use std::sync::atomic::{AtomicU64, Ordering};

/// Runs timed each way before the faster is kept.
pub const FIRST_RUNS: u64 = 2;

/// Nanoseconds per node under which a pooled run may be slower than a run
/// on the caller's thread (see the module's header).
pub const POOL_COST_BOUND: u64 = 50_000;

/// How a fork-free run is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoloWay {
    /// On the caller's thread, its operators held to one thread.
    Inline,
    /// On the pool, its operators split over the pool's threads.
    Pooled,
}

/// The smoothed wall time of one way's runs and how many were timed.
#[derive(Debug, Default)]
struct Timed {
    nanos: AtomicU64,
    runs: AtomicU64,
}

/// What one plan's fork-free runs measured each way.
#[derive(Debug, Default)]
pub struct SoloMemory {
    inline: Timed,
    pooled: Timed,
}

impl SoloMemory {
    fn timed(&self, way: SoloWay) -> &Timed {
        match way {
            SoloWay::Inline => &self.inline,
            SoloWay::Pooled => &self.pooled,
        }
    }

    /// The way a run of a plan of `nodes` nodes starting now takes, after
    /// `runs` finished runs: the pool while its runs take
    /// [`POOL_COST_BOUND`] or more per node; else the pool and the
    /// caller's thread in turn (the pool first) until each has been timed
    /// [`FIRST_RUNS`] times, then the faster, except on an exploring run
    /// (see the module's header), which takes the other.
    pub fn choose(&self, runs: u64, nodes: usize) -> SoloWay {
        let count = |way| self.timed(way).runs.load(Ordering::Relaxed);
        let (inline_runs, pooled_runs) = (count(SoloWay::Inline), count(SoloWay::Pooled));
        let bound = POOL_COST_BOUND.saturating_mul(nodes as u64);
        if pooled_runs > 0 && self.pooled.nanos.load(Ordering::Relaxed) >= bound {
            return SoloWay::Pooled;
        }
        if inline_runs < FIRST_RUNS || pooled_runs < FIRST_RUNS {
            return if pooled_runs <= inline_runs {
                SoloWay::Pooled
            } else {
                SoloWay::Inline
            };
        }
        let nanos = |way| self.timed(way).nanos.load(Ordering::Relaxed);
        let (inline, pooled) = (nanos(SoloWay::Inline), nanos(SoloWay::Pooled));
        let (faster, slower) = if inline.saturating_mul(10) < pooled.saturating_mul(9) {
            (SoloWay::Inline, SoloWay::Pooled)
        } else {
            (SoloWay::Pooled, SoloWay::Inline)
        };
        let every =
            if faster == SoloWay::Pooled && inline.saturating_mul(4) > pooled.saturating_mul(5) {
                EXPLORE_RARELY
            } else {
                EXPLORE_EVERY
            };
        if runs % every == every - 1 {
            slower
        } else {
            faster
        }
    }

    /// Records a run taken `way` that took `nanos` (smoothed like node
    /// times: fast runs weigh more, since other work only slows a run).
    pub fn record(&self, way: SoloWay, nanos: u64) {
        let timed = self.timed(way);
        smooth_into(&timed.nanos, nanos.max(1));
        timed.runs.fetch_add(1, Ordering::Relaxed);
    }

    /// The smoothed time of runs taken `way`, in nanoseconds; `None`
    /// before one was recorded.
    pub fn nanos(&self, way: SoloWay) -> Option<u64> {
        match self.timed(way).nanos.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl SoloMemory {
        /// [`SoloMemory::choose`] for a plan of 1000 nodes, whose pool
        /// runs in these tests are all under the bound.
        fn choose_for(&self, runs: u64) -> SoloWay {
            self.choose(runs, 1000)
        }
    }

    #[test]
    fn a_pool_slow_for_its_node_count_is_kept_without_trying_one_thread() {
        let m = SoloMemory::default();
        assert_eq!(m.choose(1, 4), SoloWay::Pooled);
        m.record(SoloWay::Pooled, 4 * POOL_COST_BOUND);
        for run in 2..200 {
            assert_eq!(m.choose(run, 4), SoloWay::Pooled);
        }
        // Just under the bound: the caller's thread is tried.
        let m = SoloMemory::default();
        m.record(SoloWay::Pooled, 4 * POOL_COST_BOUND - 1);
        assert_eq!(m.choose(2, 4), SoloWay::Inline);
    }

    /// Memory after `FIRST_RUNS` runs each way at these times.
    fn timed(inline: u64, pooled: u64) -> SoloMemory {
        let m = SoloMemory::default();
        for _ in 0..FIRST_RUNS {
            m.record(SoloWay::Pooled, pooled);
            m.record(SoloWay::Inline, inline);
        }
        m
    }

    #[test]
    fn takes_both_ways_in_turn_until_each_is_timed_twice() {
        let m = SoloMemory::default();
        let mut ways = Vec::new();
        for run in 0..2 * FIRST_RUNS {
            let way = m.choose_for(run);
            ways.push(way);
            // A cold first pool run, over three times slower than the next:
            // it does not decide alone.
            let nanos = match (way, run) {
                (SoloWay::Pooled, 0) => 3_000,
                (SoloWay::Pooled, _) => 800,
                (SoloWay::Inline, _) => 1_500,
            };
            m.record(way, nanos);
        }
        use SoloWay::*;
        assert_eq!(ways, [Pooled, Inline, Pooled, Inline]);
        assert_eq!(m.choose_for(2 * FIRST_RUNS), Pooled);
    }

    #[test]
    fn keeps_the_faster_and_explores_every_eighth_run() {
        // Within a tenth, the pool is kept.
        let m = timed(950, 1_000);
        assert_eq!(m.choose_for(8), SoloWay::Pooled);
        assert_eq!(m.choose_for(15), SoloWay::Inline);
        let m = timed(850, 1_000);
        assert_eq!(m.choose_for(8), SoloWay::Inline);
        assert_eq!(m.choose_for(15), SoloWay::Pooled);
        assert_eq!(m.choose_for(16), SoloWay::Inline);
        // Even a far slower pool is retried every eighth run: on the
        // caller's thread the model is small, the retry cheap.
        let m = timed(100, 1_000);
        assert_eq!(m.choose_for(15), SoloWay::Pooled);
        // A slightly slower caller's thread too.
        let m = timed(1_200, 1_000);
        assert_eq!(m.choose_for(14), SoloWay::Pooled);
        assert_eq!(m.choose_for(15), SoloWay::Inline);
    }

    #[test]
    fn a_far_slower_callers_thread_is_retried_every_64th_run() {
        let m = timed(1_300, 1_000);
        assert_eq!(m.choose_for(15), SoloWay::Pooled);
        assert_eq!(m.choose_for(63), SoloWay::Inline);
        assert_eq!(m.choose_for(64), SoloWay::Pooled);
        // The pool slows down (another process took a core): a few slow
        // runs move its estimate past the caller's thread, which wins.
        for _ in 0..6 {
            m.record(SoloWay::Pooled, 4_000);
        }
        assert!(m.nanos(SoloWay::Pooled).unwrap() > 1_300);
        assert_eq!(m.choose_for(64), SoloWay::Inline);
    }
}
