//! Timelines of runs: one span per operator on the thread that ran it and one
//! span per fork carrying its decision, exportable as Chrome trace event JSON
//! (opens in Perfetto or chrome://tracing).

use crate::sched::{Decision, ForkReport};
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

impl Trace {
    /// The trace as Chrome trace event JSON: complete ("X") events, one per
    /// span, with thread-name metadata; fork spans carry their decision
    /// (load, band, mode, pool sizes) in `args`.
    pub fn to_chrome_json(&self) -> String {
        use serde_json::json;
        let mut events = Vec::with_capacity(self.spans.len() + 8);
        let mut named = std::collections::BTreeMap::new();
        for s in &self.spans {
            named
                .entry(s.thread)
                .or_insert_with(|| s.thread_name.clone());
            let mut e = json!({
                "name": s.name, "cat": s.category, "ph": "X",
                "ts": s.start_us, "dur": s.dur_us, "pid": 1, "tid": s.thread,
            });
            if let Some(f) = &s.fork {
                let mode = match f.decision {
                    Decision::Parallel(_) => "parallel",
                    Decision::Serial { .. } => "serial",
                };
                e["args"] = json!({
                    "fork": f.fork, "load": f.load, "band": f.band.to_string(),
                    "mode": mode, "pool_sizes": f.decision.pool_sizes(),
                });
            }
            events.push(e);
        }
        for (tid, name) in named {
            events.push(json!({
                "name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                "args": { "name": name },
            }));
        }
        json!({ "traceEvents": events, "displayTimeUnit": "ms" }).to_string()
    }
}
