//! Device-state reporting (seed 000): watch CPU, memory, battery and thermal
//! state; report an *anomaly* when a value crosses its threshold and a
//! *change* when it moved more than a report delta since the last report.

/// A watched device metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// CPU use by other work, in [0, 1] (system CPU minus ours, or the host's
    /// pushed CPU utilisation).
    Cpu,
    /// Used / total memory, in [0, 1].
    Memory,
    /// Battery level, in [0, 1]; anomalous when *below* its threshold.
    Battery,
    /// Thermal state, in [0, 1] (1 = critical).
    Thermal,
}

impl Metric {
    /// All metrics, in a fixed order.
    pub const ALL: [Metric; 4] = [
        Metric::Cpu,
        Metric::Memory,
        Metric::Battery,
        Metric::Thermal,
    ];

    /// True when a *low* value is the anomaly (battery), false when a high
    /// one is.
    pub fn low_is_bad(self) -> bool {
        matches!(self, Metric::Battery)
    }

    fn index(self) -> usize {
        match self {
            Metric::Cpu => 0,
            Metric::Memory => 1,
            Metric::Battery => 2,
            Metric::Thermal => 3,
        }
    }
}

/// A report from the device-state reporter.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadEvent {
    /// `metric` crossed `threshold` into the anomalous side (above it, or
    /// below it for the battery). Fires once per crossing.
    Anomaly {
        /// The metric.
        metric: Metric,
        /// Its value now.
        value: f64,
        /// The threshold it crossed.
        threshold: f64,
    },
    /// `metric` moved by more than the report delta since it was last
    /// reported (at `previous`).
    Change {
        /// The metric.
        metric: Metric,
        /// Its value now.
        value: f64,
        /// The value last reported.
        previous: f64,
    },
}

/// Thresholds and report delta of the [`Reporter`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReportConfig {
    /// CPU use by others above which it is an anomaly (default 0.9).
    pub cpu_threshold: f64,
    /// Memory use above which it is an anomaly (default 0.9).
    pub memory_threshold: f64,
    /// Battery level below which it is an anomaly (default 0.15).
    pub battery_threshold: f64,
    /// Thermal state above which it is an anomaly (default 0.8).
    pub thermal_threshold: f64,
    /// A change is reported when a value moved by more than this since its
    /// last report (default 0.1).
    pub delta: f64,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            cpu_threshold: 0.9,
            memory_threshold: 0.9,
            battery_threshold: 0.15,
            thermal_threshold: 0.8,
            delta: 0.1,
        }
    }
}

impl ReportConfig {
    /// The threshold of `metric`.
    pub fn threshold(&self, metric: Metric) -> f64 {
        match metric {
            Metric::Cpu => self.cpu_threshold,
            Metric::Memory => self.memory_threshold,
            Metric::Battery => self.battery_threshold,
            Metric::Thermal => self.thermal_threshold,
        }
    }
}

/// True when `value` is on the anomalous side of `threshold` for `metric`.
pub fn is_anomalous(metric: Metric, value: f64, threshold: f64) -> bool {
    if metric.low_is_bad() {
        value < threshold
    } else {
        value > threshold
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Watch {
    reported: Option<f64>,
    anomalous: bool,
}

/// Watches metric values and turns them into [`LoadEvent`]s. Pure: it owns
/// no thread and no channel; the monitor feeds it samples.
#[derive(Debug, Clone)]
pub struct Reporter {
    config: ReportConfig,
    watch: [Watch; 4],
}

impl Reporter {
    /// A reporter that has seen nothing yet (every metric starts normal).
    pub fn new(config: ReportConfig) -> Reporter {
        Reporter {
            config,
            watch: [Watch::default(); 4],
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &ReportConfig {
        &self.config
    }

    /// Observes `value` of `metric`, appending the events it causes to
    /// `out`: an anomaly when it crossed into the anomalous side (again only
    /// after it went back), a change when it moved more than the delta since
    /// its last report. The first value of a metric is its first report (no
    /// change event). Non-finite values are ignored.
    pub fn observe(&mut self, metric: Metric, value: f64, out: &mut Vec<LoadEvent>) {
        if !value.is_finite() {
            return;
        }
        let threshold = self.config.threshold(metric);
        let delta = self.config.delta;
        let w = &mut self.watch[metric.index()];
        let bad = is_anomalous(metric, value, threshold);
        if bad && !w.anomalous {
            out.push(LoadEvent::Anomaly {
                metric,
                value,
                threshold,
            });
        }
        w.anomalous = bad;
        match w.reported {
            None => w.reported = Some(value),
            Some(previous) if (value - previous).abs() > delta => {
                out.push(LoadEvent::Change {
                    metric,
                    value,
                    previous,
                });
                w.reported = Some(value);
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(r: &mut Reporter, m: Metric, v: f64) -> Vec<LoadEvent> {
        let mut out = Vec::new();
        r.observe(m, v, &mut out);
        out
    }

    #[test]
    fn anomaly_fires_once_per_crossing() {
        let mut r = Reporter::new(ReportConfig {
            delta: 1.0, // no change events here
            ..ReportConfig::default()
        });
        assert!(feed(&mut r, Metric::Cpu, 0.5).is_empty());
        assert_eq!(
            feed(&mut r, Metric::Cpu, 0.95),
            vec![LoadEvent::Anomaly {
                metric: Metric::Cpu,
                value: 0.95,
                threshold: 0.9
            }]
        );
        assert!(feed(&mut r, Metric::Cpu, 0.97).is_empty());
        assert!(feed(&mut r, Metric::Cpu, 0.92).is_empty());
        assert!(feed(&mut r, Metric::Cpu, 0.5).is_empty());
        assert_eq!(feed(&mut r, Metric::Cpu, 0.91).len(), 1);
        // Metrics are independent.
        assert!(feed(&mut r, Metric::Memory, 0.5).is_empty());
        assert_eq!(feed(&mut r, Metric::Memory, 0.95).len(), 1);
    }

    #[test]
    fn battery_anomaly_is_low() {
        let mut r = Reporter::new(ReportConfig {
            delta: 1.0,
            ..ReportConfig::default()
        });
        assert!(feed(&mut r, Metric::Battery, 0.9).is_empty());
        assert!(feed(&mut r, Metric::Battery, 0.2).is_empty());
        let e = feed(&mut r, Metric::Battery, 0.1);
        assert!(matches!(
            e[..],
            [LoadEvent::Anomaly {
                metric: Metric::Battery,
                ..
            }]
        ));
        assert!(feed(&mut r, Metric::Battery, 0.05).is_empty());
        // First value already anomalous fires at once.
        let mut r = Reporter::new(ReportConfig::default());
        assert_eq!(feed(&mut r, Metric::Thermal, 0.85).len(), 1);
    }

    #[test]
    fn change_relative_to_last_report() {
        let mut r = Reporter::new(ReportConfig::default());
        assert!(feed(&mut r, Metric::Memory, 0.30).is_empty());
        // Drifts in small steps: no report until 0.1 away from 0.30.
        assert!(feed(&mut r, Metric::Memory, 0.35).is_empty());
        assert!(feed(&mut r, Metric::Memory, 0.39).is_empty());
        assert_eq!(
            feed(&mut r, Metric::Memory, 0.41),
            vec![LoadEvent::Change {
                metric: Metric::Memory,
                value: 0.41,
                previous: 0.30
            }]
        );
        assert!(feed(&mut r, Metric::Memory, 0.45).is_empty());
        assert_eq!(feed(&mut r, Metric::Memory, 0.30).len(), 1);
        assert!(feed(&mut r, Metric::Memory, f64::NAN).is_empty());
    }

    #[test]
    fn crossing_with_a_jump_reports_both() {
        let mut r = Reporter::new(ReportConfig::default());
        feed(&mut r, Metric::Cpu, 0.2);
        let e = feed(&mut r, Metric::Cpu, 0.95);
        assert_eq!(e.len(), 2);
        assert!(matches!(e[0], LoadEvent::Anomaly { .. }));
        assert!(matches!(e[1], LoadEvent::Change { previous, .. } if previous == 0.2));
    }
}
