//! Seed 000's reaction to a device that slows down: measure the total and
//! the remaining work, check whether the remaining work can still finish
//! within the deadline × a delay ratio (150 % by default), try the fastest
//! plan the load allows when the current one cannot, and fail early when
//! even that cannot. Also the seed's accounting of work handed over in
//! groups (a batch of samples processed a group at a time): how much work
//! remains, and which samples must go to another worker.
//!
//! Pure arithmetic: the executor feeds it elapsed time and estimates.

use std::time::Duration;

/// The delay ratio of the seed: a run may take up to 150 % of its deadline.
pub const DEFAULT_DELAY_RATIO: f64 = 1.5;

/// A deadline and the delay ratio it may be stretched by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeadlineRule {
    /// The time the run was planned to take.
    pub deadline: Duration,
    /// How far past it the run may go, as a ratio (≥ 1; 1.5 = 150 %).
    pub delay_ratio: f64,
}

/// What the rule says about a run in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The current plan finishes in time.
    OnTime,
    /// The current plan would be late; the fastest plan the load allows
    /// would not: switch to it.
    Hurry,
    /// Even the fastest plan would be late: stop now.
    Miss,
}

impl DeadlineRule {
    /// A rule with the seed's delay ratio.
    pub fn new(deadline: Duration) -> DeadlineRule {
        DeadlineRule {
            deadline,
            delay_ratio: DEFAULT_DELAY_RATIO,
        }
    }

    /// Checks the ratio: finite and at least 1.
    pub fn validate(&self) -> Result<(), String> {
        if self.delay_ratio.is_finite() && self.delay_ratio >= 1.0 {
            Ok(())
        } else {
            Err(format!(
                "the delay ratio must be a finite number of at least 1, not {}",
                self.delay_ratio
            ))
        }
    }

    /// The time the run may take in all: deadline × delay ratio.
    pub fn allowed(&self) -> Duration {
        self.deadline.mul_f64(self.delay_ratio.max(1.0))
    }

    /// Whether a run that has taken `elapsed` and still needs
    /// `remaining_now` seconds on its current plan, or `remaining_fastest`
    /// on the fastest plan the load allows, finishes within
    /// [`allowed`](Self::allowed).
    pub fn judge(&self, elapsed: Duration, remaining_now: f64, remaining_fastest: f64) -> Verdict {
        let allowed = self.allowed().as_secs_f64();
        let elapsed = elapsed.as_secs_f64();
        if elapsed + remaining_now <= allowed {
            Verdict::OnTime
        } else if elapsed + remaining_fastest.min(remaining_now) <= allowed {
            Verdict::Hurry
        } else {
            Verdict::Miss
        }
    }
}

/// Work handed out as `total` samples processed `group` at a time (all
/// samples of a group in step), as the seed counts it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupedWork {
    /// Samples assigned in all.
    pub total: usize,
    /// Samples processed at once.
    pub group: usize,
}

impl GroupedWork {
    /// Work done, in samples, after `groups_done` whole groups and a
    /// fraction `current` of the group in progress (the last group may be
    /// short).
    pub fn done(&self, groups_done: usize, current: f64) -> f64 {
        let whole = (groups_done * self.group).min(self.total);
        let in_progress = self.group.min(self.total - whole);
        whole as f64 + in_progress as f64 * current.clamp(0.0, 1.0)
    }

    /// Work remaining, in samples.
    pub fn remaining(&self, groups_done: usize, current: f64) -> f64 {
        self.total as f64 - self.done(groups_done, current)
    }

    /// The remaining share of the work, in [0, 1].
    pub fn remaining_fraction(&self, groups_done: usize, current: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.remaining(groups_done, current) / self.total as f64
    }

    /// Samples whose processing finished: only whole groups count, since
    /// the partial results of a group in progress cannot be handed over.
    pub fn finished(&self, groups_done: usize) -> usize {
        (groups_done * self.group).min(self.total)
    }

    /// The samples (indices) another worker must take over: all those not
    /// finished, including every sample of the group in progress.
    pub fn hand_over(&self, groups_done: usize) -> std::ops::Range<usize> {
        self.finished(groups_done)..self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn the_seeds_sixteen_samples_on_four_cores() {
        // Seed 000: 16 samples, 4 at a time; the anomaly comes halfway
        // through the second group.
        let work = GroupedWork {
            total: 16,
            group: 4,
        };
        assert_eq!(work.done(1, 0.5), 6.0); // 4 + 4 × 50 %
        assert_eq!(work.remaining(1, 0.5), 10.0); // 16 − 6
        assert_eq!(work.remaining_fraction(1, 0.5), 10.0 / 16.0); // 5/8
        assert_eq!(work.finished(1), 4); // 4/16 = 1/4 finished
        assert_eq!(work.hand_over(1), 4..16); // 12 samples: 3/4 to re-assign
        assert_eq!(work.hand_over(1).len() as f64 / 16.0, 0.75);
    }

    #[test]
    fn the_seeds_eight_samples_on_eight_cores() {
        // 8 samples all in parallel, 50 % through: half the work remains,
        // but no sample is finished, so all 8 must be handed over.
        let work = GroupedWork { total: 8, group: 8 };
        assert_eq!(work.remaining_fraction(0, 0.5), 0.5);
        assert_eq!(work.finished(0), 0);
        assert_eq!(work.hand_over(0), 0..8);
    }

    #[test]
    fn a_short_last_group_counts_what_it_holds() {
        let work = GroupedWork { total: 6, group: 4 };
        assert_eq!(work.done(1, 0.5), 5.0); // 4 + 2 × 50 %
        assert_eq!(work.remaining(2, 0.0), 0.0);
        assert_eq!(work.hand_over(2), 6..6);
        assert_eq!(
            GroupedWork { total: 0, group: 4 }.remaining_fraction(0, 0.0),
            0.0
        );
    }

    #[test]
    fn one_hundred_fifty_percent_rule() {
        // Planned 100 ms: the run may take 150 ms.
        let rule = DeadlineRule::new(MS(100));
        assert_eq!(rule.allowed(), MS(150));
        // 60 ms in, 80 ms to go: 140 ≤ 150, on time (late against the
        // deadline itself, within the delay the seed tolerates).
        assert_eq!(rule.judge(MS(60), 0.080, 0.080), Verdict::OnTime);
        // 60 ms in, 100 ms to go now, 70 ms on the fastest plan: hurry.
        assert_eq!(rule.judge(MS(60), 0.100, 0.070), Verdict::Hurry);
        // Exactly at the limit still counts as on time.
        assert_eq!(rule.judge(MS(60), 0.090, 0.090), Verdict::OnTime);
        // Even the fastest plan needs 95 ms: 155 > 150, stop now.
        assert_eq!(rule.judge(MS(60), 0.120, 0.095), Verdict::Miss);
        // A fastest estimate above the current one never makes it worse.
        assert_eq!(rule.judge(MS(60), 0.080, 0.200), Verdict::OnTime);
    }

    #[test]
    fn other_ratios_and_their_validation() {
        let rule = DeadlineRule {
            deadline: MS(20),
            delay_ratio: 1.0,
        };
        assert!(rule.validate().is_ok());
        assert_eq!(rule.judge(MS(5), 0.016, 0.016), Verdict::Miss);
        for bad in [0.5, f64::NAN, f64::INFINITY] {
            let rule = DeadlineRule {
                deadline: MS(20),
                delay_ratio: bad,
            };
            assert!(rule.validate().is_err(), "{bad}");
        }
    }
}
