//! The nine real-architecture models the `onnx` package ships under
//! `onnx/backend/test/data/light`: their shipped reference outputs, and the
//! same architectures with seeded random weights against onnxruntime's logits.
//! Data comes from `scripts/gen_test_data.py` (the test command runs it).

mod common;

use common::{assert_serial_equals_parallel, assert_within_scaled, generated};
use ramify::onnx::read_tensor_file;
use ramify::Session;
use std::path::Path;

const MODELS: [&str; 9] = [
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
];

fn case_dir(kind: &str, name: &str) -> std::path::PathBuf {
    let d = generated().join(kind).join(name);
    assert!(
        d.join("model.onnx").exists(),
        "{} is missing: run scripts/ensure_venv.sh && .venv/bin/python scripts/gen_test_data.py",
        d.display()
    );
    d
}

fn run_case(session: &Session, dir: &Path) -> (Vec<f64>, Vec<f64>, Vec<usize>) {
    let data = dir.join("test_data_set_0");
    let input = read_tensor_file(&data.join("input_0.pb")).unwrap();
    let expected = read_tensor_file(&data.join("output_0.pb")).unwrap();
    let name = session.inputs()[0].name.clone();
    let out = session.run([(name, input)]).unwrap();
    assert_eq!(out.len(), 1);
    let got = &out[0].1;
    assert_eq!(got.shape(), expected.shape(), "output shape");
    (
        got.to_f64_vec().unwrap(),
        expected.to_f64_vec().unwrap(),
        got.shape().to_vec(),
    )
}

/// ONNX's own test tolerance: |got − want| ≤ atol + rtol·|want|.
fn within_onnx_tolerance(got: &[f64], want: &[f64], rtol: f64) -> Result<(), String> {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if (g - w).abs() > 1e-7 + rtol * w.abs() {
            return Err(format!("element {i}: got {g}, want {w}"));
        }
    }
    Ok(())
}

#[test]
fn shipped_light_models_match_their_reference_outputs() {
    for name in MODELS {
        let dir = case_dir("light", name);
        let session = Session::from_file(dir.join("model.onnx")).unwrap();
        let (got, want, _) = run_case(&session, &dir);
        let rtol = if name == "densenet121" { 2e-3 } else { 1e-3 };
        within_onnx_tolerance(&got, &want, rtol).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn random_weight_light_models_match_onnxruntime_logits() {
    for name in MODELS {
        let dir = case_dir("light_random", name);
        let session = Session::from_file(dir.join("model.onnx")).unwrap();
        let (got, want, _) = run_case(&session, &dir);
        assert_within_scaled(name, &got, &want, 1e-4);
    }
}

#[test]
fn parallel_and_serial_runs_are_bit_identical() {
    for name in ["inception_v1", "squeezenet", "densenet121", "resnet50"] {
        let dir = case_dir("light_random", name);
        let input = read_tensor_file(&dir.join("test_data_set_0/input_0.pb")).unwrap();
        let inputs = |s: &Session| vec![(s.inputs()[0].name.clone(), input.clone())];
        assert_serial_equals_parallel(&dir.join("model.onnx"), inputs, name == "inception_v1");
    }
}
