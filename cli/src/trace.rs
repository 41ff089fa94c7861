//! Chrome trace event JSON of a run's [`Trace`] (opens in Perfetto or
//! chrome://tracing): complete ("X") events, one per span, with thread-name
//! metadata; fork spans carry their decision in `args`.

use ramify::exec::Trace;
use ramify::sched::Decision;
use serde_json::json;

/// The trace as Chrome trace event JSON: fork spans carry their decision
/// (load, band, mode, pool sizes) in `args`.
pub fn chrome_json(trace: &Trace) -> String {
    let mut events = Vec::with_capacity(trace.spans.len() + 8);
    let mut named = std::collections::BTreeMap::new();
    for s in &trace.spans {
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
