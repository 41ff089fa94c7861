//! Session options: an opaque handle the caller creates, sets and destroys,
//! turned into a `ramify::SessionBuilder` when a session is created.

use crate::error::{arg_mut, guard, guard_void, out_ptr, FfiError, FfiResult, RamifyStatus};
use ramify::load::LoadSource;
use ramify::{Mode, SessionBuilder};

/// How a session runs sibling subgraphs (the values of `ramify_session_options_set_mode`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamifyMode {
    /// Decide at every fork from the device's current load (the default).
    Adaptive = 0,
    /// Never run siblings in parallel; every operator uses all allowed CPUs.
    Serial = 1,
    /// Always run siblings in parallel, ignoring the load.
    Parallel = 2,
}

/// Load source bit: the system-wide CPU utilisation.
pub const RAMIFY_LOAD_SYSTEM_CPU: u32 = 1;
/// Load source bit: the run-queue delay of ramify's own threads.
pub const RAMIFY_LOAD_RUN_QUEUE: u32 = 1 << 1;
/// Load source bit: memory pressure.
pub const RAMIFY_LOAD_MEMORY: u32 = 1 << 2;
/// Load source bit: state the app pushes with `ramify_session_push_host_state`.
pub const RAMIFY_LOAD_HOST: u32 = 1 << 3;
/// Load source bit: other processes' runnable threads per CPU (`/proc/stat`).
pub const RAMIFY_LOAD_RUNNABLE: u32 = 1 << 4;
/// The largest CPU limit accepted.
pub const RAMIFY_MAX_CPUS: usize = 1024;

const LOAD_BITS: [(u32, LoadSource); 5] = [
    (RAMIFY_LOAD_SYSTEM_CPU, LoadSource::SystemCpu),
    (RAMIFY_LOAD_RUN_QUEUE, LoadSource::RunQueue),
    (RAMIFY_LOAD_MEMORY, LoadSource::Memory),
    (RAMIFY_LOAD_HOST, LoadSource::Host),
    (RAMIFY_LOAD_RUNNABLE, LoadSource::Runnable),
];

/// Settings for new sessions. Create with `ramify_session_options_create`,
/// destroy with `ramify_session_options_destroy`. Unset values keep ramify's
/// defaults (all CPUs, adaptive mode, θ1 = 0.7, θ2 = 0.5, M1 = ¾·m, M2 = ½·m,
/// load from the system CPU use and other processes' runnable threads).
#[derive(Debug, Clone, Default)]
pub struct RamifySessionOptions {
    cpus: Option<usize>,
    mode: Option<Mode>,
    theta1: Option<f64>,
    theta2: Option<f64>,
    m1: Option<usize>,
    m2: Option<usize>,
    load_sources: Option<Vec<LoadSource>>,
    pin_threads: Option<bool>,
    fixed_load: Option<f64>,
    memory_limit: Option<usize>,
    cpu_set: Option<Vec<usize>>,
    pub(crate) placement: Option<ramify::Placement>,
    pub(crate) power_table: Option<ramify::load::PowerTable>,
}

impl RamifySessionOptions {
    /// The builder these options describe.
    pub(crate) fn builder(&self) -> SessionBuilder {
        let mut b = SessionBuilder::new();
        if let Some(n) = self.cpus {
            b = b.cpus(n);
        }
        if let Some(set) = &self.cpu_set {
            b = b.cpu_set(set.iter().copied());
        }
        if let Some(m) = self.mode {
            b = b.mode(m);
        }
        // Unset thresholds and presets take the library's defaults for the
        // CPU limit the session applies.
        if let Some(t) = self.theta1 {
            b = b.theta1(t);
        }
        if let Some(t) = self.theta2 {
            b = b.theta2(t);
        }
        if let Some(m) = self.m1 {
            b = b.m1(m);
        }
        if let Some(m) = self.m2 {
            b = b.m2(m);
        }
        if let Some(s) = &self.load_sources {
            b = b.load_sources(s.clone());
        }
        if let Some(p) = self.pin_threads {
            b = b.pin_threads(p);
        }
        if let Some(n) = self.fixed_load {
            b = b.fixed_load(n);
        }
        if let Some(bytes) = self.memory_limit {
            b = b.memory_limit(bytes);
        }
        if let Some(p) = self.placement {
            b = b.placement(p);
        }
        if let Some(t) = &self.power_table {
            b = b.power_table(t.clone());
        }
        b
    }
}

/// Runs a setter body on a non-NULL options handle.
fn set(
    func: &str,
    options: *mut RamifySessionOptions,
    f: impl FnOnce(&mut RamifySessionOptions) -> FfiResult,
) -> RamifyStatus {
    guard(func, || {
        // SAFETY: the caller passes a handle from ramify_session_options_create (or NULL).
        let o = unsafe { arg_mut(options, "options") }?;
        f(o)
    })
}

/// A value that must be a finite number in [0, 1].
fn unit_interval(name: &str, v: f64) -> FfiResult<f64> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(FfiError::arg(format!("{name} must be in [0, 1], got {v}")))
    }
}

/// A pool size: 1 to `RAMIFY_MAX_CPUS`.
fn pool_size(name: &str, n: usize) -> FfiResult<usize> {
    if (1..=RAMIFY_MAX_CPUS).contains(&n) {
        Ok(n)
    } else {
        Err(FfiError::arg(format!(
            "{name} must be between 1 and {RAMIFY_MAX_CPUS}, got {n}"
        )))
    }
}

/// Creates session options with every value at its default. Destroy them
/// with `ramify_session_options_destroy`; they may be destroyed as soon as
/// the sessions that use them are created.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_create(
    out: *mut *mut RamifySessionOptions,
) -> RamifyStatus {
    guard("ramify_session_options_create", || {
        let out = unsafe { out_ptr(out, "out") }?;
        let o = Box::into_raw(Box::default());
        unsafe { out.write(o) };
        Ok(())
    })
}

/// Destroys session options. NULL is accepted and ignored.
///
/// # Safety
/// `options` must be NULL or a handle from `ramify_session_options_create`
/// not yet destroyed, and not in use by another thread.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_destroy(options: *mut RamifySessionOptions) {
    guard_void("ramify_session_options_destroy", || {
        if !options.is_null() {
            drop(unsafe { Box::from_raw(options) });
        }
    })
}

/// Limits the CPUs (m) a session uses: 1 to `RAMIFY_MAX_CPUS` (default:
/// all). The session bounds it by the CPUs the process may run on (its
/// affinity mask) or by the CPU set: `ramify_session_cpu_count` tells the
/// limit in force.
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_cpus(
    options: *mut RamifySessionOptions,
    cpus: usize,
) -> RamifyStatus {
    set("ramify_session_options_set_cpus", options, |o| {
        o.cpus = Some(pool_size("cpus", cpus)?);
        Ok(())
    })
}

/// Confines the session's threads to `count` CPUs listed at `cpus`, as the
/// OS numbers them (on a phone, e.g. its big cores: which CPUs those are is
/// in `/sys/devices/system/cpu/cpu*/cpu_capacity`). The CPU limit defaults
/// to their number. Session creation checks that each is a CPU the process
/// may use, without repeats (`RAMIFY_STATUS_INVALID_ARGUMENT` otherwise).
/// `count` 0 (with `cpus` NULL or not) goes back to every CPU. Where the OS
/// has no CPU masks (iOS), the set only bounds the CPU limit.
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread
/// meanwhile; `cpus` NULL or readable for `count` values.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_cpu_set(
    options: *mut RamifySessionOptions,
    cpus: *const usize,
    count: usize,
) -> RamifyStatus {
    set("ramify_session_options_set_cpu_set", options, |o| {
        if count == 0 {
            o.cpu_set = None;
            return Ok(());
        }
        // SAFETY: the caller passes `count` readable values (or NULL).
        let list = unsafe { crate::error::arg_slice(cpus, count, "cpus") }?;
        if count > RAMIFY_MAX_CPUS {
            return Err(FfiError::arg(format!(
                "the CPU set holds {count} CPUs, more than {RAMIFY_MAX_CPUS}"
            )));
        }
        o.cpu_set = Some(list.to_vec());
        Ok(())
    })
}

/// Sets how forks run: a `RamifyMode` value (default `RAMIFY_MODE_ADAPTIVE`).
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_mode(
    options: *mut RamifySessionOptions,
    mode: i32,
) -> RamifyStatus {
    set("ramify_session_options_set_mode", options, |o| {
        o.mode = Some(match mode {
            m if m == RamifyMode::Adaptive as i32 => Mode::Adaptive,
            m if m == RamifyMode::Serial as i32 => Mode::Serial,
            m if m == RamifyMode::Parallel as i32 => Mode::Parallel,
            m => {
                return Err(FfiError::arg(format!(
                    "mode {m} is not a RamifyMode (0 adaptive, 1 serial, 2 parallel)"
                )))
            }
        });
        Ok(())
    })
}

/// Sets θ1, the load at or above which siblings run serially: in [0, 1]
/// (default 0.7). Session creation checks 0 ≤ θ2 ≤ θ1 ≤ 1.
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_theta1(
    options: *mut RamifySessionOptions,
    theta1: f64,
) -> RamifyStatus {
    set("ramify_session_options_set_theta1", options, |o| {
        o.theta1 = Some(unit_interval("theta1", theta1)?);
        Ok(())
    })
}

/// Sets θ2, the load at or above which siblings run on the shrunk pool M1:
/// in [0, 1] (default 0.5).
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_theta2(
    options: *mut RamifySessionOptions,
    theta2: f64,
) -> RamifyStatus {
    set("ramify_session_options_set_theta2", options, |o| {
        o.theta2 = Some(unit_interval("theta2", theta2)?);
        Ok(())
    })
}

/// Sets M1, the shrunk pool size between θ2 and θ1 (default ¾·m). Session
/// creation checks 1 ≤ M2 ≤ M1 ≤ m.
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_m1(
    options: *mut RamifySessionOptions,
    m1: usize,
) -> RamifyStatus {
    set("ramify_session_options_set_m1", options, |o| {
        o.m1 = Some(pool_size("m1", m1)?);
        Ok(())
    })
}

/// Sets M2, the threads per operator when siblings run serially (default ½·m).
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_m2(
    options: *mut RamifySessionOptions,
    m2: usize,
) -> RamifyStatus {
    set("ramify_session_options_set_m2", options, |o| {
        o.m2 = Some(pool_size("m2", m2)?);
        Ok(())
    })
}

/// Chooses the load sources the session's monitor combines: a non-zero OR of
/// `RAMIFY_LOAD_*` bits (default `RAMIFY_LOAD_SYSTEM_CPU | RAMIFY_LOAD_RUNNABLE`). Include
/// `RAMIFY_LOAD_HOST` for `ramify_session_push_host_state` to count.
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_load_sources(
    options: *mut RamifySessionOptions,
    mask: u32,
) -> RamifyStatus {
    set("ramify_session_options_set_load_sources", options, |o| {
        let known = LOAD_BITS.iter().fold(0, |m, (bit, _)| m | bit);
        if mask == 0 || mask & !known != 0 {
            return Err(FfiError::arg(format!(
                "load source mask {mask:#x} must be a non-zero OR of RAMIFY_LOAD_* bits ({known:#x})"
            )));
        }
        let sources = LOAD_BITS
            .iter()
            .filter(|(bit, _)| mask & bit != 0)
            .map(|&(_, s)| s)
            .collect();
        o.load_sources = Some(sources);
        Ok(())
    })
}

/// Pins pool threads to their CPUs (non-zero) or leaves them to the OS (0).
/// Default: pin where the OS allows it.
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_pin_threads(
    options: *mut RamifySessionOptions,
    pin: i32,
) -> RamifyStatus {
    set("ramify_session_options_set_pin_threads", options, |o| {
        o.pin_threads = Some(pin != 0);
        Ok(())
    })
}

/// Uses a fixed device load in [0, 1] instead of measuring it (for
/// experiments and tests).
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_fixed_load(
    options: *mut RamifySessionOptions,
    load: f64,
) -> RamifyStatus {
    set("ramify_session_options_set_fixed_load", options, |o| {
        o.fixed_load = Some(unit_interval("load", load)?);
        Ok(())
    })
}

/// Sets the memory budget in bytes (default: half of the device's physical
/// memory). No tensor of the model, nor the intermediate values a run holds
/// at once, may exceed it: a model that declares or computes a larger one
/// fails with `RAMIFY_STATUS_MEMORY_LIMIT` before anything is allocated, and
/// the process is never aborted by a failed allocation. 0 is refused.
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_memory_limit(
    options: *mut RamifySessionOptions,
    bytes: usize,
) -> RamifyStatus {
    set("ramify_session_options_set_memory_limit", options, |o| {
        if bytes == 0 {
            return Err(FfiError::arg("the memory limit must be at least 1 byte"));
        }
        o.memory_limit = Some(bytes);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ramify_last_error;
    use ramify::sched::PolicyConfig;
    use std::ffi::CStr;
    use std::ptr;

    fn last() -> String {
        unsafe { CStr::from_ptr(ramify_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    fn options() -> *mut RamifySessionOptions {
        let mut o = ptr::null_mut();
        assert_eq!(
            unsafe { ramify_session_options_create(&mut o) },
            RamifyStatus::Ok
        );
        assert!(!o.is_null());
        o
    }

    #[test]
    fn create_rejects_null_out_and_destroy_accepts_null() {
        unsafe {
            assert_eq!(
                ramify_session_options_create(ptr::null_mut()),
                RamifyStatus::InvalidArgument
            );
            assert!(last().contains("out (the output pointer) is NULL"));
            ramify_session_options_destroy(ptr::null_mut());
        }
    }

    #[test]
    fn setters_store_valid_values() {
        let o = options();
        unsafe {
            assert_eq!(ramify_session_options_set_cpus(o, 4), RamifyStatus::Ok);
            assert_eq!(ramify_session_options_set_mode(o, 1), RamifyStatus::Ok);
            assert_eq!(ramify_session_options_set_theta1(o, 0.8), RamifyStatus::Ok);
            assert_eq!(ramify_session_options_set_theta2(o, 0.4), RamifyStatus::Ok);
            assert_eq!(ramify_session_options_set_m1(o, 3), RamifyStatus::Ok);
            assert_eq!(ramify_session_options_set_m2(o, 2), RamifyStatus::Ok);
            let mask = RAMIFY_LOAD_SYSTEM_CPU | RAMIFY_LOAD_HOST;
            assert_eq!(
                ramify_session_options_set_load_sources(o, mask),
                RamifyStatus::Ok
            );
            assert_eq!(
                ramify_session_options_set_pin_threads(o, 0),
                RamifyStatus::Ok
            );
            assert_eq!(
                ramify_session_options_set_fixed_load(o, 0.25),
                RamifyStatus::Ok
            );
            let r = &*o;
            assert_eq!(r.cpus, Some(4));
            assert_eq!(r.mode, Some(Mode::Serial));
            assert_eq!((r.theta1, r.theta2), (Some(0.8), Some(0.4)));
            assert_eq!((r.m1, r.m2), (Some(3), Some(2)));
            assert_eq!(
                r.load_sources,
                Some(vec![LoadSource::SystemCpu, LoadSource::Host])
            );
            assert_eq!(r.pin_threads, Some(false));
            assert_eq!(r.fixed_load, Some(0.25));
            ramify_session_options_destroy(o);
        }
    }

    #[test]
    fn setters_reject_null_and_out_of_range_values() {
        let o = options();
        type Case = (Box<dyn Fn() -> RamifyStatus>, &'static str);
        let cases: Vec<Case> = vec![
            (
                Box::new(|| unsafe { ramify_session_options_set_cpus(ptr::null_mut(), 2) }),
                "ramify_session_options_set_cpus: options is NULL",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_cpus(o, 0) }),
                "ramify_session_options_set_cpus: cpus must be between 1 and 1024, got 0",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_cpus(o, 5000) }),
                "cpus must be between 1 and 1024, got 5000",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_mode(o, 3) }),
                "ramify_session_options_set_mode: mode 3 is not a RamifyMode",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_mode(o, -1) }),
                "mode -1 is not a RamifyMode",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_theta1(o, 1.5) }),
                "theta1 must be in [0, 1], got 1.5",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_theta2(o, f64::NAN) }),
                "theta2 must be in [0, 1], got NaN",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_m1(o, 0) }),
                "m1 must be between 1 and 1024, got 0",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_m2(o, 0) }),
                "m2 must be between 1 and 1024, got 0",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_load_sources(o, 0) }),
                "load source mask 0x0 must be a non-zero OR of RAMIFY_LOAD_* bits (0x1f)",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_load_sources(o, 0x60) }),
                "load source mask 0x60",
            ),
            (
                Box::new(move || unsafe { ramify_session_options_set_fixed_load(o, -0.1) }),
                "load must be in [0, 1], got -0.1",
            ),
            (
                Box::new(|| unsafe { ramify_session_options_set_pin_threads(ptr::null_mut(), 1) }),
                "ramify_session_options_set_pin_threads: options is NULL",
            ),
        ];
        for (call, text) in cases {
            assert_eq!(call(), RamifyStatus::InvalidArgument, "{text}");
            assert!(last().contains(text), "{:?} lacks {text:?}", last());
        }
        // Rejected values leave the options as they were.
        unsafe {
            assert_eq!((*o).cpus, None);
            assert_eq!((*o).mode, None);
            assert_eq!((*o).load_sources, None);
            ramify_session_options_destroy(o);
        }
    }

    #[test]
    fn half_set_pairs_take_the_policy_defaults() {
        let o = options();
        let pairs = |o: *mut RamifySessionOptions| {
            // SAFETY: `o` is live until destroyed below.
            let p = unsafe { (*o).builder().policy() };
            ((p.theta1, p.theta2), (p.m1, p.m2))
        };
        unsafe {
            ramify_session_options_set_cpus(o, 8);
            ramify_session_options_set_theta2(o, 0.3);
            ramify_session_options_set_m2(o, 1);
            // M1 defaults to ¾ of the limit the session will apply: 8, or
            // fewer where the process may use fewer CPUs.
            let m = 8.min(ramify::available_cpus().len());
            assert_eq!(pairs(o), ((0.7, 0.3), (PolicyConfig::for_cpus(m).m1, 1)));
            // A CPU set of one CPU bounds it to 1.
            let one = [*ramify::available_cpus().last().unwrap()];
            ramify_session_options_set_cpu_set(o, one.as_ptr(), 1);
            assert_eq!(pairs(o).1, (1, 1));
            ramify_session_options_destroy(o);
        }
    }
}
