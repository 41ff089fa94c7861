//! Loads the example model, runs it on its reference input and prints the
//! top-5 classes and the decision taken at each fork.
//!
//! `cargo run --release --example run_model [MODEL] [INPUT_PB]`

use ramify::onnx::read_tensor_file;
use ramify::{Mode, SessionBuilder};
use std::path::PathBuf;

fn main() -> ramify::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut args = std::env::args().skip(1);
    let model = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("models/inception_mini.onnx"));
    let input = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("models/inception_mini/test_data_set_0/input_0.pb"));

    let session = SessionBuilder::new()
        .mode(Mode::Adaptive)
        .build_from_file(&model)?;
    let name = session.inputs()[0].name.clone();
    let (outputs, report) = session.run_with_report([(name, read_tensor_file(&input)?)])?;

    let (out_name, logits) = &outputs[0];
    let mut scored: Vec<(usize, f64)> = logits.to_f64_vec()?.into_iter().enumerate().collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!(
        "{out_name} {logits}: top-5 {:?}",
        &scored[..scored.len().min(5)]
    );
    for f in &report.forks {
        println!(
            "fork {}: load {:.2}, band {}, pools {:?}",
            f.fork,
            f.load,
            f.band,
            f.decision.pool_sizes()
        );
    }
    Ok(())
}
