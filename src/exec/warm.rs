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
    /// How long a spinner waits for work before it sleeps.
    idle: Duration,
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
        Self::start_idle(pool, IDLE_LIMIT)
    }

    /// [`Warm::start`] with spinners that sleep after `idle` without work
    /// (tests on slow or emulated machines need more than [`IDLE_LIMIT`]
    /// to look at them before they sleep).
    fn start_idle(pool: &Arc<Pool>, idle: Duration) -> Warm {
        let warm = Warm {
            pool: Arc::clone(pool),
            active: Arc::new(AtomicBool::new(false)),
            idle,
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
        let idle = self.idle;
        self.pool.pool.spawn_broadcast(move |ctx| {
            if ctx.index() != caller {
                spin(&active, idle);
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
/// or no task has come for `idle`.
fn spin(active: &AtomicBool, idle: Duration) {
    if SPINNING.with(|s| s.replace(true)) {
        return;
    }
    let mut last_work = Instant::now();
    while active.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => last_work = Instant::now(),
            _ if last_work.elapsed() > idle => break,
            _ => std::hint::spin_loop(),
        }
    }
    SPINNING.with(|s| s.set(false));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(threads: usize) -> Arc<Pool> {
        crate::sched::Pools::new().get(0, 0, threads).unwrap()
    }

    /// Per thread of `p`, whether it is inside `spin`: a broadcast task
    /// reaches a spinning worker through its `yield_now`, so it runs inside
    /// the spin loop and sees the flag set.
    fn spinning(p: &Pool) -> Vec<bool> {
        p.pool.broadcast(|_| SPINNING.with(Cell::get))
    }

    /// Whether every worker of `p` has left `spin` within 5 s (a busy or
    /// emulated test machine may leave a worker unscheduled for a while).
    fn all_stop(p: &Pool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while spinning(p).contains(&true) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    #[test]
    fn workers_spin_until_paused_and_take_tasks_meanwhile() {
        let p = pool(3);
        p.pool.install(|| {
            let caller = p.pool.current_thread_index().unwrap();
            // Spinners that stay up without work for the whole test: under
            // qemu the 2 ms limit ran out before they were looked at.
            let warm = Warm::start_idle(&p, Duration::from_secs(60));
            let want: Vec<bool> = (0..3).map(|i| i != caller).collect();
            assert_eq!(spinning(&p), want, "every worker but the caller spins");
            // Tasks pushed meanwhile are run, by the spinners among others.
            let done = std::sync::atomic::AtomicUsize::new(0);
            rayon::scope(|s| {
                for _ in 0..64 {
                    s.spawn(|_| {
                        done.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
            assert_eq!(done.load(Ordering::Relaxed), 64);
            // After a pause and a resume the same workers spin again.
            warm.pause();
            warm.resume();
            assert_eq!(spinning(&p), want);
            drop(warm);
            assert!(all_stop(&p), "dropping stops them");
        });
    }

    #[test]
    fn idle_spinners_go_back_to_sleep() {
        let p = pool(2);
        p.pool.install(|| {
            let warm = Warm::start(&p);
            std::thread::sleep(IDLE_LIMIT * 5);
            // No task came: the other worker stops spinning on its own
            // while `warm` is still alive.
            assert!(all_stop(&p));
            drop(warm);
        });
    }
}
