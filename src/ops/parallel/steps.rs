//! Stepped parallel loops: `steps` rounds of `blocks` independent tasks,
//! where round `s` may start only once round `s − 1` has finished (a
//! recurrence whose time step is split across threads).
//!
//! The pool's threads take tickets from one counter: ticket `i` is block
//! `i % blocks` of round `i / blocks`, and it runs once every ticket of the
//! rounds before has finished. A thread waits only for tickets that other
//! threads have already taken and are running, never for a job still queued
//! in rayon, so the loop cannot deadlock however many of its jobs rayon
//! actually starts: with one thread, that thread takes every ticket in
//! order. Each task's result depends only on its round and block, never on
//! which thread ran it.

use super::{op_threads, run_tasks};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Spins before a waiting thread starts yielding its core.
const SPINS_BEFORE_YIELD: u32 = 1 << 12;

/// Runs `f(round, block)` for every `round < steps` and `block < blocks`,
/// in parallel within a round on the current pool's threads, rounds one
/// after the other. Every write of round `s` happens before any read of
/// round `s + 1` (release/acquire on the shared counters).
pub(crate) fn par_steps(steps: usize, blocks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
    let workers = op_threads().min(blocks);
    if workers <= 1 {
        for s in 0..steps {
            for b in 0..blocks {
                f(s, b);
            }
        }
        return;
    }
    let total = steps.saturating_mul(blocks);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let work = |_| loop {
        let ticket = next.fetch_add(1, Ordering::Relaxed);
        if ticket >= total {
            return;
        }
        let (round, block) = (ticket / blocks, ticket % blocks);
        wait_for(&done, round * blocks);
        f(round, block);
        done.fetch_add(1, Ordering::Release);
    };
    run_tasks(workers, &work);
}

/// Waits until `done` reaches `target`: every ticket below it was taken by
/// a running thread, so it finishes without any help from this one.
fn wait_for(done: &AtomicUsize, target: usize) {
    let mut spins = 0u32;
    while done.load(Ordering::Acquire) < target {
        if spins < SPINS_BEFORE_YIELD {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool")
    }

    /// A recurrence `v[s][b] = Σ_j v[s−1][j] + b`: any block of a round
    /// starting before the whole previous round finished would read a
    /// stale value and change the sums.
    fn recurrence(steps: usize, blocks: usize) -> Vec<u64> {
        let state = Mutex::new(vec![vec![0u64; blocks]; steps + 1]);
        par_steps(steps, blocks, &|s, b| {
            let prev: u64 = state.lock().expect("lock")[s].iter().sum();
            // Let the other thread run ahead if it can.
            std::thread::yield_now();
            state.lock().expect("lock")[s + 1][b] = prev % 1_000_003 + b as u64 + 1;
        });
        let v = state.into_inner().expect("lock");
        v[steps].clone()
    }

    #[test]
    fn rounds_run_in_order_on_any_pool() {
        let want = pool(1).install(|| recurrence(40, 5));
        // Serial: v[s+1][b] = (Σ v[s]) % p + b + 1, computed directly.
        let mut v = vec![0u64; 5];
        for _ in 0..40 {
            let sum: u64 = v.iter().sum();
            v = (0..5).map(|b| sum % 1_000_003 + b + 1).collect();
        }
        assert_eq!(want, v);
        for threads in [2, 3, 8] {
            assert_eq!(pool(threads).install(|| recurrence(40, 5)), v);
        }
    }

    #[test]
    fn one_block_and_empty_loops() {
        let count = AtomicUsize::new(0);
        pool(2).install(|| {
            par_steps(7, 1, &|_, _| {
                count.fetch_add(1, Ordering::Relaxed);
            });
            par_steps(0, 3, &|_, _| panic!("no rounds"));
            par_steps(3, 0, &|_, _| panic!("no blocks"));
        });
        assert_eq!(count.load(Ordering::Relaxed), 7);
    }

    #[test]
    fn nested_in_a_busy_pool_does_not_deadlock() {
        // Both pool threads start a stepped loop at once: each loop's
        // second job may never start, and the loops still finish.
        let p = pool(2);
        let sums = p.install(|| {
            crate::ops::parallel::par_collect(4, 1, |i| {
                let n = AtomicUsize::new(0);
                par_steps(50, 4, &|_, _| {
                    n.fetch_add(1, Ordering::Relaxed);
                });
                n.load(Ordering::Relaxed) + i
            })
        });
        assert_eq!(sums, vec![200, 201, 202, 203]);
    }
}
