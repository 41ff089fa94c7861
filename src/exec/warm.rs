//! Keeps a pool's other workers spinning, ready for the next kernel's tasks,
//! while a run walks its steps. A worker that has gone to sleep takes tens
//! of microseconds to wake (over a hundred in a virtual machine), and a run
//! of many short operators would pay that at every operator: DenseNet's
//! 60 µs elementwise nodes took three times longer on two threads than on
//! one. onnxruntime spins its workers for the same reason.
//!
//! Spinning stops when the run ends, while the executor hands the CPUs to
//! other pools (a fork run in parallel, or serially on another pool), and
//! after a worker has found no work for [`IDLE_LIMIT`], so that a long
//! single-threaded stretch does not hold a core.

use crate::sched::Pool;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a spinning worker waits for work before it goes back to sleep.
pub(super) const IDLE_LIMIT: Duration = Duration::from_millis(2);

/// The spinning workers of one pool during one run. Dropping it stops them.
pub(super) struct Warm {
    pool: Arc<Pool>,
    /// Workers spin while this is set.
    active: Arc<AtomicBool>,
}

thread_local! {
    /// Whether this thread is inside [`spin`]: a spinner that picks up
    /// another spinner's start (after a pause and resume) returns at once
    /// instead of nesting, and the running one carries on.
    static SPINNING: Cell<bool> = const { Cell::new(false) };
}

impl Warm {
    /// Starts every worker of `pool` but the calling one spinning; call it
    /// from a thread of `pool` (elsewhere nothing spins).
    pub(super) fn start(pool: &Arc<Pool>) -> Warm {
        let warm = Warm {
            pool: Arc::clone(pool),
            active: Arc::new(AtomicBool::new(false)),
        };
        warm.resume();
        warm
    }

    /// Stops the spinning workers (they finish the task in hand, if any).
    pub(super) fn pause(&self) {
        self.active.store(false, Ordering::Release);
    }

    /// Starts the workers spinning again after [`Warm::pause`].
    pub(super) fn resume(&self) {
        let Some(caller) = self.pool.pool.current_thread_index() else {
            return;
        };
        if self.pool.size < 2 {
            return;
        }
        self.active.store(true, Ordering::Release);
        let active = Arc::clone(&self.active);
        self.pool.pool.spawn_broadcast(move |ctx| {
            if ctx.index() != caller {
                spin(&active);
            }
        });
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.pause();
    }
}

/// Runs the pool's pending tasks as they appear until `active` is cleared
/// or no task has come for [`IDLE_LIMIT`].
fn spin(active: &AtomicBool) {
    if SPINNING.with(|s| s.replace(true)) {
        return;
    }
    let mut last_work = Instant::now();
    while active.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => last_work = Instant::now(),
            _ if last_work.elapsed() > IDLE_LIMIT => break,
            _ => std::hint::spin_loop(),
        }
    }
    SPINNING.with(|s| s.set(false));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::Pool;

    fn pool(threads: usize) -> Arc<Pool> {
        crate::sched::Pools::new().get(0, 0, threads).unwrap()
    }

    #[test]
    fn workers_spin_until_paused_and_take_tasks_meanwhile() {
        let p = pool(3);
        p.pool.install(|| {
            let warm = Warm::start(&p);
            // Tasks pushed now are run by the spinning workers at once.
            let done = std::sync::atomic::AtomicUsize::new(0);
            rayon::scope(|s| {
                for _ in 0..64 {
                    s.spawn(|_| {
                        done.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
            assert_eq!(done.load(Ordering::Relaxed), 64);
            warm.pause();
            warm.resume();
            drop(warm);
        });
        // Every spinner has returned: the pool can run a broadcast on all
        // of its threads (it would hang if one were still spinning).
        let seen = p.pool.broadcast(|ctx| ctx.index());
        assert_eq!(seen, vec![0, 1, 2]);
    }

    #[test]
    fn idle_spinners_go_back_to_sleep() {
        let p = pool(2);
        let started = Instant::now();
        p.pool.install(|| {
            let warm = Warm::start(&p);
            std::thread::sleep(IDLE_LIMIT * 3);
            // The other worker gave up spinning on its own: it is free to
            // run a broadcast while `warm` is still alive.
            let seen = p.pool.broadcast(|ctx| ctx.index());
            assert_eq!(seen.len(), 2);
            drop(warm);
        });
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
