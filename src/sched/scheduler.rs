//! The scheduler: reads the device load at every fork, picks the band (with
//! hysteresis) and the decision the policy gives for the fork's sibling
//! times, checked against serial execution (the makespan check), and hands
//! out the pools to run them on. Modes override the policy: `serial` never
//! forks, `parallel` ignores the load and always forks.

use super::makespan::{self, SiblingSeconds};
use super::placement::{self, Placement};
use super::policy::{apportion, band, decide, Band, Decision, PolicyConfig};
use super::pools::{Pool, Pools};
use crate::error::{Error, Result};
use crate::load::{LoadConfig, LoadMonitor, Metric, Topology};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

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
    /// The CPUs the session's threads may run on (e.g. a phone's big
    /// cores); `None`: every CPU the process may use.
    pub cpu_set: Option<Vec<usize>>,
    /// How cores are chosen (changeable later with
    /// [`Scheduler::set_placement`]).
    pub placement: Placement,
    /// The device's clusters and core capacities; `None`: read from sysfs
    /// (see [`Topology::detect`]).
    pub topology: Option<Topology>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            mode: Mode::Adaptive,
            policy: PolicyConfig::for_cpus(num_cpus::get()),
            pin_threads: cfg!(any(target_os = "linux", target_os = "android")),
            load: LoadConfig::default(),
            cpu_set: None,
            placement: Placement::default(),
            topology: None,
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
    /// On an exploring run, the decision the makespan check made, which
    /// this run turned down for `decision` so that its times are measured
    /// again; `None` on every other run.
    pub explored_from: Option<Decision>,
    /// The placement in force at the fork (`auto` resolved).
    pub placement: Placement,
    /// The CPUs the fork's pools were given, in pool order (empty where
    /// they ran unpinned, or on the threads of the pool that reached it).
    pub cpus: Vec<usize>,
}

/// Decides at forks and owns the pools.
pub struct Scheduler {
    config: SchedulerConfig,
    monitor: Arc<LoadMonitor>,
    pools: Pools,
    last_band: AtomicU8,
    topology: Topology,
    placement: AtomicU8,
    /// The last CPUs chosen for each thread count (kept where nearly as
    /// good, so that pools do not hop between equal cores).
    chosen: Mutex<HashMap<usize, Vec<usize>>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .finish()
    }
}

const NO_BAND: u8 = u8::MAX;

/// Load of other processes, in CPUs, below which the device counts as
/// idle and pools are pinned.
pub const IDLE_CPUS: f64 = 1.0;

/// Whether other processes' load `n`, a fraction of `device_cpus` CPUs,
/// leaves the device idle (under [`IDLE_CPUS`]); never when the CPU count
/// is unknown.
fn idle(n: f64, device_cpus: Option<usize>) -> bool {
    device_cpus.is_some_and(|c| n * (c as f64) < IDLE_CPUS)
}

/// What [`Scheduler::pins_whole_set`] decides from.
#[derive(Debug, Clone, Copy)]
struct EarlyPin {
    /// Pinning is on for the session.
    pin_threads: bool,
    /// The load band now.
    band: Band,
    /// The monitor has its per-CPU loads (or is fixed): [`Scheduler::pins`] decides.
    sampled: bool,
    /// Threads of the pool.
    threads: usize,
    /// CPUs the session may use.
    allowed: usize,
    /// Other processes' runnable threads per CPU, if read.
    others_runnable: Option<f64>,
    /// CPUs `others_runnable` is a fraction of.
    device_cpus: usize,
}

/// See [`Scheduler::pins_whole_set`].
fn early_pin(e: EarlyPin) -> bool {
    e.pin_threads
        && e.band == Band::Low
        && !e.sampled
        && e.threads > 1
        && e.threads == e.allowed
        && e.others_runnable
            .is_some_and(|r| idle(r, Some(e.device_cpus)))
}

impl Scheduler {
    /// A scheduler reading load from `monitor`.
    pub fn new(config: SchedulerConfig, monitor: Arc<LoadMonitor>) -> Result<Scheduler> {
        config.policy.validate().map_err(Error::Config)?;
        let pools = match &config.cpu_set {
            Some(set) => {
                check_cpu_set(set, config.policy.cpus)?;
                Pools::on_cpus(set)
            }
            None => Pools::new(),
        };
        let topology = match &config.topology {
            Some(t) => t.clone(),
            None => Topology::detect(
                &config
                    .cpu_set
                    .clone()
                    .unwrap_or_else(crate::load::allowed::allowed_cpus),
            ),
        };
        Ok(Scheduler {
            placement: AtomicU8::new(config.placement.code()),
            config,
            monitor,
            pools,
            last_band: AtomicU8::new(NO_BAND),
            topology,
            chosen: Mutex::new(HashMap::new()),
        })
    }

    /// The device's clusters and core capacities.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The placement policy set (`auto` unresolved).
    pub fn placement(&self) -> Placement {
        Placement::from_code(self.placement.load(Ordering::Relaxed))
    }

    /// Changes the placement policy; forks from now on follow it.
    pub fn set_placement(&self, placement: Placement) {
        self.placement.store(placement.code(), Ordering::Relaxed);
    }

    /// The placement in force now: `auto` resolved against the battery and
    /// thermal readings of the monitor (the host's pushed values included).
    pub fn placement_now(&self) -> Placement {
        let p = self.placement();
        if p != Placement::Auto {
            return p;
        }
        let readings = self.monitor.readings();
        let reading = |m: Metric| {
            readings
                .iter()
                .find(|(metric, _, _)| *metric == m)
                .map(|&(_, _, v)| v)
        };
        p.resolve(reading(Metric::Battery), reading(Metric::Thermal))
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
    /// the band seen last). Every mode reads it: `parallel` and `serial`
    /// ignore it in their decisions, but pin their pools only while the
    /// device is idle ([`pins`](Self::pins)), as `adaptive` does.
    pub fn observe(&self) -> (f64, Band) {
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
    /// enables it; `parallel` mode always forks. The check charges forking
    /// the policy's `fork_overhead`, or `measured_overhead` (seconds, from
    /// earlier parallel runs of this fork, or from the empty fork the
    /// executor probes before the first) where that is larger.
    #[allow(clippy::too_many_arguments)]
    pub fn decide(
        &self,
        n: f64,
        band: Band,
        available: usize,
        nested: bool,
        times: &[f64],
        seconds_at: SiblingSeconds,
        measured_overhead: Option<f64>,
    ) -> Decision {
        let policy = &self.config.policy;
        let serial = Decision::Serial { threads: available };
        let (decision, serial_threads) = match self.config.mode {
            Mode::Serial => return serial,
            Mode::Parallel if nested => {
                let plan = apportion(available as f64, times).map_or(serial, Decision::Parallel);
                return self.fit_capacity(plan, times, nested);
            }
            Mode::Parallel => {
                let plan = apportion(policy.cpus as f64, times).map_or(serial, Decision::Parallel);
                return self.fit_capacity(plan, times, nested);
            }
            Mode::Adaptive => self.adaptive_plan(n, band, available, nested, times),
        };
        let fitted = self.fit_capacity(decision, times, nested);
        if !policy.makespan_check {
            return fitted;
        }
        let slowdown = self.pool_slowdowns(&fitted, serial_threads, nested);
        makespan::check(
            fitted,
            times.len(),
            serial_threads,
            seconds_at,
            policy.fork_overhead.max(measured_overhead.unwrap_or(0.0)),
            &slowdown,
        )
    }

    /// For the makespan check on cores of different capacity: how many
    /// times slower each pool of a top-level parallel `decision` runs than
    /// serial execution on `serial_threads` threads would, from the mean
    /// capacity of the cores the placement gives each (pools take the
    /// placed cores in order, as the executor hands them out). Empty (all
    /// 1) on uniform cores, for nested forks and serial decisions.
    fn pool_slowdowns(&self, decision: &Decision, serial_threads: usize, nested: bool) -> Vec<f64> {
        let plans = match decision {
            Decision::Parallel(plans) if !nested && !self.topology.is_uniform() => plans,
            _ => return Vec::new(),
        };
        let placement = self.placement_now();
        let mean = |cpus: &[usize]| {
            let sum: f64 = cpus.iter().map(|&c| self.topology.capacity_of(c)).sum();
            sum / cpus.len().max(1) as f64
        };
        let reference = mean(&self.place(placement, serial_threads.max(1)));
        let total: usize = plans.iter().map(|p| p.cpus).sum();
        let cpus = self.place(placement, total);
        let mut at = 0;
        plans
            .iter()
            .map(|p| {
                let end = (at + p.cpus).min(cpus.len());
                let own = mean(&cpus[at.min(end)..end]);
                at = end;
                if own > 0.0 && reference > 0.0 {
                    reference / own
                } else {
                    1.0
                }
            })
            .collect()
    }

    /// On cores of different capacity, a top-level parallel decision's
    /// pools reordered longest work first, with their core counts split by
    /// the capacity of the cores the placement gives them (see
    /// [`placement::fit_capacity`]); unchanged on uniform cores, for serial
    /// decisions, and for nested forks (their pool's threads are already
    /// placed).
    fn fit_capacity(&self, decision: Decision, times: &[f64], nested: bool) -> Decision {
        match decision {
            Decision::Parallel(plans) if !nested && !self.topology.is_uniform() => {
                let total: usize = plans.iter().map(|p| p.cpus).sum();
                let cpus = self.place(self.placement_now(), total);
                let caps: Vec<f64> = cpus.iter().map(|&c| self.topology.capacity_of(c)).collect();
                Decision::Parallel(placement::fit_capacity(plans, times, &caps))
            }
            other => other,
        }
    }

    /// Adaptive mode's decision before the makespan check, with the threads
    /// serial execution would use: the method's, or for a nested fork the
    /// pool's `available` threads apportioned.
    fn adaptive_plan(
        &self,
        n: f64,
        band: Band,
        available: usize,
        nested: bool,
        times: &[f64],
    ) -> (Decision, usize) {
        let policy = &self.config.policy;
        if nested {
            let serial = Decision::Serial { threads: available };
            let plan = apportion(available as f64, times).map_or(serial, Decision::Parallel);
            (plan, available)
        } else {
            (decide(n, band, policy, times), policy.serial_threads(band))
        }
    }

    /// The option the makespan check turned down in favour of `decision`,
    /// for an exploring run to try: in `adaptive` mode only, the policy's
    /// parallel plan where `decision` runs serially, or serial execution
    /// where it forks. `None` where the policy itself runs serially (the
    /// band, too few CPUs) or the mode fixes the choice. Run now and then,
    /// it refreshes the times of the option not taken: they are measured
    /// only when it runs, and one slow run would otherwise keep it out
    /// for good.
    pub fn alternative(
        &self,
        n: f64,
        band: Band,
        available: usize,
        nested: bool,
        times: &[f64],
        decision: &Decision,
    ) -> Option<Decision> {
        if self.config.mode != Mode::Adaptive || !self.config.policy.makespan_check {
            return None;
        }
        let (plan, serial_threads) = self.adaptive_plan(n, band, available, nested, times);
        if !matches!(plan, Decision::Parallel(_)) {
            return None;
        }
        match decision {
            Decision::Serial { .. } => Some(plan),
            Decision::Parallel(_) => Some(Decision::Serial {
                threads: serial_threads,
            }),
        }
    }

    /// Whether pools are pinned at load `n` in `band`: only while the
    /// device is idle (other processes use less than [`IDLE_CPUS`] CPUs in
    /// all). Under any load the OS must stay free to move our threads off
    /// a CPU a busy process shares: a thread pinned there gets half of it,
    /// unpinned it gets its fair share of all. On 16 CPUs with 4 busy
    /// processes (n = 0.25, the low band), pinned pools took Inception v1
    /// from 10 to 45 ms and unpinned ones to 22 ms.
    ///
    /// `n` is a fraction of the CPUs the monitor sees, not of this session's
    /// CPU limit: one busy process on 2 CPUs is a whole CPU of load for a
    /// session limited to one CPU too. Nothing is pinned before the
    /// monitor's first per-CPU sample: blind, two processes starting
    /// together both chose the first CPU. A fixed monitor stands for a
    /// device of the policy's CPU count.
    pub fn pins(&self, n: f64, band: Band) -> bool {
        let device_cpus = if self.monitor.is_fixed() {
            Some(self.config.policy.cpus)
        } else {
            self.monitor.cpus_seen()
        };
        self.config.pin_threads && band == Band::Low && idle(n, device_cpus)
    }

    /// Whether a run's own pool of `k` threads is pinned although the
    /// monitor has no per-CPU sample yet ([`pins`](Self::pins) waits for
    /// one): only where the pool takes every CPU the session may use, so
    /// that one thread goes to each and nothing is chosen blind, and the
    /// latest reading of other processes' runnable threads says the device
    /// is idle. Unpinned, the two threads of a 2-CPU session at times ran
    /// as one for the first 200 ms of the process (BERT tiny: 0.75 ms a run
    /// on two threads, as on one; 0.46 ms once pinned), which is all of a
    /// short benchmark and of an app's first inferences.
    ///
    /// Called on every run: once the per-CPU sample is in (or for one
    /// thread) it answers before the system calls that read the CPU mask,
    /// the CPU count and the runnable reading.
    pub fn pins_whole_set(&self, k: usize, band: Band) -> bool {
        let sampled = self.monitor.is_fixed() || self.monitor.cpus_seen().is_some();
        if sampled || k < 2 {
            return false;
        }
        early_pin(EarlyPin {
            pin_threads: self.config.pin_threads,
            band,
            sampled,
            threads: k,
            allowed: self.cpu_set().len(),
            others_runnable: self.monitor.last_runnable(),
            device_cpus: num_cpus::get(),
        })
    }

    /// The pool for slot `position` under `parent`, pinned to `cpus` when
    /// `pin` (see [`pins`](Self::pins)), else confined to `cpus` where
    /// there are any (see [`cpus_for`](Self::cpus_for)), else given the
    /// whole CPU mask.
    pub fn pool(
        &self,
        parent: u64,
        position: usize,
        size: usize,
        pin: bool,
        cpus: &[usize],
    ) -> Result<Arc<Pool>> {
        let p = self.pools.get(parent, position, size)?;
        if self.config.pin_threads {
            if pin {
                p.pin(cpus);
            } else if !cpus.is_empty() {
                p.confine(cpus);
            } else {
                self.pools.unpin(&p);
            }
        }
        Ok(p)
    }

    /// The CPUs for `k` threads, in the order threads take them (the
    /// first for the longest work): with `pin`, as the placement chooses;
    /// without, none (the threads keep the whole mask), except under the
    /// `power` placement, whose threads are confined to the cores it
    /// chooses so that the other clusters stay idle.
    pub fn cpus_for(&self, k: usize, pin: bool) -> Vec<usize> {
        let placement = self.placement_now();
        match placement {
            Placement::Power => self.place(placement, k),
            _ if !pin => Vec::new(),
            // Uniform cores: the monitor's least-loaded choice.
            _ if self.topology.is_uniform() => match &self.config.cpu_set {
                Some(set) => self.monitor.least_loaded_cpus_in(k, set),
                None => self.monitor.least_loaded_cpus(k),
            },
            _ => self.place(placement, k),
        }
    }

    /// The placement's choice of `k` CPUs now, fastest first.
    fn place(&self, placement: Placement, k: usize) -> Vec<usize> {
        let allowed = self.cpu_set();
        let mut chosen = self.chosen.lock().unwrap_or_else(|e| e.into_inner());
        let prev = chosen.get(&k).cloned().unwrap_or_default();
        let loads = self.monitor.per_cpu();
        let pick = placement::place(placement, &self.topology, &loads, &allowed, k, &prev);
        chosen.insert(k, pick.clone());
        pick
    }

    /// The CPUs this scheduler's threads may run on: its CPU set, or every
    /// CPU the process may use.
    pub fn cpu_set(&self) -> Vec<usize> {
        self.config
            .cpu_set
            .clone()
            .unwrap_or_else(crate::load::allowed::allowed_cpus)
    }
}

/// A CPU set must be non-empty, hold no repeats, lie within the CPUs the
/// process may use, and hold at least the CPU limit m.
fn check_cpu_set(set: &[usize], cpus: usize) -> Result<()> {
    let allowed = crate::load::allowed::allowed_cpus();
    if set.is_empty() {
        return Err(Error::Config("the CPU set is empty".into()));
    }
    if let Some(c) = set.iter().find(|c| !allowed.contains(c)) {
        return Err(Error::Config(format!(
            "CPU {c} of the CPU set is not one the process may use ({allowed:?})"
        )));
    }
    let mut sorted = set.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != set.len() {
        return Err(Error::Config(format!("the CPU set {set:?} repeats a CPU")));
    }
    if cpus > set.len() {
        return Err(Error::Config(format!(
            "the CPU limit m = {cpus} exceeds the {} CPUs of the CPU set {set:?}",
            set.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheduler(cpus: usize, pin_threads: bool) -> Scheduler {
        let config = SchedulerConfig {
            mode: Mode::Adaptive,
            policy: PolicyConfig::for_cpus(cpus),
            pin_threads,
            load: LoadConfig::default(),
            cpu_set: None,
            placement: Placement::Performance,
            topology: None,
        };
        Scheduler::new(config, LoadMonitor::fixed(0.0)).unwrap()
    }

    /// A CPU set is checked against the CPUs the process may use, and
    /// pinned pools choose their CPUs from it.
    #[test]
    fn a_cpu_set_is_checked_and_confines_the_choice() {
        let allowed = crate::load::allowed::allowed_cpus();
        let with_set = |set: Vec<usize>, cpus: usize| {
            let config = SchedulerConfig {
                policy: PolicyConfig::for_cpus(cpus),
                pin_threads: true,
                cpu_set: Some(set),
                ..SchedulerConfig::default()
            };
            Scheduler::new(config, LoadMonitor::fixed(0.0))
        };
        let last = *allowed.last().unwrap();
        let s = with_set(vec![last], 1).unwrap();
        assert_eq!(s.cpu_set(), vec![last]);
        assert_eq!(s.cpus_for(1, true), vec![last]);
        assert!(s.cpus_for(1, false).is_empty());
        for (set, cpus, text) in [
            (vec![], 1, "empty"),
            (vec![usize::MAX], 1, "not one the process may use"),
            (vec![last, last], 1, "repeats"),
            (vec![last], 2, "exceeds the 1 CPUs"),
        ] {
            let err = with_set(set, cpus).unwrap_err().to_string();
            assert!(err.contains(text), "{err}");
        }
        assert_eq!(scheduler(1, false).cpu_set(), allowed);
    }

    /// A measured fork overhead larger than the policy's own is charged:
    /// balanced siblings that fork on the model alone run serially once
    /// forking has measured slow.
    #[test]
    fn a_measured_fork_overhead_can_keep_a_fork_serial() {
        let s = scheduler(2, false);
        let t = [1e-3, 1e-3];
        let speedup = |k: usize| s.config().policy.speedup(k);
        let at = |i: usize, k: usize| t[i] / speedup(k);
        let decide = |measured| s.decide(0.0, Band::Low, 2, false, &t, &at, measured);
        assert!(matches!(decide(None), Decision::Parallel(_)));
        assert!(matches!(decide(Some(1e-6)), Decision::Parallel(_)));
        assert!(matches!(
            decide(Some(1e-3)),
            Decision::Serial { threads: 2 }
        ));
    }

    /// The makespan check counts a pool's cores at their capacity: two
    /// equal siblings fork on two equal cores, but not when the second
    /// core runs at a quarter of the first's speed (its sibling would take
    /// 4× longer than on the fast core; serial on both finishes first).
    #[test]
    fn the_makespan_check_counts_core_capacity() {
        let allowed = crate::load::allowed::allowed_cpus();
        assert!(!allowed.is_empty());
        if allowed.len() < 2 {
            return; // No second core to place a pool on (CI has two).
        }
        let with_caps = |caps: [f64; 2]| {
            let cluster = |cpu: usize, capacity: f64| crate::load::topology::Cluster {
                cpus: vec![cpu],
                capacity,
                max_khz: None,
                active_power: None,
                standby_power: None,
            };
            let config = SchedulerConfig {
                policy: PolicyConfig::for_cpus(2),
                placement: Placement::Performance,
                topology: Some(Topology {
                    clusters: vec![cluster(allowed[0], caps[0]), cluster(allowed[1], caps[1])],
                    source: crate::load::topology::TopologySource::Table,
                }),
                ..SchedulerConfig::default()
            };
            Scheduler::new(config, LoadMonitor::fixed(0.0)).unwrap()
        };
        let t = [1e-3, 1e-3];
        let decide = |s: &Scheduler| {
            let at = |i: usize, k: usize| t[i] / s.config().policy.speedup(k);
            s.decide(0.0, Band::Low, 2, false, &t, &at, None)
        };
        let equal = with_caps([1.0, 0.999]);
        assert!(!equal.topology().is_uniform());
        assert!(matches!(decide(&equal), Decision::Parallel(_)));
        let big_little = with_caps([1.0, 0.25]);
        assert_eq!(decide(&big_little), Decision::Serial { threads: 2 });
    }

    /// An exploring run gets the option the makespan check turned down:
    /// the policy's parallel plan for a serial decision and serial for a
    /// parallel one; nothing where the band or the mode decides alone.
    #[test]
    fn the_alternative_is_the_option_the_check_turned_down() {
        let s = scheduler(2, false);
        let t = [1e-3, 1e-3];
        let parallel = s.decide(0.0, Band::Low, 2, false, &t, &|i, _| t[i], None);
        let Decision::Parallel(plans) = &parallel else {
            panic!("balanced siblings fork: {parallel:?}");
        };
        assert_eq!(plans.len(), 2);
        let serial = Decision::Serial { threads: 2 };
        let alt = |band, d: &Decision| s.alternative(0.0, band, 2, false, &t, d);
        assert_eq!(alt(Band::Low, &serial), Some(parallel.clone()));
        assert_eq!(alt(Band::Low, &parallel), Some(serial.clone()));
        assert_eq!(alt(Band::High, &Decision::Serial { threads: 1 }), None);
        // A nested fork on two threads may fork on them; on one it may not.
        assert!(matches!(
            s.alternative(0.0, Band::Low, 2, true, &t, &serial),
            Some(Decision::Parallel(_))
        ));
        let one = Decision::Serial { threads: 1 };
        assert_eq!(s.alternative(0.0, Band::Low, 1, true, &t, &one), None);
        for mode in [Mode::Serial, Mode::Parallel] {
            let config = SchedulerConfig {
                mode,
                ..s.config().clone()
            };
            let fixed = Scheduler::new(config, LoadMonitor::fixed(0.0)).unwrap();
            assert_eq!(
                fixed.alternative(0.0, Band::Low, 2, false, &t, &serial),
                None
            );
        }
        let mut unchecked = s.config().clone();
        unchecked.policy.makespan_check = false;
        let s = Scheduler::new(unchecked, LoadMonitor::fixed(0.0)).unwrap();
        assert_eq!(s.alternative(0.0, Band::Low, 2, false, &t, &serial), None);
    }

    /// Pools are pinned in the low band only while other processes use
    /// less than one CPU in all; never when pinning is off.
    #[test]
    fn pools_are_pinned_only_while_the_device_is_idle() {
        let s = scheduler(16, true);
        assert!(s.pins(0.0, Band::Low));
        assert!(s.pins(0.05, Band::Low), "0.8 CPU of background noise");
        assert!(!s.pins(0.125, Band::Low), "two busy processes of 16 CPUs");
        assert!(!s.pins(0.0, Band::Mid));
        let two = scheduler(2, true);
        assert!(two.pins(0.2, Band::Low));
        assert!(!two.pins(0.5, Band::Low), "one busy process of 2 CPUs");
        assert!(!scheduler(16, false).pins(0.0, Band::Low));
        assert!(s.cpus_for(4, false).is_empty());
        let allowed = crate::load::allowed::allowed_cpus();
        assert_eq!(s.cpus_for(4, true), allowed[..allowed.len().min(4)]);
    }

    /// Before the per-CPU sample, a pool is pinned only where it takes
    /// every CPU of the session, pinning is on, the band is low and other
    /// processes' runnable threads were read and leave the device idle.
    #[test]
    fn a_pool_on_every_allowed_cpu_is_pinned_before_the_first_sample() {
        let base = EarlyPin {
            pin_threads: true,
            band: Band::Low,
            sampled: false,
            threads: 2,
            allowed: 2,
            others_runnable: Some(0.0),
            device_cpus: 2,
        };
        assert!(early_pin(base));
        assert!(
            early_pin(EarlyPin {
                others_runnable: Some(0.25),
                ..base
            }),
            "half a runnable thread on 2 CPUs"
        );
        for (e, why) in [
            (
                EarlyPin {
                    sampled: true,
                    ..base
                },
                "the per-CPU sample decides",
            ),
            (
                EarlyPin {
                    threads: 1,
                    allowed: 1,
                    ..base
                },
                "one thread",
            ),
            (EarlyPin { allowed: 4, ..base }, "a choice among 4 CPUs"),
            (
                EarlyPin {
                    others_runnable: Some(0.5),
                    ..base
                },
                "a busy process",
            ),
            (
                EarlyPin {
                    others_runnable: None,
                    ..base
                },
                "unread",
            ),
            (
                EarlyPin {
                    band: Band::Mid,
                    ..base
                },
                "not the low band",
            ),
            (
                EarlyPin {
                    pin_threads: false,
                    ..base
                },
                "pinning off",
            ),
        ] {
            assert!(!early_pin(e), "{why}");
        }
    }

    /// Idleness counts other processes' load in CPUs of the whole device,
    /// whatever the session's CPU limit, and is never assumed unmeasured.
    #[test]
    fn idleness_is_counted_in_device_cpus() {
        assert!(idle(0.4, Some(2)), "0.8 CPU of load on 2 CPUs");
        assert!(!idle(0.5, Some(2)), "one busy process on 2 CPUs");
        assert!(!idle(0.0, None), "no per-CPU sample yet");
        let one = scheduler(1, true);
        assert!(one.pins(0.5, Band::Low), "a fixed monitor: a 1-CPU device");
    }
}
