//! Run events for C: `RamifyEvent`, the flat form of a `ramify::RunEvent`
//! (a device-state anomaly or change, a re-plan, a hurry for the deadline)
//! that an event callback receives, and the wrapper that calls the C
//! callback from ramify's event thread without letting a panic unwind into C.

use ramify::load::{LoadEvent, Metric, Since, Source};
use ramify::RunEvent;
use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// What a `RamifyEvent` reports.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamifyEventKind {
    /// A device metric crossed its threshold into the anomalous side (above
    /// it; below it for the battery) while the run was going on.
    DeviceAnomaly = 0,
    /// A device metric moved by more than the report delta since it was
    /// last reported, or since the run started.
    DeviceChange = 1,
    /// The forks of the plan not yet started are decided again from the
    /// load now (after a device event, or to hurry).
    Replan = 2,
    /// The run would finish after its deadline × delay ratio on the current
    /// plan: the forks not yet started take the fastest plan.
    Hurry = 3,
}

/// The device metric of a `RamifyEvent`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamifyMetric {
    /// Not a device event (re-plan, hurry).
    None = 0,
    /// CPU use by other work, in [0, 1].
    Cpu = 1,
    /// Used / total memory, in [0, 1].
    Memory = 2,
    /// Battery level, in [0, 1] (anomalous when low).
    Battery = 3,
    /// Thermal state, in [0, 1] (1 = critical).
    Thermal = 4,
}

/// Who observed the value of a device `RamifyEvent`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamifyEventSource {
    /// Not a device event (re-plan, hurry).
    None = 0,
    /// ramify's own sampler of the device (`/proc`, sysfs).
    Sampler = 1,
    /// The app, through `ramify_session_push_host_state`.
    Host = 2,
}

/// One event of a run, as an event callback
/// (`ramify_run_options_set_event_callback`) receives it. The struct and
/// `message` are valid only during the callback: copy what you keep.
/// Fields that do not apply to the event's kind are NAN (doubles), 0
/// (`forks_left`, `since_run_start`) or `..._NONE` (enums).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RamifyEvent {
    /// What happened.
    pub kind: RamifyEventKind,
    /// Device events: the metric.
    pub metric: RamifyMetric,
    /// Device events: who observed the value.
    pub source: RamifyEventSource,
    /// Device changes: 1 when `previous` is the value at the start of the
    /// run, 0 when it is the value last reported.
    pub since_run_start: i32,
    /// Device events: the metric's value now.
    pub value: f64,
    /// Device changes: the value it moved from.
    pub previous: f64,
    /// Device anomalies: the threshold it crossed.
    pub threshold: f64,
    /// Milliseconds since the run started.
    pub at_ms: f64,
    /// Re-plans: the device load (utilisation) the forks are decided from.
    pub load: f64,
    /// Re-plans: forks of the plan not yet started.
    pub forks_left: usize,
    /// Hurries: estimated milliseconds left on the current plan.
    pub remaining_ms: f64,
    /// Hurries: estimated milliseconds left on the fastest plan.
    pub fastest_ms: f64,
    /// Hurries: the milliseconds the run may take in all (deadline × delay
    /// ratio).
    pub allowed_ms: f64,
    /// The event in words, as ramify's run reports print it (e.g. "3.1 ms:
    /// battery anomaly: 0.05 is below the threshold 0.15 (host)"):
    /// NUL-terminated UTF-8, never NULL, valid only during the callback.
    pub message: *const c_char,
}

/// Called with each event of a run: `event` is valid only during the call;
/// `user_data` is the pointer given to `ramify_run_options_set_event_callback`.
pub type RamifyEventCallback =
    Option<unsafe extern "C" fn(event: *const RamifyEvent, user_data: *mut c_void)>;

fn ms(d: &Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl RamifyEvent {
    /// An event of no kind-specific field, at `at`, described by `message`.
    fn base(kind: RamifyEventKind, at: &Duration, message: &CString) -> RamifyEvent {
        RamifyEvent {
            kind,
            metric: RamifyMetric::None,
            source: RamifyEventSource::None,
            since_run_start: 0,
            value: f64::NAN,
            previous: f64::NAN,
            threshold: f64::NAN,
            at_ms: ms(at),
            load: f64::NAN,
            forks_left: 0,
            remaining_ms: f64::NAN,
            fastest_ms: f64::NAN,
            allowed_ms: f64::NAN,
            message: message.as_ptr(),
        }
    }

    /// The C form of `event`; `message` (its text) must outlive the result.
    pub(crate) fn of(event: &RunEvent, message: &CString) -> RamifyEvent {
        match event {
            RunEvent::Device { at, event } => {
                let metric = match event.metric() {
                    Metric::Cpu => RamifyMetric::Cpu,
                    Metric::Memory => RamifyMetric::Memory,
                    Metric::Battery => RamifyMetric::Battery,
                    Metric::Thermal => RamifyMetric::Thermal,
                };
                let source = match event.source() {
                    Source::Sampler => RamifyEventSource::Sampler,
                    Source::Host => RamifyEventSource::Host,
                };
                let common = |kind| RamifyEvent {
                    metric,
                    source,
                    value: event.value(),
                    ..RamifyEvent::base(kind, at, message)
                };
                match event {
                    LoadEvent::Anomaly { threshold, .. } => RamifyEvent {
                        threshold: *threshold,
                        ..common(RamifyEventKind::DeviceAnomaly)
                    },
                    LoadEvent::Change {
                        previous, since, ..
                    } => RamifyEvent {
                        previous: *previous,
                        since_run_start: i32::from(*since == Since::RunStart),
                        ..common(RamifyEventKind::DeviceChange)
                    },
                }
            }
            RunEvent::Replan {
                at,
                load,
                forks_left,
                ..
            } => RamifyEvent {
                load: *load,
                forks_left: *forks_left,
                ..RamifyEvent::base(RamifyEventKind::Replan, at, message)
            },
            RunEvent::Hurry {
                at,
                remaining,
                fastest,
                allowed,
            } => RamifyEvent {
                remaining_ms: ms(remaining),
                fastest_ms: ms(fastest),
                allowed_ms: ms(allowed),
                ..RamifyEvent::base(RamifyEventKind::Hurry, at, message)
            },
        }
    }
}

/// A C event callback and its user data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CCallback {
    f: unsafe extern "C" fn(*const RamifyEvent, *mut c_void),
    user_data: *mut c_void,
}

// SAFETY: the header requires the callback and its user data to be usable
// from ramify's event thread (and from several at once when runs overlap);
// ramify only passes the pointer back to the callback.
unsafe impl Send for CCallback {}
unsafe impl Sync for CCallback {}

impl CCallback {
    /// The callback `f` with `user_data`; None when `f` is NULL.
    pub fn new(f: RamifyEventCallback, user_data: *mut c_void) -> Option<CCallback> {
        f.map(|f| CCallback { f, user_data })
    }

    /// Calls the callback with `event`. A panic while building the C event
    /// is caught here (that event is skipped), never unwound into C.
    pub fn deliver(&self, event: &RunEvent) {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let text = event.to_string().replace('\0', "\\0");
            let message = CString::new(text).unwrap_or_default();
            let e = RamifyEvent::of(event, &message);
            // SAFETY: the caller gave a callback that accepts this event and
            // its user data on this thread (see the header).
            unsafe { (self.f)(&e, self.user_data) };
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::sync::Mutex;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn device_events_carry_metric_source_and_values() {
        let text = CString::new("x").unwrap();
        let anomaly = RunEvent::Device {
            at: at(3),
            event: LoadEvent::Anomaly {
                metric: Metric::Battery,
                value: 0.05,
                threshold: 0.15,
                source: Source::Host,
            },
        };
        let e = RamifyEvent::of(&anomaly, &text);
        assert_eq!(e.kind, RamifyEventKind::DeviceAnomaly);
        assert_eq!(e.metric, RamifyMetric::Battery);
        assert_eq!(e.source, RamifyEventSource::Host);
        assert_eq!((e.value, e.threshold, e.at_ms), (0.05, 0.15, 3.0));
        assert!(e.previous.is_nan() && e.load.is_nan() && e.allowed_ms.is_nan());
        let change = RunEvent::Device {
            at: at(1),
            event: LoadEvent::Change {
                metric: Metric::Thermal,
                value: 0.9,
                previous: 0.2,
                since: Since::RunStart,
                source: Source::Sampler,
            },
        };
        let e = RamifyEvent::of(&change, &text);
        assert_eq!(e.kind, RamifyEventKind::DeviceChange);
        assert_eq!(
            (e.metric, e.source),
            (RamifyMetric::Thermal, RamifyEventSource::Sampler)
        );
        assert_eq!((e.value, e.previous, e.since_run_start), (0.9, 0.2, 1));
        assert!(e.threshold.is_nan());
    }

    #[test]
    fn replans_and_hurries_carry_their_numbers() {
        let text = CString::new("x").unwrap();
        let replan = RunEvent::Replan {
            at: at(2),
            load: 0.75,
            forks_left: 4,
            cause: "cpu anomaly".into(),
        };
        let e = RamifyEvent::of(&replan, &text);
        assert_eq!(e.kind, RamifyEventKind::Replan);
        assert_eq!(
            (e.metric, e.source),
            (RamifyMetric::None, RamifyEventSource::None)
        );
        assert_eq!((e.load, e.forks_left), (0.75, 4));
        assert!(e.value.is_nan());
        let hurry = RunEvent::Hurry {
            at: at(5),
            remaining: at(20),
            fastest: at(8),
            allowed: at(15),
        };
        let e = RamifyEvent::of(&hurry, &text);
        assert_eq!(e.kind, RamifyEventKind::Hurry);
        assert_eq!(
            (e.remaining_ms, e.fastest_ms, e.allowed_ms),
            (20.0, 8.0, 15.0)
        );
        assert_eq!(e.forks_left, 0);
    }

    static SEEN: Mutex<Vec<(RamifyEventKind, String, usize)>> = Mutex::new(Vec::new());

    unsafe extern "C" fn record(event: *const RamifyEvent, user_data: *mut c_void) {
        let e = &*event;
        let text = CStr::from_ptr(e.message).to_string_lossy().into_owned();
        SEEN.lock()
            .unwrap()
            .push((e.kind, text, user_data as usize));
    }

    #[test]
    fn the_callback_gets_the_event_its_text_and_user_data() {
        assert!(CCallback::new(None, std::ptr::null_mut()).is_none());
        let cb = CCallback::new(Some(record), 42 as *mut c_void).unwrap();
        let replan = RunEvent::Replan {
            at: at(2),
            load: 0.5,
            forks_left: 1,
            cause: "a\0b".into(),
        };
        cb.deliver(&replan);
        let seen = SEEN.lock().unwrap().clone();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, RamifyEventKind::Replan);
        assert!(seen[0].1.contains("re-planning 1 forks"), "{}", seen[0].1);
        assert!(seen[0].1.contains("a\\0b"), "NUL escaped: {}", seen[0].1);
        assert_eq!(seen[0].2, 42);
    }
}
