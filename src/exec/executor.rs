//! The executor: walks a plan's step tree. Plain steps run one node on the
//! current pool; at a fork it asks the scheduler for a decision and runs the
//! siblings serially on the current pool or in parallel on their own pools
//! (fork-join through nested rayon scopes). Where every pool of a parallel
//! plan has one CPU and the current pool has a thread for each, its own
//! (spinning) threads stand for those pools: each pool's siblings run as
//! one task, their operators held to one thread. Inputs come from the value
//! store or the plan's constants; each value is released after its last
//! reader. A one-thread run of a plan without forks stays on the caller's
//! thread.

use super::trace::{Recorder, Trace};
use super::warm::Warm;
use super::watch::{Control, RunEvent, Watch};
use super::{Plan, ValueStore};
use crate::analysis::Step;
use crate::error::{Error, Result};
use crate::graph::{wrap, ValueId};
use crate::ir::{Kind, Value};
use crate::ops::checked::check_outputs;
use crate::ops::interrupt::{with_interrupt, Interrupt};
use crate::ops::overflow::{self as guard, Int8Settings};
use crate::ops::util::with_thread_cap;
use crate::sched::makespan::parallel_makespan;
use crate::sched::{
    Band, Choice, Decision, ForkReport, ForkSite, Mode, Observation, Placement, Pool, PoolPlan,
    Scheduler, SoloWay,
};
use crate::tensor::{budget, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The shared state of one run in flight.
struct Run<'a> {
    plan: &'a Plan,
    store: ValueStore,
    sched: &'a Scheduler,
    reports: Mutex<Vec<ForkReport>>,
    /// Whether this run explores (see [`Plan::explores`]).
    explores: bool,
    error: Mutex<Option<Error>>,
    trace: Option<Recorder>,
    /// When the run must stop early (cancelled, or out of time).
    interrupt: &'a Interrupt,
    /// Its deadline, progress and device events.
    watch: Watch,
    /// The int8 kernel and overflow guard in force.
    int8: Int8Settings,
    /// Int8 tiles the overflow guard recomputed.
    int8_recomputed: AtomicU64,
}

impl Run<'_> {
    fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(e);
    }

    fn failed(&self) -> bool {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

/// The outputs of a run and the decisions taken at its forks.
pub struct RunResult {
    /// Graph outputs, in order (tensors, sequences or optionals).
    pub outputs: Vec<Value>,
    /// One entry per fork reached, in the order decided.
    pub forks: Vec<ForkReport>,
    /// The timeline, when tracing was asked for.
    pub trace: Option<Trace>,
    /// Device events, re-plans and deadline decisions during the run.
    pub events: Vec<RunEvent>,
    /// Int8 tiles the overflow guard recomputed exactly (see
    /// [`overflow`](crate::ops::overflow)).
    pub int8_recomputed: u64,
    /// How a fork-free run was placed, where `adaptive` mode chose.
    pub solo: Option<SoloWay>,
}

/// Runs the plan under the scheduler's decisions; with `traced`, records a
/// span per operator and per fork. `interrupt` is checked before every
/// operator (and by loops on every iteration), and so is the deadline of
/// `control` (see [`Watch`]).
pub fn run(
    plan: &Plan,
    sched: &Scheduler,
    inputs: Vec<(ValueId, Value)>,
    traced: bool,
    interrupt: &Interrupt,
    control: Control,
    int8: Int8Settings,
) -> Result<RunResult> {
    let obs = sched.observation();
    let threads = sched.serial_threads(obs.band);
    // A one-thread run of a plan without (parallel) forks stays on the caller's
    // thread: on a pool it would only hand its whole work to the pool's
    // one thread and sleep until it is done, two wake-ups that cost a tiny
    // model a fifth of its time. Its operators are held to one thread. The
    // caller's thread is the application's, so it is not pinned (one
    // thread gains nothing from it); a run confined to chosen cores (the
    // power placement) keeps its pool. A fork-free plan that could take
    // more threads stays on the caller's thread too where that was
    // measured faster (`solo_way`).
    let way = solo_way(plan, sched, threads);
    let inline = way == Some(SoloWay::Inline) || (threads == 1 && !plan.structure.forks_any());
    let threads = if inline { 1 } else { threads };
    let policy = &sched.config().policy;
    let speedup = |k: usize| policy.speedup(k);
    let watch = Watch::start(
        plan,
        sched.monitor(),
        control,
        threads,
        policy.cpus,
        &speedup,
    );
    let run = Run {
        plan,
        store: ValueStore::new(plan),
        sched,
        reports: Mutex::new(Vec::new()),
        explores: plan.forks.explores(),
        error: Mutex::new(None),
        trace: traced.then(Recorder::new),
        interrupt,
        watch,
        int8,
        int8_recomputed: AtomicU64::new(0),
    };
    for (id, t) in inputs {
        run.store.put(id, t);
    }
    let pin = obs.pin || sched.pins_whole_set(threads, obs.band);
    let cpus = sched.cpus_for(threads, pin && !inline);
    let pool = sched.pool(0, 0, threads, pin, &cpus)?;
    let started = Instant::now();
    if inline && cpus.is_empty() {
        let lane = Lane {
            pool: &pool,
            threads: 1,
            nested: false,
            warm: None,
            uniform: sched.topology().is_uniform(),
        };
        with_thread_cap(1, || run_steps(&run, &plan.structure.steps, &lane))?;
    } else {
        pool.pool.install(|| {
            let warm = Warm::start(&pool);
            let lane = Lane {
                pool: &pool,
                threads: pool.size,
                nested: false,
                warm: Some(&warm),
                uniform: sched.topology().is_uniform(),
            };
            run_steps(&run, &plan.structure.steps, &lane)
        })?;
    }
    let nanos = started.elapsed().as_nanos() as u64;
    if let (Some(way), true) = (way, plan.forks.warmed()) {
        plan.solo.record(way, nanos);
    }
    plan.forks.record_run(run.explores, nanos);
    plan.forks.finish_run();
    let outputs = collect_outputs(plan, &run.store)?;
    let forks = run.reports.into_inner().unwrap_or_else(|p| p.into_inner());
    let trace = run.trace.map(Recorder::finish);
    Ok(RunResult {
        outputs,
        forks,
        trace,
        events: run.watch.finish(),
        int8_recomputed: run.int8_recomputed.into_inner(),
        solo: way,
    })
}

/// For a plan without parallel forks that `adaptive` mode would run on `threads`
/// threads of an unconfined pool: whether this run stays on the caller's
/// thread or takes the pool, as measured (see [`SoloMemory`]). `None` where
/// there is no choice to make.
fn solo_way(plan: &Plan, sched: &Scheduler, threads: usize) -> Option<SoloWay> {
    let free = sched.config().mode == Mode::Adaptive
        && threads > 1
        && !plan.structure.forks_any()
        && sched.placement_now() != Placement::Power;
    free.then(|| plan.solo.choose(plan.forks.runs(), plan.graph.nodes.len()))
}

/// Runs `steps` on `lane`; its spinners are paused while a fork hands its
/// CPUs to other pools.
fn run_steps(run: &Run, steps: &[Step], lane: &Lane) -> Result<()> {
    let (pool, threads, warm) = (lane.pool, lane.threads, lane.warm);
    for step in steps {
        match step {
            Step::Node(i) => {
                let start = Instant::now();
                run_node(run, *i, threads)?;
                if let Some(t) = &run.trace {
                    let node = &run.plan.graph.nodes[*i];
                    t.record(&node.name, &node.op_type, start, None);
                }
            }
            Step::Fork { fork, siblings } => {
                // Events and the deadline first: they may change the decision.
                run.watch.checkpoint()?;
                let obs = if run.watch.hurrying() {
                    run.sched.observation_at(0.0, Band::Low)
                } else {
                    run.sched.observation()
                };
                run.watch.fork_started(obs.load);
                let Choice {
                    decision,
                    explored_from,
                } = choose(run, *fork, &obs, lane)?;
                let start = Instant::now();
                let speedup = |k: usize| run.sched.config().policy.speedup(k);
                let seconds_at =
                    |s: usize, k: usize| run.plan.sibling_seconds_at(*fork, s, k, &speedup);
                let pin = obs.pin;
                let cpus = fork_cpus(run, &decision, lane, pin);
                let report = ForkReport {
                    fork: *fork,
                    load: obs.load,
                    band: obs.band,
                    decision: decision.clone(),
                    explored_from,
                    placement: run.sched.placement_now(),
                    cpus: cpus.clone(),
                };
                run.reports
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(report.clone());
                let same_pool = lane.keeps(&decision);
                if let (false, Some(w)) = (same_pool, warm) {
                    w.pause();
                }
                match &decision {
                    Decision::Serial { threads: t } if *t == threads => {
                        for s in siblings {
                            run_steps(run, s, lane)?;
                        }
                    }
                    Decision::Serial { threads: t } => {
                        let p = run.sched.pool(pool.id, 0, *t, pin, &cpus)?;
                        let serial = Lane {
                            pool: &p,
                            threads: *t,
                            nested: lane.nested,
                            warm: None,
                            uniform: lane.uniform,
                        };
                        p.pool.install(|| {
                            siblings.iter().try_for_each(|s| run_steps(run, s, &serial))
                        })?;
                    }
                    Decision::Parallel(plans) => {
                        run_fork(run, plans, siblings, lane, pin, &cpus)?;
                        // What the pools' node times (just recorded) do
                        // not account for is the cost of forking.
                        let busy = parallel_makespan(plans, &seconds_at, 0.0);
                        let wall = start.elapsed().as_secs_f64();
                        let over = ((wall - busy).max(0.0) * 1e9) as u64;
                        run.plan.forks.record_overhead(*fork, over);
                    }
                }
                if let (false, Some(w)) = (same_pool, warm) {
                    w.resume();
                }
                if let Some(t) = &run.trace {
                    t.record(&format!("fork {fork}"), "fork", start, Some(report));
                }
            }
        }
    }
    Ok(())
}

/// Where a run of steps runs: its pool, the threads its operators use (all
/// of the pool's, or one for siblings run as a task of the pool), whether
/// it runs a sibling, and the pool's spinners, if this run started them.
struct Lane<'a> {
    pool: &'a Arc<Pool>,
    threads: usize,
    nested: bool,
    warm: Option<&'a Warm>,
    /// Whether the pool's threads run on cores of one capacity, so that
    /// any of them may host any sibling.
    uniform: bool,
}

impl Lane<'_> {
    /// Whether `decision` runs the siblings on this lane's own threads
    /// (whose spinners then keep spinning): serially on as many threads,
    /// or in parallel as tasks of its pool.
    fn keeps(&self, decision: &Decision) -> bool {
        match decision {
            Decision::Serial { threads } => *threads == self.threads,
            Decision::Parallel(plans) => self.hosts(plans),
        }
    }

    /// Whether the pool's own threads can stand for the plan's pools: every
    /// pool has one CPU and the lane's pool has a thread for each. Each
    /// pool's siblings then run as one task of the lane's pool, with their
    /// operators held to one thread. A fork costs what waking a spinning
    /// worker costs, instead of waking each sibling pool's sleeping thread
    /// (200-700 µs on a 2-vCPU VM), and no thread runs that the lane's
    /// pool does not already own.
    /// On cores of different capacity the plan's pools are placed by their
    /// work instead (see `Scheduler::cpus_for`).
    fn hosts(&self, plans: &[PoolPlan]) -> bool {
        self.uniform
            && self.threads == self.pool.size
            && plans.len() <= self.pool.size
            && plans.iter().all(|p| p.cpus == 1)
    }
}

/// The scheduler's choice at `fork` (see [`Scheduler::choose_fork`]),
/// probing the fork's overhead where the scheduler asks: the policy's
/// pools forked with no work from this lane, as a real fork would be.
fn choose(run: &Run, fork: usize, obs: &Observation, lane: &Lane) -> Result<Choice> {
    let speedup = |k: usize| run.sched.config().policy.speedup(k);
    let times = run.plan.sibling_times(fork, &speedup);
    let seconds_at = |s: usize, k: usize| run.plan.sibling_seconds_at(fork, s, k, &speedup);
    let site = ForkSite {
        fork,
        available: lane.threads,
        nested: lane.nested,
        times: &times,
        seconds_at: &seconds_at,
        memory: &run.plan.forks,
        explores: run.explores,
    };
    run.sched.choose_fork(obs, &site, |decision, idle| {
        let start = Instant::now();
        let paused = lane.warm.filter(|_| !lane.hosts(idle));
        if let Some(w) = paused {
            w.pause();
        }
        let cpus = fork_cpus(run, decision, lane, obs.pin);
        let probed = run_fork(run, idle, &[], lane, obs.pin, &cpus);
        if let Some(w) = paused {
            w.resume();
        }
        probed?;
        Ok(start.elapsed().as_nanos() as u64)
    })
}

/// The CPUs a fork's decision runs on, in pool order (see
/// `Scheduler::cpus_for`): none where it stays on the lane's own threads.
fn fork_cpus(run: &Run, decision: &Decision, lane: &Lane, pin: bool) -> Vec<usize> {
    match decision {
        Decision::Serial { threads } if *threads == lane.threads => Vec::new(),
        Decision::Serial { threads } => run.sched.cpus_for(*threads, pin),
        Decision::Parallel(plans) if lane.hosts(plans) => Vec::new(),
        Decision::Parallel(plans) => {
            let total = plans.iter().map(|p| p.cpus).sum();
            run.sched.cpus_for(total, pin)
        }
    }
}

/// Runs the siblings of a parallel decision: as tasks of the lane's pool
/// where it [hosts](Lane::hosts) the plan, else on the plan's own pools.
fn run_fork(
    run: &Run,
    plans: &[PoolPlan],
    siblings: &[Vec<Step>],
    lane: &Lane,
    pin: bool,
    cpus: &[usize],
) -> Result<()> {
    if lane.hosts(plans) {
        run_hosted(run, plans, siblings, lane.pool);
    } else {
        run_parallel(run, plans, siblings, lane.pool, pin, cpus);
    }
    match run.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Runs each plan's siblings as one task of `pool` (the current pool), with
/// their operators held to one thread.
fn run_hosted(run: &Run, plans: &[PoolPlan], siblings: &[Vec<Step>], pool: &Arc<Pool>) {
    rayon::scope(|scope| {
        for p in plans {
            scope.spawn(move |_| {
                with_thread_cap(1, || run_siblings(run, &p.siblings, siblings, pool, 1))
            });
        }
    });
}

/// Runs siblings `mine` one after another on `pool`, `threads` threads per
/// operator, stopping at the run's first error (recorded in `run`).
fn run_siblings(
    run: &Run,
    mine: &[usize],
    siblings: &[Vec<Step>],
    pool: &Arc<Pool>,
    threads: usize,
) {
    let lane = Lane {
        pool,
        threads,
        nested: true,
        warm: None,
        uniform: true,
    };
    for &s in mine {
        if run.failed() {
            break;
        }
        if let Err(e) = run_steps(run, &siblings[s], &lane) {
            run.fail(e);
            break;
        }
    }
}

fn run_parallel(
    run: &Run,
    plans: &[PoolPlan],
    siblings: &[Vec<Step>],
    parent: &Arc<Pool>,
    pin: bool,
    cpus: &[usize],
) {
    let mut assigned = Vec::with_capacity(plans.len());
    let mut offset = 0;
    for (position, p) in plans.iter().enumerate() {
        let chunk = cpus.get(offset..offset + p.cpus).unwrap_or(&[]);
        offset += p.cpus;
        match run.sched.pool(parent.id, position, p.cpus, pin, chunk) {
            Ok(pool) => assigned.push((pool, p.siblings.as_slice())),
            Err(e) => return run.fail(e),
        }
    }
    spawn_on_pools(run, &assigned, siblings);
}

/// Starts each pool's siblings in its own rayon scope, nesting the scopes so
/// that all pools work at once and the caller waits for all of them.
fn spawn_on_pools(run: &Run, assigned: &[(Arc<Pool>, &[usize])], siblings: &[Vec<Step>]) {
    let Some(((pool, mine), rest)) = assigned.split_first() else {
        return;
    };
    pool.pool.in_place_scope(|scope| {
        scope.spawn(|_| run_siblings(run, mine, siblings, pool, pool.size));
        spawn_on_pools(run, rest, siblings);
    });
}

/// Runs node `index` of the plan against the run's store on the current
/// pool of `threads` threads, recording its time at that thread count.
fn run_node(run: &Run, index: usize, threads: usize) -> Result<()> {
    let (plan, store) = (run.plan, &run.store);
    run.interrupt.check().map_err(|e| run.watch.locate(e))?;
    run.watch.checkpoint()?;
    if super::views::forward(plan, store, index)? {
        run.watch.after_operator(index);
        return Ok(());
    }
    let held = gather(plan, store, index)?;
    let start = Instant::now();
    let outs = budget::with_limit(plan.memory_limit, || {
        with_interrupt(run.interrupt, || {
            let (outs, recomputed) = guard::scope(run.int8, || compute(plan, store, index, &held));
            run.int8_recomputed.fetch_add(recomputed, Ordering::Relaxed);
            outs
        })
    })
    .map_err(|e| {
        // Stopping is the run's outcome, not the node's failure.
        if e.is_interrupt() {
            run.watch.locate(e.into_root())
        } else {
            wrap(&plan.graph.nodes[index], e)
        }
    })?;
    plan.record(index, threads, start.elapsed().as_nanos() as u64);
    run.watch.after_operator(index);
    finish(plan, store, index, held, outs);
    Ok(())
}

/// Runs the plan's nodes one after another on the calling thread, under the
/// interrupt, memory budget and int8 settings already in force there (those
/// of the operator whose body this is), and returns the graph outputs.
/// `inputs` fill the store first. Errors name the node; an interrupt is
/// passed on as it is, for the enclosing run to locate.
pub(super) fn run_inline(
    plan: &Plan,
    inputs: impl IntoIterator<Item = (ValueId, Value)>,
) -> Result<Vec<Value>> {
    let store = ValueStore::new(plan);
    for (id, v) in inputs {
        store.put(id, v);
    }
    for index in 0..plan.graph.nodes.len() {
        crate::ops::interrupt::check()?;
        if super::views::forward(plan, &store, index)? {
            continue;
        }
        let held = gather(plan, &store, index)?;
        let outs = compute(plan, &store, index, &held).map_err(|e| {
            if e.is_interrupt() {
                e
            } else {
                wrap(&plan.graph.nodes[index], e)
            }
        })?;
        finish(plan, &store, index, held, outs);
    }
    collect_outputs(plan, &store)
}

/// The inputs of node `index`: from the store or the plan's constants
/// (`None` for an absent input and for a constant its reader holds).
fn gather(plan: &Plan, store: &ValueStore, index: usize) -> Result<Vec<Option<Value>>> {
    let node = &plan.graph.nodes[index];
    let join = plan.joins.join(index);
    let mut held: Vec<Option<Value>> = Vec::with_capacity(node.inputs.len());
    for (k, &input) in node.inputs.iter().enumerate() {
        held.push(match input {
            None => None,
            // Its producer wrote it into the joined output already.
            Some(_) if join.is_some_and(|j| j.placed[k]) => None,
            // A constant its reader holds itself (`Graph::release_adopted`).
            Some(id) if plan.graph.released(id).is_some() => None,
            Some(id) => Some(value(plan, store, id).ok_or_else(|| Error::MissingValue {
                node: node.name.clone(),
                value: plan.graph.name(id).to_string(),
            })?),
        });
    }
    Ok(held)
}

/// Runs node `index`'s operator on its inputs `held`: a placed producer
/// writes into its part of a joined output, and a joining node hands on
/// that output (see `joins`).
fn compute(plan: &Plan, store: &ValueStore, index: usize, held: &[Option<Value>]) -> Result<Outs> {
    let node = &plan.graph.nodes[index];
    if node.op.uses_values() {
        let args: Vec<Option<&Value>> = held.iter().map(Option::as_ref).collect();
        return node.op.run_values(&args).map(Outs::Values);
    }
    // The tensor path, as fast as before values had kinds.
    let mut args: Vec<Option<&Tensor>> = Vec::with_capacity(held.len());
    for (i, v) in held.iter().enumerate() {
        args.push(match v {
            None => None,
            Some(Value::Tensor(t)) => Some(&**t),
            Some(v) => return Err(v.not(&format!("input {i}"), Kind::Tensor)),
        });
    }
    if plan.check_at_run[index] {
        check_outputs(node.op.as_ref(), &args)?;
    }
    if let Some(part) = plan.joins.part(index) {
        store.joined.write_part(node.op.as_ref(), &args, part)?;
        return Ok(Outs::Tensors(Vec::new()));
    }
    if let Some(join) = plan.joins.join(index) {
        return Ok(Outs::Tensors(vec![store.joined.complete(join, &args)?]));
    }
    node.op.run(&args).map(Outs::Tensors)
}

/// Releases node `index`'s inputs (freeing each after its last reader) and
/// stores its outputs.
fn finish(plan: &Plan, store: &ValueStore, index: usize, held: Vec<Option<Value>>, outs: Outs) {
    let node = &plan.graph.nodes[index];
    drop(held);
    for &input in node.inputs.iter().flatten() {
        store.release(input);
    }
    match outs {
        Outs::Tensors(outs) => {
            for (slot, t) in node.outputs.iter().zip(outs) {
                if let Some(id) = slot {
                    store.put(*id, Value::Tensor(Arc::new(t)));
                }
            }
        }
        Outs::Values(outs) => {
            for (slot, v) in node.outputs.iter().zip(outs) {
                if let Some(id) = slot {
                    store.put(*id, v);
                }
            }
        }
    }
}

/// A node's outputs: tensors from a tensor operator's kernel, or values
/// from an operator that [uses values](crate::ir::Operator::uses_values).
enum Outs {
    Tensors(Vec<Tensor>),
    Values(Vec<Value>),
}

/// A value from the store, or the plan's constant.
pub fn value(plan: &Plan, store: &ValueStore, id: ValueId) -> Option<Value> {
    match plan.graph.constant(id) {
        Some(c) => Some(Value::Tensor(c.clone())),
        None => store.get(id),
    }
}

/// The graph outputs from a finished run.
pub fn collect_outputs(plan: &Plan, store: &ValueStore) -> Result<Vec<Value>> {
    plan.graph
        .outputs
        .iter()
        .map(|&id| {
            value(plan, store, id).ok_or_else(|| {
                Error::InvalidModel(format!(
                    "graph output {:?} was not produced",
                    plan.graph.name(id)
                ))
            })
        })
        .collect()
}
