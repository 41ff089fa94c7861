//! Calibration of the cost model on this device: times a representative
//! kernel of each operator class on one thread, within a small time budget,
//! and caches the result for the process.

use super::cost::{CostModel, OpClass};
use crate::attributes::{Attribute, Attributes};
use crate::ops::{self, BuildContext, Fact, InferInput};
use crate::tensor::Tensor;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A probe: operator class, operator type, attributes, input shapes.
type Probe = (
    OpClass,
    &'static str,
    Vec<(&'static str, Attribute)>,
    Vec<Vec<usize>>,
);

/// One representative operator per class: type, attributes, input shapes.
fn probes() -> Vec<Probe> {
    vec![
        (
            OpClass::Conv,
            "Conv",
            vec![("pads", Attribute::Ints(vec![1, 1, 1, 1]))],
            vec![vec![1, 32, 28, 28], vec![32, 32, 3, 3]],
        ),
        (
            OpClass::MatMul,
            "MatMul",
            vec![],
            vec![vec![128, 256], vec![256, 128]],
        ),
        (
            OpClass::Window,
            "MaxPool",
            vec![("kernel_shape", Attribute::Ints(vec![3, 3]))],
            vec![vec![1, 32, 28, 28]],
        ),
        (
            OpClass::Elementwise,
            "Add",
            vec![],
            vec![vec![1, 64, 32, 32], vec![1, 64, 32, 32]],
        ),
        (OpClass::Other, "Transpose", vec![], vec![vec![64, 32, 32]]),
    ]
}

/// Times each probe on the current thread pool (call it inside a one-thread
/// pool) for at most about `budget` in all, and returns the calibrated model.
/// Probes whose operator is missing or fails keep the default throughput.
pub fn calibrate(budget: Duration) -> CostModel {
    let mut model = CostModel::default();
    let list = probes();
    let per_probe = budget / list.len() as u32;
    for (class, op_type, attrs, shapes) in list {
        let values: BTreeMap<String, Attribute> =
            attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let attrs = Attributes::new("calibration", op_type, values);
        let inputs: Vec<Tensor> = shapes
            .iter()
            .map(|s| {
                let n = s.iter().product();
                Tensor::from_vec(s, (0..n).map(|i| (i % 7) as f32 * 0.1).collect())
                    .expect("shape matches")
            })
            .collect();
        let consts: Vec<Option<&Tensor>> = vec![None; inputs.len()];
        let ctx = BuildContext {
            attrs: &attrs,
            opset: 13,
            consts: &consts,
            num_inputs: inputs.len(),
            num_outputs: 1,
        };
        let Ok(op) = ops::build("", op_type, &ctx) else {
            continue;
        };
        let facts: Vec<Fact> = inputs.iter().map(Fact::of).collect();
        let infer: Vec<InferInput> = facts
            .iter()
            .map(|f| InferInput {
                fact: Some(f),
                value: None,
            })
            .collect();
        let Ok(outs) = op.infer(&infer) else { continue };
        let flops = op.flops(&facts.iter().map(Some).collect::<Vec<_>>(), &outs);
        let args: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
        if op.run(&args).is_err() {
            continue;
        }
        let start = Instant::now();
        let mut runs = 0u32;
        let mut best = Duration::MAX;
        while runs < 3 || (start.elapsed() < per_probe && runs < 50) {
            let t = Instant::now();
            if op.run(&args).is_err() {
                break;
            }
            best = best.min(t.elapsed());
            runs += 1;
        }
        if best != Duration::MAX {
            model.record(class, flops, best);
        }
    }
    model
}

/// The calibrated model for this process, computed once (on a one-thread
/// pool built for the purpose) and reused by every later session.
pub fn cached() -> CostModel {
    static CACHE: OnceLock<CostModel> = OnceLock::new();
    CACHE
        .get_or_init(
            || match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
                Ok(pool) => pool.install(|| calibrate(Duration::from_millis(25))),
                Err(_) => CostModel::default(),
            },
        )
        .clone()
}
