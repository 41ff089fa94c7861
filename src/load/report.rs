//! Device-state reporting (seed 000): watch CPU, memory, battery and thermal
//! state; report an *anomaly* when a value crosses its threshold, and a
//! *change* when it moved more than a report delta since the last report
//! ([`Reporter`], shared by all runs) or since the state at the start of a
//! run ([`Baseline`], one per run). The sampler and the host application
//! are watched apart: each event names its [`Source`].

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

    /// Its name in reports: `cpu`, `memory`, `battery`, `thermal`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Cpu => "cpu",
            Metric::Memory => "memory",
            Metric::Battery => "battery",
            Metric::Thermal => "thermal",
        }
    }
}

/// Who observed a value: the cause an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The monitor's own sampler (`/proc`, sysinfo, sysfs).
    Sampler,
    /// A state the host application pushed.
    Host,
}

impl Source {
    /// Both sources, in a fixed order.
    pub const ALL: [Source; 2] = [Source::Sampler, Source::Host];

    fn index(self) -> usize {
        match self {
            Source::Sampler => 0,
            Source::Host => 1,
        }
    }

    /// Its name in reports: `sampler` or `host`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Sampler => "sampler",
            Source::Host => "host",
        }
    }
}

/// What a [`LoadEvent::Change`] is measured from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Since {
    /// The value last reported for the metric.
    LastReport,
    /// The value when the run started (seed 000's initial state).
    RunStart,
}

/// Watch slots: one per metric and source.
const SLOTS: usize = 8;

fn slot(metric: Metric, source: Source) -> usize {
    metric.index() * 2 + source.index()
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
        /// Who observed it.
        source: Source,
    },
    /// `metric` moved by more than the report delta since it was last
    /// reported, or since the run started (at `previous`).
    Change {
        /// The metric.
        metric: Metric,
        /// Its value now.
        value: f64,
        /// The value it is measured from.
        previous: f64,
        /// Which value `previous` is.
        since: Since,
        /// Who observed it.
        source: Source,
    },
}

impl LoadEvent {
    /// `anomaly` or `change`.
    pub fn kind(&self) -> &'static str {
        match self {
            LoadEvent::Anomaly { .. } => "anomaly",
            LoadEvent::Change { .. } => "change",
        }
    }

    /// The metric it is about.
    pub fn metric(&self) -> Metric {
        match self {
            LoadEvent::Anomaly { metric, .. } | LoadEvent::Change { metric, .. } => *metric,
        }
    }

    /// The metric's value now.
    pub fn value(&self) -> f64 {
        match self {
            LoadEvent::Anomaly { value, .. } | LoadEvent::Change { value, .. } => *value,
        }
    }

    /// Who observed it.
    pub fn source(&self) -> Source {
        match self {
            LoadEvent::Anomaly { source, .. } | LoadEvent::Change { source, .. } => *source,
        }
    }
}

impl std::fmt::Display for LoadEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadEvent::Anomaly {
                metric,
                value,
                threshold,
                source,
            } => {
                let side = if metric.low_is_bad() {
                    "below"
                } else {
                    "above"
                };
                write!(
                    f,
                    "{} anomaly: {value:.2} is {side} the threshold {threshold:.2} ({})",
                    metric.name(),
                    source.name()
                )
            }
            LoadEvent::Change {
                metric,
                value,
                previous,
                since,
                source,
            } => {
                let from = match since {
                    Since::LastReport => "the last report",
                    Since::RunStart => "the start of the run",
                };
                write!(
                    f,
                    "{} change: {previous:.2} -> {value:.2} since {from} ({})",
                    metric.name(),
                    source.name()
                )
            }
        }
    }
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
    /// last report (default 0.1; infinity reports none).
    pub delta: f64,
    /// A change is reported when a value moved by more than this since the
    /// start of a run (default 0.2; infinity reports none).
    pub start_delta: f64,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            cpu_threshold: 0.9,
            memory_threshold: 0.9,
            battery_threshold: 0.15,
            thermal_threshold: 0.8,
            delta: 0.1,
            start_delta: 0.2,
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
    watch: [Watch; SLOTS],
}

impl Reporter {
    /// A reporter that has seen nothing yet (every metric starts normal).
    pub fn new(config: ReportConfig) -> Reporter {
        Reporter {
            config,
            watch: [Watch::default(); SLOTS],
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &ReportConfig {
        &self.config
    }

    /// Observes `value` of `metric` from `source`, appending the events it
    /// causes to `out`: an anomaly when it crossed into the anomalous side
    /// (again only after it went back), a change when it moved more than
    /// the delta since its last report. The first value of a metric from a
    /// source is its first report (no change event). Non-finite values are
    /// ignored.
    pub fn observe(
        &mut self,
        metric: Metric,
        source: Source,
        value: f64,
        out: &mut Vec<LoadEvent>,
    ) {
        if !value.is_finite() {
            return;
        }
        let threshold = self.config.threshold(metric);
        let delta = self.config.delta;
        let w = &mut self.watch[slot(metric, source)];
        let bad = is_anomalous(metric, value, threshold);
        if bad && !w.anomalous {
            out.push(LoadEvent::Anomaly {
                metric,
                value,
                threshold,
                source,
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
                    since: Since::LastReport,
                    source,
                });
                w.reported = Some(value);
            }
            Some(_) => {}
        }
    }
}

/// The device state at the start of one run, and the changes from it: a
/// change is reported when a value moved more than
/// [`ReportConfig::start_delta`] from its value at the start, once per
/// excursion (again only after it came back within the delta).
#[derive(Debug, Clone)]
pub struct Baseline {
    delta: f64,
    start: [Option<f64>; SLOTS],
    away: [bool; SLOTS],
}

impl Baseline {
    /// A baseline from the values known at the start of the run; a metric
    /// not known yet takes its first value seen as its start.
    pub fn new(delta: f64, known: &[(Metric, Source, f64)]) -> Baseline {
        let mut start = [None; SLOTS];
        for &(m, s, v) in known {
            if v.is_finite() {
                start[slot(m, s)] = Some(v);
            }
        }
        Baseline {
            delta,
            start,
            away: [false; SLOTS],
        }
    }

    /// Observes `value` of `metric` from `source`, appending a change event
    /// to `out` when it has just moved more than the delta from the start.
    pub fn observe(
        &mut self,
        metric: Metric,
        source: Source,
        value: f64,
        out: &mut Vec<LoadEvent>,
    ) {
        if !value.is_finite() {
            return;
        }
        let i = slot(metric, source);
        let Some(start) = self.start[i] else {
            self.start[i] = Some(value);
            return;
        };
        let away = (value - start).abs() > self.delta;
        if away && !self.away[i] {
            out.push(LoadEvent::Change {
                metric,
                value,
                previous: start,
                since: Since::RunStart,
                source,
            });
        }
        self.away[i] = away;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(r: &mut Reporter, m: Metric, v: f64) -> Vec<LoadEvent> {
        let mut out = Vec::new();
        r.observe(m, Source::Sampler, v, &mut out);
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
                threshold: 0.9,
                source: Source::Sampler,
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
                previous: 0.30,
                since: Since::LastReport,
                source: Source::Sampler,
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

    #[test]
    fn sources_are_watched_apart() {
        // The sampler sees 0.2 while the host says 0.95: the host's value
        // is an anomaly of its own, and the sampler's next reading neither
        // ends it nor raises another.
        let mut r = Reporter::new(ReportConfig::default());
        let mut out = Vec::new();
        r.observe(Metric::Cpu, Source::Sampler, 0.2, &mut out);
        r.observe(Metric::Cpu, Source::Host, 0.95, &mut out);
        r.observe(Metric::Cpu, Source::Sampler, 0.21, &mut out);
        r.observe(Metric::Cpu, Source::Host, 0.96, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].source(), Source::Host);
        assert_eq!(out[0].kind(), "anomaly");
        assert_eq!(
            out[0].to_string(),
            "cpu anomaly: 0.95 is above the threshold 0.90 (host)"
        );
    }

    #[test]
    fn changes_from_the_start_of_a_run_add_up_small_steps() {
        // Steps of 0.07 or less add up: 0.60 -> 0.38 is more than 0.2 from
        // the state at the start of the run.
        let mut b = Baseline::new(0.2, &[(Metric::Battery, Source::Host, 0.60)]);
        let mut out = Vec::new();
        for v in [0.55, 0.50, 0.45, 0.38] {
            b.observe(Metric::Battery, Source::Host, v, &mut out);
        }
        assert_eq!(
            out,
            vec![LoadEvent::Change {
                metric: Metric::Battery,
                value: 0.38,
                previous: 0.60,
                since: Since::RunStart,
                source: Source::Host,
            }]
        );
        // Once per excursion: further down, nothing new; back and out again,
        // one more.
        b.observe(Metric::Battery, Source::Host, 0.30, &mut out);
        assert_eq!(out.len(), 1);
        b.observe(Metric::Battery, Source::Host, 0.55, &mut out);
        b.observe(Metric::Battery, Source::Host, 0.35, &mut out);
        assert_eq!(out.len(), 2);
        // A metric unknown at the start takes its first value as the start.
        b.observe(Metric::Memory, Source::Sampler, 0.5, &mut out);
        b.observe(Metric::Memory, Source::Sampler, 0.65, &mut out);
        assert_eq!(out.len(), 2);
        b.observe(Metric::Memory, Source::Sampler, 0.75, &mut out);
        assert_eq!(out.len(), 3);
        assert!(out[2].to_string().contains("since the start of the run"));
    }
}
