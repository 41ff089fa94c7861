//! [`SessionBuilder`]: a session's settings (CPUs, mode, thresholds, load
//! sources, CPU set, memory and time limits) and the load that builds it.

use super::{panic_message, LoadPasses, Session};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::load::{LoadConfig, LoadMonitor, LoadSource, PowerTable, Topology};
use crate::ops::interrupt::{with_interrupt, Interrupt};
use crate::sched::{Mode, Placement, PolicyConfig, Scheduler, SchedulerConfig};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Configures and builds a [`Session`].
///
/// ```
/// use ramify::{Mode, SessionBuilder};
/// let builder = SessionBuilder::new().cpus(2).mode(Mode::Adaptive).thresholds(0.7, 0.5);
/// ```
#[derive(Debug, Clone, Default)]
pub struct SessionBuilder {
    cpus: Option<usize>,
    mode: Mode,
    theta1: Option<f64>,
    theta2: Option<f64>,
    m1: Option<usize>,
    m2: Option<usize>,
    pin_threads: Option<bool>,
    load_sources: Option<Vec<LoadSource>>,
    fixed_load: Option<f64>,
    load_monitor: Option<Arc<LoadMonitor>>,
    no_fusion: bool,
    keep_weights: bool,
    no_makespan_check: bool,
    memory_limit: Option<usize>,
    time_limit: Option<Duration>,
    cpu_set: Option<Vec<usize>>,
    oversubscribe: bool,
    placement: Placement,
    power_table: Option<PowerTable>,
    sysfs_root: Option<PathBuf>,
}

impl SessionBuilder {
    /// A builder with default settings: all CPUs, adaptive mode, the method's
    /// thresholds and the makespan check, load from the system CPU use and
    /// other processes' runnable threads.
    pub fn new() -> Self {
        Self::default()
    }

    /// Limits the CPUs (m) the session uses: at least 1, and at most the
    /// CPUs the process may run on (its affinity mask, or the
    /// [`cpu_set`](Self::cpu_set)) unless [`oversubscribe`](Self::oversubscribe)
    /// allows more. [`Session::cpus`] tells the limit in force.
    ///
    /// ```
    /// use ramify::SessionBuilder;
    /// let session = SessionBuilder::new()
    ///     .cpus(4096)
    ///     .build_from_file("models/inception_mini.onnx")?;
    /// assert!(session.cpus() <= ramify::available_cpus().len());
    /// # Ok::<(), ramify::Error>(())
    /// ```
    pub fn cpus(mut self, n: usize) -> Self {
        self.cpus = Some(n.max(1));
        self
    }

    /// Confines the session's threads to these CPUs (indices as the OS
    /// numbers them, e.g. a phone's big cores): pinned pools choose among
    /// them and unpinned ones get them as their mask. m defaults to their
    /// number. Each must be one the process may use ([`available_cpus`]),
    /// with no repeats; a bad set fails the build with [`Error::Config`].
    /// Where the OS has no CPU masks (iOS), the set only sizes m.
    ///
    /// [`available_cpus`]: crate::available_cpus
    pub fn cpu_set(mut self, cpus: impl IntoIterator<Item = usize>) -> Self {
        self.cpu_set = Some(cpus.into_iter().collect());
        self
    }

    /// How the session chooses cores on a device with several kinds
    /// (default [`Placement::Auto`]); [`Session::set_placement`] changes it
    /// later.
    ///
    /// [`Session::set_placement`]: crate::Session::set_placement
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// Per-cluster power (and optionally capacity) where the kernel's
    /// energy model is not readable; a table naming unknown or repeated
    /// CPUs, or negative or non-finite values, fails the build with
    /// [`Error::Config`].
    ///
    /// ```
    /// use ramify::load::{ClusterPower, PowerTable};
    /// use ramify::{Placement, SessionBuilder};
    /// let cpu = ramify::available_cpus()[0];
    /// let table = PowerTable {
    ///     clusters: vec![ClusterPower { cpus: vec![cpu], active_power: 500.0, standby_power: 20.0, capacity: None }],
    /// };
    /// let session = SessionBuilder::new()
    ///     .placement(Placement::Power)
    ///     .power_table(table)
    ///     .build_from_file("models/inception_mini.onnx")?;
    /// assert_eq!(session.topology().clusters.iter().filter(|c| c.active_power == Some(500.0)).count(), 1);
    /// # Ok::<(), ramify::Error>(())
    /// ```
    pub fn power_table(mut self, table: PowerTable) -> Self {
        self.power_table = Some(table);
        self
    }

    /// Reads the CPU topology from this sysfs root instead of
    /// `$RAMIFY_SYSFS_ROOT` or `/sys` (a simulated device for tests).
    pub fn sysfs_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.sysfs_root = Some(root.into());
        self
    }

    /// Lets [`cpus`](Self::cpus) exceed the CPUs the process may use (more
    /// threads than CPUs, for experiments that study oversubscription).
    /// Default off.
    pub fn oversubscribe(mut self, on: bool) -> Self {
        self.oversubscribe = on;
        self
    }

    /// Alias of [`cpus`](Self::cpus).
    pub fn threads(self, n: usize) -> Self {
        self.cpus(n)
    }

    /// How forks are run.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The load thresholds θ1 (serial at or above) and θ2 (shrunk pool at or above).
    pub fn thresholds(self, theta1: f64, theta2: f64) -> Self {
        self.theta1(theta1).theta2(theta2)
    }

    /// The load threshold θ1 alone (serial at or above); θ2 keeps its
    /// default, [`PolicyConfig::for_cpus`] of the CPU limit the session
    /// applies, unless set too.
    pub fn theta1(mut self, theta1: f64) -> Self {
        self.theta1 = Some(theta1);
        self
    }

    /// The load threshold θ2 alone (shrunk pool at or above); θ1 keeps its
    /// default unless set too.
    pub fn theta2(mut self, theta2: f64) -> Self {
        self.theta2 = Some(theta2);
        self
    }

    /// The pool presets M1 (shrunk pool) and M2 (threads per operator when serial).
    pub fn presets(self, m1: usize, m2: usize) -> Self {
        self.m1(m1).m2(m2)
    }

    /// The preset M1 alone (shrunk pool); M2 keeps its default,
    /// [`PolicyConfig::for_cpus`] of the CPU limit the session applies,
    /// unless set too.
    pub fn m1(mut self, m1: usize) -> Self {
        self.m1 = Some(m1);
        self
    }

    /// The preset M2 alone (threads per operator when serial); M1 keeps its
    /// default unless set too.
    pub fn m2(mut self, m2: usize) -> Self {
        self.m2 = Some(m2);
        self
    }

    /// Pin pool threads to the CPUs they are given (default: where the OS
    /// allows). A one-thread run of a model without forks has no pool: it
    /// runs on the caller's thread, which is never pinned.
    pub fn pin_threads(mut self, pin: bool) -> Self {
        self.pin_threads = Some(pin);
        self
    }

    /// Which load sources the monitor combines.
    pub fn load_sources(mut self, sources: Vec<LoadSource>) -> Self {
        self.load_sources = Some(sources);
        self
    }

    /// Uses a fixed utilisation instead of measuring (for experiments and tests).
    pub fn fixed_load(mut self, n: f64) -> Self {
        self.fixed_load = Some(n.clamp(0.0, 1.0));
        self
    }

    /// Reads the load from `monitor` instead of starting a sampler thread of
    /// its own, so that the sessions of one process can share one: each
    /// started monitor is a background thread that wakes every period, and
    /// the load it measures (others' CPU use, run-queue delay, memory, the
    /// host's pushes) is the device's, the same for every session. The
    /// monitor's own configuration applies ([`load_sources`](Self::load_sources)
    /// is then ignored); a [`fixed_load`](Self::fixed_load) still wins.
    ///
    /// ```
    /// use ramify::load::{LoadConfig, LoadMonitor};
    /// use ramify::SessionBuilder;
    /// let monitor = LoadMonitor::start(LoadConfig::default());
    /// let detector = SessionBuilder::new().load_monitor(monitor.clone());
    /// let classifier = SessionBuilder::new().cpus(2).load_monitor(monitor);
    /// ```
    pub fn load_monitor(mut self, monitor: Arc<LoadMonitor>) -> Self {
        self.load_monitor = Some(monitor);
        self
    }

    /// Turns the makespan check on or off (default on): in adaptive mode a
    /// parallel plan is kept only when its estimated finishing time beats
    /// serial execution of the same siblings. Off, forks follow the method's
    /// bands alone.
    pub fn makespan_check(mut self, on: bool) -> Self {
        self.no_makespan_check = !on;
        self
    }

    /// Turns the load-time fusions (BatchNormalization and per-channel
    /// Mul/Add folded into Conv, Mul/Add into BatchNormalization,
    /// activations fused into Conv/Gemm/BatchNormalization) on or off
    /// (default on).
    pub fn fusion(mut self, on: bool) -> Self {
        self.no_fusion = !on;
        self
    }

    /// Keeps every weight in the session's graph ([`Session::graph`] shows
    /// its value) beside the copy a kernel packs it into (default off: an
    /// operator that packs a constant for its kernel, such as a float32
    /// convolution, takes the graph's copy and lets it go once packed, so
    /// that the weights live once in memory).
    ///
    /// ```
    /// use ramify::SessionBuilder;
    /// let session = SessionBuilder::new()
    ///     .keep_weights(true)
    ///     .build_from_file("models/inception_mini.onnx")?;
    /// assert!(session.graph().released.iter().all(Option::is_none));
    /// # Ok::<(), ramify::Error>(())
    /// ```
    pub fn keep_weights(mut self, on: bool) -> Self {
        self.keep_weights = on;
        self
    }

    /// The memory budget in bytes (default: half of the device's physical
    /// memory). No tensor of the model may exceed it, nor may the
    /// intermediate values a run holds at once: a model that declares or
    /// computes a larger one fails with [`Error::MemoryLimit`] or
    /// [`Error::PlanMemory`] (naming the node, shape and bytes) before
    /// anything is allocated, at load time where shapes are known and at
    /// run time otherwise.
    ///
    /// ```
    /// use ramify::SessionBuilder;
    /// let builder = SessionBuilder::new().memory_limit(256 << 20);
    /// ```
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// The longest a load (constant folding runs operators) or a run may
    /// take before it stops with [`Error::Deadline`]; a run's own
    /// [`RunOptions::time_limit`] takes precedence. Checked before every
    /// operator and on every iteration of a loop, so a hostile model (a loop
    /// of 2^62 trips) cannot hold the caller's thread. Default: no limit.
    ///
    /// ```
    /// use ramify::SessionBuilder;
    /// use std::time::Duration;
    /// let builder = SessionBuilder::new().time_limit(Duration::from_secs(2));
    /// ```
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = Some(limit);
        self
    }

    /// The CPU limit the session applies: the CPUs asked for (default: all
    /// it may use), at most those it may run on (all the process may use,
    /// or the CPU set) unless oversubscribed; at least 1.
    pub fn cpu_limit(&self) -> usize {
        let usable = match &self.cpu_set {
            Some(set) => set.len(),
            None => crate::available_cpus().len(),
        }
        .max(1);
        match self.cpus {
            Some(n) if self.oversubscribe => n,
            Some(n) => n.min(usable),
            None => usable,
        }
        .max(1)
    }

    /// The scheduling policy the session will apply: the defaults for its
    /// CPU limit ([`PolicyConfig::for_cpus`]) with the thresholds, presets
    /// and makespan check set here.
    pub fn policy(&self) -> PolicyConfig {
        let mut policy = PolicyConfig::for_cpus(self.cpu_limit());
        policy.theta1 = self.theta1.unwrap_or(policy.theta1);
        policy.theta2 = self.theta2.unwrap_or(policy.theta2);
        policy.m1 = self.m1.unwrap_or(policy.m1);
        policy.m2 = self.m2.unwrap_or(policy.m2);
        policy.makespan_check = !self.no_makespan_check;
        policy
    }

    fn scheduler(&self) -> Result<Scheduler> {
        let policy = self.policy();
        let mut config = SchedulerConfig {
            mode: self.mode,
            policy,
            cpu_set: self.cpu_set.clone(),
            placement: self.placement,
            topology: Some(self.device_topology()?),
            ..SchedulerConfig::default()
        };
        if let Some(pin) = self.pin_threads {
            config.pin_threads = pin;
        }
        if let Some(sources) = &self.load_sources {
            config.load = LoadConfig {
                sources: sources.clone(),
                ..LoadConfig::default()
            };
        }
        // Every mode samples the load: the fixed modes do not decide by it,
        // but they pin their pools only while the device is idle.
        let monitor = match (self.fixed_load, &self.load_monitor) {
            (Some(n), _) => LoadMonitor::fixed(n),
            (None, Some(shared)) => {
                config.load = shared.config().clone();
                Arc::clone(shared)
            }
            (None, None) => LoadMonitor::start(config.load.clone()),
        };
        Scheduler::new(config, monitor)
    }

    /// The load-time passes this builder asks for.
    fn passes(&self) -> LoadPasses {
        LoadPasses {
            fusion: !self.no_fusion,
            release_weights: !self.keep_weights,
        }
    }

    /// How the model's control-flow bodies run: as plans of the executor,
    /// through the same load-time passes as the model's graph.
    fn bodies(&self) -> crate::exec::Bodies {
        crate::exec::Bodies {
            fusion: self.passes().fusion,
        }
    }

    /// The device's topology over the session's CPUs, as a session built
    /// now would see it (sysfs, then the power table applied).
    pub fn device_topology(&self) -> Result<Topology> {
        let cpus = self
            .cpu_set
            .clone()
            .unwrap_or_else(crate::load::allowed::allowed_cpus);
        let topology = match &self.sysfs_root {
            Some(root) => Topology::read(root, &cpus),
            None => Topology::detect(&cpus),
        };
        match &self.power_table {
            Some(table) => topology.with_table(table).map_err(Error::Config),
            None => Ok(topology),
        }
    }

    /// Loads a model file (external data is read from beside it).
    pub fn build_from_file(self, path: impl AsRef<Path>) -> Result<Session> {
        let path = path.as_ref();
        let bodies = self.bodies();
        self.build(|| crate::onnx::load_model_file(path, &bodies))
    }

    /// Loads a model from bytes in memory.
    pub fn build_from_bytes(self, bytes: &[u8]) -> Result<Session> {
        let bodies = self.bodies();
        self.build(|| crate::onnx::load_model_bytes(bytes, &bodies))
    }

    /// Parses with `parse` and builds the session, within the memory budget;
    /// a panic on the way (a bug) becomes [`Error::Internal`].
    ///
    /// The scheduler (its pools, the device topology and the load monitor's
    /// synchronous baseline, about 6 ms of mostly waiting) is made on a
    /// second thread while this one parses, so it adds nothing to a cold
    /// start that parsing takes longer than. That thread inherits this
    /// one's CPU affinity, which the monitor reads as the allowed CPUs.
    /// The cost model's calibration (once per process, and independent of
    /// the model) starts on a third thread at the same time; the session
    /// takes its result once the graph is optimized.
    fn build(self, parse: impl FnOnce() -> Result<Graph>) -> Result<Session> {
        let limit = self
            .memory_limit
            .unwrap_or_else(crate::tensor::budget::default_limit);
        let interrupt = Interrupt::new(None, self.time_limit);
        std::thread::scope(|scope| {
            // Without the thread, Session::new calibrates in line.
            let calibration = (!crate::analysis::calibration_done())
                .then(|| {
                    std::thread::Builder::new()
                        .name("ramify-calibrate-start".into())
                        .spawn_scoped(scope, crate::analysis::calibrated_cost_model)
                        .ok()
                })
                .flatten();
            let scheduler = std::thread::Builder::new()
                .name("ramify-setup".into())
                .spawn_scoped(scope, || self.scheduler());
            let built = catch_unwind(AssertUnwindSafe(|| {
                crate::tensor::budget::with_limit(limit, || with_interrupt(&interrupt, parse))
            }));
            // Without a second thread, the scheduler is made here instead.
            let sched = match scheduler {
                Ok(handle) => handle.join(),
                Err(_) => catch_unwind(AssertUnwindSafe(|| self.scheduler())),
            };
            let finish = || {
                let graph = built.map_err(|p| Error::Internal(panic_message("loading", &p)))??;
                let sched = sched.map_err(|p| Error::Internal(panic_message("loading", &p)))??;
                catch_unwind(AssertUnwindSafe(|| {
                    crate::tensor::budget::with_limit(limit, || {
                        with_interrupt(&interrupt, || {
                            Session::new(graph, sched, self.passes(), limit, self.time_limit)
                        })
                    })
                }))
                .map_err(|p| Error::Internal(panic_message("loading", &p)))?
            };
            let session = finish();
            // Session::new waited for the calibration (or, had it panicked,
            // calibrated again under its catch_unwind); joining here keeps
            // such a panic from escaping the scope.
            if let Some(handle) = calibration {
                let _ = handle.join();
            }
            session
        })
    }
}
