//! `ramify bench`: latency over repeated runs, as text or one JSON object.

use crate::burn::Burners;
use crate::inputs;
use crate::options::SchedArgs;
use crate::stats::Stats;
use anyhow::{Context, Result};
use clap::Args;
use ramify::sched::Decision;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct BenchArgs {
    /// The model file (default: the example model in models/).
    model: Option<PathBuf>,
    /// Timed runs.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Untimed runs before timing.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    #[command(flatten)]
    sched: SchedArgs,
    /// Folder with input_0.pb, … (default: test_data_set_0 beside the model if
    /// present, else synthesised inputs).
    #[arg(long)]
    input_dir: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Print the decision taken at each fork (load, band, mode, pool sizes).
    #[arg(long)]
    verbose: bool,
    /// Busy processes to run in the background while measuring.
    #[arg(long, default_value_t = 0)]
    background_load: usize,
}

pub fn main(a: BenchArgs) -> Result<()> {
    let model = a.model.unwrap_or_else(crate::default_model);
    let builder = a.sched.builder();
    let session = builder
        .build_from_file(&model)
        .with_context(|| format!("loading {}", model.display()))?;
    let input_dir = a.input_dir.clone().or_else(|| inputs::beside(&model));
    let feeds = inputs::load(&session, input_dir.as_deref())?;
    let _load = Burners::start(a.background_load, Duration::from_secs(900))?;
    for _ in 0..a.warmup {
        session.run(feeds.clone())?;
    }
    let mut samples = Vec::with_capacity(a.runs);
    let mut decisions: BTreeMap<String, usize> = BTreeMap::new();
    let mut loads = Vec::with_capacity(a.runs);
    for _ in 0..a.runs.max(1) {
        let inputs = feeds.clone();
        let t = Instant::now();
        let (_, report) = session.run_with_report(inputs)?;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
        loads.extend(report.forks.iter().map(|f| f.load));
        for f in &report.forks {
            let what = match &f.decision {
                Decision::Parallel(p) => format!(
                    "parallel {:?}",
                    p.iter().map(|p| p.cpus).collect::<Vec<_>>()
                ),
                Decision::Serial { threads } => format!("serial on {threads}"),
            };
            *decisions
                .entry(format!(
                    "fork {:>3} band {:<4} {what}",
                    f.fork,
                    f.band.to_string()
                ))
                .or_default() += 1;
        }
    }
    drop(_load);
    let s = Stats::of(&samples);
    let mean_load = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
    if a.verbose {
        eprintln!(
            "fork decisions over {} runs (mean load seen {mean_load:.2}):",
            samples.len()
        );
        for (k, v) in &decisions {
            eprintln!("  {k}  x{v}");
        }
    }
    if a.json {
        let v = serde_json::json!({
            "model": model.display().to_string(),
            "runs": samples.len(),
            "warmup": a.warmup,
            "cpus": a.sched.cpus.unwrap_or_else(num_cpus_hint),
            "mode": a.sched.mode.to_string(),
            "min_ms": s.min, "mean_ms": s.mean, "median_ms": s.median,
            "p90_ms": s.p90, "p95_ms": s.p95, "p99_ms": s.p99, "max_ms": s.max,
            "samples_ms": samples,
            "background_load": a.background_load,
            "mean_load_seen": mean_load,
        });
        println!("{v}");
    } else {
        println!(
            "{}: {} runs, median {:.3} ms, p95 {:.3} ms (min {:.3}, mean {:.3}, max {:.3})",
            model.display(),
            samples.len(),
            s.median,
            s.p95,
            s.min,
            s.mean,
            s.max
        );
    }
    Ok(())
}

fn num_cpus_hint() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
