//! Device-state sampling and reporting: the utilisation `n` of the method
//! (how busy the device is with work *other than ours*), per-CPU loads for
//! pinning, and seed 000's anomaly / change reports.
//!
//! - [`allowed`]: the CPUs this process may run on (pinning keeps to them).
//! - [`config`]: sources, period, smoothing, host state.
//! - [`sample`]: reading `/proc/self/task/*/schedstat` and sysinfo.
//! - [`runnable`]: other processes' runnable threads (demand for CPUs).
//! - [`power`]: battery level and thermal state from sysfs.
//! - [`sysfs`]: reading sysfs files under a configurable root.
//! - [`topology`]: clusters, core capacities and power (big.LITTLE).
//! - [`smooth`]: the pure arithmetic (deltas, own-CPU subtraction, mappings,
//!   combining, EWMA).
//! - [`report`]: threshold-crossing and change events.
//! - [`monitor`]: the [`LoadMonitor`] and its sampler thread.

pub mod allowed;
pub mod config;
pub mod monitor;
pub mod power;
pub mod report;
pub mod runnable;
pub mod sample;
pub mod smooth;
pub mod sysfs;
pub mod topology;

pub use config::{HostState, LoadConfig, LoadSource};
pub use monitor::{Activity, LoadMonitor};
pub use report::{Baseline, LoadEvent, Metric, ReportConfig, Reporter, Since, Source};
pub use sample::{Sample, Sampler};
pub use topology::{Cluster, ClusterPower, PowerTable, Topology, TopologySource};

#[cfg(test)]
mod spinner;
#[cfg(test)]
mod tests;
