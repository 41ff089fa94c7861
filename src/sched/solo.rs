//! Whether a plan without forks runs on the caller's thread or on its pool.
//!
//! A plan with no forks has no siblings to spread: more threads can only
//! split its operators, and each split wakes the pool's threads and waits
//! for them. For a small model that costs more than it saves. So, in
//! `adaptive` mode, the scheduler measures whole runs both ways (the
//! caller's thread alone, and the pool the load band allows) and keeps the
//! faster; every [`EXPLORE_EVERY`](super::fork::EXPLORE_EVERY)-th run takes
//! the other way so that both times stay current. The outputs do not
//! depend on the choice: every kernel gives the same bits on any number of
//! threads.

use super::fork::smooth_into;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// The way a run starting now takes: the pool until it has been
    /// measured, then the caller's thread until it has been, then the
    /// faster of the two; `explores` swaps the choice for this run.
    pub fn choose(&self, explores: bool) -> SoloWay {
        let inline = self.inline.load(Ordering::Relaxed);
        let pooled = self.pooled.load(Ordering::Relaxed);
        if pooled == 0 {
            return SoloWay::Pooled;
        }
        if inline == 0 {
            return SoloWay::Inline;
        }
        let faster = if inline <= pooled {
            SoloWay::Inline
        } else {
            SoloWay::Pooled
        };
        match (explores, faster) {
            (false, way) => way,
            (true, SoloWay::Inline) => SoloWay::Pooled,
            (true, SoloWay::Pooled) => SoloWay::Inline,
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
        assert_eq!(m.choose(false), SoloWay::Pooled);
        m.record(SoloWay::Pooled, 1_000);
        assert_eq!(m.choose(false), SoloWay::Inline);
        m.record(SoloWay::Inline, 600);
        assert_eq!(m.choose(false), SoloWay::Inline);
        assert_eq!(m.choose(true), SoloWay::Pooled);
        // The inline runs slow down (another process took the core): a few
        // slow runs move the estimate past the pool's, and the pool wins.
        for _ in 0..6 {
            m.record(SoloWay::Inline, 3_000);
        }
        assert!(m.nanos(SoloWay::Inline).unwrap() > 1_000);
        assert_eq!(m.choose(false), SoloWay::Pooled);
        assert_eq!(m.choose(true), SoloWay::Inline);
    }

    #[test]
    fn an_exploring_run_before_both_are_measured_measures_the_missing_way() {
        let m = SoloMemory::default();
        assert_eq!(m.choose(true), SoloWay::Pooled);
        m.record(SoloWay::Pooled, 5);
        assert_eq!(m.choose(true), SoloWay::Inline);
    }
}
