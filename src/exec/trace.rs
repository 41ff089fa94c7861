//! Timelines of runs: one span per operator on the thread that ran it and one
//! span per fork carrying its decision (the command line writes them as Chrome
//! trace event JSON, for Perfetto or chrome://tracing).

use crate::sched::ForkReport;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One span of a trace.
#[derive(Debug, Clone)]
pub struct Span {
    /// Node name, or `fork N`.
    pub name: String,
    /// Operator type, or `fork`.
    pub category: String,
    /// Small id of the thread that ran it.
    pub thread: u64,
    /// That thread's name.
    pub thread_name: String,
    /// Start, microseconds since the run began.
    pub start_us: f64,
    /// Duration in microseconds.
    pub dur_us: f64,
    /// The decision, for fork spans.
    pub fork: Option<ForkReport>,
}

/// The spans of one run.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Every span, in the order they ended.
    pub spans: Vec<Span>,
}

fn thread_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static ID: Cell<u64> = const { Cell::new(0) });
    ID.with(|id| {
        if id.get() == 0 {
            id.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        id.get()
    })
}

/// Collects spans while a run is in flight.
pub(crate) struct Recorder {
    origin: Instant,
    spans: Mutex<Vec<Span>>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            origin: Instant::now(),
            spans: Mutex::new(Vec::new()),
        }
    }

    pub fn record(&self, name: &str, category: &str, start: Instant, fork: Option<ForkReport>) {
        let end = Instant::now();
        let span = Span {
            name: name.to_string(),
            category: category.to_string(),
            thread: thread_id(),
            thread_name: std::thread::current()
                .name()
                .unwrap_or("caller")
                .to_string(),
            start_us: start.duration_since(self.origin).as_secs_f64() * 1e6,
            dur_us: end.duration_since(start).as_secs_f64() * 1e6,
            fork,
        };
        self.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(span);
    }

    pub fn finish(self) -> Trace {
        Trace {
            spans: self.spans.into_inner().unwrap_or_else(|e| e.into_inner()),
        }
    }
}
