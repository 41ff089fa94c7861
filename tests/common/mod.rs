//! Helpers for integration tests: small ONNX models built in code (with the
//! shared builder of `tests/model_builder`), and the paths of generated
//! test data.
#![allow(dead_code)]

use model_builder::onnx_protobuf::ModelProto;
use std::path::PathBuf;

// The ONNX builders are the shared ones of tests/model_builder (also used
// by the C API's tests, the benches and the fuzz crate). Each test binary
// uses some of them.
#[allow(unused_imports)]
pub use model_builder::{
    bytes, float_attr, graph, graph_attr, initializer, int64_init, int64_initializer, int_attr,
    ints_attr, model, node, raw_initializer, string_attr, value_info,
};

/// x[1,4] → Relu → Add(bias) → y[1,4]: a small valid model.
pub fn relu_add_model() -> ModelProto {
    model(
        graph(
            vec![
                node("Relu", &["x"], &["r"]),
                node("Add", &["r", "b"], &["y"]),
            ],
            vec![value_info("x", 1, &[-1, 4])],
            vec![value_info("y", 1, &[-1, 4])],
            vec![initializer("b", &[4], &[1.0, 2.0, 3.0, 4.0])],
        ),
        13,
    )
}

/// The repository root: the crate's own folder, or its parent for the
/// workspace's member crates (`cli/`) that share these helpers.
pub fn repo() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if manifest.join("models").is_dir() {
        manifest
    } else {
        manifest
            .parent()
            .expect("a member crate has a parent")
            .to_path_buf()
    }
}

/// The generated test data folder (made by scripts/gen_test_data.py).
pub fn generated() -> PathBuf {
    repo().join("tests/data/generated")
}

/// A fresh, empty temporary folder for one test.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ramify-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Rows of [`chains_model`]'s input.
pub const CHAINS_ROWS: usize = 64;
/// Columns of [`chains_model`]'s input, and the side of its weight.
pub const CHAINS_WIDTH: usize = 256;

/// x[64,256] → Relu → a fork of two MatMul chains of `left` and `right`
/// products by a 256×256 weight, joined by Add.
pub fn chains_model(left: usize, right: usize) -> Vec<u8> {
    let (rows, width) = (CHAINS_ROWS, CHAINS_WIDTH);
    let mut nodes = vec![node("Relu", &["x"], &["r"])];
    let mut ends = Vec::new();
    for (side, len) in [("l", left), ("r", right)] {
        let mut prev = "r".to_string();
        for i in 0..len {
            let out = format!("{side}{i}");
            nodes.push(node("MatMul", &[&prev, "w"], &[&out]));
            prev = out;
        }
        ends.push(prev);
    }
    nodes.push(node("Add", &[&ends[0], &ends[1]], &["y"]));
    let w: Vec<f32> = (0..width * width)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-5)
        .collect();
    bytes(&model(
        graph(
            nodes,
            vec![value_info("x", 1, &[rows as i64, width as i64])],
            vec![value_info("y", 1, &[rows as i64, width as i64])],
            vec![initializer("w", &[width as i64, width as i64], &w)],
        ),
        13,
    ))
}

/// An input for [`chains_model`].
pub fn chains_input() -> ramify::Tensor {
    let data: Vec<f32> = (0..CHAINS_ROWS * CHAINS_WIDTH)
        .map(|i| (i % 13) as f32 * 0.1 - 0.6)
        .collect();
    ramify::Tensor::from_vec(&[CHAINS_ROWS, CHAINS_WIDTH], data).expect("shape")
}

/// The process's peak resident size (VmHWM) in bytes, where /proc is there.
pub fn vm_hwm_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The f32 output's bit patterns, for bit-for-bit comparisons.
pub fn f32_bits(t: &ramify::Tensor) -> Vec<u32> {
    t.array::<f32>()
        .expect("float output")
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Fails unless every |got − want| ≤ `tol` × the largest |want| (the
/// criterion for random weights against onnxruntime: summation order
/// differs, so the error scales with the values' size).
pub fn assert_within_scaled(label: &str, got: &[f64], want: &[f64], tol: f64) {
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{label}: reference is all zeros");
    let worst = got
        .iter()
        .zip(want)
        .fold(0.0f64, |m, (g, w)| m.max((g - w).abs()));
    assert!(
        worst <= tol * scale,
        "{label}: max |diff| {worst:e} > {tol:e} x max |ref| {scale:e}"
    );
}

/// Runs `model` serially on 1 and 3 CPUs and in parallel on 4 and 2
/// (oversubscribed), with `inputs(session)` each time, and fails unless all
/// four give the same outputs bit for bit. With `fork_runs_parallel`, the
/// parallel runs must also have run a fork in parallel, so that the
/// comparison cannot pass trivially.
pub fn assert_serial_equals_parallel(
    model: &std::path::Path,
    inputs: impl Fn(&ramify::Session) -> Vec<(String, ramify::Tensor)>,
    fork_runs_parallel: bool,
) {
    use ramify::{Mode, SessionBuilder};
    let mut outputs = Vec::new();
    for (mode, cpus) in [
        (Mode::Serial, 1),
        (Mode::Serial, 3),
        (Mode::Parallel, 4),
        (Mode::Parallel, 2),
    ] {
        let s = SessionBuilder::new()
            .mode(mode)
            .cpus(cpus)
            .oversubscribe(true)
            .build_from_file(model)
            .unwrap();
        let (out, report) = s.run_with_report(inputs(&s)).unwrap();
        if mode == Mode::Parallel && fork_runs_parallel {
            assert!(
                report
                    .forks
                    .iter()
                    .any(|f| matches!(f.decision, ramify::sched::Decision::Parallel(_))),
                "{}: parallel mode ran no fork in parallel",
                model.display()
            );
        }
        outputs.push(out.iter().map(|(_, t)| f32_bits(t)).collect::<Vec<_>>());
    }
    for o in &outputs[1..] {
        assert!(
            o == &outputs[0],
            "{}: outputs differ between modes",
            model.display()
        );
    }
}
