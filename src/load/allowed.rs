//! The CPUs this process may run on: the calling thread's affinity mask when
//! the monitor starts (what `taskset`, a container's cpuset or an Android
//! app's cpuset leaves it). Pools are pinned only to these: pinned outside
//! them, two processes started with disjoint masks piled onto the same CPU.

/// The indices of the CPUs in the calling thread's affinity mask, ascending;
/// every CPU `0..num_cpus` where the mask cannot be read.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain bits, so all-zero is a valid (empty) set;
    // sched_getaffinity writes at most the size it is given and CPU_ISSET
    // only reads the set, at indices below its capacity.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut set) == 0 {
            let cpus: Vec<usize> = (0..8 * size)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect();
            if !cpus.is_empty() {
                return cpus;
            }
        }
    }
    every_cpu()
}

/// The indices of the CPUs in the calling thread's affinity mask, ascending;
/// every CPU `0..num_cpus` where the mask cannot be read.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn allowed_cpus() -> Vec<usize> {
    every_cpu()
}

fn every_cpu() -> Vec<usize> {
    (0..num_cpus::get().max(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_calling_threads_mask() {
        let all = allowed_cpus();
        assert!(!all.is_empty());
        assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
        let last = *all.last().unwrap();
        // A thread restricted to one CPU sees only that one.
        let seen = std::thread::spawn(move || {
            core_affinity::set_for_current(core_affinity::CoreId { id: last }).then(allowed_cpus)
        })
        .join()
        .unwrap();
        if let Some(seen) = seen {
            if cfg!(any(target_os = "linux", target_os = "android")) {
                assert_eq!(seen, vec![last]);
            }
        }
    }
}
