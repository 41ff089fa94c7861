//! The cost model: a node's single-thread time is its FLOPs divided by the
//! device's single-thread throughput for its class of operator, plus a small
//! fixed overhead per node. Throughputs have defaults, can be calibrated on the
//! device (bounded in time), and measured node times refine the estimate.

use crate::graph::Node;
use std::time::Duration;

/// Classes of operators with distinct single-thread throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// Convolutions.
    Conv,
    /// Matrix products.
    MatMul,
    /// Pooling and normalisation.
    Window,
    /// Elementwise arithmetic and activations.
    Elementwise,
    /// Data movement and everything else.
    Other,
}

impl OpClass {
    /// Every class, in a fixed order.
    pub const ALL: [OpClass; 5] = [
        OpClass::Conv,
        OpClass::MatMul,
        OpClass::Window,
        OpClass::Elementwise,
        OpClass::Other,
    ];

    /// The class of an ONNX operator type.
    pub fn of(op_type: &str) -> OpClass {
        match op_type {
            "Conv" | "ConvTranspose" | "ConvInteger" | "QLinearConv" => OpClass::Conv,
            "Gemm" | "MatMul" | "MatMulInteger" | "QLinearMatMul" | "Einsum" => OpClass::MatMul,
            "MaxPool"
            | "AveragePool"
            | "GlobalAveragePool"
            | "GlobalMaxPool"
            | "LpPool"
            | "LRN"
            | "BatchNormalization"
            | "InstanceNormalization"
            | "LayerNormalization"
            | "GroupNormalization"
            | "Softmax"
            | "LogSoftmax" => OpClass::Window,
            "Add" | "Sub" | "Mul" | "Div" | "Relu" | "Sigmoid" | "Tanh" | "Clip" | "Sum"
            | "Max" | "Min" | "Mean" | "LeakyRelu" | "HardSwish" | "Exp" | "Erf" | "Gelu" => {
                OpClass::Elementwise
            }
            _ => OpClass::Other,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

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
        self.throughput[class.index()]
    }

    /// Sets the throughput of a class (ignored unless finite and positive).
    pub fn set_throughput(&mut self, class: OpClass, flops_per_second: f64) {
        if flops_per_second.is_finite() && flops_per_second > 0.0 {
            self.throughput[class.index()] = flops_per_second;
        }
    }

    /// Estimated single-thread seconds of a node from its FLOPs.
    pub fn node_seconds(&self, node: &Node, flops: u64) -> f64 {
        self.per_node + flops as f64 / self.throughput(OpClass::of(&node.op_type))
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
    fn classes() {
        assert_eq!(OpClass::of("Conv"), OpClass::Conv);
        assert_eq!(OpClass::of("MatMul"), OpClass::MatMul);
        assert_eq!(OpClass::of("Relu"), OpClass::Elementwise);
        assert_eq!(OpClass::of("Reshape"), OpClass::Other);
    }

    #[test]
    fn record_sets_throughput() {
        let mut m = CostModel::default();
        m.record(OpClass::Conv, 1_000_000_000, Duration::from_millis(100));
        assert!((m.throughput(OpClass::Conv) - 1e10).abs() < 1.0);
        m.record(OpClass::Conv, 0, Duration::from_millis(100));
        assert!((m.throughput(OpClass::Conv) - 1e10).abs() < 1.0);
    }
}
