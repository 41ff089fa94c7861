//! The memory budget: a model that declares or computes a tensor beyond it
//! fails with a typed error naming the node, the shape and the bytes, before
//! anything is allocated, at load time where shapes are known and at run
//! time otherwise. This file's first test reads the process's peak resident
//! size, so the file holds only budget tests with small allocations.

mod common;

use common::{bytes, graph, int64_initializer, model, node, value_info};
use ramify::{Error, SessionBuilder, Tensor};

const LIMIT: usize = 64 << 20;

fn vm_hwm_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The innermost error under `Node` wrappers, with the nodes passed.
fn unwrap_nodes(e: &Error) -> (Vec<String>, &Error) {
    let mut nodes = Vec::new();
    let mut e = e;
    while let Error::Node { node, source, .. } = e {
        nodes.push(node.clone());
        e = source;
    }
    (nodes, e)
}

#[test]
fn a_terabyte_constant_fails_at_load_and_peak_memory_stays_under_the_budget() {
    // ConstantOfShape([2^38, 4]) of float: 4 TiB, folded at load.
    let m = model(
        graph(
            vec![
                node("ConstantOfShape", &["shape"], &["big"]),
                node("ReduceSum", &["big"], &["y"]),
            ],
            vec![],
            vec![value_info("y", 1, &[])],
            vec![int64_initializer("shape", &[2], &[1 << 38, 4])],
        ),
        13,
    );
    let err = SessionBuilder::new()
        .memory_limit(LIMIT)
        .build_from_bytes(&bytes(&m))
        .unwrap_err();
    let (nodes, inner) = unwrap_nodes(&err);
    assert_eq!(nodes, ["ConstantOfShape_big"], "{err}");
    match inner {
        Error::MemoryLimit {
            shape,
            bytes,
            limit,
            ..
        } => {
            assert_eq!(shape, &[1usize << 38, 4]);
            assert_eq!(*bytes, Some(1u128 << 42));
            assert_eq!(*limit, LIMIT);
        }
        other => panic!("expected a memory-limit error, got {other}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("4.0 TiB") && msg.contains("64.0 MiB"), "{msg}");
    if let Some(peak) = vm_hwm_bytes() {
        assert!(
            peak < LIMIT,
            "peak RSS {peak} B is over the budget {LIMIT} B"
        );
    }
}

#[test]
fn a_huge_shape_computed_from_an_input_fails_at_run_time() {
    // Expand(x, shape) where the shape is an input: known only when running.
    let m = model(
        graph(
            vec![node("Expand", &["x", "shape"], &["y"])],
            vec![value_info("x", 1, &[1]), value_info("shape", 7, &[2])],
            vec![value_info("y", 1, &[-1, -1])],
            vec![],
        ),
        13,
    );
    let session = SessionBuilder::new()
        .memory_limit(LIMIT)
        .build_from_bytes(&bytes(&m))
        .unwrap();
    let x = Tensor::from_vec(&[1], vec![1.0f32]).unwrap();
    let ok = Tensor::from_vec(&[2], vec![3i64, 5]).unwrap();
    let out = session.run([("x", x.clone()), ("shape", ok)]).unwrap();
    assert_eq!(out[0].1.shape(), &[3, 5]);

    let huge = Tensor::from_vec(&[2], vec![1i64 << 20, 1 << 20]).unwrap();
    let err = session
        .run([("x", x.clone()), ("shape", huge)])
        .unwrap_err();
    let (nodes, inner) = unwrap_nodes(&err);
    assert_eq!(nodes, ["Expand_y"], "{err}");
    assert!(
        matches!(inner, Error::MemoryLimit { shape, .. } if shape == &[1usize << 20, 1 << 20]),
        "{err}"
    );
    // The session still works after the refusal.
    let ok = Tensor::from_vec(&[2], vec![2i64, 2]).unwrap();
    assert_eq!(
        session.run([("x", x), ("shape", ok)]).unwrap()[0].1.len(),
        4
    );
}

#[test]
fn values_that_each_fit_but_not_together_fail_when_planned() {
    // x (16 MiB) feeds three 16 MiB branches summed at the end: 64 MiB live
    // at the Sum with a 48 MiB budget, while each tensor alone fits.
    let n = 4 << 20;
    let m = model(
        graph(
            vec![
                node("Relu", &["x"], &["a"]),
                node("Sigmoid", &["x"], &["b"]),
                node("Tanh", &["x"], &["c"]),
                node("Sum", &["a", "b", "c"], &["y"]),
            ],
            vec![value_info("x", 1, &[-1])],
            vec![value_info("y", 1, &[-1])],
            vec![],
        ),
        13,
    );
    let session = SessionBuilder::new()
        .memory_limit(48 << 20)
        .build_from_bytes(&bytes(&m))
        .unwrap();
    let small = Tensor::from_vec(&[4], vec![1.0f32; 4]).unwrap();
    assert!(session.run([("x", small)]).is_ok());
    let x = Tensor::zeros(ramify::DType::F32, &[n]);
    let err = session.run([("x", x)]).unwrap_err();
    match &err {
        Error::PlanMemory { bytes, limit, .. } => {
            assert!(*bytes > *limit as u128, "{err}");
            assert_eq!(*limit, 48 << 20);
        }
        other => panic!("expected a plan-memory error, got {other}"),
    }
}

#[test]
fn the_default_budget_is_half_the_physical_memory() {
    let session = SessionBuilder::new()
        .build_from_bytes(&bytes(&common::relu_add_model()))
        .unwrap();
    let limit = session.memory_limit();
    assert_eq!(limit, ramify::tensor::budget::default_limit());
    assert!(
        limit >= 64 << 20,
        "default budget {limit} B is implausibly small"
    );
}
