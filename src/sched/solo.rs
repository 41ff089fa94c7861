//! Whether a plan without forks runs on the caller's thread or on its pool.
//!
//! A plan with no forks has no siblings to spread: more threads can only
//! split its operators, and each split wakes the pool's threads and waits
//! for them. For a small model that costs more than it saves. So, in
//! `adaptive` mode, the scheduler measures whole runs both ways (the
//! caller's thread alone, and the pool the load band allows) and keeps the
//! faster; every [`EXPLORE_EVERY`]-th run takes the other way so that
//! both times stay current, or only every [`EXPLORE_RARELY`]-th where one
//! way is far slower (a large model on one thread), so that exploring
//! costs its runs little. The outputs do not depend on the choice: every
//! kernel gives the same bits on any number of threads.

use super::fork::{smooth_into, EXPLORE_EVERY};
use std::sync::atomic::{AtomicU64, Ordering};

/// One run in this many takes the slower way where it is more than a
/// quarter slower.
pub const EXPLORE_RARELY: u64 = 64;

/// How a fork-free run is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoloWay {
    /// On the caller's thread, its operators held to one thread.
    Inline,
    /// On the pool, its operators split over the pool's threads.
    Pooled,
}

/// The smoothed wall times of one plan's fork-free runs each way, in
/// nanoseconds (0 = not measured yet).
#[derive(Debug, Default)]
pub struct SoloMemory {
    inline: AtomicU64,
    pooled: AtomicU64,
}

impl SoloMemory {
    /// The way a run starting now takes, after `runs` finished runs: the
    /// pool until it has been measured, then the caller's thread until it
    /// has been, then the faster of the two, except on an exploring run
    /// (see the module's header), which takes the other.
    pub fn choose(&self, runs: u64) -> SoloWay {
        let inline = self.inline.load(Ordering::Relaxed);
        let pooled = self.pooled.load(Ordering::Relaxed);
        if pooled == 0 {
            return SoloWay::Pooled;
        }
        if inline == 0 {
            return SoloWay::Inline;
        }
        let (faster, slower, fast, slow) = if inline <= pooled {
            (SoloWay::Inline, SoloWay::Pooled, inline, pooled)
        } else {
            (SoloWay::Pooled, SoloWay::Inline, pooled, inline)
        };
        let every = if slow.saturating_mul(4) <= fast.saturating_mul(5) {
            EXPLORE_EVERY
        } else {
            EXPLORE_RARELY
        };
        if runs > 0 && runs % every == every - 1 {
            slower
        } else {
            faster
        }
    }

    /// Records a run taken `way` that took `nanos` (smoothed like node
    /// times: fast runs weigh more, since other work only slows a run).
    pub fn record(&self, way: SoloWay, nanos: u64) {
        let slot = match way {
            SoloWay::Inline => &self.inline,
            SoloWay::Pooled => &self.pooled,
        };
        smooth_into(slot, nanos.max(1));
    }

    /// The smoothed time of runs taken `way`, in nanoseconds; `None`
    /// before one was recorded.
    pub fn nanos(&self, way: SoloWay) -> Option<u64> {
        let slot = match way {
            SoloWay::Inline => &self.inline,
            SoloWay::Pooled => &self.pooled,
        };
        match slot.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_the_pool_then_the_caller_then_keeps_the_faster() {
        let m = SoloMemory::default();
        assert_eq!(m.choose(1), SoloWay::Pooled);
        m.record(SoloWay::Pooled, 1_000);
        assert_eq!(m.choose(2), SoloWay::Inline);
        m.record(SoloWay::Inline, 900);
        assert_eq!(m.choose(3), SoloWay::Inline);
        // Within a quarter of each other: every eighth run explores.
        assert_eq!(m.choose(7), SoloWay::Pooled);
        assert_eq!(m.choose(15), SoloWay::Pooled);
        assert_eq!(m.choose(16), SoloWay::Inline);
        // The inline runs slow down (another process took the core): a few
        // slow runs move the estimate past the pool's, and the pool wins.
        for _ in 0..6 {
            m.record(SoloWay::Inline, 3_000);
        }
        assert!(m.nanos(SoloWay::Inline).unwrap() > 1_250);
        assert_eq!(m.choose(8), SoloWay::Pooled);
        // Far slower: the caller's thread is explored only every 64th run.
        assert_eq!(m.choose(7), SoloWay::Pooled);
        assert_eq!(m.choose(63), SoloWay::Inline);
        assert_eq!(m.choose(64), SoloWay::Pooled);
    }

    #[test]
    fn before_both_are_measured_no_run_explores() {
        let m = SoloMemory::default();
        assert_eq!(m.choose(7), SoloWay::Pooled);
        m.record(SoloWay::Pooled, 5);
        assert_eq!(m.choose(7), SoloWay::Inline);
        assert_eq!(m.choose(63), SoloWay::Inline);
    }
}
