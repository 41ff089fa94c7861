//! The scheduler: reads the device load at every fork, picks the band (with
//! hysteresis) and the decision the policy gives for the fork's sibling
//! times, checked against serial execution (the makespan check), and hands
//! out the pools to run them on. Modes override the policy: `serial` never
//! forks, `parallel` ignores the load and always forks.

use super::makespan::{self, SiblingSeconds};
use super::policy::{apportion, band, decide, Band, Decision, PolicyConfig};
use super::pools::{Pool, Pools};
use crate::error::{Error, Result};
use crate::load::{LoadConfig, LoadMonitor};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// How a session runs forks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Decide at every fork from the current load (the method).
    #[default]
    Adaptive,
    /// Never run siblings in parallel; every operator on all allowed CPUs.
    Serial,
    /// Always run siblings in parallel on pools sized from their costs,
    /// ignoring the load.
    Parallel,
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Mode> {
        match s {
            "adaptive" => Ok(Mode::Adaptive),
            "serial" => Ok(Mode::Serial),
            "parallel" => Ok(Mode::Parallel),
            other => Err(Error::Config(format!(
                "unknown mode {other:?} (expected adaptive, serial or parallel)"
            ))),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Adaptive => "adaptive",
            Mode::Serial => "serial",
            Mode::Parallel => "parallel",
        })
    }
}

/// Everything that configures a scheduler.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// The mode.
    pub mode: Mode,
    /// Policy thresholds and presets (its `cpus` is the CPU limit m).
    pub policy: PolicyConfig,
    /// Pin pool threads to the CPUs they are given (where the OS allows).
    pub pin_threads: bool,
    /// How the device load is measured.
    pub load: LoadConfig,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            mode: Mode::Adaptive,
            policy: PolicyConfig::for_cpus(num_cpus::get()),
            pin_threads: cfg!(any(target_os = "linux", target_os = "android")),
            load: LoadConfig::default(),
        }
    }
}

/// One fork's decision in a run, for reports and traces.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkReport {
    /// Index of the fork in the plan's structure.
    pub fork: usize,
    /// The utilisation read at the fork.
    pub load: f64,
    /// The band it fell in.
    pub band: Band,
    /// The decision taken.
    pub decision: Decision,
}

/// Decides at forks and owns the pools.
pub struct Scheduler {
    config: SchedulerConfig,
    monitor: Arc<LoadMonitor>,
    pools: Pools,
    last_band: AtomicU8,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .finish()
    }
}

const NO_BAND: u8 = u8::MAX;

impl Scheduler {
    /// A scheduler reading load from `monitor`.
    pub fn new(config: SchedulerConfig, monitor: Arc<LoadMonitor>) -> Result<Scheduler> {
        config.policy.validate().map_err(Error::Config)?;
        Ok(Scheduler {
            config,
            monitor,
            pools: Pools::new(),
            last_band: AtomicU8::new(NO_BAND),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The load monitor.
    pub fn monitor(&self) -> &Arc<LoadMonitor> {
        &self.monitor
    }

    /// The pools.
    pub fn pools(&self) -> &Pools {
        &self.pools
    }

    /// Reads the load now and returns it with its band (hysteresis against
    /// the band seen last). `parallel` and `serial` modes report n = 0.
    pub fn observe(&self) -> (f64, Band) {
        if self.config.mode != Mode::Adaptive {
            return (0.0, Band::Low);
        }
        let n = self.monitor.utilisation();
        let prev = match self.last_band.load(Ordering::Relaxed) {
            0 => Some(Band::Low),
            1 => Some(Band::Mid),
            2 => Some(Band::High),
            _ => None,
        };
        let b = band(n, &self.config.policy, prev);
        self.last_band.store(b as u8, Ordering::Relaxed);
        (n, b)
    }

    /// Threads for operators outside forks in this band.
    pub fn serial_threads(&self, band: Band) -> usize {
        match self.config.mode {
            Mode::Adaptive => self.config.policy.serial_threads(band),
            Mode::Serial | Mode::Parallel => self.config.policy.cpus,
        }
    }

    /// The decision at a fork with sibling single-thread times `times`, run
    /// from a pool of `available` threads (`nested` when that pool is itself
    /// a sibling's). `seconds_at(s, k)` estimates sibling `s` on `k` threads
    /// for the makespan check, which `adaptive` mode applies when the policy
    /// enables it; `parallel` mode always forks.
    pub fn decide(
        &self,
        n: f64,
        band: Band,
        available: usize,
        nested: bool,
        times: &[f64],
        seconds_at: SiblingSeconds,
    ) -> Decision {
        let policy = &self.config.policy;
        let serial = Decision::Serial { threads: available };
        let nested_plan =
            || apportion(available as f64, times).map_or(serial.clone(), Decision::Parallel);
        let (decision, serial_threads) = match self.config.mode {
            Mode::Serial => return serial,
            Mode::Parallel if nested => return nested_plan(),
            Mode::Parallel => {
                return apportion(policy.cpus as f64, times).map_or(serial, Decision::Parallel)
            }
            Mode::Adaptive if nested => (nested_plan(), available),
            Mode::Adaptive => (decide(n, band, policy, times), policy.serial_threads(band)),
        };
        if !policy.makespan_check {
            return decision;
        }
        makespan::check(
            decision,
            times.len(),
            serial_threads,
            seconds_at,
            policy.fork_overhead,
        )
    }

    /// The pool for slot `position` under `parent`. In the low band it is
    /// pinned (when enabled) to the given CPUs; in a loaded band it is
    /// unpinned, so that the OS can move its threads off a CPU a busy
    /// process shares (a thread pinned there gets half of it, unpinned it
    /// gets its fair share of all).
    pub fn pool(
        &self,
        parent: u64,
        position: usize,
        size: usize,
        band: Band,
        cpus: &[usize],
    ) -> Result<Arc<Pool>> {
        let p = self.pools.get(parent, position, size)?;
        if self.config.pin_threads {
            if band == Band::Low {
                p.pin(cpus);
            } else {
                self.pools.unpin(&p);
            }
        }
        Ok(p)
    }

    /// The `k` least-loaded CPUs (for pinning in `band`; none in a loaded
    /// band, where pools are not pinned).
    pub fn least_loaded_cpus(&self, k: usize, band: Band) -> Vec<usize> {
        if self.config.pin_threads && band == Band::Low {
            self.monitor.least_loaded_cpus(k)
        } else {
            Vec::new()
        }
    }
}
