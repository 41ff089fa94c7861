//! The benchmark zoo's onnx.helper models (issue 43): transformers in the
//! shape PyTorch's TorchScript exporter gives them (`bert_tiny`,
//! `vit_small_like`) and recurrent networks (`lstm_bidir_2layer`,
//! `gru_2layer`, `rnn_tanh`), against onnxruntime's outputs in their
//! `test_data_set_0`, and serial and parallel runs bit for bit. Data comes from
//! `scripts/gen_transformer_zoo.py` and `scripts/gen_rnn_zoo.py` (the test
//! command runs them; neither needs torch). The PyTorch-exported part of the
//! zoo (`scripts/gen_torch_zoo.py`) is for benchmarks only and is not read here.

mod common;

use common::{assert_serial_equals_parallel, assert_within_scaled, generated};
use ramify::onnx::read_tensor_file;
use ramify::{Session, Tensor};
use std::path::{Path, PathBuf};

const MODELS: [&str; 5] = [
    "bert_tiny",
    "vit_small_like",
    "lstm_bidir_2layer",
    "gru_2layer",
    "rnn_tanh",
];

fn case_dir(name: &str) -> PathBuf {
    let d = generated().join("zoo").join(name);
    assert!(
        d.join("model.onnx").exists() && d.join("test_data_set_0/output_0.pb").exists(),
        "{} is missing: run scripts/ensure_venv.sh && .venv/bin/python scripts/gen_transformer_zoo.py \
         && .venv/bin/python scripts/gen_rnn_zoo.py",
        d.display()
    );
    d
}

/// The inputs of test_data_set_0, named after the session's inputs in order.
fn inputs(session: &Session, dir: &Path) -> Vec<(String, Tensor)> {
    let data = dir.join("test_data_set_0");
    session
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, info)| {
            let t = read_tensor_file(&data.join(format!("input_{i}.pb"))).unwrap();
            (info.name.clone(), t)
        })
        .collect()
}

/// Every output within `tol` × the largest |reference| of that output (the
/// light models' criterion for random weights: summation order differs from
/// onnxruntime's, so the error scales with the values' size).
const TOL: f64 = 1e-4;

#[test]
fn zoo_models_match_onnxruntime_outputs() {
    for name in MODELS {
        let dir = case_dir(name);
        let session = Session::from_file(dir.join("model.onnx")).unwrap();
        let out = session.run(inputs(&session, &dir)).unwrap();
        assert_eq!(out.len(), session.outputs().len(), "{name}: output count");
        for (i, (out_name, got)) in out.iter().enumerate() {
            let path = dir.join(format!("test_data_set_0/output_{i}.pb"));
            let want = read_tensor_file(&path).unwrap();
            assert_eq!(got.shape(), want.shape(), "{name}: {out_name}: shape");
            let (got, want) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
            assert_within_scaled(&format!("{name}: {out_name}"), &got, &want, TOL);
        }
    }
}

#[test]
fn zoo_parallel_and_serial_runs_are_bit_identical() {
    for name in MODELS {
        let dir = case_dir(name);
        // In vit_small_like, Q, K and V are sibling branches: the comparison
        // means something only if they really ran side by side.
        let fork = name == "vit_small_like";
        assert_serial_equals_parallel(&dir.join("model.onnx"), |s| inputs(s, &dir), fork);
    }
}
