//! `ramify bench --stream N [--pipeline K]`: throughput on a stream of N
//! inputs, each of ramify's modes running the items one after another on
//! the session's CPUs, against the model split into K parts and run as a
//! pipeline (stage `i` on CPUs of its own). Rounds alternate the targets
//! (order rotating), so the noise of a shared machine falls on all alike;
//! the report gives each target's median throughput and the pipeline's
//! per-round ratio to the best other target (median, spread, worst).

use crate::inputs;
use crate::stats::Stats;
use anyhow::{Context, Result};
use ramify::analysis::PartitionOptions;
use ramify::{Mode, Pipeline, Session, Tensor};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// How a stream is run.
enum Runner {
    Session(Mode, Box<Session>),
    Pipeline(usize, Pipeline),
}

impl Runner {
    fn label(&self) -> String {
        match self {
            Runner::Session(mode, _) => mode.to_string(),
            Runner::Pipeline(k, _) => format!("pipeline {k}"),
        }
    }

    /// Runs `n` items of `feeds` and returns the seconds taken.
    fn stream(&self, feeds: &[(String, Arc<Tensor>)], n: usize) -> Result<f64> {
        let start = Instant::now();
        match self {
            Runner::Session(_, session) => {
                for _ in 0..n {
                    let mut outputs = ramify::Outputs::new();
                    session.run_bound(
                        feeds.iter().cloned(),
                        &mut outputs,
                        &ramify::RunOptions::new(),
                    )?;
                }
            }
            Runner::Pipeline(_, pipeline) => {
                let mut failed = None;
                pipeline.run_stream((0..n).map(|_| feeds.to_vec()), |_, r| {
                    if let Err(e) = r {
                        failed.get_or_insert(e);
                    }
                });
                if let Some(e) = failed {
                    return Err(e.into());
                }
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }
}

/// What the stream bench needs from `bench`'s arguments.
pub struct StreamArgs<'a> {
    pub items: usize,
    pub pipeline: Option<usize>,
    pub rounds: usize,
    pub modes: &'a [Mode],
    pub sched: &'a crate::options::SchedArgs,
    pub input_dir: Option<&'a Path>,
    pub critical: ramify::analysis::Critical,
}

pub fn main(a: &StreamArgs, models: &[PathBuf]) -> Result<()> {
    for model in models {
        measure(a, model).with_context(|| format!("streaming {}", model.display()))?;
    }
    Ok(())
}

fn measure(a: &StreamArgs, model: &Path) -> Result<()> {
    let mut runners = Vec::new();
    for &mode in a.modes {
        let mut sched = a.sched.clone();
        sched.mode = mode;
        runners.push(Runner::Session(
            mode,
            Box::new(sched.builder().build_from_file(model)?),
        ));
    }
    let cpus = cpus_of(runners.first().map(|r| match r {
        Runner::Session(_, s) => s.cpu_set(),
        Runner::Pipeline(..) => Vec::new(),
    }));
    if let Some(k) = a.pipeline {
        let options = PartitionOptions {
            parts: k,
            ..PartitionOptions::default()
        };
        let split = ramify::partition_model(model, &options, a.critical)?;
        let pipeline = Pipeline::new(&split, &a.sched.builder(), &cpus)?;
        runners.push(Runner::Pipeline(k, pipeline));
    }
    let probe = Session::from_file(model)?;
    let dir = a
        .input_dir
        .map(Path::to_path_buf)
        .or_else(|| inputs::beside(model));
    let feeds: Vec<(String, Arc<Tensor>)> = inputs::load(&probe, dir.as_deref())?
        .into_iter()
        .map(|(n, t)| (n, Arc::new(t)))
        .collect();
    drop(probe);
    for r in &runners {
        r.stream(&feeds, a.items.min(10))?; // warm-up: plans, buffers, caches
    }
    let mut seconds = vec![Vec::new(); runners.len()];
    for round in 0..a.rounds.max(1) {
        for k in 0..runners.len() {
            let i = (k + round) % runners.len();
            seconds[i].push(runners[i].stream(&feeds, a.items)?);
        }
    }
    println!(
        "{}: stream of {} inputs, {} rounds, CPUs {:?}",
        model.display(),
        a.items,
        a.rounds.max(1),
        cpus
    );
    for (r, s) in runners.iter().zip(&seconds) {
        let per_second: Vec<f64> = s.iter().map(|t| a.items as f64 / t).collect();
        let st = Stats::of(&per_second);
        println!(
            "  {:<12} median {:>8.1} inputs/s ({:.3} ms per input), min {:.1}, max {:.1}",
            r.label(),
            st.median,
            1e3 / st.median,
            st.min,
            st.max
        );
    }
    if a.pipeline.is_some() && runners.len() > 1 {
        let last = runners.len() - 1;
        // Per round: the pipeline's throughput over the best other target's.
        let ratios: Vec<f64> = (0..seconds[last].len())
            .map(|round| {
                let best = (0..last)
                    .map(|i| seconds[i][round])
                    .fold(f64::INFINITY, f64::min);
                best / seconds[last][round]
            })
            .collect();
        let st = Stats::of(&ratios);
        println!(
            "  pipeline / best other mode, throughput per round: median {:.3}x (min {:.3}, max {:.3})",
            st.median, st.min, st.max
        );
    }
    Ok(())
}

/// The CPUs the pipeline's stages share: the sessions' own set.
fn cpus_of(set: Option<Vec<usize>>) -> Vec<usize> {
    match set {
        Some(s) if !s.is_empty() => s,
        _ => ramify::available_cpus(),
    }
}
