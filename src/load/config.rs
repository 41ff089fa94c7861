//! Load-monitor configuration: which sources to combine, how often to sample,
//! how much to smooth, and the state a host application can push in.

use std::time::Duration;

use super::report::ReportConfig;

/// One measurement the monitor can combine into the utilisation `n`.
///
/// The enabled sources are combined by taking their maximum: the device is as
/// busy as its busiest signal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Whole-system CPU use minus this process's own CPU use, as a fraction
    /// of all CPUs (sysinfo for the system, `/proc/self/task/*/schedstat` for
    /// our own threads; on other systems the raw system value).
    SystemCpu,
    /// Run-queue delay of this process's threads
    /// (`/proc/self/task/*/schedstat`): the share of the interval our active
    /// threads spent waiting for a CPU. Contributes nothing where unreadable.
    RunQueue,
    /// Threads of other processes that are running or waiting for a CPU,
    /// per CPU (`procs_running` in `/proc/stat` minus our own runnable
    /// threads): the demand of others, which a CPU share under-reads while
    /// we compete with them. Contributes nothing where unreadable.
    Runnable,
    /// Memory pressure: used / total memory, mapped by
    /// [`memory_pressure`](super::smooth::memory_pressure).
    Memory,
    /// The last [`HostState`] pushed by the application, mapped by
    /// [`host_load`](super::smooth::host_load).
    Host,
}

/// How a [`LoadMonitor`](super::LoadMonitor) samples and combines load.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The sources combined (maximum of the enabled ones).
    pub sources: Vec<LoadSource>,
    /// Time between two samples of the background thread (default 100 ms).
    pub period: Duration,
    /// EWMA weight of the newest sample, in (0, 1] (default 0.3; 1 = no
    /// smoothing).
    pub smoothing: f64,
    /// Thresholds and report delta of the device-state reporter.
    pub report: ReportConfig,
    /// The background thread stops sampling (sleeps without waking) once no
    /// run has been in flight for this long, and resumes, sampling at once,
    /// when the next run starts: an idle app spends nothing on monitoring.
    /// `None` samples all the time. Default 1 s.
    pub idle_after: Option<Duration>,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            sources: vec![LoadSource::SystemCpu, LoadSource::Runnable],
            period: Duration::from_millis(100),
            smoothing: 0.3,
            report: ReportConfig::default(),
            idle_after: Some(Duration::from_secs(1)),
        }
    }
}

impl LoadConfig {
    /// This configuration with another reporter configuration.
    pub fn with_report(mut self, report: ReportConfig) -> Self {
        self.report = report;
        self
    }

    /// True when `source` is enabled.
    pub fn has(&self, source: LoadSource) -> bool {
        self.sources.contains(&source)
    }
}

/// Device state the host application knows better than we do (phones know
/// their battery and thermal state). Every field is optional; absent fields
/// contribute nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostState {
    /// CPU utilisation by other work, in [0, 1]; used directly.
    pub cpu_utilisation: Option<f64>,
    /// Battery level in [0, 1] (1 = full); a low battery raises the load.
    pub battery_level: Option<f64>,
    /// Thermal state in [0, 1] (0 = cool, 1 = critical throttling); used
    /// directly as a load.
    pub thermal: Option<f64>,
}
