//! `ramify watch`: prints the device state and then its events (seed 000's
//! anomalies and changes, from the sampler and from sysfs) as JSON lines,
//! until interrupted or for a given time.

use anyhow::{bail, Result};
use clap::Args;
use ramify::load::{LoadConfig, LoadEvent, LoadMonitor, ReportConfig, Since};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

// The defaults are the library's (`LoadConfig::default`,
// `ReportConfig::default`), so the command line and an app agree.
#[derive(Args)]
pub struct WatchArgs {
    /// Time between two samples, in milliseconds.
    #[arg(long, default_value_t = LoadConfig::default().period.as_millis() as f64, value_name = "MS")]
    period: f64,
    /// Stop after this many seconds (default: until interrupted).
    #[arg(long, value_name = "SECONDS")]
    seconds: Option<f64>,
    /// CPU use by others above which it is an anomaly.
    #[arg(long, default_value_t = ReportConfig::default().cpu_threshold)]
    cpu_threshold: f64,
    /// Memory use above which it is an anomaly.
    #[arg(long, default_value_t = ReportConfig::default().memory_threshold)]
    memory_threshold: f64,
    /// Battery level below which it is an anomaly.
    #[arg(long, default_value_t = ReportConfig::default().battery_threshold)]
    battery_threshold: f64,
    /// Thermal state above which it is an anomaly.
    #[arg(long, default_value_t = ReportConfig::default().thermal_threshold)]
    thermal_threshold: f64,
    /// A change is reported when a value moved more than this since its
    /// last report.
    #[arg(long, default_value_t = ReportConfig::default().delta)]
    delta: f64,
}

/// One event as a JSON object.
pub fn event_json(event: &LoadEvent, at: Duration) -> Value {
    let mut v = json!({
        "type": event.kind(),
        "metric": event.metric().name(),
        "value": event.value(),
        "source": event.source().name(),
        "at_ms": at.as_secs_f64() * 1e3,
        "message": event.to_string(),
    });
    match event {
        LoadEvent::Anomaly { threshold, .. } => v["threshold"] = json!(threshold),
        LoadEvent::Change {
            previous, since, ..
        } => {
            v["previous"] = json!(previous);
            v["since"] = json!(match since {
                Since::LastReport => "last_report",
                Since::RunStart => "run_start",
            });
        }
    }
    v
}

pub fn main(a: WatchArgs) -> Result<()> {
    if !(a.period.is_finite() && a.period > 0.0) {
        bail!("--period must be a positive number of milliseconds");
    }
    let config = LoadConfig {
        period: Duration::from_secs_f64(a.period.min(3.6e6) / 1e3),
        idle_after: None,
        report: ReportConfig {
            cpu_threshold: a.cpu_threshold,
            memory_threshold: a.memory_threshold,
            battery_threshold: a.battery_threshold,
            thermal_threshold: a.thermal_threshold,
            delta: a.delta,
            ..ReportConfig::default()
        },
        ..LoadConfig::default()
    };
    let start = Instant::now();
    let monitor = LoadMonitor::start(config);
    let events = monitor.subscribe();
    let mut state = serde_json::Map::new();
    state.insert("type".into(), json!("state"));
    for (metric, _, value) in monitor.readings() {
        state.insert(metric.name().into(), json!(value));
    }
    state.insert("utilisation".into(), json!(monitor.utilisation()));
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", Value::Object(state))?;
    out.flush()?;
    let end = a
        .seconds
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| start + Duration::from_secs_f64(s.min(1e9)));
    loop {
        let wait = match end {
            Some(end) => match end.checked_duration_since(Instant::now()) {
                Some(w) => w,
                None => return Ok(()),
            },
            None => Duration::from_secs(3600),
        };
        match events.recv_timeout(wait) {
            Ok(event) => {
                writeln!(out, "{}", event_json(&event, start.elapsed()))?;
                out.flush()?;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}
