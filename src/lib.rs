//! ramify: an embeddable on-device ONNX runtime for the CPU.
//!
//! ramify loads an ONNX model, finds the sibling subgraphs under each fork of
//! the graph, estimates each sibling's single-thread time from operator FLOPs,
//! and decides at every fork, from the device's current load, whether to run
//! the siblings in parallel on CPU pools, on shrunk pools, or one after another.
//!
//! The modules form layers, each importing only those below it (checked in
//! CI by `scripts/check_layers.py`; see `docs/architecture.md`): [`error`];
//! [`tensor`] and [`load`]; [`ir`], the vocabulary shared by graph and
//! operators; [`ops`] and [`sched`]; [`graph`]; [`analysis`] and [`onnx`];
//! [`exec`]; [`session`].
//!
//! ```no_run
//! use ramify::{Session, Tensor};
//!
//! let session = Session::builder().threads(2).build_from_file("models/inception_mini.onnx")?;
//! let input = Tensor::from_vec(&[1, 3, 96, 96], vec![0.5f32; 3 * 96 * 96])?;
//! for (name, value) in session.run([("input", input)])? {
//!     println!("{name}: {value}");
//! }
//! # Ok::<(), ramify::Error>(())
//! ```

pub mod analysis;
pub mod error;
pub mod exec;
pub mod graph;
pub mod ir;
pub mod load;
pub mod onnx;
pub mod ops;
pub(crate) mod order;
pub mod sched;
pub mod session;
pub mod tensor;

pub use error::{DeadlineMiss, Error, Result};
pub use exec::{Progress, RunEvent};
pub use ir::attributes;
pub use ir::{Kind as ValueKind, Optional, Sequence, Value};
pub use ops::interrupt::CancelToken;
pub use ops::overflow::{Int8Kernel, Int8Settings};
pub use sched::{Mode, Placement};
pub use session::{
    available_cpus, partition_model, BatchResult, EventCallback, IoInfo, Outputs, Partitioned,
    Pipeline, RunOptions, RunReport, Session, SessionBuilder,
};
pub use tensor::{AlignedAllocator, DType, Element, Tensor};
