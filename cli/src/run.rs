//! `ramify run`: run a model once on given or synthesised inputs, print a
//! summary of each output and the time, optionally save the outputs and a
//! Chrome trace of the run.

use crate::inputs;
use crate::options::{DeadlineArgs, SchedArgs};
use anyhow::{Context, Result};
use clap::Args;
use ramify::{Tensor, Value};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args)]
pub struct RunArgs {
    /// The model file (default: the example model in models/).
    model: Option<PathBuf>,
    /// Folder with input_0.pb, input_1.pb, … (serialized TensorProto).
    #[arg(long)]
    input_dir: Option<PathBuf>,
    /// Folder to write output_0.pb, output_1.pb, … into.
    #[arg(long)]
    output_dir: Option<PathBuf>,
    #[command(flatten)]
    sched: SchedArgs,
    #[command(flatten)]
    deadline: DeadlineArgs,
    /// Write a Chrome trace (Perfetto, chrome://tracing) of the run to this file.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

fn summary(t: &Tensor) -> String {
    match t.to_f64_vec() {
        Ok(v) if !v.is_empty() => {
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let head: Vec<String> = v.iter().take(4).map(|x| format!("{x:.5}")).collect();
            format!(
                "min {min:.5} max {max:.5} mean {mean:.5} first [{}]",
                head.join(", ")
            )
        }
        Ok(_) => "empty".to_string(),
        Err(_) => format!("{} values", t.len()),
    }
}

/// One line about an output value: a tensor's type, shape and summary, a
/// sequence's length and each tensor's, an optional's presence.
fn describe(v: &Value) -> String {
    match v {
        Value::Tensor(t) => format!("{t}  {}", summary(t)),
        Value::Sequence(s) => {
            let parts: Vec<String> = s.items().iter().map(|t| t.to_string()).collect();
            format!(
                "sequence of {} {} tensors [{}]",
                s.len(),
                s.dtype(),
                parts.join("; ")
            )
        }
        Value::Optional(o) => match o.value() {
            Some(inner) => format!("optional holding {}", describe(inner)),
            None => format!("optional {} of {}, absent", o.kind(), o.dtype()),
        },
    }
}

pub fn main(a: RunArgs) -> Result<()> {
    let model = a.model.unwrap_or_else(crate::default_model);
    let builder = a.sched.builder();
    let t0 = Instant::now();
    let session = builder
        .build_from_file(&model)
        .with_context(|| format!("loading {}", model.display()))?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let feeds = inputs::load_values(&session, a.input_dir.as_deref())?;
    let options = a.deadline.options()?.trace(a.trace.is_some());
    let t1 = Instant::now();
    let (outputs, report) = session
        .run_values_with_options(feeds, &options)
        .with_context(|| format!("running {}", model.display()))?;
    let run_ms = t1.elapsed().as_secs_f64() * 1e3;
    for event in &report.events {
        eprintln!("event: {event}");
    }
    if report.int8_recomputed > 0 {
        eprintln!(
            "int8 overflow guard: {} tiles recomputed exactly",
            report.int8_recomputed
        );
    }
    if let (Some(path), Some(trace)) = (&a.trace, &report.trace) {
        std::fs::write(path, crate::trace::chrome_json(trace))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("model {} (loaded in {load_ms:.1} ms)", model.display());
    for (name, v) in &outputs {
        println!("  {name}: {}", describe(v));
    }
    println!("run time {run_ms:.2} ms");
    if let Some(dir) = a.output_dir {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for (i, (name, v)) in outputs.iter().enumerate() {
            // A tensor as a TensorProto, a sequence or optional as the
            // SequenceProto or OptionalProto ONNX's test data sets hold.
            ramify::onnx::write_value_file(&dir.join(format!("output_{i}.pb")), v, name)?;
        }
    }
    Ok(())
}
