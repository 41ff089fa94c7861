//! `ramify bench`: the latency of one or more models in one or more
//! scheduling modes over repeated runs (modes interleaved run by run), at one
//! or more levels of background load; printed as text or as one JSON object
//! (`report.rs`), with an optional Chrome trace of one run and an SVG plot
//! (`plot.rs`).

use crate::burn::Burners;
use crate::inputs;
use crate::options::{DeadlineArgs, SchedArgs};
use crate::stats::Stats;
use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use ramify::load::{LoadConfig, LoadMonitor};
use ramify::sched::{Decision, SoloWay};
use ramify::tensor::recycle::recycle;
use ramify::{Mode, RunOptions, RunReport, Session, Tensor};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct BenchArgs {
    /// Model files (default: the example model in models/).
    models: Vec<PathBuf>,
    /// Timed runs per model, mode and load level.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Untimed runs before timing (per model, mode and load level).
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    #[command(flatten)]
    sched: SchedArgs,
    #[command(flatten)]
    deadline: DeadlineArgs,
    /// Several modes in one call, interleaved run by run, e.g.
    /// `adaptive,serial,parallel` (replaces --mode).
    #[arg(long, value_delimiter = ',')]
    modes: Vec<Mode>,
    /// Folder with input_0.pb, … (default: test_data_set_0 beside each model
    /// if present, else synthesised inputs).
    #[arg(long)]
    input_dir: Option<PathBuf>,
    /// Print one JSON object instead of text (fields: docs/bench-json.md).
    #[arg(long)]
    json: bool,
    /// Also write the JSON object to this file.
    #[arg(long, value_name = "FILE")]
    json_file: Option<PathBuf>,
    /// Print the decision taken at each fork (load, band, mode, pool sizes).
    #[arg(long)]
    verbose: bool,
    /// Busy processes to run in the background while measuring; a comma
    /// list (e.g. 0,1,2) measures every level in turn.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    background_load: Vec<usize>,
    /// Write a Chrome trace (Perfetto, chrome://tracing) of one run of the
    /// first model in the first mode to this file.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Measure throughput on a stream of this many inputs instead of
    /// latency: each mode runs the items one after another, a pipeline
    /// (`--pipeline`) runs them through its stages.
    #[arg(long, value_name = "N")]
    stream: Option<usize>,
    /// With --stream: also split the model into K parts (seed 004) and run
    /// them as a pipeline, stage i on CPUs of its own.
    #[arg(long, value_name = "K", requires = "stream")]
    pipeline: Option<usize>,
    /// With --stream: which edges the partition treats as critical
    /// (`bytes:N` or `path`).
    #[arg(long, default_value = crate::partition::DEFAULT_CRITICAL, value_parser = crate::partition::parse_critical)]
    critical: ramify::analysis::Critical,
    /// With --stream: rounds, each running every target's stream once.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Write an SVG plot: latency distribution per mode and, with several
    /// background-load levels, median and p95 against load.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// The samples of one model in one mode at one background-load level.
pub struct Measured {
    pub model: String,
    pub mode: Mode,
    pub background_load: usize,
    /// Run times in milliseconds, in the order taken (runs that missed
    /// their deadline not included).
    pub samples: Vec<f64>,
    /// Timed runs stopped early by `--deadline`.
    pub deadline_misses: usize,
    /// Others' utilisation read after each run from the load monitor the
    /// bench and its sessions share.
    pub loads_seen: Vec<f64>,
    /// The utilisation the scheduler read at each fork (adaptive mode only).
    pub fork_loads: Vec<f64>,
    /// How often each fork decision was taken.
    pub decisions: BTreeMap<String, usize>,
}

impl Measured {
    pub fn stats(&self) -> Stats {
        Stats::of(&self.samples)
    }
}

/// One model loaded in one mode.
struct Target {
    model: usize,
    mode: Mode,
    session: Session,
    /// The inputs, shared: runs read them in place, with no copy per run.
    feeds: Vec<(String, Arc<Tensor>)>,
}

/// The settings the report needs besides the results.
pub struct Settings {
    pub runs: usize,
    pub warmup: usize,
    pub cpus: usize,
}

/// The mean of `v` (0 when empty).
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0; // not the -0.0 an empty float sum gives
    }
    v.iter().sum::<f64>() / v.len() as f64
}

fn decision_key(f: &ramify::sched::ForkReport) -> String {
    let describe = |d: &Decision| match d {
        Decision::Parallel(p) => format!(
            "parallel {:?}",
            p.iter().map(|p| p.cpus).collect::<Vec<_>>()
        ),
        Decision::Serial { threads } => format!("serial on {threads}"),
    };
    let what = describe(&f.decision);
    let explored = match &f.explored_from {
        Some(d) => format!(" (exploring; the check chose {})", describe(d)),
        None => String::new(),
    };
    let cpus = if f.cpus.is_empty() {
        String::new()
    } else {
        format!(" on CPUs {:?}", f.cpus)
    };
    format!(
        "fork {:>3} band {:<4} {what}{explored}, placement {}{cpus}",
        f.fork,
        f.band.to_string(),
        f.placement
    )
}

/// Time for the load monitor to settle on a new background load.
const SETTLE: Duration = Duration::from_millis(1200);

/// Loads every model in every mode; all the sessions read the load from
/// `monitor`, the one sampler thread of the bench.
fn load_targets(
    a: &BenchArgs,
    models: &[PathBuf],
    modes: &[Mode],
    monitor: &Arc<LoadMonitor>,
) -> Result<Vec<Target>> {
    let mut targets = Vec::new();
    for (i, model) in models.iter().enumerate() {
        for &mode in modes {
            let mut sched = a.sched.clone();
            sched.mode = mode;
            let session = sched
                .builder()
                .load_monitor(Arc::clone(monitor))
                .build_from_file(model)
                .with_context(|| format!("loading {}", model.display()))?;
            let dir = a.input_dir.clone().or_else(|| inputs::beside(model));
            let feeds = inputs::load(&session, dir.as_deref())?
                .into_iter()
                .map(|(n, t)| (n, Arc::new(t)))
                .collect();
            targets.push(Target {
                model: i,
                mode,
                session,
                feeds,
            });
        }
    }
    Ok(targets)
}

fn progress(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} runs, {elapsed} (eta {eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Measures every target at one background-load level: warm-up, then the
/// timed runs, the targets of a model interleaved run by run (the order
/// rotating so that no mode always runs first).
fn measure_level(
    a: &BenchArgs,
    targets: &[Target],
    level: usize,
    monitor: &LoadMonitor,
    bar: &ProgressBar,
) -> Result<Vec<Measured>> {
    let mut out: Vec<Measured> = targets
        .iter()
        .map(|t| Measured {
            model: String::new(),
            mode: t.mode,
            background_load: level,
            samples: Vec::with_capacity(a.runs),
            deadline_misses: 0,
            loads_seen: Vec::with_capacity(a.runs),
            fork_loads: Vec::new(),
            decisions: BTreeMap::new(),
        })
        .collect();
    let runs = a.runs.max(1);
    let options = a.deadline.options()?;
    let models = targets.iter().map(|t| t.model).max().map_or(0, |m| m + 1);
    for model in 0..models {
        let group: Vec<usize> = (0..targets.len())
            .filter(|&i| targets[i].model == model)
            .collect();
        for &i in &group {
            for _ in 0..a.warmup {
                timed(&targets[i], &RunOptions::default())?;
                bar.inc(1);
            }
        }
        for r in 0..runs {
            for k in 0..group.len() {
                let i = group[(r + k) % group.len()];
                let m = &mut out[i];
                let Some((ms, report)) = timed(&targets[i], &options)? else {
                    m.deadline_misses += 1;
                    bar.inc(1);
                    continue;
                };
                m.samples.push(ms);
                m.loads_seen.push(monitor.utilisation());
                for f in &report.forks {
                    m.fork_loads.push(f.load);
                    *m.decisions.entry(decision_key(f)).or_default() += 1;
                }
                if let Some(way) = report.solo {
                    *m.decisions.entry(solo_key(way).into()).or_default() += 1;
                }
                bar.inc(1);
            }
        }
    }
    Ok(out)
}

/// The decision key of a fork-free run's placement (see [`SoloWay`]).
fn solo_key(way: SoloWay) -> &'static str {
    match way {
        SoloWay::Inline => "no forks: on the caller's thread",
        SoloWay::Pooled => "no forks: on the pool",
    }
}

/// One timed run: its milliseconds and report, or `None` when it missed
/// its deadline.
fn timed(t: &Target, options: &RunOptions) -> Result<Option<(f64, RunReport)>> {
    let inputs = t.feeds.iter().map(|(n, v)| (n.as_str(), v.clone()));
    let start = Instant::now();
    match t.session.run_shared_with_options(inputs, options) {
        Ok((outputs, report)) => {
            let ms = start.elapsed().as_secs_f64() * 1e3;
            // Back to the library's pools, as a frame loop hands its
            // outputs back: otherwise every run maps and faults in fresh
            // pages for a large output (a single-layer model's, say).
            outputs.into_iter().for_each(|(_, t)| recycle(t));
            Ok(Some((ms, report)))
        }
        Err(ramify::Error::Deadline(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Writes the Chrome trace of one run of `t` to `path`.
fn write_trace(t: &Target, path: &Path) -> Result<()> {
    let feeds = t.feeds.iter().map(|(n, v)| (n.as_str(), Tensor::clone(v)));
    let (_, report) = t.session.run_traced(feeds)?;
    let trace = report.trace.context("the session recorded no trace")?;
    std::fs::write(path, crate::trace::chrome_json(&trace))
        .with_context(|| format!("writing {}", path.display()))
}

pub fn main(a: BenchArgs) -> Result<()> {
    let models = if a.models.is_empty() {
        vec![crate::default_model()]
    } else {
        a.models.clone()
    };
    let modes = if a.modes.is_empty() {
        vec![a.sched.mode]
    } else {
        a.modes.clone()
    };
    if let Some(items) = a.stream {
        let modes = if a.modes.is_empty() {
            vec![Mode::Adaptive, Mode::Serial, Mode::Parallel]
        } else {
            modes
        };
        let args = crate::stream::StreamArgs {
            items: items.max(1),
            pipeline: a.pipeline,
            rounds: a.rounds,
            modes: &modes,
            sched: &a.sched,
            input_dir: a.input_dir.as_deref(),
            critical: a.critical,
        };
        return crate::stream::main(&args, &models);
    }
    let levels = if a.background_load.is_empty() {
        vec![0]
    } else {
        a.background_load.clone()
    };
    let monitor = LoadMonitor::start(LoadConfig::default());
    let targets = load_targets(&a, &models, &modes, &monitor)?;
    let machine = crate::report::Machine::start();
    let per_level = targets.len() * (a.warmup + a.runs.max(1));
    let bar = progress((per_level * levels.len()) as u64);
    let mut results = Vec::new();
    for &level in &levels {
        bar.set_message(format!("background load {level}"));
        let _burners = Burners::start(level, Duration::from_secs(900))?;
        if level > 0 {
            // Let the load monitor see the new level (about 11
            // samples of 100 ms reach a steady load) before measuring.
            std::thread::sleep(SETTLE);
        }
        for (mut m, t) in measure_level(&a, &targets, level, &monitor, &bar)?
            .into_iter()
            .zip(&targets)
        {
            m.model = models[t.model].display().to_string();
            results.push(m);
        }
    }
    bar.finish_and_clear();
    let machine = machine.finish(&results);
    if let (Some(path), Some(first)) = (&a.trace, targets.first()) {
        write_trace(first, path)?;
    }
    if let Some(path) = &a.plot {
        crate::plot::write(path, &results)?;
    }
    if a.verbose {
        let topology = a.sched.builder().device_topology()?;
        eprint!(
            "{}",
            crate::placement::describe_topology(&topology, a.sched.placement.placement)
        );
        for m in &results {
            eprintln!(
                "{} [{}, background load {}]: fork decisions over {} runs (mean fork load {:.2}):",
                m.model,
                m.mode,
                m.background_load,
                m.samples.len(),
                mean(&m.fork_loads)
            );
            for (k, v) in &m.decisions {
                eprintln!("  {k}  x{v}");
            }
        }
    }
    let settings = Settings {
        runs: a.runs.max(1),
        warmup: a.warmup,
        cpus: a.sched.cpus.unwrap_or_else(num_cpus_hint),
    };
    let doc = crate::report::json(&settings, &machine, &results);
    if let Some(path) = &a.json_file {
        std::fs::write(path, format!("{doc:#}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if a.json {
        println!("{doc}");
    } else {
        for m in &results {
            let s = m.stats();
            let missed = match a.deadline.deadline {
                Some(ms) => format!(
                    ", {} of {} missed the {ms} ms deadline",
                    m.deadline_misses,
                    m.deadline_misses + m.samples.len()
                ),
                None => String::new(),
            };
            println!(
                "{} [{}, background load {}]: {} runs{missed}, median {:.3} ms, p95 {:.3} ms \
                 (min {:.3}, mean {:.3}, p90 {:.3}, p99 {:.3}, max {:.3})",
                m.model,
                m.mode,
                m.background_load,
                m.samples.len(),
                s.median,
                s.p95,
                s.min,
                s.mean,
                s.p90,
                s.p99,
                s.max
            );
        }
    }
    Ok(())
}

pub fn num_cpus_hint() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
