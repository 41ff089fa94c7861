//! Peak memory while loading the largest model tested (VGG-19 with real-size
//! random weights) stays under twice its weight bytes. This file holds one
//! test so that the process's peak resident size is this test's alone.

mod common;

use common::{generated, vm_hwm_bytes};
use ramify::Session;

#[test]
fn loading_peaks_under_twice_the_weight_bytes() {
    let path = generated().join("light_random/vgg19/model.onnx");
    assert!(
        path.exists(),
        "{} is missing: run scripts/gen_test_data.py",
        path.display()
    );
    let Some(before) = vm_hwm_bytes() else {
        eprintln!("no /proc/self/status here: peak memory not measurable");
        return;
    };
    let session = Session::from_file(&path).unwrap();
    let weights = session.graph().weight_bytes();
    let peak = vm_hwm_bytes().unwrap();
    eprintln!(
        "vgg19: weights {:.1} MB, peak RSS {:.1} MB (before load {:.1} MB), ratio {:.2}",
        weights as f64 / 1e6,
        peak as f64 / 1e6,
        before as f64 / 1e6,
        peak as f64 / weights as f64
    );
    assert!(
        weights > 500_000_000,
        "expected real-size VGG-19 weights, got {weights}"
    );
    assert!(peak < 2 * weights, "peak {peak} >= 2 x weights {weights}");
}
