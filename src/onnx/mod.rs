//! The ONNX front end: protobuf model files to the graph IR, and TensorProto
//! to and from [`Tensor`](crate::Tensor), SequenceProto and OptionalProto to
//! and from [`Value`](crate::ir::Value). Nothing after this stage sees protobuf.

mod attributes;
mod external;
mod framing;
mod inventory;
mod model;
mod split;
mod subgraph;
mod tensor_proto;
mod value_proto;

pub use inventory::{operators_used, UsedOperator};
pub use model::{load_model_bytes, load_model_file, MAX_IR_VERSION, MIN_IR_VERSION};
pub use split::{split_model_file, PartModel, SplitSpec};
pub use tensor_proto::{read_tensor_file, tensor_from_proto, tensor_to_proto, write_tensor_file};
pub use value_proto::{read_value_file, value_from_bytes, value_to_bytes, write_value_file};
