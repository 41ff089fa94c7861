//! The cost model: a node's single-thread time is its FLOPs divided by the
//! device's single-thread throughput for its class of operator, plus a small
//! fixed overhead per node. Throughputs have defaults, can be calibrated on the
//! device (bounded in time), and measured node times refine the estimate. Each
//! operator names its own class ([`Operator::cost_class`](crate::ir::Operator::cost_class)).

use crate::graph::Node;
use std::time::Duration;

pub use crate::ir::OpClass;

/// Single-thread throughputs (FLOP per second) per operator class.
#[derive(Debug, Clone)]
pub struct CostModel {
    throughput: [f64; 5],
    /// Fixed cost of dispatching one node, in seconds.
    pub per_node: f64,
}

impl Default for CostModel {
    /// Conservative defaults for a current phone or laptop core.
    fn default() -> Self {
        CostModel {
            throughput: [20e9, 20e9, 2e9, 1e9, 1e9],
            per_node: 2e-6,
        }
    }
}

impl CostModel {
    /// The throughput of a class, FLOP/s.
    pub fn throughput(&self, class: OpClass) -> f64 {
        self.throughput[class as usize]
    }

    /// Sets the throughput of a class (ignored unless finite and positive).
    pub fn set_throughput(&mut self, class: OpClass, flops_per_second: f64) {
        if flops_per_second.is_finite() && flops_per_second > 0.0 {
            self.throughput[class as usize] = flops_per_second;
        }
    }

    /// Estimated single-thread seconds of a node from its FLOPs.
    pub fn node_seconds(&self, node: &Node, flops: u64) -> f64 {
        self.per_node + flops as f64 / self.throughput(node.op.cost_class())
    }

    /// Updates a class's throughput from a measured single-thread run.
    pub fn record(&mut self, class: OpClass, flops: u64, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        if flops > 0 && secs > 0.0 {
            self.set_throughput(class, flops as f64 / secs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_sets_throughput() {
        let mut m = CostModel::default();
        m.record(OpClass::Conv, 1_000_000_000, Duration::from_millis(100));
        assert!((m.throughput(OpClass::Conv) - 1e10).abs() < 1.0);
        m.record(OpClass::Conv, 0, Duration::from_millis(100));
        assert!((m.throughput(OpClass::Conv) - 1e10).abs() < 1.0);
    }
}
