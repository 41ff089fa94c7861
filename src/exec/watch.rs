//! The watch over one run (seed 000 in the executor): it counts the work
//! done and estimates the work left from the plan's node times, judges the
//! deadline × delay ratio before every operator (on time, hurry onto the
//! fastest plan, or stop early), collects the device-state events that
//! arrive during the run (the monitor's anomalies and changes, and changes
//! from the state at the run's start), and marks the forks not yet started
//! for re-planning when one arrives. Events go to the run report and,
//! without blocking the run, to the caller's sink.

use crate::error::{DeadlineMiss, Error, Result};
use crate::load::{Baseline, LoadEvent, LoadMonitor};
use crate::sched::{DeadlineRule, Verdict};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Plan;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Something that happened during a run, as the run report lists it and
/// the event callback receives it. `at` is the time since the run started.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// A device-state anomaly or change seen during the run.
    Device {
        /// When it was seen.
        at: Duration,
        /// The event.
        event: LoadEvent,
    },
    /// The forks not yet started are decided again, from the load now.
    Replan {
        /// When the next fork started.
        at: Duration,
        /// The utilisation they are decided from.
        load: f64,
        /// Forks of the plan not yet started.
        forks_left: usize,
        /// What made it re-plan.
        cause: String,
    },
    /// The current plan would finish after the deadline × delay ratio and
    /// the fastest plan the load allows would not: the forks not yet
    /// started take the decisions of an idle device (all the session's
    /// CPUs, the makespan check still choosing serial or parallel).
    Hurry {
        /// When it was decided.
        at: Duration,
        /// Estimated time left on the current plan.
        remaining: Duration,
        /// Estimated time left on the fastest plan.
        fastest: Duration,
        /// The time the run may take in all.
        allowed: Duration,
    },
}

impl std::fmt::Display for RunEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: &Duration| d.as_secs_f64() * 1e3;
        match self {
            RunEvent::Device { at, event } => write!(f, "{:.1} ms: {event}", ms(at)),
            RunEvent::Replan {
                at,
                load,
                forks_left,
                cause,
            } => write!(
                f,
                "{:.1} ms: re-planning {forks_left} forks at load {load:.2} ({cause})",
                ms(at)
            ),
            RunEvent::Hurry {
                at,
                remaining,
                fastest,
                allowed,
            } => write!(
                f,
                "{:.1} ms: hurrying: {:.1} ms left on the current plan, {:.1} ms on the \
                 fastest, {:.1} ms allowed",
                ms(at),
                ms(remaining),
                ms(fastest),
                ms(allowed)
            ),
        }
    }
}

/// A run's progress, readable from other threads while it runs.
#[derive(Debug, Default)]
pub struct Progress {
    operators_run: AtomicUsize,
    operators: AtomicUsize,
    items_done: AtomicUsize,
    items: AtomicUsize,
}

impl Progress {
    /// Progress of nothing yet.
    pub fn new() -> Arc<Progress> {
        Arc::new(Progress::default())
    }

    /// Operators run so far in the current run, and the plan's operators.
    pub fn operators(&self) -> (usize, usize) {
        (
            self.operators_run.load(Ordering::Relaxed),
            self.operators.load(Ordering::Relaxed),
        )
    }

    /// Items of a batch finished, and in all (0 and 0 outside batches).
    pub fn items(&self) -> (usize, usize) {
        (
            self.items_done.load(Ordering::Relaxed),
            self.items.load(Ordering::Relaxed),
        )
    }

    /// Sets the batch counters.
    pub fn set_items(&self, done: usize, total: usize) {
        self.items.store(total, Ordering::Relaxed);
        self.items_done.store(done, Ordering::Relaxed);
    }
}

/// What the caller asks of a run beyond its inputs: a deadline, a sink for
/// its events, a progress to update.
#[derive(Debug, Clone, Default)]
pub struct Control {
    /// The deadline and delay ratio, if any.
    pub rule: Option<DeadlineRule>,
    /// Where events go as they happen (never waited on: a full queue drops).
    pub sink: Option<SyncSender<RunEvent>>,
    /// Updated as operators finish.
    pub progress: Option<Arc<Progress>>,
}

/// Seconds to nanoseconds for the atomic work counters.
fn nanos(seconds: f64) -> u64 {
    (seconds.max(0.0) * 1e9) as u64
}

/// The watch over one run in flight (see the module header).
pub struct Watch {
    start: Instant,
    control: Control,
    /// Per node: estimated seconds on the run's current threads and on the
    /// fastest plan (all the session's CPUs); empty without a deadline.
    estimate_now: Vec<f64>,
    estimate_fast: Vec<f64>,
    total_now: f64,
    total_fast: f64,
    done_now: AtomicU64,
    done_fast: AtomicU64,
    operators_run: AtomicUsize,
    operators: usize,
    forks: usize,
    forks_started: AtomicUsize,
    monitor: Arc<LoadMonitor>,
    /// The number of the last monitor event taken in.
    event_seq: AtomicU64,
    /// The monitor's generation when the baseline last saw its readings.
    seen_generation: AtomicU64,
    baseline: Mutex<Baseline>,
    log: Mutex<Vec<RunEvent>>,
    hurry: AtomicBool,
    /// The cause of a re-plan the next fork records.
    replan: Mutex<Option<String>>,
}

impl Watch {
    /// Watches a run of `plan` starting now on `threads` threads of a
    /// session of `cpus` CPUs whose operators speed up by `speedup(k)` on k
    /// threads.
    pub fn start(
        plan: &Plan,
        monitor: &Arc<LoadMonitor>,
        control: Control,
        threads: usize,
        cpus: usize,
        speedup: &dyn Fn(usize) -> f64,
    ) -> Watch {
        let nodes = plan.graph.nodes.len();
        let (estimate_now, estimate_fast): (Vec<f64>, Vec<f64>) = match control.rule {
            Some(_) => (0..nodes)
                .map(|i| {
                    (
                        plan.node_seconds_at(i, threads, speedup),
                        plan.node_seconds_at(i, cpus.max(threads), speedup),
                    )
                })
                .unzip(),
            None => (Vec::new(), Vec::new()),
        };
        if let Some(p) = &control.progress {
            p.operators.store(nodes, Ordering::Relaxed);
            p.operators_run.store(0, Ordering::Relaxed);
        }
        let start_delta = monitor.config().report.start_delta;
        let generation = monitor.generation();
        let baseline = Baseline::new(start_delta, &monitor.readings());
        Watch {
            start: Instant::now(),
            total_now: estimate_now.iter().sum(),
            total_fast: estimate_fast.iter().sum(),
            estimate_now,
            estimate_fast,
            control,
            done_now: AtomicU64::new(0),
            done_fast: AtomicU64::new(0),
            operators_run: AtomicUsize::new(0),
            operators: nodes,
            forks: plan.structure.forks.len(),
            forks_started: AtomicUsize::new(0),
            event_seq: AtomicU64::new(monitor.event_seq()),
            seen_generation: AtomicU64::new(generation),
            monitor: monitor.clone(),
            baseline: Mutex::new(baseline),
            log: Mutex::new(Vec::new()),
            hurry: AtomicBool::new(false),
            replan: Mutex::new(None),
        }
    }

    /// Time since the run started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Whether the forks not yet started should take the decisions of an
    /// idle device (see [`RunEvent::Hurry`]).
    pub fn hurrying(&self) -> bool {
        self.hurry.load(Ordering::Relaxed)
    }

    fn emit(&self, event: RunEvent) {
        if let Some(sink) = &self.control.sink {
            let _ = sink.try_send(event.clone());
        }
        lock(&self.log).push(event);
    }

    /// Before an operator or a fork: takes in the events that arrived,
    /// then judges the deadline. An error stops the run.
    pub fn checkpoint(&self) -> Result<()> {
        self.poll();
        self.judge()
    }

    /// After operator `i` ran.
    pub fn after_operator(&self, i: usize) {
        let run = self.operators_run.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(p) = &self.control.progress {
            p.operators_run.store(run, Ordering::Relaxed);
        }
        if let (Some(now), Some(fast)) = (self.estimate_now.get(i), self.estimate_fast.get(i)) {
            self.done_now.fetch_add(nanos(*now), Ordering::Relaxed);
            self.done_fast.fetch_add(nanos(*fast), Ordering::Relaxed);
        }
    }

    /// At the start of a fork decided from utilisation `load`: records a
    /// pending re-plan, if an event asked for one.
    pub fn fork_started(&self, load: f64) {
        let started = self.forks_started.fetch_add(1, Ordering::Relaxed);
        let cause = lock(&self.replan).take();
        if let Some(cause) = cause {
            self.emit(RunEvent::Replan {
                at: self.elapsed(),
                load,
                forks_left: self.forks.saturating_sub(started),
                cause,
            });
        }
    }

    /// Device events that arrived: the monitor's, and changes from the
    /// state at the start of the run when new values came in.
    fn poll(&self) {
        // Two atomic loads when nothing new arrived (the common case).
        let mut seen = Vec::new();
        let last = self.event_seq.load(Ordering::Acquire);
        if self.monitor.event_seq() != last {
            let (events, seq) = self.monitor.events_since(last);
            // Whoever moves the number first takes the events.
            if self
                .event_seq
                .compare_exchange(last, seq, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                seen = events;
            }
        }
        let generation = self.monitor.generation();
        if self.seen_generation.swap(generation, Ordering::AcqRel) != generation {
            let mut base = lock(&self.baseline);
            for (m, s, v) in self.monitor.readings() {
                base.observe(m, s, v, &mut seen);
            }
        }
        if seen.is_empty() {
            return;
        }
        let at = self.elapsed();
        let cause = seen
            .iter()
            .map(|e| format!("{} {}", e.metric().name(), e.kind()))
            .collect::<Vec<_>>()
            .join(", ");
        for event in seen {
            self.emit(RunEvent::Device { at, event });
        }
        *lock(&self.replan) = Some(cause);
    }

    /// Seed 000's check: can the work left still finish within the deadline
    /// × delay ratio?
    fn judge(&self) -> Result<()> {
        let Some(rule) = self.control.rule else {
            return Ok(());
        };
        let elapsed = self.elapsed();
        let done = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 * 1e-9;
        let now = (self.total_now - done(&self.done_now)).max(0.0);
        let fast = (self.total_fast - done(&self.done_fast)).max(0.0);
        let remaining = if self.hurrying() { fast } else { now };
        match rule.judge(elapsed, remaining, fast) {
            Verdict::OnTime => Ok(()),
            Verdict::Hurry => {
                if !self.hurry.swap(true, Ordering::Relaxed) {
                    self.emit(RunEvent::Hurry {
                        at: elapsed,
                        remaining: Duration::from_secs_f64(now),
                        fastest: Duration::from_secs_f64(fast),
                        allowed: rule.allowed(),
                    });
                    *lock(&self.replan) = Some("hurrying for the deadline".into());
                }
                Ok(())
            }
            Verdict::Miss => Err(Error::Deadline(Box::new(DeadlineMiss {
                reason: format!(
                    "cannot finish within {:.1} ms (deadline {:.1} ms x delay ratio {})",
                    rule.allowed().as_secs_f64() * 1e3,
                    rule.deadline.as_secs_f64() * 1e3,
                    rule.delay_ratio
                ),
                elapsed,
                operators_run: self.operators_run.load(Ordering::Relaxed),
                operators: self.operators,
                remaining: Some(Duration::from_secs_f64(fast.min(now))),
            }))),
        }
    }

    /// Adds the run's progress to a deadline error that lacks it.
    pub fn locate(&self, e: Error) -> Error {
        match e {
            Error::Deadline(mut miss) if miss.operators == 0 => {
                miss.operators_run = self.operators_run.load(Ordering::Relaxed);
                miss.operators = self.operators;
                Error::Deadline(miss)
            }
            e => e,
        }
    }

    /// The events of the run, in order (the last poll included).
    pub fn finish(&self) -> Vec<RunEvent> {
        self.poll();
        std::mem::take(&mut *lock(&self.log))
    }
}
