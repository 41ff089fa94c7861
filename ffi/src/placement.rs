//! Core placement through the C API: the policy for new sessions and for a
//! live one, and the per-cluster power table an app supplies where the
//! kernel's energy model is not readable.

use crate::error::{arg_mut, arg_ref, arg_slice, guard, FfiError, FfiResult, RamifyStatus};
use crate::options::{RamifySessionOptions, RAMIFY_MAX_CPUS};
use crate::session::RamifySession;
use ramify::load::ClusterPower;
use ramify::Placement;

/// How a session chooses cores on a device with several kinds (the values
/// of `ramify_session_options_set_placement` and `ramify_session_set_placement`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamifyPlacement {
    /// Fastest cores first, least loaded among equals.
    Performance = 0,
    /// The cluster that fits the threads with the fewest idle cores, then
    /// the least power (seed 002); the other clusters stay idle.
    Power = 1,
    /// Power on low battery or when the device is hot, else performance
    /// (the default).
    Auto = 2,
}

fn placement(value: i32) -> FfiResult<Placement> {
    match value {
        v if v == RamifyPlacement::Performance as i32 => Ok(Placement::Performance),
        v if v == RamifyPlacement::Power as i32 => Ok(Placement::Power),
        v if v == RamifyPlacement::Auto as i32 => Ok(Placement::Auto),
        v => Err(FfiError::arg(format!(
            "placement {v} is not a RamifyPlacement (0 performance, 1 power, 2 auto)"
        ))),
    }
}

/// Sets the placement policy of new sessions: a `RamifyPlacement` value.
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_set_placement(
    options: *mut RamifySessionOptions,
    value: i32,
) -> RamifyStatus {
    guard("ramify_session_options_set_placement", || {
        // SAFETY: the caller passes a live options handle (or NULL).
        let o = unsafe { arg_mut(options, "options") }?;
        o.placement = Some(placement(value)?);
        Ok(())
    })
}

/// Adds one cluster to the power table of new sessions: its `count` CPUs
/// at `cpus`, the power of one busy core at its top frequency, the power
/// of the cluster with every core idle (one unit for all clusters, e.g.
/// mW), and each core's capacity on any scale the clusters share (0 keeps
/// what the kernel reports). Session creation checks the CPUs against the
/// device (`RAMIFY_STATUS_INVALID_ARGUMENT` for unknown or repeated ones).
/// `count` 0 clears the table.
///
/// # Safety
/// `options` must be NULL or a live handle not used by another thread
/// meanwhile; `cpus` NULL or readable for `count` values.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_options_add_cluster_power(
    options: *mut RamifySessionOptions,
    cpus: *const usize,
    count: usize,
    active_power: f64,
    standby_power: f64,
    capacity: f64,
) -> RamifyStatus {
    guard("ramify_session_options_add_cluster_power", || {
        // SAFETY: the caller passes a live options handle (or NULL).
        let o = unsafe { arg_mut(options, "options") }?;
        if count == 0 {
            o.power_table = None;
            return Ok(());
        }
        if count > RAMIFY_MAX_CPUS {
            return Err(FfiError::arg(format!(
                "the cluster holds {count} CPUs, more than {RAMIFY_MAX_CPUS}"
            )));
        }
        // SAFETY: the caller passes `count` readable values (or NULL).
        let list = unsafe { arg_slice(cpus, count, "cpus") }?;
        for (name, v) in [
            ("active_power", active_power),
            ("standby_power", standby_power),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(FfiError::arg(format!(
                    "{name} must be a finite number >= 0, got {v}"
                )));
            }
        }
        if !(capacity.is_finite() && capacity >= 0.0) {
            return Err(FfiError::arg(format!(
                "capacity must be a finite number >= 0 (0: the kernel's), got {capacity}"
            )));
        }
        o.power_table
            .get_or_insert_with(Default::default)
            .clusters
            .push(ClusterPower {
                cpus: list.to_vec(),
                active_power,
                standby_power,
                capacity: (capacity > 0.0).then_some(capacity),
            });
        Ok(())
    })
}

/// Changes a live session's placement policy: a `RamifyPlacement` value.
/// Forks of runs from now on follow it; safe from any thread, also while
/// runs are in progress.
///
/// # Safety
/// `session` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_set_placement(
    session: *const RamifySession,
    value: i32,
) -> RamifyStatus {
    guard("ramify_session_set_placement", || {
        // SAFETY: the caller passes a live session handle (or NULL).
        let s = unsafe { arg_ref(session, "session") }?;
        s.session.set_placement(placement(value)?);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{ramify_session_options_create, ramify_session_options_destroy};
    use crate::session::{ramify_session_create_from_memory, ramify_session_destroy};
    use crate::test_models::matmul_add_bytes;
    use std::ptr;

    #[test]
    fn placement_and_power_table_reach_the_session() {
        let cpu = ramify::available_cpus()[0];
        let mut o = ptr::null_mut();
        unsafe {
            assert_eq!(ramify_session_options_create(&mut o), RamifyStatus::Ok);
            assert_eq!(
                ramify_session_options_set_placement(o, 7),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(ramify_session_options_set_placement(o, 1), RamifyStatus::Ok);
            let cpus = [cpu];
            assert_eq!(
                ramify_session_options_add_cluster_power(o, cpus.as_ptr(), 1, -1.0, 0.0, 0.0),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                ramify_session_options_add_cluster_power(o, cpus.as_ptr(), 1, 500.0, 20.0, 0.0),
                RamifyStatus::Ok
            );
            let bytes = matmul_add_bytes();
            let mut s = ptr::null_mut();
            assert_eq!(
                ramify_session_create_from_memory(bytes.as_ptr().cast(), bytes.len(), o, &mut s),
                RamifyStatus::Ok
            );
            let session = &(*s).session;
            assert_eq!(session.placement(), Placement::Power);
            let c = session.topology().cluster_of(cpu).unwrap();
            assert_eq!(session.topology().clusters[c].active_power, Some(500.0));
            assert_eq!(ramify_session_set_placement(s, 0), RamifyStatus::Ok);
            assert_eq!(session.placement(), Placement::Performance);
            assert_eq!(
                ramify_session_set_placement(s, -1),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                ramify_session_set_placement(ptr::null(), 0),
                RamifyStatus::InvalidArgument
            );
            ramify_session_destroy(s);
            // A CPU the device does not have fails the creation.
            let far = [usize::MAX - 1];
            assert_eq!(
                ramify_session_options_add_cluster_power(o, far.as_ptr(), 1, 1.0, 1.0, 0.0),
                RamifyStatus::Ok
            );
            let mut s = ptr::null_mut();
            assert_eq!(
                ramify_session_create_from_memory(bytes.as_ptr().cast(), bytes.len(), o, &mut s),
                RamifyStatus::InvalidArgument
            );
            ramify_session_options_destroy(o);
        }
    }
}
