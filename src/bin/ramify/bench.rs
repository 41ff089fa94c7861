//! `ramify bench`: latency over repeated runs, as text or one JSON object.

use crate::inputs;
use crate::stats::Stats;
use anyhow::{Context, Result};
use clap::Args;
use ramify::Session;
use std::path::PathBuf;
use std::time::Instant;

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
    /// Number of CPU threads to use (default: all).
    #[arg(long, alias = "cpus")]
    threads: Option<usize>,
    /// Folder with input_0.pb, … (default: synthesised inputs).
    #[arg(long)]
    input_dir: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn main(a: BenchArgs) -> Result<()> {
    let model = a.model.unwrap_or_else(crate::default_model);
    let mut builder = Session::builder();
    if let Some(n) = a.threads {
        builder = builder.threads(n);
    }
    let session = builder
        .build_from_file(&model)
        .with_context(|| format!("loading {}", model.display()))?;
    let feeds = inputs::load(&session, a.input_dir.as_deref())?;
    for _ in 0..a.warmup {
        session.run(feeds.clone())?;
    }
    let mut samples = Vec::with_capacity(a.runs);
    for _ in 0..a.runs.max(1) {
        let inputs = feeds.clone();
        let t = Instant::now();
        session.run(inputs)?;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let s = Stats::of(&samples);
    if a.json {
        let v = serde_json::json!({
            "model": model.display().to_string(),
            "runs": samples.len(),
            "warmup": a.warmup,
            "threads": a.threads.unwrap_or_else(num_cpus_hint),
            "min_ms": s.min, "mean_ms": s.mean, "median_ms": s.median,
            "p90_ms": s.p90, "p95_ms": s.p95, "p99_ms": s.p99, "max_ms": s.max,
            "samples_ms": samples,
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
