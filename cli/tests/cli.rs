//! The `ramify` command line: `run` round-trips the ONNX test-data layout,
//! `bench --json` prints one JSON object, `inspect` shows forks, and errors
//! exit non-zero with the error's message.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{repo, temp_dir};
use ramify::onnx::read_tensor_file;
use std::process::Command;

fn ramify() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ramify"))
}

#[test]
fn run_round_trips_the_test_data_layout() {
    let model = repo().join("models/inception_mini.onnx");
    let data = repo().join("models/inception_mini/test_data_set_0");
    let out = temp_dir("cli-run");
    let status = ramify()
        .arg("run")
        .arg(&model)
        .arg("--input-dir")
        .arg(&data)
        .arg("--output-dir")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert!(stdout.contains("logits"), "{stdout}");
    assert!(stdout.contains("run time"), "{stdout}");
    let got = read_tensor_file(&out.join("output_0.pb")).unwrap();
    let want = read_tensor_file(&data.join("output_0.pb")).unwrap();
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    for (a, b) in g.iter().zip(&w) {
        assert!((a - b).abs() <= 1e-4 + 1e-3 * b.abs(), "{a} vs {b}");
    }
    assert!(!out.join("output_1.pb").exists());
}

#[test]
fn run_without_arguments_uses_the_example_model() {
    let o = ramify().arg("run").current_dir(repo()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("inception_mini"));
}

#[test]
fn bench_json_has_the_documented_fields() {
    let o = ramify()
        .args([
            "bench", "--runs", "3", "--warmup", "1", "--json", "--cpus", "1",
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["runs"], 3);
    assert!(v["median_ms"].as_f64().unwrap() > 0.0);
    assert!(v["p95_ms"].as_f64().unwrap() >= v["median_ms"].as_f64().unwrap());
    assert_eq!(v["samples_ms"].as_array().unwrap().len(), 3);
}

/// `ops --required` names the families (cargo features) a model needs, with
/// the operators that need each, and the reduced build's command.
#[test]
fn ops_required_lists_the_features_a_model_needs() {
    let o = ramify()
        .args(["ops", "--required", "models/inception_mini.onnx"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8_lossy(&o.stdout);
    let conv = s
        .lines()
        .find(|l| l.starts_with("ops-conv"))
        .unwrap_or_default();
    assert!(conv.contains("Conv"), "{s}");
    assert!(
        !s.contains("ops-rnn"),
        "the example has no recurrent operator: {s}"
    );
    let build = s
        .lines()
        .find(|l| l.starts_with("build: "))
        .unwrap_or_default();
    assert!(
        build.contains("--no-default-features --features ops-") && build.contains("ops-conv"),
        "{s}"
    );
    let o = ramify()
        .args(["ops", "--required", "no/such/model.onnx"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no/such/model.onnx"));
}

#[test]
fn inspect_lists_forks_and_plans() {
    let o = ramify()
        .args(["inspect", "--load", "0.2", "--cpus", "8"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("fork 0"), "{s}");
    assert!(s.contains("sibling 3"), "{s}");
    assert!(s.contains("plan at n = 0.20 (band low)"), "{s}");
}

#[test]
fn errors_exit_non_zero_with_the_message() {
    let dir = temp_dir("cli-err");
    let bad = dir.join("bad.onnx");
    std::fs::write(&bad, b"definitely not a model").unwrap();
    let o = ramify().arg("run").arg(&bad).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error:") && err.contains("bad.onnx"), "{err}");
    let o = ramify()
        .arg("run")
        .arg(repo().join("models/inception_mini.onnx"))
        .arg("--input-dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("input_0.pb"));
}

#[test]
fn operators_page_matches_the_build() {
    let o = ramify().args(["ops", "--markdown"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let generated = String::from_utf8(o.stdout).unwrap();
    for op in ["Conv", "Softmax", "Resize", "MatMul", "ReduceMean", "Cast"] {
        assert!(generated.contains(&format!("| {op} |")), "{op} missing");
    }
    let page = std::fs::read_to_string(repo().join("docs/operators.md")).unwrap_or_default();
    assert!(
        page == generated,
        "docs/operators.md is stale: regenerate it with \
         `cargo run --release -- ops --markdown > docs/operators.md`"
    );
}
