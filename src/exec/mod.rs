//! Execution: the plan a session builds for one set of input shapes, the
//! store that holds values while a run is in flight, and the executor.

mod executor;
mod plan;
mod store;

pub use executor::run_serial;
pub use plan::Plan;
pub use store::ValueStore;
