//! TEMPORARY stub of the load monitor API (replaced by the real module).
use std::sync::Arc;
use std::time::Duration;
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    SystemCpu,
    RunQueue,
    Memory,
    Host,
}
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub sources: Vec<LoadSource>,
    pub period: Duration,
    pub smoothing: f64,
}
impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            sources: vec![LoadSource::SystemCpu],
            period: Duration::from_millis(100),
            smoothing: 0.3,
        }
    }
}
#[derive(Debug, Clone, Default)]
pub struct HostState {
    pub cpu_utilisation: Option<f64>,
    pub battery_level: Option<f64>,
    pub thermal: Option<f64>,
}
#[derive(Debug)]
pub struct LoadMonitor {
    n: f64,
}
impl LoadMonitor {
    pub fn start(_c: LoadConfig) -> Arc<LoadMonitor> {
        Arc::new(LoadMonitor { n: 0.0 })
    }
    pub fn fixed(n: f64) -> Arc<LoadMonitor> {
        Arc::new(LoadMonitor { n })
    }
    pub fn utilisation(&self) -> f64 {
        self.n
    }
    pub fn push_host(&self, _s: HostState) {}
    pub fn least_loaded_cpus(&self, k: usize) -> Vec<usize> {
        (0..k).collect()
    }
}
