//! The embedding API an app needs beyond `run`: shared inputs, output
//! selection that prunes the plan, caller-owned output buffers (too small
//! ones refused before running), the CPU limit bounded by the device, and
//! the model's metadata. The CPU set is tested in `cpu_set.rs`, a process
//! of its own.

mod common;

use common::*;
use onnx_protobuf::StringStringEntryProto;
use ramify::{available_cpus, DType, Error, Outputs, RunOptions, Session, SessionBuilder, Tensor};
use std::sync::Arc;

/// x → Relu → a, x → Neg → Exp → b: two outputs on separate branches.
fn two_outputs() -> Vec<u8> {
    bytes(&model(
        graph(
            vec![
                node("Relu", &["x"], &["a"]),
                node("Neg", &["x"], &["n"]),
                node("Exp", &["n"], &["b"]),
            ],
            vec![value_info("x", 1, &[2, 3])],
            vec![value_info("a", 1, &[2, 3]), value_info("b", 1, &[2, 3])],
            vec![],
        ),
        13,
    ))
}

fn input() -> Arc<Tensor> {
    Arc::new(Tensor::from_vec(&[2, 3], vec![-1.0f32, 0.5, 2.0, -3.0, 0.0, 1.5]).unwrap())
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn selected_outputs_run_only_their_branch() {
    let s = Session::from_bytes(&two_outputs()).unwrap();
    let full = s.run([("x", (*input()).clone())]).unwrap();
    let mut outputs = Outputs::new();
    outputs.select("b");
    s.run_bound([("x", input())], &mut outputs, &RunOptions::new())
        .unwrap();
    assert_eq!(outputs.get("b"), Some(&full[1].1));
    assert_eq!(outputs.get("a"), None, "a was not asked for");
    // The selection's plan holds only b's branch (Neg, Exp); the full one all three.
    let mut sizes: Vec<usize> = s.plans().iter().map(|p| p.graph.nodes.len()).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![2, 3]);
    // With nothing chosen, every output comes back.
    let mut all = Outputs::new();
    s.run_bound([("x", input())], &mut all, &RunOptions::new())
        .unwrap();
    assert_eq!(all.names().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(all.take("a"), Some(full[0].1.clone()));
}

#[test]
fn shared_inputs_are_not_kept_after_the_run() {
    let s = Session::from_bytes(&two_outputs()).unwrap();
    let mut frame = input();
    let mut outputs = Outputs::new();
    outputs.select("a");
    for value in [1.0f32, -2.0, 3.0] {
        // The app writes the next frame into the same tensor, in place.
        let t = Arc::get_mut(&mut frame).expect("the run let go of the input");
        *t = Tensor::from_vec(&[2, 3], vec![value; 6]).unwrap();
        s.run_bound([("x", frame.clone())], &mut outputs, &RunOptions::new())
            .unwrap();
        let want = Tensor::from_vec(&[2, 3], vec![value.max(0.0); 6]).unwrap();
        assert_eq!(outputs.get("a"), Some(&want));
    }
    assert_eq!(Arc::strong_count(&frame), 1);
}

#[test]
fn bound_buffers_receive_the_output_bytes() {
    let s = Session::from_bytes(&two_outputs()).unwrap();
    let full = s.run([("x", (*input()).clone())]).unwrap();
    let mut a = vec![0xAAu8; 24 + 8];
    let mut outputs = Outputs::new();
    outputs.bind("a", &mut a).select("b");
    s.run_bound([("x", input())], &mut outputs, &RunOptions::new())
        .unwrap();
    assert_eq!(outputs.shape("a"), Some(&[2, 3][..]));
    assert_eq!(outputs.dtype("a"), Some(DType::F32));
    assert_eq!(outputs.get("a"), None, "a went to its buffer");
    assert_eq!(outputs.get("b"), Some(&full[1].1));
    drop(outputs);
    assert_eq!(
        floats(&a[..24]),
        full[0]
            .1
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|&v| v as f32)
            .collect::<Vec<_>>()
    );
    assert!(
        a[24..].iter().all(|&b| b == 0xAA),
        "bytes past the output are kept"
    );
}

#[test]
fn too_small_buffers_and_unknown_names_are_refused() {
    let s = Session::from_bytes(&two_outputs()).unwrap();
    let mut small = vec![0x55u8; 23];
    let mut outputs = Outputs::new();
    outputs.bind("b", &mut small);
    let err = s
        .run_bound([("x", input())], &mut outputs, &RunOptions::new())
        .unwrap_err();
    match &err {
        Error::OutputBuffer {
            name,
            shape,
            needed,
            capacity,
            ..
        } => assert_eq!(
            (name.as_str(), shape.as_slice(), *needed, *capacity),
            ("b", &[2, 3][..], 24, 23)
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "output \"b\" needs 24 bytes (float32 [2, 3]); its buffer holds 23"
    );
    // The shape needed is left for the caller; nothing was written.
    assert_eq!(outputs.shape("b"), Some(&[2, 3][..]));
    drop(outputs);
    assert!(small.iter().all(|&b| b == 0x55));

    let mut outputs = Outputs::new();
    outputs.select("c");
    let err = s
        .run_bound([("x", input())], &mut outputs, &RunOptions::new())
        .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownOutput { name, expected } if name == "c" && expected == &["a", "b"]),
        "{err:?}"
    );
    let err = s
        .run_bound([("y", input())], &mut Outputs::new(), &RunOptions::new())
        .unwrap_err();
    assert!(matches!(err, Error::UnknownInput { .. }), "{err:?}");
}

#[test]
fn the_cpu_limit_is_bounded_by_the_cpus_the_process_may_use() {
    let usable = available_cpus().len();
    let s = SessionBuilder::new()
        .cpus(4096)
        .build_from_bytes(&two_outputs())
        .unwrap();
    assert_eq!(s.cpus(), usable);
    assert_eq!(s.cpu_set(), available_cpus());
    let s = SessionBuilder::new()
        .cpus(usable + 1)
        .oversubscribe(true)
        .build_from_bytes(&two_outputs())
        .unwrap();
    assert_eq!(
        s.cpus(),
        usable + 1,
        "oversubscription is asked for explicitly"
    );
}

#[test]
fn the_models_metadata_is_readable() {
    let mut m = relu_add_model();
    m.producer_name = "ramify-tests".into();
    m.producer_version = "1.2.3".into();
    m.domain = "com.example.vision".into();
    m.model_version = 7;
    m.doc_string = "adds a bias".into();
    for (k, v) in [("labels", "cat,dog"), ("mean", "0.5")] {
        let mut e = StringStringEntryProto::new();
        e.key = k.into();
        e.value = v.into();
        m.metadata_props.push(e);
    }
    let s = Session::from_bytes(&bytes(&m)).unwrap();
    let md = s.metadata();
    assert_eq!(md.producer_name, "ramify-tests");
    assert_eq!(md.producer_version, "1.2.3");
    assert_eq!(md.domain, "com.example.vision");
    assert_eq!(md.model_version, 7);
    assert_eq!(md.ir_version, m.ir_version);
    assert_eq!(md.description, "adds a bias");
    assert_eq!(md.custom("labels"), Some("cat,dog"));
    assert_eq!(md.custom.len(), 2);
}
