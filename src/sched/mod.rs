//! Scheduling: the method's policy (bands, pool sizing), the makespan check
//! that keeps a fork serial when parallel siblings would not finish sooner,
//! the thread pools siblings run on, and the scheduler that combines them with the device
//! load at every fork ([`fork`]: the whole decision, from observing the
//! device to exploring the option not taken; [`solo`]: whether a plan
//! without forks runs on the caller's thread or on its pool).

mod affinity;
pub mod deadline;
pub mod fork;
pub mod makespan;
pub mod placement;
mod policy;
mod pools;
mod scheduler;
pub mod solo;

pub use deadline::{DeadlineRule, GroupedWork, Verdict, DEFAULT_DELAY_RATIO};
pub use fork::{Choice, ForkMemory, ForkSite, Observation};
pub use placement::Placement;
pub use policy::{apportion, band, decide, Band, Decision, PolicyConfig, PoolPlan};
pub use pools::{Pool, Pools};
pub use scheduler::{ForkReport, Mode, Scheduler, SchedulerConfig};
pub use solo::{SoloMemory, SoloWay};
