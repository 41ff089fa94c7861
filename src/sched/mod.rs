//! Scheduling: the method's policy (bands, pool sizing), the makespan check
//! that keeps a fork serial when parallel siblings would not finish sooner,
//! the thread pools siblings run on, and the scheduler that combines them with the device
//! load at every fork.

mod affinity;
pub mod deadline;
pub mod makespan;
pub mod placement;
mod policy;
mod pools;
mod scheduler;

pub use deadline::{DeadlineRule, GroupedWork, Verdict, DEFAULT_DELAY_RATIO};
pub use placement::Placement;
pub use policy::{apportion, band, decide, Band, Decision, PolicyConfig, PoolPlan};
pub use pools::{Pool, Pools};
pub use scheduler::{ForkReport, Mode, Scheduler, SchedulerConfig};
