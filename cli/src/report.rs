//! The JSON report of `ramify bench`: one object with the ramify version, the
//! machine, the settings and every model × mode × load result; the first
//! result's figures are repeated at the top level for one-result callers
//! (scripts/compare.py). Fields are documented in docs/bench-json.md.

use crate::bench::{mean, Measured, Settings};
use serde_json::{json, Map, Value};
use sysinfo::System;

/// Watches the machine while the bench runs.
pub struct Machine(System);

/// What the report says about the machine.
pub struct MachineInfo {
    pub cpu_model: String,
    pub logical_cpus: usize,
    pub physical_cores: Option<usize>,
    /// Whole-system CPU use over the bench, ours included, in [0, 1].
    pub system_cpu_use: f64,
    /// Others' utilisation seen after the runs, in [0, 1] (mean over all).
    pub mean_load_seen: f64,
}

impl Machine {
    /// Starts watching: reads the CPU list and a first usage baseline.
    pub fn start() -> Machine {
        let mut sys = System::new();
        sys.refresh_cpu_all();
        Machine(sys)
    }

    /// The machine's description, with its CPU use since [`start`](Self::start).
    pub fn finish(mut self, results: &[Measured]) -> MachineInfo {
        self.0.refresh_cpu_usage();
        let sys = &self.0;
        let seen: Vec<f64> = results
            .iter()
            .flat_map(|m| m.loads_seen.iter().copied())
            .collect();
        MachineInfo {
            cpu_model: sys
                .cpus()
                .first()
                .map(|c| c.brand().trim().to_string())
                .unwrap_or_default(),
            logical_cpus: sys.cpus().len().max(1),
            physical_cores: sys.physical_core_count(),
            system_cpu_use: f64::from(sys.global_cpu_usage()) / 100.0,
            mean_load_seen: mean(&seen),
        }
    }
}

/// The figures of one result.
pub fn result(m: &Measured) -> Map<String, Value> {
    let s = m.stats();
    let v = json!({
        "model": m.model,
        "mode": m.mode.to_string(),
        "background_load": m.background_load,
        "runs": m.samples.len(),
        "deadline_misses": m.deadline_misses,
        "min_ms": s.min, "mean_ms": s.mean, "p50_ms": s.median, "median_ms": s.median,
        "p90_ms": s.p90, "p95_ms": s.p95, "p99_ms": s.p99, "max_ms": s.max,
        "samples_ms": m.samples,
        "mean_load_seen": mean(&m.loads_seen),
        "loads_seen": m.loads_seen,
        "mean_fork_load": mean(&m.fork_loads),
        "decisions": m.decisions,
    });
    match v {
        Value::Object(o) => o,
        _ => Map::new(),
    }
}

/// The whole report.
pub fn json(settings: &Settings, machine: &MachineInfo, results: &[Measured]) -> Value {
    let mut top = results.first().map(result).unwrap_or_default();
    let distinct = |f: &dyn Fn(&Measured) -> Value| {
        let mut v: Vec<Value> = Vec::new();
        for m in results {
            let x = f(m);
            if !v.contains(&x) {
                v.push(x);
            }
        }
        Value::Array(v)
    };
    let models = distinct(&|m| json!(m.model));
    let modes = distinct(&|m| json!(m.mode.to_string()));
    let loads = distinct(&|m| json!(m.background_load));
    let extra = json!({
        "ramify_version": env!("CARGO_PKG_VERSION"),
        "machine": {
            "cpu_model": machine.cpu_model,
            "logical_cpus": machine.logical_cpus,
            "physical_cores": machine.physical_cores,
            "system_cpu_use": machine.system_cpu_use,
            "mean_load_seen": machine.mean_load_seen,
        },
        "warmup": settings.warmup,
        "cpus": settings.cpus,
        "models": models,
        "modes": modes,
        "background_loads": loads,
        "results": results.iter().map(|m| Value::Object(result(m))).collect::<Vec<_>>(),
    });
    if let Value::Object(extra) = extra {
        top.extend(extra);
    }
    top.insert("runs".into(), json!(settings.runs));
    Value::Object(top)
}
