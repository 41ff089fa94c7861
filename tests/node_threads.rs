//! Over many runs on several threads, the executor runs each operator held
//! to one thread where that measured faster, and tries the other count
//! once every 16 runs: whichever count a node runs on, every run's
//! outputs stay bit-identical to a one-thread session's.

mod common;

use common::{f32_bits, generated};
use ramify::onnx::read_tensor_file;
use ramify::{Mode, SessionBuilder, Tensor};

/// Runs past two rounds of every node's exploring run (16 runs each), after
/// the first runs that measure the lane's count and then one thread.
const RUNS: usize = 40;

fn outputs_of_every_run(model: &str, cpus: usize, runs: usize) -> Vec<Vec<Vec<u32>>> {
    let dir = generated().join(model);
    let data = dir.join("test_data_set_0");
    let session = SessionBuilder::new()
        .mode(Mode::Serial)
        .cpus(cpus)
        .oversubscribe(true)
        .build_from_file(dir.join("model.onnx"))
        .unwrap();
    let inputs: Vec<(String, Tensor)> = session
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, info)| {
            let t = read_tensor_file(&data.join(format!("input_{i}.pb"))).unwrap();
            (info.name.clone(), t)
        })
        .collect();
    (0..runs)
        .map(|_| {
            let out = session.run(inputs.clone()).unwrap();
            out.iter()
                .filter(|(_, t)| t.array::<f32>().is_some())
                .map(|(_, t)| f32_bits(t))
                .collect()
        })
        .collect()
}

#[test]
fn every_run_on_two_or_three_threads_matches_one_thread_bit_for_bit() {
    for model in ["zoo/bert_tiny", "light_random/squeezenet"] {
        let want = outputs_of_every_run(model, 1, 1).remove(0);
        assert!(!want.is_empty(), "{model}: no float output");
        for cpus in [2, 3] {
            for (run, got) in outputs_of_every_run(model, cpus, RUNS).iter().enumerate() {
                assert!(
                    got == &want,
                    "{model}: run {run} on {cpus} threads differs from one thread"
                );
            }
        }
    }
}

#[test]
fn a_node_faster_on_one_thread_is_estimated_at_that_time_on_two() {
    // The executor holds such a node to one thread, so a fork's estimate
    // of it on two threads is its one-thread time.
    let session = SessionBuilder::new()
        .cpus(2)
        .mode(Mode::Serial)
        .pin_threads(false)
        .build_from_bytes(&common::chains_model(1, 1))
        .expect("valid model");
    let plan = session
        .plan_for(&[std::sync::Arc::new(common::chains_input())])
        .expect("a plan");
    // One run warms the plan up: times count from then on.
    session.run([("x", common::chains_input())]).expect("runs");
    let speedup = |k: usize| k as f64;
    plan.record(0, 2, 3_000_000);
    assert!((plan.node_seconds_at(0, 2, &speedup) - 3e-3).abs() < 1e-9);
    plan.record(0, 1, 2_000_000);
    assert!((plan.node_seconds_at(0, 2, &speedup) - 2e-3).abs() < 1e-9);
    // Where two threads are faster, their time stands.
    plan.record(0, 2, 1_000_000);
    let two = plan.node_seconds_at(0, 2, &speedup);
    assert!(two < 2e-3, "{two}");
}
