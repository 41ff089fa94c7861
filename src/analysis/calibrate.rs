//! Calibration of the cost model on this device: times a representative
//! kernel of each operator class ([`crate::ops::calibration`]) on one thread,
//! within a small time budget, and caches the result for the process.

use super::cost::CostModel;
use crate::ir::{Fact, InferInput};
use crate::ops::calibration::{probes, Probe};
use crate::sched::Pool;
use crate::tensor::recycle::recycle;
use crate::tensor::Tensor;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Fewest timed runs per probe.
const MIN_RUNS: u32 = 3;
/// Most timed runs per probe.
const MAX_RUNS: u32 = 50;
/// Runs in a row without a new best after which a probe stops. Without
/// this rule every probe ran until its share of the budget was spent
/// (25 ms in all: most of a small model's cold start).
const SETTLED: u32 = 4;

/// Times each probe on the current thread pool (call it inside a one-thread
/// pool) for at most about `budget` in all, and returns the calibrated model.
/// Probes whose operator is missing or fails keep the default throughput.
pub fn calibrate(budget: Duration) -> CostModel {
    let mut model = CostModel::default();
    let list = probes();
    let per_probe = budget / list.len().max(1) as u32;
    for Probe { op, inputs } in list {
        let class = op.cost_class();
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
        // Each run's outputs go back to the buffer pools before the next, as
        // a model's intermediate values do between runs: the probe then
        // times the kernel on a warm buffer, not the system mapping fresh
        // pages for it (a block over glibc's mapping threshold was mapped
        // and faulted in again at every run, about 7 MB per calibration).
        let Ok(mut previous) = op.run(&args) else {
            continue;
        };
        let start = Instant::now();
        let (mut runs, mut since_best) = (0u32, 0u32);
        let mut best = Duration::MAX;
        while runs < MIN_RUNS
            || (start.elapsed() < per_probe && runs < MAX_RUNS && since_best < SETTLED)
        {
            previous.drain(..).for_each(recycle);
            let t = Instant::now();
            let Ok(outputs) = op.run(&args) else {
                break;
            };
            let took = t.elapsed();
            previous = outputs;
            since_best = if took < best { 0 } else { since_best + 1 };
            best = best.min(took);
            runs += 1;
        }
        // The last outputs are dropped, so no probe's buffer outlives it.
        drop(previous);
        if best != Duration::MAX {
            model.record(class, flops, best);
        }
    }
    model
}

/// The process's calibrated model, once made.
static CACHE: OnceLock<CostModel> = OnceLock::new();

/// Whether [`cached`] has its model already (a later call returns at once).
pub fn done() -> bool {
    CACHE.get().is_some()
}

/// The calibrated model for this process, computed once (on a one-thread
/// pool built for the purpose, whose thread is joined before this returns)
/// and reused by every later session.
pub fn cached() -> CostModel {
    CACHE
        .get_or_init(|| match Pool::new(0, 1, "ramify-calibrate") {
            Ok(pool) => pool.pool.install(|| calibrate(Duration::from_millis(25))),
            Err(_) => CostModel::default(),
        })
        .clone()
}
