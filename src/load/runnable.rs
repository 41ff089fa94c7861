//! The demand source: how many threads of *other* processes want a CPU right
//! now — the system's runnable count (`procs_running` in `/proc/stat`) minus
//! our own threads that are running or runnable (state `R` in
//! `/proc/self/task/*/stat`, the sampler thread included).
//!
//! CPU-share sources under-read a competitor while we compete with it: one
//! busy process on two CPUs gets only about two thirds of a CPU while we run
//! two threads, so "others use 33 %" would keep us on both CPUs and the
//! competitor would keep getting a third. Runnable threads measure what the
//! others would use if we stepped aside, which is the load the policy needs.
//! Like every `/proc` read, an unreadable or malformed file makes the source
//! unavailable for that sample, never an error.

/// The `procs_running` count from the text of `/proc/stat`.
pub fn parse_procs_running(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("procs_running"))
        .and_then(|rest| rest.trim().parse().ok())
}

/// The scheduler state letter of a thread from the text of its
/// `/proc/.../stat` (`pid (comm) S ...`; comm may hold spaces and
/// parentheses, so the state follows the last `)`).
pub fn parse_task_state(stat: &str) -> Option<char> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// Our threads that are running or waiting for a CPU.
fn own_runnable() -> Option<u64> {
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    let mut n = 0;
    for entry in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if parse_task_state(&text) == Some('R') {
            n += 1;
        }
    }
    Some(n)
}

/// Runnable threads of other processes as a fraction of `cpus` CPUs, clamped
/// to [0, 1]: `(procs_running − ours) / cpus`. `None` where `/proc` is not
/// readable (not Linux, or an Android app sandbox) or `cpus` is 0.
pub fn others_runnable(cpus: usize) -> Option<f64> {
    if cpus == 0 {
        return None;
    }
    let system = parse_procs_running(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let ours = own_runnable()?;
    Some(others_fraction(system, ours, cpus))
}

/// The median of `reads` readings of [`others_runnable`], `gap` apart: a
/// process that is runnable only for a moment (a shell, a parent process
/// spawning us) is seen by few of them, a busy one by all. `None` when no
/// reading succeeds.
pub fn others_runnable_median(cpus: usize, reads: usize, gap: std::time::Duration) -> Option<f64> {
    let mut seen = Vec::with_capacity(reads.max(1));
    for i in 0..reads.max(1) {
        if i > 0 && !gap.is_zero() {
            std::thread::sleep(gap);
        }
        seen.extend(others_runnable(cpus));
    }
    median(&mut seen)
}

/// The median of `values` (the lower middle for an even count); `None`
/// when empty.
pub fn median(values: &mut [f64]) -> Option<f64> {
    crate::order::sort_f64(values);
    values.get(values.len().saturating_sub(1) / 2).copied()
}

/// `(system − ours) / cpus`, clamped to [0, 1] (our count can exceed the
/// system's when threads change state between the two reads).
pub fn others_fraction(system: u64, ours: u64, cpus: usize) -> f64 {
    (system.saturating_sub(ours) as f64 / cpus.max(1) as f64).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_and_task_states() {
        let stat = "cpu  1 2 3 4\ncpu0 1 2 3 4\nctxt 99\nprocs_running 3\nprocs_blocked 0\n";
        assert_eq!(parse_procs_running(stat), Some(3));
        assert_eq!(parse_procs_running("cpu 1 2\n"), None);
        assert_eq!(parse_procs_running("procs_running x\n"), None);
        assert_eq!(parse_task_state("12 (ramify) R 1 2 3"), Some('R'));
        assert_eq!(parse_task_state("12 (a b) (c)) S 1 2"), Some('S'));
        assert_eq!(parse_task_state("12 ramify R"), None);
        assert_eq!(parse_task_state("12 (x)"), None);
    }

    #[test]
    fn median_filters_a_momentary_reading() {
        assert_eq!(median(&mut [0.0, 0.5, 0.0, 0.0, 0.5]), Some(0.0));
        assert_eq!(median(&mut [0.5, 1.0, 0.5]), Some(0.5));
        assert_eq!(median(&mut [1.0, 0.0]), Some(0.0));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn others_exclude_ours_and_saturate() {
        // One busy competitor plus our two running threads on 2 CPUs.
        assert_eq!(others_fraction(3, 2, 2), 0.5);
        assert_eq!(others_fraction(5, 1, 2), 1.0);
        assert_eq!(others_fraction(1, 2, 2), 0.0);
        assert_eq!(others_fraction(4, 0, 0), 1.0);
    }

    /// The median of `k` reads of `f`, 2 ms apart.
    fn median_of(k: usize, f: impl Fn() -> f64) -> f64 {
        let mut v: Vec<f64> = (0..k)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                f()
            })
            .collect();
        crate::order::sort_f64(&mut v);
        v[k / 2]
    }

    #[test]
    fn a_busy_competitor_is_seen_and_our_own_busy_thread_is_not() {
        if !cfg!(target_os = "linux") || others_runnable(1).is_none() {
            return;
        }
        // Our own spinning thread is always runnable, and so is the reading
        // thread: both count as ours at (nearly) every read.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let ours = std::thread::spawn(move || {
            let mut x = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                std::hint::black_box(x);
            }
        });
        let own = median_of(21, || own_runnable().unwrap_or(0) as f64);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = ours.join();
        assert!(own >= 2.0, "own runnable threads {own}");
        // A spinning child process is another's runnable thread at every read.
        let Some(child) = crate::load::spinner::SpinningChild::start() else {
            return;
        };
        let cpus = 1024; // counts stay unclamped
        let others = median_of(21, || others_runnable(cpus).unwrap_or(0.0) * cpus as f64);
        child.stop();
        assert!(others >= 1.0, "others' runnable threads {others}");
    }
}
