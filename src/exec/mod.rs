//! Execution: the plan a session builds for one set of input shapes, the
//! store that holds values while a run is in flight, and the executor that
//! walks the plan's steps under the scheduler's decisions, watched for its
//! deadline and the device's events; control-flow bodies run as plans of
//! their own ([`Bodies`]). Concatenations are written in place by the
//! producers of their inputs where the layout allows ([`Joins`]).

mod body;
mod executor;
mod joins;
mod plan;
mod store;
mod trace;
mod views;
mod warm;
mod watch;

pub use body::{Bodies, MAX_PLANS};
pub use executor::{run, RunResult};
pub use joins::{Join, Joins, Part};
pub use plan::Plan;
pub use store::ValueStore;
pub use trace::{Span, Trace};
pub use watch::{Control, Progress, RunEvent, Watch};
