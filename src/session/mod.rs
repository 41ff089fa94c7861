//! The public entry point: a [`Session`] loads a model once and runs it many
//! times, from any thread. It validates inputs, keeps one specialised plan per
//! set of input shapes (and output selection), and runs the plan on its
//! thread pool. [`SessionBuilder`] holds the settings; [`Outputs`] chooses
//! outputs and the caller's buffers they are written to.

mod batch;
mod builder;
mod options;
mod outputs;
mod partition;
mod pipeline;

pub use batch::{BatchResult, ItemResult};
pub use builder::SessionBuilder;
pub use options::{EventCallback, RunOptions, CALLBACK_QUEUE};
pub use outputs::Outputs;
pub use partition::{partition_model, Partitioned};
pub use pipeline::Pipeline;

use crate::analysis::{calibrated_cost_model, CostModel};
use crate::error::{Error, Result};
use crate::exec::{self, Plan, RunEvent, Trace};
use crate::graph::pipeline::{optimize, Stage};
use crate::graph::{Declared, Graph, ModelMetadata, ValueId};
use crate::ir::{Fact, Kind, Value};
use crate::load::{HostState, Topology};
use crate::ops::interrupt::{with_interrupt, Interrupt};
use crate::sched::{ForkReport, Placement, Scheduler, SoloWay};
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

/// The CPUs the process may run on (its affinity mask where the OS has
/// one), as the OS numbers them: what [`SessionBuilder::cpus`] is bounded by
/// and [`SessionBuilder::cpu_set`] chooses from.
///
/// ```
/// let cpus = ramify::available_cpus();
/// assert!(!cpus.is_empty());
/// ```
pub fn available_cpus() -> Vec<usize> {
    crate::load::allowed::allowed_cpus()
}

/// The decisions of one run: the load seen and what was chosen at each fork.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// One entry per fork reached, in the order decided.
    pub forks: Vec<ForkReport>,
    /// The run's timeline, when asked for with [`Session::run_traced`].
    pub trace: Option<Trace>,
    /// Device-state events seen during the run, re-plans and deadline
    /// decisions, in order.
    pub events: Vec<RunEvent>,
    /// Int8 tiles whose narrow sums may have saturated and were recomputed
    /// exactly (the overflow guard, see [`RunOptions::int8`]).
    pub int8_recomputed: u64,
    /// For a plan without forks that `adaptive` mode could run on more
    /// than one thread: whether this run stayed on the caller's thread or
    /// took the pool (see [`SoloWay`](crate::sched::SoloWay)); `None` where
    /// there was no such choice.
    pub solo: Option<SoloWay>,
}

/// The load-time passes a builder asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadPasses {
    /// Whether the fusion passes run.
    pub fusion: bool,
    /// Whether operators that pack a constant take it from the graph
    /// ([`Graph::release_adopted`]).
    pub release_weights: bool,
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
    plans: Mutex<HashMap<PlanKey, Arc<Plan>>>,
    sched: Scheduler,
    cost: CostModel,
    memory_limit: usize,
    time_limit: Option<Duration>,
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
        passes: LoadPasses,
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
                let shape = shape.filter(|_| d.kind == Kind::Tensor);
                Some((
                    id,
                    Fact {
                        kind: d.kind,
                        dtype: d.dtype,
                        shape,
                    },
                ))
            })
            .collect();
        on_own_pool(&sched, || {
            optimize(
                &mut graph,
                &declared,
                Stage::Load {
                    fusion: passes.fusion,
                },
            )
        })?;
        if passes.release_weights {
            let fixed = declared.len() == graph.inputs.len()
                && declared.iter().all(|(_, f)| f.shape.is_some());
            graph.release_adopted(fixed);
        }
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

    /// Runs `f` on one of the session's own pool threads, so that runs it
    /// makes start there without a hand-over (a pipeline stage's loop).
    pub(crate) fn on_pool<R: Send>(&self, f: impl FnOnce() -> Result<R> + Send) -> Result<R> {
        on_own_pool(&self.sched, f)
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
        self.bind_shared(inputs.into_iter().map(|(n, t)| (n, Arc::new(t))))
    }

    /// [`bind`](Self::bind) for shared tensors: they are read in place, and
    /// copied only when not laid out row-major.
    fn bind_shared<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Arc<Tensor>)>,
    ) -> Result<Vec<Arc<Tensor>>> {
        let inputs: Vec<(N, Arc<Tensor>)> = inputs.into_iter().collect();
        let mut bound: Vec<Option<Arc<Tensor>>> = vec![None; self.inputs.len()];
        let given: Vec<usize> = inputs
            .iter()
            .map(|(n, _)| self.input_index(n.as_ref()))
            .collect::<Result<_>>()?;
        for (i, t) in given.into_iter().zip(self.check_tensors(inputs)?) {
            bound[i] = Some(t);
        }
        bound
            .into_iter()
            .zip(&self.inputs)
            .map(|(t, info)| t.ok_or_else(|| Error::MissingInput(info.name.clone())))
            .collect()
    }

    /// The position of input `name`, or [`Error::UnknownInput`].
    fn input_index(&self, name: &str) -> Result<usize> {
        self.inputs
            .iter()
            .position(|x| x.name == name)
            .ok_or_else(|| Error::UnknownInput {
                name: name.to_string(),
                expected: self.inputs.iter().map(|x| x.name.clone()).collect(),
            })
    }

    /// Named tensors checked against the declared types and shapes (a
    /// sequence or optional input is an [`Error::ValueKind`]), laid out
    /// row-major (copied only where they are not).
    fn check_tensors<N: AsRef<str>>(
        &self,
        inputs: Vec<(N, Arc<Tensor>)>,
    ) -> Result<Vec<Arc<Tensor>>> {
        let mut out = Vec::with_capacity(inputs.len());
        for (name, t) in inputs {
            let name = name.as_ref();
            let i = self.input_index(name)?;
            if let Some(d) = &self.inputs[i].declared {
                if d.kind != Kind::Tensor {
                    return Err(Error::ValueKind {
                        what: format!("input {name:?}"),
                        actual: Kind::Tensor.to_string(),
                        expected: d.kind.to_string(),
                    });
                }
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
            out.push(if t.is_standard_layout() {
                t
            } else {
                Arc::new((*t).clone().into_standard_layout())
            });
        }
        Ok(out)
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
        let values: Vec<Value> = inputs.iter().cloned().map(Value::Tensor).collect();
        self.plan_selecting(&values, None)
    }

    /// The plan for these input shapes that computes only the outputs
    /// `selected` (indices into [`outputs`](Self::outputs), ascending; `None`
    /// for all): nodes that no selected output needs are pruned.
    fn plan_selecting(&self, inputs: &[Value], selected: Option<&[usize]>) -> Result<Arc<Plan>> {
        // A sequence or optional input plans like any other of its kind
        // (its facts do not depend on its contents): its key names the kind.
        let key: PlanKey = (
            inputs
                .iter()
                .map(|v| match v {
                    Value::Tensor(t) => t.shape().to_vec(),
                    v => vec![usize::MAX, v.kind() as usize],
                })
                .collect(),
            selected.map(<[usize]>::to_vec),
        );
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
            .map(|(&id, v)| (id, Fact::of_value(v)))
            .collect();
        let cpus = self.sched.config().policy.cpus;
        let plan = Arc::new(on_own_pool(&self.sched, || match selected {
            None => Plan::new(&self.graph, &facts, &self.cost, cpus, self.memory_limit),
            Some(sel) => {
                let mut graph = self.graph.clone();
                graph.outputs = sel.iter().map(|&i| self.graph.outputs[i]).collect();
                Plan::new(&graph, &facts, &self.cost, cpus, self.memory_limit)
            }
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
        self.run_with_options(inputs, &RunOptions::default())
    }

    /// Like [`run_with_report`](Self::run_with_report), under `options`: a
    /// time limit, a deadline and a cancellation token, checked before
    /// every operator (the time limit and the token also on every
    /// iteration of a loop), a progress and an event callback (see
    /// [`RunOptions`]). A stopped run returns [`Error::Deadline`] or
    /// [`Error::Cancelled`]; the session stays usable.
    pub fn run_with_options<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
        options: &RunOptions,
    ) -> Result<(Vec<(String, Tensor)>, RunReport)> {
        self.run_shared_with_options(inputs.into_iter().map(|(n, t)| (n, Arc::new(t))), options)
    }

    /// Like [`run_with_options`](Self::run_with_options), on shared
    /// inputs: they are read in place, not copied (a tensor not laid out
    /// row-major is the exception), so a caller that feeds the same inputs
    /// run after run (a benchmark, a frame loop) makes no copy per run.
    ///
    /// ```
    /// use ramify::{RunOptions, Session, Tensor};
    /// use std::sync::Arc;
    /// let session = Session::from_file("models/inception_mini.onnx")?;
    /// let input = Arc::new(Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96]));
    /// for _ in 0..2 {
    ///     let feeds = [("input", input.clone())];
    ///     let (outputs, _) = session.run_shared_with_options(feeds, &RunOptions::default())?;
    ///     assert_eq!(outputs.len(), session.outputs().len());
    /// }
    /// // The run kept no reference to the input.
    /// assert_eq!(Arc::strong_count(&input), 1);
    /// # Ok::<(), ramify::Error>(())
    /// ```
    pub fn run_shared_with_options<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Arc<Tensor>)>,
        options: &RunOptions,
    ) -> Result<(Vec<(String, Tensor)>, RunReport)> {
        let _active = self.sched.monitor().activity();
        let bound = self
            .bind_shared(inputs)?
            .into_iter()
            .map(Value::Tensor)
            .collect();
        let (results, report) = self.execute(bound, None, options, |_| Ok(()))?;
        let outputs = self
            .outputs
            .iter()
            .zip(results)
            .map(|(info, v)| {
                let t = v.into_tensor(&format!("output {:?}", info.name))?;
                let t = Arc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone());
                Ok((info.name.clone(), t))
            })
            .collect::<Result<_>>()?;
        Ok((outputs, report))
    }

    /// Runs the model on named values of any kind (tensors, sequences,
    /// optionals) and returns the named output values in the model's
    /// output order; [`run`](Self::run) is the same for tensors only.
    ///
    /// ```
    /// use ramify::{Session, Tensor, Value};
    /// let session = Session::from_file("models/inception_mini.onnx")?;
    /// let input = Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96]);
    /// let outputs = session.run_values([("input", Value::from(input))])?;
    /// assert!(outputs[0].1.tensor().is_some());
    /// # Ok::<(), ramify::Error>(())
    /// ```
    pub fn run_values<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Value)>,
    ) -> Result<Vec<(String, Value)>> {
        self.run_values_with_options(inputs, &RunOptions::default())
            .map(|(outputs, _)| outputs)
    }

    /// Like [`run_values`](Self::run_values), under `options` (see
    /// [`run_with_options`](Self::run_with_options)), with the run's report.
    pub fn run_values_with_options<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Value)>,
        options: &RunOptions,
    ) -> Result<(Vec<(String, Value)>, RunReport)> {
        let _active = self.sched.monitor().activity();
        let mut tensors = Vec::new();
        let mut others = Vec::new();
        for (name, v) in inputs {
            match v {
                Value::Tensor(t) => tensors.push((name, t)),
                v => others.push((name, v)),
            }
        }
        let mut bound: Vec<Option<Value>> = vec![None; self.inputs.len()];
        for (name, v) in others {
            let i = self.input_index(name.as_ref())?;
            if let Some(d) = &self.inputs[i].declared {
                if d.kind != v.kind() || d.dtype != v.dtype() {
                    return Err(Error::InputType {
                        name: name.as_ref().to_string(),
                        actual: format!("{} of {}", v.kind(), v.dtype()),
                        expected: d.to_string(),
                    });
                }
            }
            bound[i] = Some(v);
        }
        let given: Vec<usize> = tensors
            .iter()
            .map(|(n, _)| self.input_index(n.as_ref()))
            .collect::<Result<_>>()?;
        for (i, t) in given.into_iter().zip(self.check_tensors(tensors)?) {
            bound[i] = Some(Value::Tensor(t));
        }
        let bound = bound
            .into_iter()
            .zip(&self.inputs)
            .map(|(v, info)| v.ok_or_else(|| Error::MissingInput(info.name.clone())))
            .collect::<Result<_>>()?;
        let (results, report) = self.execute(bound, None, options, |_| Ok(()))?;
        let outputs = self
            .outputs
            .iter()
            .map(|info| info.name.clone())
            .zip(results)
            .collect();
        Ok((outputs, report))
    }

    /// Like [`run_with_report`](Self::run_with_report), and also records a
    /// timeline of the run (one span per operator and per fork) in the report.
    pub fn run_traced<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
    ) -> Result<(Vec<(String, Tensor)>, RunReport)> {
        self.run_with_options(inputs, &RunOptions::new().trace(true))
    }

    /// Plans and runs bound inputs, computing the outputs `selected` (all
    /// when `None`); `check` sees the plan before anything runs.
    fn execute(
        &self,
        bound: Vec<Value>,
        selected: Option<&[usize]>,
        options: &RunOptions,
        check: impl FnOnce(&Plan) -> Result<()>,
    ) -> Result<(Vec<Value>, RunReport)> {
        let interrupt = Interrupt::new(
            options.cancel.clone(),
            options.time_limit.or(self.time_limit),
        );
        let (control, _dispatcher) = options.control()?;
        // Planning folds constants, which may run operators (a loop): it
        // stops like the run.
        let plan = with_interrupt(&interrupt, || self.plan_selecting(&bound, selected))?;
        check(&plan)?;
        let feeds: Vec<(ValueId, Value)> = self.graph.inputs.iter().copied().zip(bound).collect();
        let result = catch_unwind(AssertUnwindSafe(|| {
            exec::run(
                &plan,
                &self.sched,
                feeds,
                options.traced,
                &interrupt,
                control,
                options.int8,
            )
        }))
        .map_err(|p| Error::Internal(panic_message("running", &p)))??;
        Ok((
            result.outputs,
            RunReport {
                forks: result.forks,
                trace: result.trace,
                events: result.events,
                int8_recomputed: result.int8_recomputed,
                solo: result.solo,
            },
        ))
    }

    /// The scheduler (its configuration, load monitor and pools).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// The placement policy set (see [`SessionBuilder::placement`]).
    pub fn placement(&self) -> Placement {
        self.sched.placement()
    }

    /// Changes the placement policy; forks of runs from now on follow it.
    ///
    /// ```
    /// use ramify::{Placement, Session};
    /// let session = Session::from_file("models/inception_mini.onnx")?;
    /// session.set_placement(Placement::Power);
    /// assert_eq!(session.placement(), Placement::Power);
    /// # Ok::<(), ramify::Error>(())
    /// ```
    pub fn set_placement(&self, placement: Placement) {
        self.sched.set_placement(placement);
    }

    /// The device's clusters and core capacities, as the session sees them.
    pub fn topology(&self) -> &Topology {
        self.sched.topology()
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

    /// The CPU limit m in force: what [`SessionBuilder::cpus`] asked for,
    /// bounded by the CPUs the process may use (or the CPU set).
    pub fn cpus(&self) -> usize {
        self.sched.config().policy.cpus
    }

    /// The CPUs this session's threads may run on: its CPU set
    /// ([`SessionBuilder::cpu_set`]), or every CPU the process may use.
    pub fn cpu_set(&self) -> Vec<usize> {
        self.sched.cpu_set()
    }

    /// What the model file says about itself: producer, version,
    /// description, custom key/value pairs.
    pub fn metadata(&self) -> &ModelMetadata {
        &self.graph.metadata
    }
}

/// Plans are kept per input shapes and output selection.
type PlanKey = (Vec<Vec<usize>>, Option<Vec<usize>>);

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
