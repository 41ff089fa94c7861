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

/// Tensors start on a cache line (see `ramify::AlignedAllocator`).
#[global_allocator]
static ALLOCATOR: ramify::AlignedAllocator = ramify::AlignedAllocator;

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

/// Has glibc's allocator hand every block of 256 KiB or more back to the
/// system when freed (and keep up to 16 MiB of smaller ones at the heap's
/// top for the next run). By default glibc raises that threshold each time such
/// a block is freed, and blocks below it stay in the heap once freed: the
/// original weights the library lets go after packing them (see
/// `SessionBuilder::keep_weights`) would then stay resident, holes between
/// the packed copies. The library's per-run buffers come from its own pools
/// (`tensor::recycle`), so a run does not map fresh pages under this
/// setting. Apps embedding the library choose their allocator's policy
/// themselves; Android's and Apple's allocators return large blocks
/// already.
fn return_large_blocks_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a setting of glibc's allocator; it is
    // called before this program allocates from other threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        // Fixing one threshold stops glibc adjusting the other, and its
        // default (128 KiB) would hand the heap's top back after every
        // run and fault it in again on the next.
        libc::mallopt(libc::M_TRIM_THRESHOLD, 16 << 20);
    }
}

fn main() {
    return_large_blocks_to_the_system();
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
