//! The public entry point: a [`Session`] loads a model once and runs it many
//! times, from any thread. It validates inputs, keeps one specialised plan per
//! set of input shapes, and runs the plan on its thread pool.

use crate::analysis::{calibrated_cost_model, CostModel};
use crate::error::{Error, Result};
use crate::exec::{self, Plan, Trace};
use crate::graph::pipeline::{optimize, Stage};
use crate::graph::{Declared, Graph, ValueId};
use crate::ir::Fact;
use crate::load::{HostState, LoadConfig, LoadMonitor, LoadSource};
use crate::ops::interrupt::{with_interrupt, CancelToken, Interrupt};
use crate::sched::{ForkReport, Mode, PolicyConfig, Scheduler, SchedulerConfig};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The name and declared type of a model input or output.
#[derive(Debug, Clone)]
pub struct IoInfo {
    /// The value's name.
    pub name: String,
    /// The declared element type and shape, if the model declares them.
    pub declared: Option<Declared>,
}

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
    thresholds: Option<(f64, f64)>,
    presets: Option<(usize, usize)>,
    pin_threads: Option<bool>,
    load_sources: Option<Vec<LoadSource>>,
    fixed_load: Option<f64>,
    load_monitor: Option<Arc<LoadMonitor>>,
    no_fusion: bool,
    no_makespan_check: bool,
    memory_limit: Option<usize>,
    time_limit: Option<Duration>,
}

impl SessionBuilder {
    /// A builder with default settings: all CPUs, adaptive mode, the method's
    /// thresholds and the makespan check, load from the system CPU use and
    /// other processes' runnable threads.
    pub fn new() -> Self {
        Self::default()
    }

    /// Limits the CPUs (m) the session uses; at least 1.
    pub fn cpus(mut self, n: usize) -> Self {
        self.cpus = Some(n.max(1));
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
    pub fn thresholds(mut self, theta1: f64, theta2: f64) -> Self {
        self.thresholds = Some((theta1, theta2));
        self
    }

    /// The pool presets M1 (shrunk pool) and M2 (threads per operator when serial).
    pub fn presets(mut self, m1: usize, m2: usize) -> Self {
        self.presets = Some((m1, m2));
        self
    }

    /// Pin pool threads to the CPUs they are given (default: where the OS allows).
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

    fn scheduler(&self) -> Result<Scheduler> {
        let cpus = self.cpus.unwrap_or_else(num_cpus::get).max(1);
        let mut policy = PolicyConfig::for_cpus(cpus);
        if let Some((t1, t2)) = self.thresholds {
            policy.theta1 = t1;
            policy.theta2 = t2;
        }
        if let Some((m1, m2)) = self.presets {
            policy.m1 = m1;
            policy.m2 = m2;
        }
        policy.makespan_check = !self.no_makespan_check;
        let mut config = SchedulerConfig {
            mode: self.mode,
            policy,
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

    /// Loads a model file (external data is read from beside it).
    pub fn build_from_file(self, path: impl AsRef<Path>) -> Result<Session> {
        let path = path.as_ref();
        self.build(|| crate::onnx::load_model_file(path))
    }

    /// Loads a model from bytes in memory.
    pub fn build_from_bytes(self, bytes: &[u8]) -> Result<Session> {
        self.build(|| crate::onnx::load_model_bytes(bytes))
    }

    /// Parses with `parse` and builds the session, within the memory budget;
    /// a panic on the way (a bug) becomes [`Error::Internal`].
    fn build(self, parse: impl FnOnce() -> Result<Graph>) -> Result<Session> {
        let limit = self
            .memory_limit
            .unwrap_or_else(crate::tensor::budget::default_limit);
        let interrupt = Interrupt::new(None, self.time_limit);
        catch_unwind(AssertUnwindSafe(|| {
            crate::tensor::budget::with_limit(limit, || {
                with_interrupt(&interrupt, || {
                    let graph = parse()?;
                    let sched = self.scheduler()?;
                    Session::new(graph, sched, !self.no_fusion, limit, self.time_limit)
                })
            })
        }))
        .map_err(|p| Error::Internal(panic_message("loading", &p)))?
    }
}

/// The decisions of one run: the load seen and what was chosen at each fork.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// One entry per fork reached, in the order decided.
    pub forks: Vec<ForkReport>,
    /// The run's timeline, when asked for with [`Session::run_traced`].
    pub trace: Option<Trace>,
}

/// A loaded model, ready to run. `Session` is `Send + Sync`: runs from
/// several threads at once are allowed.
///
/// ```no_run
/// use ramify::{Session, Tensor};
/// let session = Session::from_file("models/inception_mini.onnx")?;
/// let input = Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96]);
/// let outputs = session.run([("input", input)])?;
/// println!("{}", outputs[0].1);
/// # Ok::<(), ramify::Error>(())
/// ```
pub struct Session {
    graph: Graph,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    plans: Mutex<HashMap<Vec<Vec<usize>>, Arc<Plan>>>,
    sched: Scheduler,
    cost: CostModel,
    memory_limit: usize,
    time_limit: Option<Duration>,
}

/// Options of one run: a time limit and a cancellation token.
///
/// ```no_run
/// use ramify::{CancelToken, RunOptions, Session, Tensor};
/// use std::time::Duration;
/// let session = Session::from_file("models/inception_mini.onnx")?;
/// let token = CancelToken::new();
/// let options = RunOptions::new()
///     .time_limit(Duration::from_millis(50))
///     .cancel(token.clone());
/// // Another thread may call token.cancel() to stop the run.
/// let input = Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96]);
/// let (outputs, _report) = session.run_with_options([("input", input)], &options)?;
/// # Ok::<(), ramify::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    time_limit: Option<Duration>,
    cancel: Option<CancelToken>,
}

impl RunOptions {
    /// No limit and no token (the session's time limit, if any, applies).
    pub fn new() -> RunOptions {
        RunOptions::default()
    }

    /// Stops the run with [`Error::Deadline`] once it has taken `limit`.
    pub fn time_limit(mut self, limit: Duration) -> RunOptions {
        self.time_limit = Some(limit);
        self
    }

    /// Stops the run with [`Error::Cancelled`] once `token` is cancelled.
    pub fn cancel(mut self, token: CancelToken) -> RunOptions {
        self.cancel = Some(token);
        self
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("nodes", &self.graph.nodes.len())
            .finish()
    }
}

impl Session {
    /// A builder for sessions with non-default settings.
    pub fn builder() -> SessionBuilder {
        SessionBuilder::new()
    }

    /// Loads a model file with default settings.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Session> {
        SessionBuilder::new().build_from_file(path)
    }

    /// Loads a model from bytes with default settings.
    pub fn from_bytes(bytes: &[u8]) -> Result<Session> {
        SessionBuilder::new().build_from_bytes(bytes)
    }

    fn new(
        mut graph: Graph,
        sched: Scheduler,
        fusion: bool,
        memory_limit: usize,
        time_limit: Option<Duration>,
    ) -> Result<Session> {
        // Fold what does not depend on the inputs once, at load.
        let declared: Vec<(ValueId, Fact)> = graph
            .inputs
            .iter()
            .filter_map(|&id| {
                let d = graph.values[id].declared.as_ref()?;
                let shape = d.dims.as_ref().and_then(|_| {
                    d.concrete_shape(usize::MAX)
                        .filter(|s| !s.contains(&usize::MAX))
                });
                Some((
                    id,
                    Fact {
                        dtype: d.dtype,
                        shape,
                    },
                ))
            })
            .collect();
        on_own_pool(&sched, || {
            optimize(&mut graph, &declared, Stage::Load { fusion })
        })?;
        let info = |ids: &[ValueId]| -> Vec<IoInfo> {
            ids.iter()
                .map(|&id| IoInfo {
                    name: graph.values[id].name.clone(),
                    declared: graph.values[id].declared.clone(),
                })
                .collect()
        };
        let inputs = info(&graph.inputs);
        let outputs = info(&graph.outputs);
        Ok(Session {
            graph,
            inputs,
            outputs,
            plans: Mutex::new(HashMap::new()),
            sched,
            cost: calibrated_cost_model(),
            memory_limit,
            time_limit,
        })
    }

    /// The inputs the caller feeds, in the model's order.
    pub fn inputs(&self) -> &[IoInfo] {
        &self.inputs
    }

    /// The outputs a run returns, in the model's order.
    pub fn outputs(&self) -> &[IoInfo] {
        &self.outputs
    }

    /// The graph after load-time folding.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Orders named inputs by the model's inputs, checking names, element
    /// types and shapes against the declarations.
    fn bind<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
    ) -> Result<Vec<Arc<Tensor>>> {
        let mut bound: Vec<Option<Arc<Tensor>>> = vec![None; self.inputs.len()];
        for (name, t) in inputs {
            let name = name.as_ref();
            let Some(i) = self.inputs.iter().position(|x| x.name == name) else {
                return Err(Error::UnknownInput {
                    name: name.to_string(),
                    expected: self.inputs.iter().map(|x| x.name.clone()).collect(),
                });
            };
            if let Some(d) = &self.inputs[i].declared {
                if d.dtype != t.dtype() {
                    return Err(Error::InputType {
                        name: name.to_string(),
                        actual: t.dtype().to_string(),
                        expected: d.dtype.to_string(),
                    });
                }
                if !d.accepts(t.shape()) {
                    return Err(Error::InputShape {
                        name: name.to_string(),
                        actual: t.shape().to_vec(),
                        expected: d.to_string(),
                    });
                }
            }
            bound[i] = Some(Arc::new(t.into_standard_layout()));
        }
        bound
            .into_iter()
            .zip(&self.inputs)
            .map(|(t, info)| t.ok_or_else(|| Error::MissingInput(info.name.clone())))
            .collect()
    }

    /// The plan for these named inputs' shapes (built on first use), e.g. to
    /// inspect forks and costs without running.
    pub fn plan<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
    ) -> Result<Arc<Plan>> {
        let bound = self.bind(inputs)?;
        self.plan_for(&bound)
    }

    /// The plan for these input tensors' shapes, built on first use.
    pub fn plan_for(&self, inputs: &[Arc<Tensor>]) -> Result<Arc<Plan>> {
        let key: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
        if let Some(p) = self
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(p.clone());
        }
        let facts: Vec<(ValueId, Fact)> = self
            .graph
            .inputs
            .iter()
            .zip(inputs)
            .map(|(&id, t)| (id, Fact::of(t)))
            .collect();
        let cpus = self.sched.config().policy.cpus;
        let plan = Arc::new(on_own_pool(&self.sched, || {
            Plan::new(&self.graph, &facts, &self.cost, cpus, self.memory_limit)
        })?);
        self.plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, plan.clone());
        Ok(plan)
    }

    /// Runs the model on named inputs and returns the named outputs in the
    /// model's output order.
    pub fn run<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
    ) -> Result<Vec<(String, Tensor)>> {
        self.run_with_report(inputs).map(|(outputs, _)| outputs)
    }

    /// Like [`run`](Self::run), and also returns the decision taken at each
    /// fork (load seen, band, serial or parallel, pool sizes).
    pub fn run_with_report<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
    ) -> Result<(Vec<(String, Tensor)>, RunReport)> {
        self.run_inner(inputs, false, &RunOptions::default())
    }

    /// Like [`run_with_report`](Self::run_with_report), under `options`: a
    /// time limit and a cancellation token, checked before every operator
    /// and on every iteration of a loop. A stopped run returns
    /// [`Error::Deadline`] or [`Error::Cancelled`]; the session stays usable.
    pub fn run_with_options<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
        options: &RunOptions,
    ) -> Result<(Vec<(String, Tensor)>, RunReport)> {
        self.run_inner(inputs, false, options)
    }

    /// Like [`run_with_report`](Self::run_with_report), and also records a
    /// timeline of the run (one span per operator and per fork) in the report.
    pub fn run_traced<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
    ) -> Result<(Vec<(String, Tensor)>, RunReport)> {
        self.run_inner(inputs, true, &RunOptions::default())
    }

    fn run_inner<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
        traced: bool,
        options: &RunOptions,
    ) -> Result<(Vec<(String, Tensor)>, RunReport)> {
        let interrupt = Interrupt::new(
            options.cancel.clone(),
            options.time_limit.or(self.time_limit),
        );
        // The load monitor samples while runs are in flight (and a little
        // after); an idle session costs nothing.
        let _active = self.sched.monitor().activity();
        let bound = self.bind(inputs)?;
        // Planning folds constants, which may run operators (a loop): it
        // stops like the run.
        let plan = with_interrupt(&interrupt, || self.plan_for(&bound))?;
        let feeds: Vec<(ValueId, Arc<Tensor>)> =
            self.graph.inputs.iter().copied().zip(bound).collect();
        let result = catch_unwind(AssertUnwindSafe(|| {
            exec::run(&plan, &self.sched, feeds, traced, &interrupt)
        }))
        .map_err(|p| Error::Internal(panic_message("running", &p)))??;
        let outputs = self
            .outputs
            .iter()
            .zip(result.outputs)
            .map(|(info, t)| {
                let t = Arc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone());
                (info.name.clone(), t)
            })
            .collect();
        Ok((
            outputs,
            RunReport {
                forks: result.forks,
                trace: result.trace,
            },
        ))
    }

    /// The scheduler (its configuration, load monitor and pools).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// Pushes state the host app measured (CPU use, battery, thermal) into the
    /// session's load monitor; it counts from the next fork on.
    pub fn push_host_state(&self, state: HostState) {
        self.sched.monitor().push_host(state);
    }

    /// The plans built so far, one per set of input shapes.
    pub fn plans(&self) -> Vec<Arc<Plan>> {
        self.plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The memory budget in force, in bytes.
    pub fn memory_limit(&self) -> usize {
        self.memory_limit
    }
}

/// Runs `f` on the session's own pool, with this thread's memory limit and
/// interrupt in force there: the kernels that constant folding runs (at load
/// and when planning) then split their work over the session's threads, and
/// never start rayon's process-wide pool, whose threads would outlive every
/// session (and the library, for an app that unloads it).
fn on_own_pool<R: Send>(sched: &Scheduler, f: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    let limit = crate::tensor::budget::current_limit();
    let interrupt = crate::ops::interrupt::current();
    let pool = sched.pools().get(0, 0, sched.config().policy.cpus)?;
    pool.pool
        .install(|| crate::tensor::budget::with_limit(limit, || with_interrupt(&interrupt, f)))
}

/// The message of a panic caught while `doing` something.
fn panic_message(doing: &str, p: &Box<dyn std::any::Any + Send>) -> String {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    format!("panic while {doing}: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Session>();
    }
}
