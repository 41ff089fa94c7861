//! ramify: an embeddable on-device ONNX runtime for the CPU.
//!
//! ramify loads an ONNX model, finds the sibling subgraphs under each fork of
//! the graph, estimates each sibling's single-thread time from operator FLOPs,
//! and decides at every fork, from the device's current load, whether to run
//! the siblings in parallel on CPU pools, on shrunk pools, or one after another.

pub mod attributes;
pub mod error;
pub mod ops;
pub mod tensor;

pub use error::{Error, Result};
pub use tensor::{DType, Element, Tensor};
