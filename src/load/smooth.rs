//! The pure arithmetic of the monitor: clamping, interval deltas, the
//! own-CPU subtraction, run-queue contention, the memory and host mappings,
//! combining sources and EWMA smoothing. Everything here is deterministic and
//! unit-tested with synthetic numbers.

use super::config::HostState;

/// Clamps `x` to [0, 1]; NaN becomes 0.
pub fn clamp01(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

/// Growth of a cumulative counter; a counter that went backwards (a thread
/// replaced, a wrap) grew by 0.
pub fn counter_delta(prev: u64, cur: u64) -> u64 {
    cur.saturating_sub(prev)
}

/// CPU used by others: the whole-system fraction `system` (of all CPUs, in
/// [0, 1]) minus our own CPU time `own_ns` over `interval_ns` on `cpus` CPUs,
/// clamped to [0, 1]. A zero interval or zero CPUs gives the raw system value.
pub fn others_cpu(system: f64, own_ns: u64, interval_ns: u64, cpus: usize) -> f64 {
    if interval_ns == 0 || cpus == 0 {
        return clamp01(system);
    }
    let own = own_ns as f64 / (interval_ns as f64 * cpus as f64);
    clamp01(clamp01(system) - own)
}

/// Run-queue contention: the nanoseconds our threads waited for a CPU during
/// the interval, divided by the interval times the number of our threads that
/// were active (ran or waited) in it; 0 when none was active.
pub fn run_queue_contention(wait_ns: u64, interval_ns: u64, active_threads: usize) -> f64 {
    if interval_ns == 0 || active_threads == 0 {
        return 0.0;
    }
    clamp01(wait_ns as f64 / (interval_ns as f64 * active_threads as f64))
}

/// Memory use at or below this fraction adds no load.
pub const MEMORY_FREE_BELOW: f64 = 0.75;
/// Memory use at or above this fraction is full load.
pub const MEMORY_FULL_AT: f64 = 0.95;

/// Maps the used memory fraction to a load: 0 up to 75 %, rising linearly to
/// 1 at 95 % (so 90 % used maps to 0.75, above the default serial threshold
/// θ1 = 0.7: a device short of memory should not fan out).
pub fn memory_pressure(used_fraction: f64) -> f64 {
    clamp01((used_fraction - MEMORY_FREE_BELOW) / (MEMORY_FULL_AT - MEMORY_FREE_BELOW))
}

/// A battery at or above this level adds no load.
pub const BATTERY_LOW_BELOW: f64 = 0.3;

/// Maps a battery level to a load: 0 from 30 % up, rising linearly to 1 at an
/// empty battery (15 % → 0.5, 9 % → 0.7).
pub fn battery_load(level: f64) -> f64 {
    clamp01((BATTERY_LOW_BELOW - clamp01(level)) / BATTERY_LOW_BELOW)
}

/// The load a pushed host state stands for: the maximum of its CPU
/// utilisation (directly), its thermal state (directly) and
/// [`battery_load`] of its battery level; `None` when it says nothing.
pub fn host_load(state: &HostState) -> Option<f64> {
    let parts = [
        state.cpu_utilisation.map(clamp01),
        state.thermal.map(clamp01),
        state.battery_level.map(battery_load),
    ];
    combine(parts)
}

/// Combines source values by taking the maximum of those present (each
/// clamped); `None` when none is present.
pub fn combine(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    values.into_iter().flatten().map(clamp01).reduce(f64::max)
}

/// A smoothed value this close to the newest sample takes the sample's
/// value: an EWMA only approaches a steady input, and a steady load exactly
/// on a threshold (one busy process on two CPUs is n = 0.5 = θ2) must reach it.
pub const EWMA_SNAP: f64 = 0.01;

/// One EWMA step: `alpha·x + (1−alpha)·prev`, or `x` when there is no
/// previous value or the step lands within [`EWMA_SNAP`] of `x`; `alpha` is
/// clamped to (0, 1] (0 would freeze the value, so it is raised to a tiny
/// positive weight).
pub fn ewma(prev: Option<f64>, x: f64, alpha: f64) -> f64 {
    let x = clamp01(x);
    match prev {
        None => x,
        Some(p) => {
            let a = if alpha.is_nan() {
                1.0
            } else {
                alpha.clamp(1e-6, 1.0)
            };
            let next = clamp01(a * x + (1.0 - a) * p);
            if (next - x).abs() <= EWMA_SNAP {
                x
            } else {
                next
            }
        }
    }
}

/// Takes out of each CPU's use (`per_cpu`, fractions of that CPU) the time
/// our own threads ran there (`own_ns` by CPU, over `interval_ns`), never
/// below zero.
pub fn others_per_cpu(per_cpu: &mut [f64], own_ns: &[u64], interval_ns: u64) {
    if interval_ns == 0 {
        return;
    }
    for (use_, &own) in per_cpu.iter_mut().zip(own_ns) {
        *use_ = clamp01(*use_ - own as f64 / interval_ns as f64);
    }
}

/// How much less loaded (in CPUs) another CPU must be before a pool leaves
/// the CPUs it was given last: moving costs the caches it warmed, and
/// per-CPU use is noisy.
pub const STAY_MARGIN: f64 = 0.25;

/// The indices of the `k` smallest loads (ties by index) among the CPUs in
/// `allowed` (all of them where none of `allowed` has a load), `k` clamped
/// to the number of candidates, where the CPUs in `prev` (the last choice)
/// count [`STAY_MARGIN`] less loaded than they are.
pub fn least_loaded(loads: &[f64], allowed: &[usize], k: usize, prev: &[usize]) -> Vec<usize> {
    let key = |i: usize| loads[i] - if prev.contains(&i) { STAY_MARGIN } else { 0.0 };
    let mut idx: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|&i| i < loads.len())
        .collect();
    if idx.is_empty() {
        idx = (0..loads.len()).collect();
    }
    crate::order::sort_indices(&mut idx, &|a, b| key(a).total_cmp(&key(b)).then(a.cmp(&b)));
    idx.truncate(k.min(loads.len()));
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamp_and_delta() {
        assert_eq!(clamp01(-0.5), 0.0);
        assert_eq!(clamp01(1.5), 1.0);
        assert_eq!(clamp01(f64::NAN), 0.0);
        assert_eq!(counter_delta(10, 25), 15);
        assert_eq!(counter_delta(25, 10), 0);
    }

    #[test]
    fn own_cpu_is_subtracted() {
        // 4 CPUs, 100 ms: system at 50 % = 200 ms of CPU; we used 150 ms.
        let v = others_cpu(0.5, 150_000_000, 100_000_000, 4);
        assert!((v - 0.125).abs() < 1e-12, "{v}");
        // We are the whole load: others are at 0, never negative.
        assert_eq!(others_cpu(0.25, 100_000_000, 100_000_000, 4), 0.0);
        assert_eq!(others_cpu(0.3, 900_000_000, 100_000_000, 4), 0.0);
        // Degenerate interval: raw value.
        assert_eq!(others_cpu(0.4, 5, 0, 4), 0.4);
        assert_eq!(others_cpu(1.7, 0, 1, 1), 1.0);
    }

    #[test]
    fn run_queue() {
        // 2 active threads, 100 ms, waited 50 ms in all: 25 %.
        assert!((run_queue_contention(50_000_000, 100_000_000, 2) - 0.25).abs() < 1e-12);
        assert_eq!(run_queue_contention(50, 100, 0), 0.0);
        assert_eq!(run_queue_contention(500, 100, 1), 1.0);
    }

    #[test]
    fn memory_and_host_mappings() {
        assert_eq!(memory_pressure(0.5), 0.0);
        assert_eq!(memory_pressure(0.75), 0.0);
        assert!((memory_pressure(0.9) - 0.75).abs() < 1e-12);
        assert_eq!(memory_pressure(0.99), 1.0);
        assert_eq!(battery_load(0.8), 0.0);
        assert!((battery_load(0.15) - 0.5).abs() < 1e-12);
        assert_eq!(battery_load(0.0), 1.0);
        assert_eq!(host_load(&HostState::default()), None);
        let s = HostState {
            cpu_utilisation: Some(0.2),
            battery_level: Some(0.15),
            thermal: Some(0.4),
        };
        assert_eq!(host_load(&s), Some(0.5));
        let s = HostState {
            thermal: Some(1.3),
            ..HostState::default()
        };
        assert_eq!(host_load(&s), Some(1.0));
    }

    #[test]
    fn combine_takes_max() {
        assert_eq!(combine([None, None]), None);
        assert_eq!(combine([Some(0.2), None, Some(0.6), Some(0.1)]), Some(0.6));
        assert_eq!(combine([Some(-1.0)]), Some(0.0));
    }

    #[test]
    fn ewma_steps() {
        assert_eq!(ewma(None, 0.8, 0.3), 0.8);
        assert!((ewma(Some(0.0), 1.0, 0.3) - 0.3).abs() < 1e-12);
        assert!((ewma(Some(0.5), 0.0, 0.5) - 0.25).abs() < 1e-12);
        assert_eq!(ewma(Some(0.2), 0.9, 1.0), 0.9);
        // Converges to a constant input.
        let mut v = None;
        for _ in 0..100 {
            v = Some(ewma(v.or(Some(0.0)), 0.6, 0.3));
        }
        assert!((v.unwrap() - 0.6).abs() < 1e-9);
        // A steady input is reached exactly, in a bounded number of steps
        // (0.5·0.7^k ≤ 0.01 after 11).
        let mut v = Some(0.0);
        let mut steps = 0;
        while v != Some(0.5) && steps < 100 {
            v = Some(ewma(v, 0.5, 0.3));
            steps += 1;
        }
        assert_eq!((v, steps), (Some(0.5), 11));
    }

    const ALL: [usize; 5] = [0, 1, 2, 3, 4];

    #[test]
    fn least_loaded_ties_by_index() {
        let l = [0.5, 0.1, 0.5, 0.0, 0.1];
        assert_eq!(least_loaded(&l, &ALL, 3, &[]), vec![3, 1, 4]);
        assert_eq!(least_loaded(&l, &ALL, 10, &[]), vec![3, 1, 4, 0, 2]);
        assert_eq!(least_loaded(&l, &ALL, 0, &[]), Vec::<usize>::new());
        assert_eq!(least_loaded(&[], &ALL, 2, &[2]), Vec::<usize>::new());
    }

    /// Only the CPUs the process may run on are chosen, however idle the
    /// others; where none of them has a load, any CPU is.
    #[test]
    fn least_loaded_keeps_to_the_allowed_cpus() {
        let l = [0.0, 0.9, 0.0, 0.5];
        assert_eq!(least_loaded(&l, &[1, 3], 1, &[]), vec![3]);
        assert_eq!(least_loaded(&l, &[1, 3], 4, &[]), vec![3, 1]);
        assert_eq!(least_loaded(&l, &[3, 9], 2, &[]), vec![3]);
        assert_eq!(least_loaded(&l, &[7, 9], 2, &[]), vec![0, 2]);
    }

    /// The last choice stays while no other CPU is STAY_MARGIN less loaded,
    /// and gives way once one is.
    #[test]
    fn least_loaded_stays_on_the_last_choice_within_the_margin() {
        assert_eq!(least_loaded(&[0.02, 0.2], &ALL, 1, &[1]), vec![1]);
        assert_eq!(
            least_loaded(&[0.0, 0.2 + STAY_MARGIN], &ALL, 1, &[1]),
            vec![0]
        );
        let l = [0.3, 0.1, 0.0, 0.1];
        assert_eq!(least_loaded(&l, &ALL, 2, &[0, 3]), vec![3, 2]);
        assert_eq!(least_loaded(&l, &ALL, 2, &[]), vec![2, 1]);
    }

    /// Our own time on each CPU comes off that CPU's use, never below zero.
    #[test]
    fn own_time_comes_off_each_cpu() {
        let mut per_cpu = [1.0, 0.3, 0.5];
        // 100 ms: our threads ran 95 ms on CPU 0, 0 on CPU 1, 80 ms on CPU 2.
        others_per_cpu(&mut per_cpu, &[95_000_000, 0, 80_000_000], 100_000_000);
        assert!((per_cpu[0] - 0.05).abs() < 1e-12, "{per_cpu:?}");
        assert_eq!(per_cpu[1], 0.3);
        assert_eq!(per_cpu[2], 0.0);
        let mut unchanged = [0.4];
        others_per_cpu(&mut unchanged, &[5], 0);
        assert_eq!(unchanged, [0.4]);
    }
}
