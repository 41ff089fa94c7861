//! The makespan check: a parallel plan is kept only when its estimated
//! finishing time beats running the same siblings one after another, each
//! operator on all the serial threads.
//!
//! The method sizes pools by t_i/T but never asks whether forking pays. On
//! few CPUs it often does not: two siblings costing 1:9 on two CPUs finish
//! after 0.9·T in parallel, but after about T/1.7 serially when operators
//! split over both threads. Sibling times per thread count come from the
//! plan (measured node times where known, else the cost model and
//! [`PolicyConfig::speedup`](super::PolicyConfig::speedup)), so a wrong
//! guess corrects itself: the plan that ran is measured and compared again
//! at the next fork.
//!
//! On cores of different capacity (big and little), each pool's estimate is
//! scaled by how much slower its cores are than those serial execution
//! would run on (see [`check`]'s `slowdown`).

use super::policy::{Decision, PoolPlan};

/// Seconds of sibling `s` on `k` threads.
pub type SiblingSeconds<'a> = &'a dyn Fn(usize, usize) -> f64;

/// Estimated seconds until the last pool of `pools` finishes (each runs its
/// siblings one after another on its CPUs), plus `overhead` for the fork.
pub fn parallel_makespan(pools: &[PoolPlan], seconds_at: SiblingSeconds, overhead: f64) -> f64 {
    scaled_makespan(pools, seconds_at, overhead, &[])
}

/// [`parallel_makespan`] with pool `i`'s siblings taking `slowdown[i]`
/// times their estimate (1 where `slowdown` has no entry).
pub fn scaled_makespan(
    pools: &[PoolPlan],
    seconds_at: SiblingSeconds,
    overhead: f64,
    slowdown: &[f64],
) -> f64 {
    let slowest = pools
        .iter()
        .enumerate()
        .map(|(i, p)| {
            // Matched by reference: an `Option<f64>` None carries an
            // uninitialised payload that optimised code may branch on
            // (valgrind flags it).
            let scale = match slowdown.get(i) {
                Some(&f) if f.is_finite() && f > 0.0 => f,
                _ => 1.0,
            };
            scale
                * p.siblings
                    .iter()
                    .map(|&s| seconds_at(s, p.cpus))
                    .sum::<f64>()
        })
        .fold(0.0, f64::max);
    slowest + overhead
}

/// Estimated seconds of `siblings` siblings run one after another, each
/// operator on `threads` threads.
pub fn serial_seconds(siblings: usize, threads: usize, seconds_at: SiblingSeconds) -> f64 {
    (0..siblings).map(|s| seconds_at(s, threads)).sum()
}

/// `decision`, unless it is parallel and not faster than serial execution
/// of the `siblings` siblings on `serial_threads` threads: then serial.
/// Estimates are for the cores serial execution runs on; pool `i` runs on
/// cores `slowdown[i]` times slower than those (its mean capacity over
/// theirs, inverted; empty on uniform cores).
pub fn check(
    decision: Decision,
    siblings: usize,
    serial_threads: usize,
    seconds_at: SiblingSeconds,
    overhead: f64,
    slowdown: &[f64],
) -> Decision {
    match decision {
        Decision::Parallel(pools)
            if scaled_makespan(&pools, seconds_at, overhead, slowdown)
                >= serial_seconds(siblings, serial_threads, seconds_at) =>
        {
            Decision::Serial {
                threads: serial_threads,
            }
        }
        d => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::{apportion, PolicyConfig};

    /// Sibling times `t` (single-thread) under the speedup model of `cfg`.
    fn model<'a>(t: &'a [f64], cfg: &'a PolicyConfig) -> impl Fn(usize, usize) -> f64 + 'a {
        move |s, k| t[s] / cfg.speedup(k)
    }

    #[test]
    fn unbalanced_siblings_on_two_cpus_run_serially() {
        // 1:9 on 2 CPUs: parallel finishes after 9 (one CPU each), serial
        // after 10/1.7 ≈ 5.9.
        let cfg = PolicyConfig::for_cpus(2);
        let t = [1.0, 9.0];
        let pools = apportion(2.0, &t).unwrap();
        let f = model(&t, &cfg);
        assert_eq!(parallel_makespan(&pools, &f, 0.0), 9.0);
        assert!((serial_seconds(2, 2, &f) - 10.0 / 1.7).abs() < 1e-12);
        assert_eq!(
            check(Decision::Parallel(pools), 2, 2, &f, 0.0, &[]),
            Decision::Serial { threads: 2 }
        );
    }

    #[test]
    fn balanced_siblings_on_many_cpus_stay_parallel() {
        // Four equal siblings on 8 CPUs: 2 CPUs each finish after
        // 1/1.7 ≈ 0.59; serial on 8 threads takes 4/5.9 ≈ 0.68.
        let cfg = PolicyConfig::for_cpus(8);
        let t = [1.0; 4];
        let pools = apportion(8.0, &t).unwrap();
        let d = Decision::Parallel(pools.clone());
        assert_eq!(check(d.clone(), 4, 8, &model(&t, &cfg), 0.0, &[]), d);
        // A fork overhead larger than the gain makes it serial.
        assert_eq!(
            check(d, 4, 8, &model(&t, &cfg), 0.2, &[]),
            Decision::Serial { threads: 8 }
        );
    }

    #[test]
    fn measured_times_decide_over_the_model() {
        // The model says parallel wins, but measurements (here: siblings
        // three times slower on one CPU than the model thinks) say not.
        let cfg = PolicyConfig::for_cpus(2);
        let t = [1.0, 1.0];
        let measured = |s: usize, k: usize| {
            if k == 1 {
                3.0 * t[s]
            } else {
                t[s] / cfg.speedup(k)
            }
        };
        let pools = apportion(2.0, &t).unwrap();
        let d = Decision::Parallel(pools);
        assert_eq!(check(d.clone(), 2, 2, &model(&t, &cfg), 0.0, &[]), d);
        assert_eq!(
            check(d, 2, 2, &measured, 0.0, &[]),
            Decision::Serial { threads: 2 }
        );
    }

    #[test]
    fn slow_cores_can_make_a_parallel_plan_lose() {
        // Two equal siblings on 2 CPUs: on uniform cores parallel (1.0)
        // beats serial on both (2/1.7 ≈ 1.18). With the second pool on a
        // little core at a third of the big core's speed, it finishes
        // after 3.0: serial on the big cores wins.
        let cfg = PolicyConfig::for_cpus(2);
        let t = [1.0, 1.0];
        let d = Decision::Parallel(apportion(2.0, &t).unwrap());
        let f = model(&t, &cfg);
        assert_eq!(check(d.clone(), 2, 2, &f, 0.0, &[1.0, 1.0]), d);
        assert_eq!(scaled_makespan(&d_pools(&d), &f, 0.0, &[1.0, 3.0]), 3.0);
        assert_eq!(
            check(d, 2, 2, &f, 0.0, &[1.0, 3.0]),
            Decision::Serial { threads: 2 }
        );
    }

    #[test]
    fn missing_or_invalid_slowdowns_count_as_one() {
        let t = [2.0, 1.0];
        let f = |s: usize, _: usize| t[s];
        let pools = apportion(2.0, &t).unwrap();
        assert_eq!(scaled_makespan(&pools, &f, 0.5, &[]), 2.5);
        assert_eq!(scaled_makespan(&pools, &f, 0.0, &[f64::NAN, -1.0]), 2.0);
        assert_eq!(scaled_makespan(&pools, &f, 0.0, &[1.0, 4.0]), 4.0);
    }

    fn d_pools(d: &Decision) -> Vec<PoolPlan> {
        match d {
            Decision::Parallel(p) => p.clone(),
            Decision::Serial { .. } => Vec::new(),
        }
    }

    #[test]
    fn serial_decisions_pass_through() {
        let f = |_: usize, _: usize| 1.0;
        let d = Decision::Serial { threads: 3 };
        assert_eq!(check(d.clone(), 2, 8, &f, 0.0, &[]), d);
    }
}
