//! The decision at one fork, whole: what the scheduler observes of the
//! device ([`Observation`]: load, band, and whether pools are pinned), what
//! it remembers of a plan's forks across runs ([`ForkMemory`]: their
//! measured overhead and which runs explore), and the choice itself
//! ([`Scheduler::choose_fork`]: the policy's decision, charged the fork's
//! measured overhead, probed first where unknown, and on an exploring run
//! swapped for the option the makespan check turned down). The executor
//! only runs what it is told.

use super::policy::{Band, Decision, PoolPlan};
use super::scheduler::Scheduler;
use crate::error::Result;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the scheduler sees of the device at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Utilisation of the CPUs by other processes, 0 to 1.
    pub load: f64,
    /// The load's band (with hysteresis).
    pub band: Band,
    /// Whether pools are pinned to CPUs now (see [`Scheduler::pins`]).
    pub pin: bool,
}

/// One run in this many explores (see [`ForkMemory::explores`]).
pub const EXPLORE_EVERY: u64 = 8;

/// One run in this many explores where exploring was measured to cost
/// (see [`ForkMemory::explores`]).
pub const EXPLORE_RARELY: u64 = 64;

/// What the scheduler remembers of one plan's forks across its runs: how
/// many runs have finished (which decides the exploring runs), each
/// fork's measured overhead, and the smoothed wall time of exploring and
/// of other runs. Times count only once the first run has finished (the
/// first pays for lazy set-up).
#[derive(Debug)]
pub struct ForkMemory {
    runs: AtomicU64,
    warmed: AtomicBool,
    overheads: Vec<AtomicU64>,
    /// Smoothed nanoseconds of runs that did not explore.
    usual: AtomicU64,
    /// Smoothed nanoseconds of runs that explored.
    explored: AtomicU64,
}

impl ForkMemory {
    /// Memory for a plan with `forks` forks.
    pub fn new(forks: usize) -> ForkMemory {
        ForkMemory {
            runs: AtomicU64::new(0),
            warmed: AtomicBool::new(false),
            overheads: (0..forks).map(|_| AtomicU64::new(0)).collect(),
            usual: AtomicU64::new(0),
            explored: AtomicU64::new(0),
        }
    }

    /// Records a whole run's wall time, `explored` or not (not kept before
    /// the first run has finished).
    pub fn record_run(&self, explored: bool, nanos: u64) {
        if self.warmed() {
            let slot = if explored {
                &self.explored
            } else {
                &self.usual
            };
            smooth_into(slot, nanos.max(1));
        }
    }

    /// Whether exploring runs were measured more than a tenth slower than
    /// the others.
    fn exploring_costs(&self) -> bool {
        let usual = self.usual.load(Ordering::Relaxed);
        let explored = self.explored.load(Ordering::Relaxed);
        usual > 0 && explored.saturating_mul(10) > usual.saturating_mul(11)
    }

    /// Marks a run as finished: times are kept from the next run on.
    pub fn finish_run(&self) {
        self.warmed.store(true, Ordering::Relaxed);
        self.runs.fetch_add(1, Ordering::Relaxed);
    }

    /// How many runs have finished.
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// Whether a run has finished, so that measured times count.
    pub fn warmed(&self) -> bool {
        self.warmed.load(Ordering::Relaxed)
    }

    /// Whether a run starting now explores: every [`EXPLORE_EVERY`]-th
    /// run after the first, each fork takes the option the makespan check
    /// turned down, so that its times stay measured. All forks explore in
    /// the same run, which leaves the other runs untouched. Where the
    /// exploring runs were measured more than a tenth slower than the
    /// others, only every [`EXPLORE_RARELY`]-th run explores: each of
    /// them is a slow run the application waits for (one in eight made
    /// a long-running app's 95th percentile an exploring run's time).
    pub fn explores(&self) -> bool {
        let runs = self.runs.load(Ordering::Relaxed);
        let every = if self.exploring_costs() {
            EXPLORE_RARELY
        } else {
            EXPLORE_EVERY
        };
        runs > 0 && runs % every == every - 1
    }

    /// Records the overhead of a parallel run of fork `f`: `nanos` of its
    /// wall time that its pools' node times do not account for (smoothed
    /// like node times; not kept before the first run has finished).
    pub fn record_overhead(&self, f: usize, nanos: u64) {
        if let (Some(slot), true) = (self.overheads.get(f), self.warmed()) {
            smooth_into(slot, nanos);
        }
    }

    /// Records the overhead of fork `f` measured by a fork with no work,
    /// kept only while no real one has been recorded (on any run: it stands
    /// for the fork before the first real measurement).
    pub fn probe_overhead(&self, f: usize, nanos: u64) {
        if let Some(slot) = self.overheads.get(f) {
            let _ = slot.compare_exchange(0, nanos.max(1), Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// The measured overhead of running fork `f` in parallel, in seconds;
    /// `None` before one was recorded.
    pub fn overhead(&self, f: usize) -> Option<f64> {
        let ns = self.overheads.get(f)?.load(Ordering::Relaxed);
        (ns > 0).then_some(ns as f64 * 1e-9)
    }
}

/// Folds `nanos` into `slot`: a faster run counts three quarters, a slower
/// one a quarter. Other processes and the host only ever slow a run down,
/// so the estimate follows the fast runs and a slow outlier fades after one
/// good run.
pub fn smooth_into(slot: &AtomicU64, nanos: u64) {
    let old = slot.load(Ordering::Relaxed);
    let new = match old {
        0 => nanos,
        old if nanos < old => (old.saturating_add(nanos.saturating_mul(3))) / 4,
        old => (old.saturating_mul(3).saturating_add(nanos)) / 4,
    };
    slot.store(new.max(1), Ordering::Relaxed);
}

/// One fork as the decision needs it.
pub struct ForkSite<'a> {
    /// The fork's index in its plan.
    pub fork: usize,
    /// Threads of the pool the fork is reached on.
    pub available: usize,
    /// Whether that pool is itself a sibling's.
    pub nested: bool,
    /// The siblings' single-thread times, in seconds.
    pub times: &'a [f64],
    /// Seconds of sibling `s` on `k` threads.
    pub seconds_at: &'a dyn Fn(usize, usize) -> f64,
    /// The plan's fork memory.
    pub memory: &'a ForkMemory,
    /// Whether this run explores (read once per run from
    /// [`ForkMemory::explores`], so that all its forks do).
    pub explores: bool,
}

/// The decision taken at a fork.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// What runs.
    pub decision: Decision,
    /// On an exploring run, the decision the scheduler would have taken.
    pub explored_from: Option<Decision>,
}

impl Scheduler {
    /// Observes the device now: [`observe`](Self::observe)'s load and band,
    /// and whether pools are pinned at them.
    pub fn observation(&self) -> Observation {
        let (load, band) = self.observe();
        self.observation_at(load, band)
    }

    /// The observation for a given load and band (a run hurrying to its
    /// deadline decides as on an idle device).
    pub fn observation_at(&self, load: f64, band: Band) -> Observation {
        Observation {
            load,
            band,
            pin: self.pins(load, band),
        }
    }

    /// The decision at a fork. Before the fork's overhead has been
    /// measured, a parallel decision is first tried with no work: `probe`
    /// runs the policy's pools empty (waking and joining them as a real
    /// fork does) and returns the nanoseconds it took, and the decision is
    /// taken again with that overhead. On a 2-vCPU VM a fork on sibling
    /// pools costs 200-700 µs against the policy's 20 µs, and the first
    /// runs of a session otherwise forked where running serially was
    /// faster. On an exploring run (see [`ForkMemory::explores`]) the
    /// option the makespan check turned down runs instead.
    pub fn choose_fork(
        &self,
        obs: &Observation,
        site: &ForkSite,
        probe: impl FnOnce(&Decision, &[PoolPlan]) -> Result<u64>,
    ) -> Result<Choice> {
        let decide = |overhead| {
            self.decide(
                obs.load,
                obs.band,
                site.available,
                site.nested,
                site.times,
                site.seconds_at,
                overhead,
            )
        };
        let mut decision = decide(site.memory.overhead(site.fork));
        if let Decision::Parallel(plans) = &decision {
            if site.memory.overhead(site.fork).is_none() {
                let idle: Vec<PoolPlan> = plans
                    .iter()
                    .map(|p| PoolPlan {
                        cpus: p.cpus,
                        siblings: Vec::new(),
                    })
                    .collect();
                let nanos = probe(&decision, &idle)?;
                site.memory.probe_overhead(site.fork, nanos);
                decision = decide(site.memory.overhead(site.fork));
            }
        }
        if !site.explores {
            return Ok(Choice {
                decision,
                explored_from: None,
            });
        }
        let other = self.alternative(
            obs.load,
            obs.band,
            site.available,
            site.nested,
            site.times,
            &decision,
        );
        Ok(match other {
            Some(other) => Choice {
                decision: other,
                explored_from: Some(decision),
            },
            None => Choice {
                decision,
                explored_from: None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_explores_every_eighth_run_after_the_first() {
        let m = ForkMemory::new(1);
        let mut exploring = Vec::new();
        for run in 0..20 {
            if m.explores() {
                exploring.push(run);
            }
            m.finish_run();
        }
        assert_eq!(exploring, [7, 15]);
    }

    #[test]
    fn costly_exploring_runs_come_every_sixty_fourth_run() {
        let m = ForkMemory::new(1);
        let mut exploring = Vec::new();
        for run in 0..200u64 {
            let explores = m.explores();
            if explores {
                exploring.push(run);
            }
            // Exploring runs take 1.5 ms against 1 ms, from the first.
            m.record_run(explores, if explores { 1_500_000 } else { 1_000_000 });
            m.finish_run();
        }
        // The first exploring run is measured, then only every 64th run
        // explores.
        assert_eq!(exploring, [7, 63, 127, 191]);
    }

    #[test]
    fn exploring_runs_a_tenth_slower_or_less_stay_every_eighth() {
        let m = ForkMemory::new(1);
        let mut exploring = 0;
        for _ in 0..64 {
            let explores = m.explores();
            exploring += usize::from(explores);
            m.record_run(explores, if explores { 1_090_000 } else { 1_000_000 });
            m.finish_run();
        }
        assert_eq!(exploring, 8);
        // Once they take more than a tenth longer, they come rarely.
        m.record_run(true, 2_000_000);
        m.record_run(true, 2_000_000);
        let later = (0..64)
            .filter(|_| {
                let e = m.explores();
                m.finish_run();
                e
            })
            .count();
        assert_eq!(later, 1);
    }

    #[test]
    fn overheads_count_after_the_first_run_and_a_probe_only_until_then() {
        let m = ForkMemory::new(2);
        let ns = |f| m.overhead(f).map(|s: f64| (s * 1e9).round() as u64);
        m.record_overhead(0, 500);
        assert_eq!(ns(0), None, "the first run is not kept");
        m.probe_overhead(0, 400);
        assert_eq!(ns(0), Some(400));
        m.finish_run();
        m.record_overhead(0, 200);
        assert_eq!(ns(0), Some(250), "faster counts 3/4");
        m.probe_overhead(0, 9000);
        assert_eq!(ns(0), Some(250), "a probe never replaces");
        m.record_overhead(0, 650);
        assert_eq!(ns(0), Some(350), "slower counts 1/4");
        assert_eq!(ns(1), None);
        assert_eq!(ns(2), None, "no such fork");
        m.record_overhead(2, 1);
    }
}
