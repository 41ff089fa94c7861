//! Folding BatchNormalization into the Conv before it does not keep a second
//! copy of the weights: loading ResNet-50 with real-size random weights (53
//! batch norms folded) peaks under 1.4 times its weight bytes above the
//! process's size before the load. When every fold copied the weights, the
//! originals stayed resident beside the folded ones (2.2 times, and the
//! allocator kept the freed originals' pages). This file holds one test so
//! that the process's peak resident size is this test's alone.

mod common;

use common::{generated, vm_hwm_bytes};
use ramify::Session;

#[test]
fn folding_batch_norms_keeps_one_copy_of_the_weights() {
    let path = generated().join("light_random/resnet50/model.onnx");
    assert!(
        path.exists(),
        "{} is missing: run scripts/gen_test_data.py",
        path.display()
    );
    let Some(before) = vm_hwm_bytes() else {
        eprintln!("no /proc/self/status here: peak memory not measurable");
        return;
    };
    let session = Session::builder().cpus(1).build_from_file(&path).unwrap();
    let graph = session.graph();
    let weights = graph.weight_bytes();
    let batch_norms = graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "BatchNormalization")
        .count();
    let peak = vm_hwm_bytes().unwrap() - before;
    eprintln!(
        "resnet50: weights {:.1} MB, load peak {:.1} MB above {:.1} MB, ratio {:.2}",
        weights as f64 / 1e6,
        peak as f64 / 1e6,
        before as f64 / 1e6,
        peak as f64 / weights as f64
    );
    assert!(
        weights > 90_000_000,
        "expected real-size weights, got {weights}"
    );
    assert_eq!(batch_norms, 0, "every batch norm was folded");
    assert!(
        (peak as f64) < 1.4 * weights as f64,
        "load peak {peak} >= 1.4 x weights {weights}"
    );
}
