//! Execution: the plan a session builds for one set of input shapes, the
//! store that holds values while a run is in flight, and the executor that
//! walks the plan's steps under the scheduler's decisions.

mod executor;
mod plan;
mod store;
mod trace;
mod views;
mod warm;

pub use executor::{run, RunResult};
pub use plan::Plan;
pub use store::ValueStore;
pub use trace::{Span, Trace};
