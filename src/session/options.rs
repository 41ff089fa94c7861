//! Options of one run ([`RunOptions`]): a hard time limit, a deadline with
//! its delay ratio (seed 000), a cancellation token, a progress to follow
//! and an event callback; and the dispatcher that calls the callback on its
//! own thread, so that the run never waits for it.

use crate::error::{Error, Result};
use crate::exec::{Control, Progress, RunEvent};
use crate::ops::interrupt::CancelToken;
use crate::ops::overflow::Int8Settings;
use crate::sched::{DeadlineRule, DEFAULT_DELAY_RATIO};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Called with each event of a run (see [`RunOptions::on_event`]).
pub type EventCallback = Arc<dyn Fn(&RunEvent) + Send + Sync>;

/// Events a run can have waiting for a slow callback before further ones
/// are dropped (the report lists them all).
pub const CALLBACK_QUEUE: usize = 256;

/// Options of one run: a time limit, a deadline and its delay ratio, a
/// cancellation token, a progress and an event callback.
///
/// ```no_run
/// use ramify::{CancelToken, RunOptions, Session, Tensor};
/// use std::time::Duration;
/// let session = Session::from_file("models/inception_mini.onnx")?;
/// let token = CancelToken::new();
/// let options = RunOptions::new()
///     .deadline(Duration::from_millis(30))
///     .cancel(token.clone())
///     .on_event(|e| eprintln!("{e}"));
/// // Another thread may call token.cancel() to stop the run.
/// let input = Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96]);
/// let (outputs, report) = session.run_with_options([("input", input)], &options)?;
/// # Ok::<(), ramify::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct RunOptions {
    pub(super) time_limit: Option<Duration>,
    pub(super) cancel: Option<CancelToken>,
    deadline: Option<Duration>,
    delay_ratio: Option<f64>,
    pub(super) progress: Option<Arc<Progress>>,
    callback: Option<EventCallback>,
    pub(super) traced: bool,
    pub(super) int8: Int8Settings,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("time_limit", &self.time_limit)
            .field("cancel", &self.cancel)
            .field("deadline", &self.deadline)
            .field("delay_ratio", &self.delay_ratio)
            .field("callback", &self.callback.is_some())
            .field("traced", &self.traced)
            .field("int8", &self.int8)
            .finish()
    }
}

impl RunOptions {
    /// No limit, no deadline, no token (the session's time limit, if any,
    /// applies).
    pub fn new() -> RunOptions {
        RunOptions::default()
    }

    /// Stops the run with [`Error::Deadline`] once it has taken `limit`,
    /// wherever it is.
    pub fn time_limit(mut self, limit: Duration) -> RunOptions {
        self.time_limit = Some(limit);
        self
    }

    /// Stops the run with [`Error::Cancelled`] at the next operator (or
    /// loop iteration) once `token` is cancelled.
    pub fn cancel(mut self, token: CancelToken) -> RunOptions {
        self.cancel = Some(token);
        self
    }

    /// The time the run is planned to take (seed 000). Before every
    /// operator the run checks whether the time taken plus the estimated
    /// time of the operators left fits the deadline × the
    /// [delay ratio](Self::delay_ratio); when only the fastest plan the
    /// load allows would fit, the forks not yet started take it
    /// ([`RunEvent::Hurry`]); when not even that would, the run stops at
    /// once with [`Error::Deadline`], saying how far it got and the
    /// estimate that decided. The estimates are the plan's measured
    /// operator times (the cost model's before the first runs).
    pub fn deadline(mut self, deadline: Duration) -> RunOptions {
        self.deadline = Some(deadline);
        self
    }

    /// How far past its deadline a run may go, as a ratio of at least 1
    /// (default [`DEFAULT_DELAY_RATIO`], 1.5: 150 %).
    pub fn delay_ratio(mut self, ratio: f64) -> RunOptions {
        self.delay_ratio = Some(ratio);
        self
    }

    /// Updates `progress` as the run goes (operators run, of how many), for
    /// another thread to read.
    pub fn progress(mut self, progress: Arc<Progress>) -> RunOptions {
        self.progress = Some(progress);
        self
    }

    /// Calls `callback` with each event of the run: device-state anomalies
    /// and changes seen while it runs, re-plans and hurries. It is called
    /// on a thread of its own (`ramify-events`), in order, never after the
    /// run has returned; the run does not wait for it, but returns only
    /// once it has handled the events delivered. It may push host state or
    /// cancel the run; it must not start a run of the same session and
    /// wait for it. A panic in it is caught and ends the delivery.
    pub fn on_event(mut self, callback: impl Fn(&RunEvent) + Send + Sync + 'static) -> RunOptions {
        self.callback = Some(Arc::new(callback));
        self
    }

    /// Records a timeline of the run (one span per operator and per fork)
    /// in its report, as [`Session::run_traced`](super::Session::run_traced)
    /// does.
    pub fn trace(mut self, on: bool) -> RunOptions {
        self.traced = on;
        self
    }

    /// The int8 micro-kernel and overflow guard for this run (default:
    /// the fastest exact kernel, guard on). The report counts the tiles the
    /// guard recomputed ([`RunReport::int8_recomputed`](super::RunReport)).
    ///
    /// ```
    /// use ramify::{Int8Kernel, Int8Settings, RunOptions};
    /// let narrow = RunOptions::new().int8(Int8Settings {
    ///     kernel: Int8Kernel::Narrow,
    ///     guard: true,
    /// });
    /// # let _ = narrow;
    /// ```
    pub fn int8(mut self, settings: Int8Settings) -> RunOptions {
        self.int8 = settings;
        self
    }

    /// The deadline rule in force, checked.
    pub(super) fn rule(&self) -> Result<Option<DeadlineRule>> {
        let Some(deadline) = self.deadline else {
            if self.delay_ratio.is_some() {
                return Err(Error::Config(
                    "a delay ratio was given without a deadline".into(),
                ));
            }
            return Ok(None);
        };
        let rule = DeadlineRule {
            deadline,
            delay_ratio: self.delay_ratio.unwrap_or(DEFAULT_DELAY_RATIO),
        };
        rule.validate().map_err(Error::Config)?;
        Ok(Some(rule))
    }

    /// The executor's control for one run, and the dispatcher feeding the
    /// callback (which the run keeps until it returns).
    pub(super) fn control(&self) -> Result<(Control, Dispatcher)> {
        let dispatcher = Dispatcher::start(self.callback.clone());
        Ok((
            Control {
                rule: self.rule()?,
                sink: dispatcher.sink.clone(),
                progress: self.progress.clone(),
            },
            dispatcher,
        ))
    }
}

/// Calls an event callback on its own thread; dropping it waits for the
/// events already sent to be handled.
pub(super) struct Dispatcher {
    sink: Option<SyncSender<RunEvent>>,
    thread: Option<JoinHandle<()>>,
}

impl Dispatcher {
    fn start(callback: Option<EventCallback>) -> Dispatcher {
        let Some(callback) = callback else {
            return Dispatcher {
                sink: None,
                thread: None,
            };
        };
        let (tx, rx) = sync_channel::<RunEvent>(CALLBACK_QUEUE);
        let thread = std::thread::Builder::new()
            .name("ramify-events".into())
            .spawn(move || {
                let _ = catch_unwind(AssertUnwindSafe(|| {
                    for event in rx {
                        callback(&event);
                    }
                }));
            })
            .ok();
        Dispatcher {
            // No thread, no delivery: the report still lists the events.
            sink: thread.as_ref().map(|_| tx),
            thread,
        }
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.sink = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
