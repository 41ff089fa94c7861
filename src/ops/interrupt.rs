//! Stopping a run from outside: a cancellation token another thread can
//! trigger, and a time limit. Both are checked before every operator and on
//! every iteration of a loop, so that no model, however hostile (a loop of
//! 2^62 trips), holds the caller's thread longer than one operator past the
//! moment it asked to stop.
//!
//! The executor puts the run's [`Interrupt`] in force on the thread running
//! each operator ([`with_interrupt`]); control-flow operators call [`check`]
//! between iterations.

use crate::error::{DeadlineMiss, Error, Result};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A token that stops the runs it is given to: clone it, hand the clone to
/// the run, and call [`cancel`](Self::cancel) from any thread.
///
/// ```
/// use ramify::ops::interrupt::CancelToken;
/// let token = CancelToken::new();
/// let for_the_run = token.clone();
/// token.cancel();
/// assert!(for_the_run.is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Asks every run holding this token to stop at its next check.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// When a run must stop: a cancellation token, a time limit, both or neither.
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    cancel: Option<CancelToken>,
    /// The time limit and the instant it runs out.
    limit: Option<(Duration, Instant)>,
}

impl Interrupt {
    /// Stops when `cancel` is cancelled or when `limit` has passed from now.
    pub fn new(cancel: Option<CancelToken>, limit: Option<Duration>) -> Interrupt {
        Interrupt {
            cancel,
            limit: limit.map(|l| (l, Instant::now() + l)),
        }
    }

    /// Whether nothing can stop the run early.
    pub fn is_none(&self) -> bool {
        self.cancel.is_none() && self.limit.is_none()
    }

    /// An error when the run must stop now.
    pub fn check(&self) -> Result<()> {
        if self.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            return Err(Error::Cancelled);
        }
        if let Some((limit, end)) = self.limit {
            let now = Instant::now();
            if now >= end {
                return Err(Error::Deadline(Box::new(DeadlineMiss::new(
                    format!(
                        "the time limit of {:.1} ms has passed",
                        limit.as_secs_f64() * 1e3
                    ),
                    limit + now.saturating_duration_since(end),
                ))));
            }
        }
        Ok(())
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Interrupt>> = const { RefCell::new(None) };
}

/// Runs `f` with `interrupt` in force on this thread (restored afterwards,
/// also when `f` panics).
pub fn with_interrupt<R>(interrupt: &Interrupt, f: impl FnOnce() -> R) -> R {
    if interrupt.is_none() {
        return f();
    }
    struct Restore(Option<Interrupt>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| *c.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.borrow_mut().replace(interrupt.clone())));
    f()
}

/// The interrupt in force on this thread (an empty one when none is), to
/// carry into work handed to another thread.
pub fn current() -> Interrupt {
    CURRENT
        .with(|c| c.borrow().clone())
        .unwrap_or_else(|| Interrupt::new(None, None))
}

/// An error when the run in force on this thread must stop now.
pub fn check() -> Result<()> {
    CURRENT.with(|c| c.borrow().as_ref().map_or(Ok(()), Interrupt::check))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_token_stops_the_run_in_force() {
        let token = CancelToken::new();
        let interrupt = Interrupt::new(Some(token.clone()), None);
        with_interrupt(&interrupt, || {
            assert!(check().is_ok());
            token.cancel();
            assert!(matches!(check(), Err(Error::Cancelled)));
        });
        // Outside the scope nothing is in force.
        assert!(check().is_ok());
    }

    #[test]
    fn a_time_limit_runs_out() {
        let interrupt = Interrupt::new(None, Some(Duration::from_millis(20)));
        assert!(interrupt.check().is_ok());
        std::thread::sleep(Duration::from_millis(30));
        let err = interrupt.check().unwrap_err();
        assert!(matches!(err, Error::Deadline(_)), "{err}");
        assert!(err.to_string().contains("20.0 ms"), "{err}");
    }

    #[test]
    fn no_interrupt_never_stops() {
        let none = Interrupt::default();
        assert!(none.is_none());
        with_interrupt(&none, || assert!(check().is_ok()));
    }
}
