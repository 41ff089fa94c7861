//! The `ramify` command line: run a model on test data, benchmark it, inspect
//! it, partition it.

mod bench;
mod burn;
mod dot;
mod inputs;
mod inspect;
mod ops;
mod options;
mod partition;
mod placement;
mod plot;
mod report;
mod run;
mod stats;
mod stream;
mod trace;
mod watch;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "ramify",
    version,
    about = "Run ONNX models on the CPU, branches in parallel"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a model once and print (or save) its outputs.
    Run(run::RunArgs),
    /// Measure a model's latency over repeated runs.
    Bench(bench::BenchArgs),
    /// Show a model's forks, siblings, costs and the plan for a load.
    Inspect(inspect::InspectArgs),
    /// Print device-state events (CPU, memory, battery, thermal) as JSON
    /// lines until interrupted.
    Watch(watch::WatchArgs),
    /// Split a model into ordered parts with few critical cut edges
    /// (seed 004); print them, write them as ONNX models, draw them.
    Partition(partition::PartitionArgs),
    /// List the supported operators (`--markdown` for docs/operators.md).
    Ops(ops::OpsArgs),
    /// Spin one core for a bounded time (background load for experiments).
    #[command(hide = true)]
    Burn {
        /// How long to spin.
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
    },
}

/// The example model shipped in `models/`, found from the working directory
/// or from the source tree this binary was built from.
pub fn default_model() -> PathBuf {
    let rel = PathBuf::from("models/inception_mini.onnx");
    if rel.exists() {
        rel
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
    }
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.command {
        Command::Run(a) => run::main(a),
        Command::Bench(a) => bench::main(a),
        Command::Inspect(a) => inspect::main(a),
        Command::Ops(a) => ops::main(a),
        Command::Partition(a) => partition::main(a),
        Command::Watch(a) => watch::main(a),
        Command::Burn { seconds } => {
            burn::spin(seconds);
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
