//! `ramify partition` and `bench --stream --pipeline`: the parts it writes,
//! chained in onnxruntime, give onnxruntime's result for the whole model
//! (scripts/check_partition.py, in the test venv); the report and the DOT
//! drawing name the parts and the cut; bad requests exit non-zero with a
//! message.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{generated, repo, temp_dir};
use std::path::Path;
use std::process::Command;

fn ramify() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ramify"))
}

/// Partitions `model` into `parts`, writes them to a fresh folder and
/// checks them chained in onnxruntime; returns the report.
fn emit_and_check_in_onnxruntime(model: &Path, parts: usize, tag: &str) -> String {
    let dir = temp_dir(tag);
    let o = ramify()
        .arg("partition")
        .arg(model)
        .args(["--parts", &parts.to_string(), "--emit"])
        .arg(&dir)
        .arg("--dot")
        .arg(dir.join("parts.dot"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = String::from_utf8_lossy(&o.stdout).to_string();
    let files: Vec<_> = (0..parts)
        .map(|i| dir.join(format!("part_{i}.onnx")))
        .collect();
    let python = repo().join(".venv/bin/python");
    assert!(
        python.exists(),
        "the test venv is missing: run scripts/ensure_venv.sh"
    );
    let check = Command::new(python)
        .arg(repo().join("scripts/check_partition.py"))
        .arg(model)
        .args(&files)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let dot = std::fs::read_to_string(dir.join("parts.dot")).unwrap();
    for p in 0..parts {
        assert!(dot.contains(&format!("subgraph cluster_part{p}")), "{dot}");
        assert!(report.contains(&format!("part {p}: ")), "{report}");
    }
    report
}

#[test]
fn parts_of_the_example_model_chain_in_onnxruntime() {
    let report = emit_and_check_in_onnxruntime(
        &repo().join("models/inception_mini.onnx"),
        3,
        "part-example",
    );
    assert!(report.contains("refinement"), "{report}");
    assert!(report.contains("cut: "), "{report}");
    assert!(report.contains("best: "), "{report}");
}

#[test]
fn parts_of_a_light_inception_chain_in_onnxruntime() {
    let model = generated().join("light/inception_v1/model.onnx");
    assert!(
        model.exists(),
        "{} is missing: run scripts/gen_test_data.py",
        model.display()
    );
    emit_and_check_in_onnxruntime(&model, 4, "part-inception");
}

#[test]
fn bench_streams_through_a_pipeline_next_to_the_modes() {
    let o = ramify()
        .args(["bench", "--stream", "6", "--pipeline", "2", "--rounds", "1"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    for label in [
        "adaptive",
        "serial",
        "parallel",
        "pipeline 2",
        "pipeline / best other mode",
    ] {
        assert!(out.contains(label), "{label} missing from {out}");
    }
}

#[test]
fn bad_partition_requests_exit_with_a_message() {
    for (args, expected) in [
        (vec!["--parts", "0"], "0 parts"),
        (vec!["--parts", "100000"], "100000 parts"),
        (vec!["--critical", "edges:3"], "bytes:N or path"),
        (vec!["--balance=-1"], "--balance"),
    ] {
        let o = ramify()
            .arg("partition")
            .args(&args)
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}
