//! The measurement sources: this process's threads from
//! `/proc/self/task/*/schedstat` (CPU time and run-queue wait, both in ns)
//! and `stat` (the CPU each last ran on), system CPU, per-CPU use (ours
//! taken out) and memory from sysinfo, and other processes'
//! runnable threads (see [`runnable`](super::runnable)). A [`Sampler`] keeps
//! the previous snapshot and turns two snapshots into one [`Sample`].
//!
//! Nothing read from `/proc` is trusted: a file that cannot be read or parsed
//! makes its source unavailable for that sample, never an error or a panic.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sysinfo::System;

use super::power::{sysfs_root, PowerFiles};
use super::runnable::others_runnable_median;
use super::smooth::{clamp01, counter_delta, others_cpu, others_per_cpu, run_queue_contention};

/// Cumulative scheduler statistics of one thread, from its `schedstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskStat {
    /// Nanoseconds spent on a CPU.
    pub run_ns: u64,
    /// Nanoseconds spent waiting on a run queue.
    pub wait_ns: u64,
    /// The CPU it last ran on (`None` where unknown).
    pub cpu: Option<usize>,
}

/// Parses a `schedstat` line (`run_ns wait_ns timeslices`); `None` when it
/// is malformed.
pub fn parse_schedstat(text: &str) -> Option<TaskStat> {
    let mut it = text.split_ascii_whitespace();
    let run_ns = it.next()?.parse().ok()?;
    let wait_ns = it.next()?.parse().ok()?;
    Some(TaskStat {
        run_ns,
        wait_ns,
        cpu: None,
    })
}

/// The CPU a thread last ran on, from its `stat` line (field 39,
/// `processor`, counted after the parenthesised name, which may itself hold
/// spaces and parentheses); `None` when the line is malformed.
pub fn parse_stat_cpu(text: &str) -> Option<usize> {
    let after_name = &text[text.rfind(')')? + 1..];
    after_name
        .split_ascii_whitespace()
        .nth(39 - 3)?
        .parse()
        .ok()
}

/// Per-thread statistics of this process, keyed by thread id.
pub type TaskSnapshot = HashMap<u32, TaskStat>;

/// What changed between two snapshots of our threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskDelta {
    /// CPU time all our threads used (including the excluded one).
    pub own_run_ns: u64,
    /// Run-queue wait of our threads, the excluded one left out.
    pub wait_ns: u64,
    /// Threads (the excluded one left out) that ran or waited.
    pub active: usize,
}

/// Differences two snapshots. A thread new in `cur` counts with its whole
/// totals (it started within the interval); a thread gone from `cur` is lost
/// for its last interval. `exclude` (the sampler thread) counts towards our
/// CPU time but not towards contention.
pub fn task_delta(prev: &TaskSnapshot, cur: &TaskSnapshot, exclude: Option<u32>) -> TaskDelta {
    let mut d = TaskDelta::default();
    for (tid, c) in cur {
        let p = prev.get(tid).copied().unwrap_or_default();
        let run = counter_delta(p.run_ns, c.run_ns);
        let wait = counter_delta(p.wait_ns, c.wait_ns);
        d.own_run_ns = d.own_run_ns.saturating_add(run);
        if Some(*tid) == exclude {
            continue;
        }
        d.wait_ns = d.wait_ns.saturating_add(wait);
        if run > 0 || wait > 0 {
            d.active += 1;
        }
    }
    d
}

/// The CPU time each of `ncpu` CPUs gave our threads between two
/// snapshots, each thread's time put on the CPU it last ran on (exact for
/// pinned threads; a thread that moved within the interval counts where
/// it ended). Threads of unknown CPU are left out.
pub fn own_run_by_cpu(prev: &TaskSnapshot, cur: &TaskSnapshot, ncpu: usize) -> Vec<u64> {
    let mut by_cpu = vec![0u64; ncpu];
    for (tid, c) in cur {
        let p = prev.get(tid).copied().unwrap_or_default();
        if let Some(slot) = c.cpu.and_then(|i| by_cpu.get_mut(i)) {
            *slot = slot.saturating_add(counter_delta(p.run_ns, c.run_ns));
        }
    }
    by_cpu
}

/// Reads every `/proc/self/task/*/schedstat` (and the last CPU from
/// `stat`); `None` where `/proc` is not
/// readable (not Linux, or restricted). Threads whose file vanished or is
/// malformed are skipped.
pub fn read_tasks() -> Option<TaskSnapshot> {
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    let mut snap = TaskSnapshot::new();
    for entry in dir.flatten() {
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) else {
            continue;
        };
        if let Some(mut stat) = parse_schedstat(&text) {
            stat.cpu = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|t| parse_stat_cpu(&t));
            snap.insert(tid, stat);
        }
    }
    if snap.is_empty() {
        None
    } else {
        Some(snap)
    }
}

/// The id of the calling thread, from `/proc/thread-self` (`PID/task/TID`).
pub fn current_tid() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// One sample: each source's value in [0, 1], `None` where unavailable.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Whole-system CPU use, as a fraction of all CPUs (ours included).
    pub system_cpu_raw: Option<f64>,
    /// Our own CPU use (all our threads), as a fraction of all CPUs.
    pub own_cpu: Option<f64>,
    /// CPU use by others: [`Sample::system_cpu_raw`] minus our own.
    pub system_cpu: Option<f64>,
    /// Run-queue contention of our threads.
    pub run_queue: Option<f64>,
    /// Runnable threads of other processes per CPU, right now (needs no
    /// interval, so the first sample has it).
    pub runnable: Option<f64>,
    /// Used / total memory.
    pub memory_used: Option<f64>,
    /// Battery level in [0, 1], where sysfs has one.
    pub battery: Option<f64>,
    /// Thermal state in [0, 1] (1 = critical), where sysfs has zones.
    pub thermal: Option<f64>,
    /// Per-CPU use by others in [0, 1], by CPU index (empty when unknown):
    /// each CPU's use minus the time our threads ran on it.
    pub per_cpu: Vec<f64>,
}

/// How long sysinfo's CPU figures must age before a refresh renews them:
/// its own minimum refresh interval and a margin (it starts its clock
/// after reading, we before asking).
pub const CPU_WINDOW: Duration =
    Duration::from_millis(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL.as_millis() as u64 + 10);

/// Takes samples: holds the sysinfo handle and the previous snapshots.
///
/// Run-queue wait is differenced between consecutive samples. System and
/// per-CPU use come from sysinfo, which renews them at most every
/// `sysinfo::MINIMUM_CPU_UPDATE_INTERVAL` and whose first figures average
/// the time since boot; our own CPU time is taken out of them over the
/// same window (from the snapshot of our threads at sysinfo's previous
/// renewal), and samples in between carry no CPU figures. Mismatched
/// windows read a since-boot 75 % minus our last 20 ms as others' load:
/// a bench on an idle machine ran its first 300 ms on one thread.
pub struct Sampler {
    system: System,
    tasks: Option<TaskSnapshot>,
    last: Instant,
    exclude: Option<u32>,
    primed: bool,
    /// Our threads when sysinfo last renewed its CPU figures, and when.
    cpu_tasks: Option<TaskSnapshot>,
    cpu_last: Instant,
    runnable_reads: usize,
    runnable_gap: Duration,
    /// Battery and thermal files.
    power: PowerFiles,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("primed", &self.primed)
            .finish()
    }
}

impl Sampler {
    /// A sampler with a first baseline taken now. Memory is known at once;
    /// CPU and run-queue values need a second sample (an interval).
    pub fn new() -> Sampler {
        let mut system = System::new();
        let cpu_last = Instant::now();
        system.refresh_cpu_usage();
        system.refresh_memory();
        let tasks = read_tasks();
        Sampler {
            system,
            cpu_tasks: tasks.clone(),
            tasks,
            last: Instant::now(),
            exclude: None,
            primed: false,
            cpu_last,
            runnable_reads: 1,
            runnable_gap: Duration::ZERO,
            power: PowerFiles::find(&sysfs_root()),
        }
    }

    /// The time one sample spends sleeping between its runnable-thread
    /// readings (not a cost: the thread is idle).
    pub fn spread_sleep(&self) -> Duration {
        self.runnable_gap * self.runnable_reads.saturating_sub(1) as u32
    }

    /// Takes the runnable-threads value of each sample as the median of
    /// `reads` readings `gap` apart (default: one reading), so that a
    /// process runnable for a moment does not count as load.
    pub fn spread_runnable(&mut self, reads: usize, gap: Duration) {
        self.runnable_reads = reads.max(1);
        self.runnable_gap = gap;
    }

    /// Leaves thread `tid` (the sampler's own) out of the contention measure.
    pub fn exclude_thread(&mut self, tid: Option<u32>) {
        self.exclude = tid;
    }

    /// The memory sample available without an interval.
    pub fn memory_now(&self) -> Option<f64> {
        let total = self.system.total_memory();
        if total == 0 {
            return None;
        }
        Some(clamp01(self.system.used_memory() as f64 / total as f64))
    }

    /// Takes one sample, differencing against the previous one (and the
    /// CPU figures against sysinfo's previous renewal, when they are due).
    pub fn sample(&mut self) -> Sample {
        let now = Instant::now();
        let interval_ns = nanos(now.duration_since(self.last));
        self.last = now;
        self.system.refresh_memory();
        let tasks = read_tasks();
        let delta = match (&self.tasks, &tasks) {
            (Some(p), Some(c)) => Some(task_delta(p, c, self.exclude)),
            _ => None,
        };
        let primed = std::mem::replace(&mut self.primed, true);
        let run_queue = delta
            .filter(|_| primed)
            .map(|d| run_queue_contention(d.wait_ns, interval_ns, d.active));
        let cpu = if now.duration_since(self.cpu_last) >= CPU_WINDOW {
            self.cpu_window(now, tasks.as_ref())
        } else {
            CpuWindow::default()
        };
        self.tasks = tasks;
        Sample {
            system_cpu_raw: cpu.raw,
            own_cpu: cpu.own,
            system_cpu: cpu.others,
            run_queue,
            runnable: others_runnable_median(
                match self.system.cpus().len() {
                    0 => num_cpus::get(),
                    n => n,
                },
                self.runnable_reads,
                self.runnable_gap,
            ),
            memory_used: self.memory_now(),
            battery: self.power.battery(),
            thermal: self.power.thermal(),
            per_cpu: cpu.per_cpu,
        }
    }

    /// Renews sysinfo's CPU figures (taken at `now`) and takes our threads'
    /// time over the same window out of them. The window starts at the
    /// previous renewal, the first at [`Sampler::new`] (whose own figures,
    /// averaging the time since boot, are never read).
    fn cpu_window(&mut self, now: Instant, tasks: Option<&TaskSnapshot>) -> CpuWindow {
        let interval_ns = nanos(now.duration_since(self.cpu_last));
        self.system.refresh_cpu_usage();
        self.cpu_last = now;
        let prev = std::mem::replace(&mut self.cpu_tasks, tasks.cloned());
        if interval_ns == 0 {
            return CpuWindow::default();
        }
        let cpus = self.system.cpus();
        let ncpu = cpus.len();
        if ncpu == 0 {
            return CpuWindow::default();
        }
        let mut per_cpu: Vec<f64> = cpus
            .iter()
            .map(|c| clamp01(c.cpu_usage() as f64 / 100.0))
            .collect();
        let raw = clamp01(self.system.global_cpu_usage() as f64 / 100.0);
        let Some((p, c)) = prev.as_ref().zip(tasks) else {
            return CpuWindow {
                raw: Some(raw),
                others: Some(raw),
                own: None,
                per_cpu,
            };
        };
        // Our own threads are not load on the CPUs they ran on: counted,
        // they made the CPU a pool was pinned to look the busiest, so the
        // next run moved the pool to the other CPU and back, each time with
        // cold caches.
        others_per_cpu(&mut per_cpu, &own_run_by_cpu(p, c, ncpu), interval_ns);
        let own_ns = task_delta(p, c, self.exclude).own_run_ns;
        CpuWindow {
            raw: Some(raw),
            others: Some(others_cpu(raw, own_ns, interval_ns, ncpu)),
            own: Some(clamp01(own_ns as f64 / (interval_ns as f64 * ncpu as f64))),
            per_cpu,
        }
    }
}

/// The CPU figures of one sysinfo window (all empty between renewals).
#[derive(Debug, Default)]
struct CpuWindow {
    raw: Option<f64>,
    others: Option<f64>,
    own: Option<f64>,
    per_cpu: Vec<f64>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(v: &[(u32, u64, u64)]) -> TaskSnapshot {
        v.iter()
            .map(|&(t, r, w)| {
                (
                    t,
                    TaskStat {
                        run_ns: r,
                        wait_ns: w,
                        cpu: Some(t as usize % 2),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn parses_schedstat() {
        assert_eq!(
            parse_schedstat("123 456 7\n"),
            Some(TaskStat {
                run_ns: 123,
                wait_ns: 456,
                cpu: None,
            })
        );
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("12"), None);
        assert_eq!(parse_schedstat("a b c"), None);
        assert_eq!(parse_schedstat("-1 2 3"), None);
    }

    /// The processor field is found after a name holding spaces and
    /// parentheses; this thread's own line names a CPU there is.
    #[test]
    fn parses_the_last_cpu_from_stat() {
        let tail: Vec<String> = (3..=52).map(|f| f.to_string()).collect();
        let line = format!("4242 (we(i) rd) {}\n", tail.join(" "));
        assert_eq!(parse_stat_cpu(&line), Some(39));
        assert_eq!(parse_stat_cpu("4242 (x) R 1 2"), None);
        assert_eq!(parse_stat_cpu("no name here"), None);
        if cfg!(target_os = "linux") {
            let own = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
            let cpu = parse_stat_cpu(&own).expect("own stat line");
            assert!(cpu < num_cpus::get().max(cpu + 1), "{cpu}");
            let snap = read_tasks().expect("own tasks");
            assert!(snap.values().any(|t| t.cpu.is_some()), "{snap:?}");
        }
    }

    /// Each thread's time goes to the CPU it last ran on; threads on CPUs
    /// past the count or of unknown CPU are left out.
    #[test]
    fn own_time_by_cpu_of_synthetic_snapshots() {
        // Threads 1 and 3 on CPU 1, 2 and 4 on CPU 0 (see `snap`).
        let prev = snap(&[(1, 100, 0), (2, 500, 0), (3, 7, 0)]);
        let mut cur = snap(&[(1, 150, 0), (2, 400, 0), (3, 17, 0), (4, 60, 0)]);
        assert_eq!(own_run_by_cpu(&prev, &cur, 2), vec![60, 50 + 10]);
        assert_eq!(own_run_by_cpu(&prev, &cur, 1), vec![60]);
        cur.get_mut(&4).unwrap().cpu = None;
        assert_eq!(own_run_by_cpu(&prev, &cur, 2), vec![0, 60]);
    }

    #[test]
    fn deltas_of_synthetic_snapshots() {
        let prev = snap(&[(1, 100, 10), (2, 500, 50), (3, 7, 7), (9, 0, 0)]);
        // 1 ran 50 and waited 20; 2 went backwards (replaced): 0; 3 idle;
        // 4 is new; 9 (the sampler) ran 30 and waited 1000.
        let cur = snap(&[
            (1, 150, 30),
            (2, 400, 40),
            (3, 7, 7),
            (4, 60, 5),
            (9, 30, 1000),
        ]);
        let d = task_delta(&prev, &cur, Some(9));
        assert_eq!(d.own_run_ns, 50 + 60 + 30);
        assert_eq!(d.wait_ns, 20 + 5);
        assert_eq!(d.active, 2);
        let d = task_delta(&prev, &cur, None);
        assert_eq!(d.wait_ns, 20 + 5 + 1000);
        assert_eq!(d.active, 3);
        assert_eq!(task_delta(&cur, &cur, None), TaskDelta::default());
    }

    #[test]
    fn live_sample_is_in_range() {
        let mut s = Sampler::new();
        let first = s.sample();
        assert_eq!(first.system_cpu, None);
        std::thread::sleep(Duration::from_millis(30));
        // Within sysinfo's refresh interval: run-queue figures, no CPU ones
        // (sysinfo would hand back the figures it has, from another window).
        let early = s.sample();
        assert_eq!((early.system_cpu, early.own_cpu), (None, None), "{early:?}");
        assert!(early.per_cpu.is_empty(), "{early:?}");
        std::thread::sleep(CPU_WINDOW);
        let x = s.sample();
        for v in [
            x.system_cpu_raw,
            x.system_cpu,
            x.run_queue,
            x.runnable,
            x.memory_used,
        ]
        .into_iter()
        .flatten()
        .chain(x.per_cpu.iter().copied())
        {
            assert!((0.0..=1.0).contains(&v), "{x:?}");
        }
        if cfg!(target_os = "linux") {
            assert!(x.system_cpu.is_some() && x.run_queue.is_some(), "{x:?}");
            assert!(first.runnable.is_some() && x.runnable.is_some(), "{x:?}");
            assert!(!x.per_cpu.is_empty());
            assert!(x.system_cpu <= x.system_cpu_raw);
        }
    }

    #[test]
    fn own_busy_thread_is_not_counted() {
        // Loose live check only (the machine is shared): while one of our
        // threads burns a CPU, our measured share is clearly positive and the
        // value credited to others is the raw value minus it.
        if !cfg!(target_os = "linux") {
            return;
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let busy = std::thread::spawn(move || {
            let mut x = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                std::hint::black_box(x);
            }
        });
        let mut s = Sampler::new();
        s.sample();
        std::thread::sleep(Duration::from_millis(300));
        let x = s.sample();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = busy.join();
        let (Some(raw), Some(others)) = (x.system_cpu_raw, x.system_cpu) else {
            panic!("no cpu sample: {x:?}");
        };
        let (Some(own), Some(cpus)) = (x.own_cpu, Some(x.per_cpu.len().max(1))) else {
            panic!("no own sample: {x:?}");
        };
        // Our busy thread got some CPU in 300 ms, and it is what was taken off.
        assert!(own > 0.1 / cpus as f64, "{x:?}");
        // The system figure covers the same window, so it includes us (to
        // the 10 ms tick of /proc/stat); a stale one, such as sysinfo's
        // first (the average since boot), need not.
        assert!(raw + 0.1 >= own, "{x:?}");
        assert!(others <= raw, "{x:?}");
        assert!((others - (raw - own).max(0.0)).abs() < 1e-9, "{x:?}");
    }

    /// A CPU our own pinned thread keeps busy does not look busy: its
    /// time comes off that CPU's use (without this it read about 1.0).
    /// Where other processes take that CPU from the thread, what it did
    /// get bounds what may be left for them, so a busy machine loosens the
    /// bound instead of failing the test.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn own_pinned_thread_leaves_its_cpu_idle_for_others() {
        let Some(cpu) = core_affinity::get_core_ids().and_then(|ids| ids.last().copied()) else {
            return;
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let busy = std::thread::spawn(move || {
            if !core_affinity::set_for_current(cpu) {
                return None;
            }
            let start = (std::time::Instant::now(), thread_cpu_time());
            let mut x = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                std::hint::black_box(x);
            }
            let wall = start.0.elapsed().as_secs_f64();
            Some((thread_cpu_time() - start.1) / wall.max(1e-9))
        });
        let mut s = Sampler::new();
        std::thread::sleep(Duration::from_millis(50));
        s.sample();
        std::thread::sleep(Duration::from_millis(300));
        let x = s.sample();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let Some(share) = busy.join().expect("busy thread") else {
            return;
        };
        let others = x.per_cpu.get(cpu.id).copied().expect("per-CPU sample");
        // On a quiet machine `share` is about 1 and `others` about 0.
        assert!(
            others < (1.0 - share) + 0.4,
            "CPU {}: own share {share:.2}, {x:?}",
            cpu.id
        );
    }

    /// The calling thread's CPU time in seconds.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn thread_cpu_time() -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call's duration.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    }

    #[test]
    fn one_sample_costs_far_below_one_percent() {
        let mut s = Sampler::new();
        s.sample();
        let mut times: Vec<Duration> = (0..15)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(2));
                let t = Instant::now();
                std::hint::black_box(s.sample());
                t.elapsed()
            })
            .collect();
        times.sort();
        let median = times[times.len() / 2];
        // Period 100 ms: 1 % of a core is 1 ms per sample.
        assert!(
            median < Duration::from_millis(1),
            "median sample {median:?}"
        );
    }
}
