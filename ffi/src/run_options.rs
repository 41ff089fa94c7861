//! Run options: an opaque handle (`RamifyRunOptions`) holding a deadline and
//! its delay ratio, a time limit, a cancellation token, an event callback
//! and the int8 settings (`int8.rs`), turned into a `ramify::RunOptions` at the start of each run of
//! `ramify_session_run_with_options` or
//! `ramify_session_run_binding_with_options`. Its settings sit behind a lock,
//! so every function here may be called from any thread, also while runs
//! use the handle: `ramify_run_options_cancel` stops those runs, other
//! changes count from the next run.

use crate::error::{arg_ref, guard, guard_void, out_ptr, FfiError, FfiResult, RamifyStatus};
use crate::event::{CCallback, RamifyEventCallback};
use ramify::{CancelToken, Int8Settings, RunOptions, RunReport};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Options of runs: deadline, delay ratio, time limit, cancellation and an
/// event callback. Create with `ramify_run_options_create`, destroy with
/// `ramify_run_options_destroy`; pass to `ramify_session_run_with_options`
/// or `ramify_session_run_binding_with_options` (many runs, on many threads
/// and sessions, may use one handle at once). Synchronised: any
/// `ramify_run_options_*` call may come from any thread, also while runs use
/// the handle; a run reads the settings when it starts.
#[derive(Debug, Default)]
pub struct RamifyRunOptions {
    settings: Mutex<Settings>,
    /// Tiles the int8 overflow guard recomputed in runs with these options.
    pub(crate) int8_recomputed: AtomicU64,
}

/// What a run takes from the handle when it starts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    /// The int8 kernel and overflow guard of the runs.
    pub(crate) int8: Int8Settings,
    deadline: Option<Duration>,
    delay_ratio: Option<f64>,
    time_limit: Option<Duration>,
    token: CancelToken,
    callback: Option<CCallback>,
}

impl RamifyRunOptions {
    fn settings(&self) -> MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The library's options for one run.
    fn run_options(&self) -> RunOptions {
        let s = self.settings().clone();
        let mut options = RunOptions::new().cancel(s.token).int8(s.int8);
        if let Some(d) = s.deadline {
            options = options.deadline(d);
        }
        if let Some(r) = s.delay_ratio {
            options = options.delay_ratio(r);
        }
        if let Some(t) = s.time_limit {
            options = options.time_limit(t);
        }
        if let Some(cb) = s.callback {
            options = options.on_event(move |e| cb.deliver(e));
        }
        options
    }
}

/// The options of one run from a handle that may be NULL (the defaults: no
/// deadline, no limit, no token, no callback).
///
/// # Safety
/// `opts` must be NULL or a live handle.
pub(crate) unsafe fn run_options_of(opts: *const RamifyRunOptions) -> FfiResult<RunOptions> {
    if opts.is_null() {
        return Ok(RunOptions::new());
    }
    Ok(arg_ref(opts, "opts")?.run_options())
}

/// Adds what a run with the handle `opts` (NULL: none) reports to the
/// handle's counters.
///
/// # Safety
/// `opts` must be NULL or a live handle.
pub(crate) unsafe fn record_report(opts: *const RamifyRunOptions, report: &RunReport) {
    if let Some(o) = unsafe { opts.as_ref() } {
        o.int8_recomputed
            .fetch_add(report.int8_recomputed, Ordering::Relaxed);
    }
}

/// A duration in milliseconds: positive and finite; 0 means none.
fn duration_ms(name: &str, ms: f64) -> FfiResult<Option<Duration>> {
    if ms == 0.0 {
        return Ok(None);
    }
    if !(ms.is_finite() && ms > 0.0) {
        return Err(FfiError::arg(format!(
            "{name} must be a positive, finite number of milliseconds (or 0 for none), got {ms}"
        )));
    }
    Duration::try_from_secs_f64(ms / 1e3)
        .map(Some)
        .map_err(|_| FfiError::arg(format!("{name} of {ms} ms is too large")))
}

/// Applies `change` to the settings of the handle `opts`.
///
/// # Safety
/// `opts` must be NULL or a live handle.
pub(crate) unsafe fn update(
    opts: *const RamifyRunOptions,
    change: impl FnOnce(&mut Settings),
) -> FfiResult {
    let o = arg_ref(opts, "opts")?;
    change(&mut o.settings());
    Ok(())
}

/// Creates run options with nothing set: no deadline, no time limit (the
/// session's, if any, applies), not cancelled, no event callback.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_create(
    out: *mut *mut RamifyRunOptions,
) -> RamifyStatus {
    guard("ramify_run_options_create", || unsafe {
        let out = out_ptr(out, "out")?;
        out.write(Box::into_raw(Box::default()));
        Ok(())
    })
}

/// Destroys run options. NULL is accepted and ignored. Must not race with
/// any other use of the handle (no run using it may be in flight).
///
/// # Safety
/// `opts` must be NULL or a live handle that no other call uses.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_destroy(opts: *mut RamifyRunOptions) {
    guard_void("ramify_run_options_destroy", || {
        if !opts.is_null() {
            drop(unsafe { Box::from_raw(opts) });
        }
    })
}

/// Sets the time a run is planned to take, in milliseconds (0 removes the
/// deadline). Before every operator the run checks whether the time taken
/// plus the estimated time of the operators left fits the deadline × the
/// delay ratio: when only the fastest plan the load allows would fit, the
/// forks not yet started take it (a `RAMIFY_EVENT_KIND_HURRY` event); when
/// not even that would, the run stops at once with
/// `RAMIFY_STATUS_DEADLINE`, the message saying how far it got. `ms` must
/// be positive and finite, or 0.
///
/// # Safety
/// `opts` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_set_deadline_ms(
    opts: *mut RamifyRunOptions,
    ms: f64,
) -> RamifyStatus {
    guard("ramify_run_options_set_deadline_ms", || unsafe {
        let deadline = duration_ms("the deadline", ms)?;
        update(opts, |s| s.deadline = deadline)
    })
}

/// Sets how far past its deadline a run may go, as a ratio: finite and at
/// least 1 (default 1.5, i.e. 150 %). It applies only with a deadline: a
/// run whose options have a delay ratio but no deadline fails with
/// `RAMIFY_STATUS_INVALID_ARGUMENT`.
///
/// # Safety
/// `opts` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_set_delay_ratio(
    opts: *mut RamifyRunOptions,
    ratio: f64,
) -> RamifyStatus {
    guard("ramify_run_options_set_delay_ratio", || unsafe {
        if !(ratio.is_finite() && ratio >= 1.0) {
            return Err(FfiError::arg(format!(
                "the delay ratio must be a finite number of at least 1, got {ratio}"
            )));
        }
        update(opts, |s| s.delay_ratio = Some(ratio))
    })
}

/// Sets a hard time limit in milliseconds (0 removes it): a run that has
/// taken that long stops with `RAMIFY_STATUS_DEADLINE` at its next check
/// (before every operator and on every iteration of a loop), whatever the
/// estimates say. It replaces the session's time limit, if any. `ms` must
/// be positive and finite, or 0.
///
/// # Safety
/// `opts` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_set_time_limit_ms(
    opts: *mut RamifyRunOptions,
    ms: f64,
) -> RamifyStatus {
    guard("ramify_run_options_set_time_limit_ms", || unsafe {
        let limit = duration_ms("the time limit", ms)?;
        update(opts, |s| s.time_limit = limit)
    })
}

/// Cancels every run using these options: runs in flight stop at their next
/// check (before every operator, on every iteration of a loop) with
/// `RAMIFY_STATUS_CANCELLED`, and so do runs started later with them. May be
/// called from any thread, including the event callback, while runs are in
/// flight. The options stay cancelled until `ramify_run_options_reset_cancel`.
///
/// # Safety
/// `opts` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_cancel(opts: *mut RamifyRunOptions) -> RamifyStatus {
    guard("ramify_run_options_cancel", || unsafe {
        update(opts, |s| s.token.cancel())
    })
}

/// Makes cancelled options usable again: runs started from now on get a
/// fresh cancellation token. Runs already cancelled still stop.
///
/// # Safety
/// `opts` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_reset_cancel(
    opts: *mut RamifyRunOptions,
) -> RamifyStatus {
    guard("ramify_run_options_reset_cancel", || unsafe {
        update(opts, |s| s.token = CancelToken::new())
    })
}

/// Sets the function called with each event of the runs using these
/// options (NULL `callback` removes it): device-state anomalies and changes
/// seen during the run (e.g. the battery level the app pushed with
/// `ramify_session_push_host_state` falling below 15 %), re-plans and
/// hurries. `user_data` is passed back unchanged.
///
/// Threading rules: the callback is called on a thread of ramify's own,
/// named "ramify-events", one per run, with that run's events in order,
/// and never after the run call has returned (the run does not wait for the
/// callback, but returns only once it has handled the events delivered).
/// Runs in flight at once call it from their own threads concurrently, so
/// `user_data` must be safe to use from them. The callback may call
/// `ramify_run_options_cancel` and `ramify_session_push_host_state`, and
/// read the event's fields; it must not start a run of the same session and
/// wait for it, and must not throw (C++) or longjmp out. An event that finds
/// 256 others waiting for a slow callback is dropped. Nothing ramify raises
/// unwinds into C.
///
/// # Safety
/// `opts` must be NULL or a live handle; `callback` NULL or a function that
/// follows the rules above with `user_data`.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_set_event_callback(
    opts: *mut RamifyRunOptions,
    callback: RamifyEventCallback,
    user_data: *mut c_void,
) -> RamifyStatus {
    guard("ramify_run_options_set_event_callback", || unsafe {
        let cb = CCallback::new(callback, user_data);
        update(opts, |s| s.callback = cb)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ramify_last_error;
    use std::ffi::CStr;
    use std::ptr;

    fn last() -> String {
        unsafe { CStr::from_ptr(ramify_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    fn create() -> *mut RamifyRunOptions {
        let mut o = ptr::null_mut();
        assert_eq!(
            unsafe { ramify_run_options_create(&mut o) },
            RamifyStatus::Ok
        );
        o
    }

    #[test]
    fn null_handles_are_refused() {
        let n = ptr::null_mut();
        unsafe {
            assert_eq!(
                ramify_run_options_create(n as _),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                last(),
                "ramify_run_options_create: out (the output pointer) is NULL"
            );
            type Call = Box<dyn Fn() -> RamifyStatus>;
            let calls: Vec<(Call, &str)> = vec![
                (
                    Box::new(move || ramify_run_options_set_deadline_ms(n, 5.0)),
                    "set_deadline_ms",
                ),
                (
                    Box::new(move || ramify_run_options_set_delay_ratio(n, 2.0)),
                    "set_delay_ratio",
                ),
                (
                    Box::new(move || ramify_run_options_set_time_limit_ms(n, 5.0)),
                    "set_time_limit_ms",
                ),
                (Box::new(move || ramify_run_options_cancel(n)), "cancel"),
                (
                    Box::new(move || ramify_run_options_reset_cancel(n)),
                    "reset_cancel",
                ),
                (
                    Box::new(move || ramify_run_options_set_event_callback(n, None, n as _)),
                    "set_event_callback",
                ),
            ];
            for (call, name) in calls {
                assert_eq!(call(), RamifyStatus::InvalidArgument, "{name}");
                assert_eq!(last(), format!("ramify_run_options_{name}: opts is NULL"));
            }
            ramify_run_options_destroy(n);
            assert!(run_options_of(ptr::null()).is_ok());
        }
    }

    #[test]
    fn values_are_checked() {
        let o = create();
        unsafe {
            for ms in [-1.0, f64::NAN, f64::INFINITY] {
                let st = ramify_run_options_set_deadline_ms(o, ms);
                assert_eq!(st, RamifyStatus::InvalidArgument, "{ms}");
                assert!(last().contains("positive, finite"), "{}", last());
                let st = ramify_run_options_set_time_limit_ms(o, ms);
                assert_eq!(st, RamifyStatus::InvalidArgument, "{ms}");
            }
            let st = ramify_run_options_set_deadline_ms(o, 1e300);
            assert_eq!(st, RamifyStatus::InvalidArgument);
            assert!(last().contains("too large"), "{}", last());
            for r in [0.5, f64::NAN, f64::INFINITY] {
                let st = ramify_run_options_set_delay_ratio(o, r);
                assert_eq!(st, RamifyStatus::InvalidArgument, "{r}");
            }
            assert!(last().contains("at least 1"), "{}", last());
            assert_eq!(
                ramify_run_options_set_deadline_ms(o, 30.0),
                RamifyStatus::Ok
            );
            assert_eq!(ramify_run_options_set_delay_ratio(o, 1.0), RamifyStatus::Ok);
            assert_eq!(
                ramify_run_options_set_time_limit_ms(o, 500.0),
                RamifyStatus::Ok
            );
            let s = (*o).settings().clone();
            assert_eq!(s.deadline, Some(Duration::from_millis(30)));
            assert_eq!(s.delay_ratio, Some(1.0));
            assert_eq!(s.time_limit, Some(Duration::from_millis(500)));
            // 0 removes.
            assert_eq!(ramify_run_options_set_deadline_ms(o, 0.0), RamifyStatus::Ok);
            assert_eq!(
                ramify_run_options_set_time_limit_ms(o, 0.0),
                RamifyStatus::Ok
            );
            let s = (*o).settings().clone();
            assert_eq!((s.deadline, s.time_limit), (None, None));
            ramify_run_options_destroy(o);
        }
    }

    #[test]
    fn cancel_sticks_until_reset_and_reaches_runs_in_flight() {
        let o = create();
        unsafe {
            let before = run_options_of(o).unwrap();
            assert!(format!("{before:?}").contains("CancelToken(false)"));
            // A run that started before the cancel holds the same token.
            assert_eq!(ramify_run_options_cancel(o), RamifyStatus::Ok);
            assert!(format!("{before:?}").contains("CancelToken(true)"));
            let later = run_options_of(o).unwrap();
            assert!(format!("{later:?}").contains("CancelToken(true)"));
            assert_eq!(ramify_run_options_reset_cancel(o), RamifyStatus::Ok);
            assert!(format!("{before:?}").contains("CancelToken(true)"));
            let fresh = run_options_of(o).unwrap();
            assert!(format!("{fresh:?}").contains("CancelToken(false)"));
            ramify_run_options_destroy(o);
        }
    }

    unsafe extern "C" fn ignore(_: *const crate::RamifyEvent, _: *mut c_void) {}

    #[test]
    fn the_callback_is_set_and_removed() {
        let o = create();
        unsafe {
            let st = ramify_run_options_set_event_callback(o, Some(ignore), ptr::null_mut());
            assert_eq!(st, RamifyStatus::Ok);
            assert!(format!("{:?}", run_options_of(o).unwrap()).contains("callback: true"));
            let st = ramify_run_options_set_event_callback(o, None, ptr::null_mut());
            assert_eq!(st, RamifyStatus::Ok);
            assert!(format!("{:?}", run_options_of(o).unwrap()).contains("callback: false"));
            ramify_run_options_destroy(o);
        }
    }
}
