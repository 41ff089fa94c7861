//! Whole CPU masks for unpinning: a pool pinned one thread per CPU while the
//! device was idle is given back the mask the process started with when the
//! device gets busy, so the OS can move its threads away from CPUs that a
//! busy process shares (core_affinity only sets one-CPU masks). Only on
//! Linux and Android; elsewhere there is no mask and nothing to undo.

/// A CPU mask.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[derive(Clone, Copy)]
pub struct Mask(libc::cpu_set_t);

/// A CPU mask (none on this OS).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[derive(Clone, Copy)]
pub struct Mask(());

impl std::fmt::Debug for Mask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mask")
    }
}

/// The calling thread's current mask; `None` where it cannot be read.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn current() -> Option<Mask> {
    // SAFETY: cpu_set_t is plain bits, so all-zero is a valid (empty) set,
    // and sched_getaffinity writes at most the size it is given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        (libc::sched_getaffinity(0, size, &mut set) == 0).then_some(Mask(set))
    }
}

/// The calling thread's current mask; `None` where it cannot be read.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn current() -> Option<Mask> {
    None
}

/// The mask of exactly `cpus` (indices past the mask's capacity are
/// ignored); `None` where masks are unsupported or no CPU fits.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn of_cpus(cpus: &[usize]) -> Option<Mask> {
    // SAFETY: cpu_set_t is plain bits, so all-zero is a valid (empty) set;
    // CPU_SET writes only indices below the set's capacity, checked here.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let capacity = 8 * std::mem::size_of::<libc::cpu_set_t>();
        let mut any = false;
        for &c in cpus.iter().filter(|&&c| c < capacity) {
            libc::CPU_SET(c, &mut set);
            any = true;
        }
        any.then_some(Mask(set))
    }
}

/// The mask of exactly `cpus` (none on this OS).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn of_cpus(_cpus: &[usize]) -> Option<Mask> {
    None
}

/// Sets the calling thread's mask; false when the OS refuses.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn set(mask: &Mask) -> bool {
    // SAFETY: the set is a valid cpu_set_t read for its own size.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mask.0) == 0 }
}

/// Sets the calling thread's mask; false when the OS refuses.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn set(_mask: &Mask) -> bool {
    false
}

/// CPUs in the mask (0 where unknown); for tests and reports.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[cfg_attr(not(test), allow(dead_code))]
pub fn count(mask: &Mask) -> usize {
    // SAFETY: CPU_COUNT only reads the set.
    unsafe { libc::CPU_COUNT(&mask.0) as usize }
}

/// CPUs in the mask (0 where unknown); for tests and reports.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[cfg_attr(not(test), allow(dead_code))]
pub fn count(_mask: &Mask) -> usize {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_one_cpu_gets_its_whole_mask_back() {
        let Some(whole) = current() else {
            return; // not Linux/Android
        };
        let cpus = count(&whole);
        assert!(cpus >= 1);
        std::thread::spawn(move || {
            let first = core_affinity::get_core_ids()
                .and_then(|ids| ids.first().copied())
                .expect("a core id");
            assert!(core_affinity::set_for_current(first));
            assert_eq!(current().map(|m| count(&m)), Some(1));
            assert!(set(&whole));
            assert_eq!(current().map(|m| count(&m)), Some(cpus));
        })
        .join()
        .expect("the pinning thread");
    }
}
