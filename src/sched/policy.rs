//! The scheduling policy of the method, as pure functions: the load band
//! (with hysteresis), and for a fork the choice between parallel siblings on
//! pools of c_i = m·(1−n)·t_i/T CPUs, the same on a shrunk pool (M1), or
//! serial execution on M2 CPUs.

/// Thresholds and pool presets of the policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyConfig {
    /// CPUs the runtime may use (m).
    pub cpus: usize,
    /// Upper threshold θ1: at or above it, siblings run serially.
    pub theta1: f64,
    /// Lower threshold θ2: below it, siblings run in parallel on m CPUs.
    pub theta2: f64,
    /// Shrunk pool size M1 used between θ2 and θ1.
    pub m1: usize,
    /// Threads per operator M2 when serial.
    pub m2: usize,
    /// Margin below a threshold that the load must fall to leave its band.
    pub hysteresis: f64,
    /// Keep a parallel decision only when its estimated makespan beats
    /// serial execution (see [`makespan`](super::makespan)); default on.
    /// Off, the scheduler follows the method's bands alone.
    pub makespan_check: bool,
    /// Parallel efficiency e of an operator on its own threads: k threads
    /// run it [`speedup`](Self::speedup)`(k) = 1 + (k−1)·e` times faster
    /// (default 0.7). Used where no node time was measured at k threads.
    pub intra_op_efficiency: f64,
    /// Seconds one parallel fork costs at least (waking the pools,
    /// joining); default 20 µs. The executor measures each fork's real
    /// overhead (first with an empty fork) and charges the larger.
    pub fork_overhead: f64,
}

impl PolicyConfig {
    /// The method's defaults for `cpus` CPUs: θ1 = 70 %, θ2 = 50 %,
    /// M1 = ¾·m and M2 = ½·m (at least 1), hysteresis 5 %.
    pub fn for_cpus(cpus: usize) -> PolicyConfig {
        let m = cpus.max(1);
        PolicyConfig {
            cpus: m,
            theta1: 0.7,
            theta2: 0.5,
            m1: (3 * m / 4).max(1),
            m2: (m / 2).max(1),
            hysteresis: 0.05,
            makespan_check: true,
            intra_op_efficiency: 0.7,
            fork_overhead: 20e-6,
        }
    }

    /// How much faster an operator runs on `threads` threads than on one:
    /// `1 + (threads − 1)·e`, at least 1.
    pub fn speedup(&self, threads: usize) -> f64 {
        1.0 + threads.saturating_sub(1) as f64 * self.intra_op_efficiency
    }

    /// Checks the invariants: 0 ≤ θ2 ≤ θ1 ≤ 1, 1 ≤ M2 ≤ M1 ≤ m.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.theta2)
            || !(0.0..=1.0).contains(&self.theta1)
            || self.theta2 > self.theta1
        {
            return Err(format!(
                "thresholds must satisfy 0 <= theta2 <= theta1 <= 1 (theta1 {}, theta2 {})",
                self.theta1, self.theta2
            ));
        }
        if self.m2 == 0 || self.m2 > self.m1 || self.m1 > self.cpus {
            return Err(format!(
                "pool sizes must satisfy 1 <= M2 <= M1 <= m (M1 {}, M2 {}, m {})",
                self.m1, self.m2, self.cpus
            ));
        }
        if !(self.intra_op_efficiency > 0.0 && self.intra_op_efficiency <= 1.0) {
            return Err(format!(
                "intra-op efficiency {} must be in (0, 1]",
                self.intra_op_efficiency
            ));
        }
        if !(self.fork_overhead.is_finite() && self.fork_overhead >= 0.0) {
            return Err(format!(
                "fork overhead {} must be a finite number of seconds >= 0",
                self.fork_overhead
            ));
        }
        if !(0.0..0.5).contains(&self.hysteresis) {
            return Err(format!(
                "hysteresis {} must be in [0, 0.5)",
                self.hysteresis
            ));
        }
        Ok(())
    }

    /// CPUs for operators outside forks (and for serial siblings) in a band.
    pub fn serial_threads(&self, band: Band) -> usize {
        match band {
            Band::Low => self.cpus,
            Band::Mid => self.m1,
            Band::High => self.m2,
        }
    }
}

/// The load band the utilisation falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Band {
    /// n < θ2: parallel on m CPUs.
    Low,
    /// θ2 ≤ n < θ1: parallel on M1 CPUs.
    Mid,
    /// n ≥ θ1: serial on M2 CPUs.
    High,
}

impl std::fmt::Display for Band {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Band::Low => "low",
            Band::Mid => "mid",
            Band::High => "high",
        })
    }
}

/// The band for utilisation `n`. With a previous band, a higher band is
/// entered as soon as its threshold is reached, but a band is left downwards
/// only when the load falls the hysteresis margin below its threshold, so
/// that noise around a threshold does not make decisions flap. (Entering
/// upwards at the threshold itself matters on small devices: one busy
/// process on two CPUs is exactly n = 0.5 = θ2.)
pub fn band(n: f64, cfg: &PolicyConfig, previous: Option<Band>) -> Band {
    let plain = |n: f64| {
        if n >= cfg.theta1 {
            Band::High
        } else if n >= cfg.theta2 {
            Band::Mid
        } else {
            Band::Low
        }
    };
    let candidate = plain(n);
    match previous {
        Some(prev) if (candidate as u8) < (prev as u8) => {
            // Down only as far as n + h still allows.
            let shifted = plain(n + cfg.hysteresis);
            if (shifted as u8) < (prev as u8) {
                shifted
            } else {
                prev
            }
        }
        _ => candidate,
    }
}

/// One pool of a parallel fork: its CPU count and the siblings it runs, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolPlan {
    /// CPUs (threads) of the pool.
    pub cpus: usize,
    /// Indices of the siblings it runs, one after another.
    pub siblings: Vec<usize>,
}

/// What to do at a fork.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Siblings in parallel on these pools.
    Parallel(Vec<PoolPlan>),
    /// Siblings one after another, each operator on `threads` CPUs.
    Serial {
        /// Threads per operator.
        threads: usize,
    },
}

impl Decision {
    /// The pool sizes (one entry for serial).
    pub fn pool_sizes(&self) -> Vec<usize> {
        match self {
            Decision::Parallel(p) => p.iter().map(|p| p.cpus).collect(),
            Decision::Serial { threads } => vec![*threads],
        }
    }
}

/// The method's decision at a fork for utilisation `n` in `band`, with
/// sibling single-thread times `times`.
pub fn decide(n: f64, band: Band, cfg: &PolicyConfig, times: &[f64]) -> Decision {
    let base = match band {
        Band::Low => cfg.cpus,
        Band::Mid => cfg.m1,
        Band::High => return Decision::Serial { threads: cfg.m2 },
    };
    let budget = base as f64 * (1.0 - n.clamp(0.0, 1.0));
    match apportion(budget, times) {
        Some(pools) => Decision::Parallel(pools),
        // Below 2 CPUs of budget: serial, each operator on the band's threads.
        None => Decision::Serial {
            threads: cfg.serial_threads(band),
        },
    }
}

/// Splits a budget of `budget` CPUs among siblings with times `times`:
/// c_i = budget·t_i/T rounded down, at least 1 each, leftover CPUs to the
/// largest remainders. With more siblings than CPUs, each of the ⌊budget⌋
/// pools gets one CPU and siblings are dealt longest first to the pool with
/// the least work. `None` when the budget is below 2 CPUs (run serially) or
/// there is only one sibling.
pub fn apportion(budget: f64, times: &[f64]) -> Option<Vec<PoolPlan>> {
    let k = times.len();
    if k < 2 || budget.is_nan() || budget < 2.0 {
        return None;
    }
    let total = budget.floor() as usize;
    let t: Vec<f64> = times
        .iter()
        .map(|&x| if x.is_finite() && x > 0.0 { x } else { 0.0 })
        .collect();
    let sum: f64 = t.iter().sum();
    let share = |i: usize| {
        if sum > 0.0 {
            t[i] / sum
        } else {
            1.0 / k as f64
        }
    };
    if k > total {
        let mut order: Vec<usize> = (0..k).collect();
        crate::order::sort_indices(&mut order, &|a, b| t[b].total_cmp(&t[a]).then(a.cmp(&b)));
        let mut pools: Vec<PoolPlan> = (0..total)
            .map(|_| PoolPlan {
                cpus: 1,
                siblings: Vec::new(),
            })
            .collect();
        let mut work = vec![0.0f64; total];
        for i in order {
            let p = (0..total)
                .min_by(|&a, &b| work[a].total_cmp(&work[b]).then(a.cmp(&b)))
                .unwrap_or(0);
            work[p] += t[i].max(f64::MIN_POSITIVE);
            pools[p].siblings.push(i);
        }
        return Some(pools);
    }
    let quota: Vec<f64> = (0..k).map(|i| budget * share(i)).collect();
    let mut c: Vec<usize> = quota.iter().map(|&q| (q.floor() as usize).max(1)).collect();
    let remainder = |i: usize| quota[i] - quota[i].floor();
    let mut assigned: usize = c.iter().sum();
    // Too many after the at-least-one rule: take from the largest pools,
    // smallest remainder first.
    while assigned > total {
        let i = (0..k)
            .filter(|&i| c[i] > 1)
            .max_by(|&a, &b| c[a].cmp(&c[b]).then(remainder(b).total_cmp(&remainder(a))))
            .unwrap_or(0);
        c[i] -= 1;
        assigned -= 1;
    }
    // Leftover CPUs go to the largest remainders.
    let mut by_remainder: Vec<usize> = (0..k).collect();
    crate::order::sort_indices(&mut by_remainder, &|a, b| {
        remainder(b).total_cmp(&remainder(a)).then(a.cmp(&b))
    });
    for &i in by_remainder
        .iter()
        .cycle()
        .take(total.saturating_sub(assigned))
    {
        c[i] += 1;
    }
    Some(
        c.into_iter()
            .enumerate()
            .map(|(i, cpus)| PoolPlan {
                cpus,
                siblings: vec![i],
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(d: &Decision) -> Vec<usize> {
        d.pool_sizes()
    }

    #[test]
    fn worked_example_from_the_method() {
        // m = 8, n = 0.7 (θ1 = 0.7 would make it serial, so use the formula
        // directly as the method's example does), t = 50 s and 60 s.
        let pools = apportion(8.0 * (1.0 - 0.7), &[50.0, 60.0]).unwrap();
        assert_eq!(pools.iter().map(|p| p.cpus).collect::<Vec<_>>(), vec![1, 1]);
    }

    #[test]
    fn defaults_follow_the_method() {
        let c = PolicyConfig::for_cpus(8);
        assert_eq!((c.m1, c.m2), (6, 4));
        assert_eq!((c.theta1, c.theta2), (0.7, 0.5));
        let c = PolicyConfig::for_cpus(2);
        assert_eq!((c.m1, c.m2), (1, 1));
        assert!(c.validate().is_ok());
        let c = PolicyConfig::for_cpus(1);
        assert_eq!((c.m1, c.m2), (1, 1));
    }

    #[test]
    fn every_band() {
        let c = PolicyConfig::for_cpus(8);
        assert_eq!(band(0.1, &c, None), Band::Low);
        assert_eq!(band(0.5, &c, None), Band::Mid);
        assert_eq!(band(0.69, &c, None), Band::Mid);
        assert_eq!(band(0.7, &c, None), Band::High);
        // Low band: m·(1−n)·t_i/T with m = 8, n = 0.25 → budget 6, t 1:2 → 2 and 4.
        let d = decide(0.25, Band::Low, &c, &[1.0, 2.0]);
        assert_eq!(sizes(&d), vec![2, 4]);
        // Mid band: M1 = 6 replaces m: budget 6·0.4 = 2.4 → 1 and 1.
        let d = decide(0.6, Band::Mid, &c, &[1.0, 2.0]);
        assert_eq!(sizes(&d), vec![1, 1]);
        // High band: serial on M2 = 4.
        assert_eq!(
            decide(0.8, Band::High, &c, &[1.0, 2.0]),
            Decision::Serial { threads: 4 }
        );
    }

    #[test]
    fn hysteresis_keeps_the_band_near_a_threshold() {
        let c = PolicyConfig::for_cpus(8);
        // Up at the threshold itself.
        assert_eq!(band(0.49, &c, Some(Band::Low)), Band::Low);
        assert_eq!(band(0.5, &c, Some(Band::Low)), Band::Mid);
        assert_eq!(band(0.7, &c, Some(Band::Mid)), Band::High);
        assert_eq!(band(0.75, &c, Some(Band::Low)), Band::High);
        // Down only the margin (0.05) below it.
        assert_eq!(band(0.48, &c, Some(Band::Mid)), Band::Mid);
        assert_eq!(band(0.46, &c, Some(Band::Mid)), Band::Mid);
        assert_eq!(band(0.44, &c, Some(Band::Mid)), Band::Low);
        assert_eq!(band(0.67, &c, Some(Band::High)), Band::High);
        assert_eq!(band(0.64, &c, Some(Band::High)), Band::Mid);
        assert_eq!(band(0.47, &c, Some(Band::High)), Band::Mid);
        assert_eq!(band(0.2, &c, Some(Band::High)), Band::Low);
        // Noise between 0.46 and 0.55 around θ2 never flaps once in Mid.
        let mut b = band(0.5, &c, None);
        for n in [0.47, 0.53, 0.46, 0.51, 0.49, 0.55, 0.46] {
            b = band(n, &c, Some(b));
            assert_eq!(b, Band::Mid, "n = {n}");
        }
    }

    #[test]
    fn rounding_gives_leftovers_to_largest_remainders() {
        // budget 8, shares 0.2/0.3/0.5 → quotas 1.6, 2.4, 4.0 → floors 1, 2, 4
        // (7) → the leftover CPU goes to the 0.6 remainder.
        let p = apportion(8.0, &[2.0, 3.0, 5.0]).unwrap();
        assert_eq!(p.iter().map(|p| p.cpus).collect::<Vec<_>>(), vec![2, 2, 4]);
        assert_eq!(p.iter().map(|p| p.cpus).sum::<usize>(), 8);
    }

    #[test]
    fn every_sibling_gets_at_least_one_cpu() {
        // quotas 0.04, 0.04, 3.92 on budget 4 → 1, 1, 2.
        let p = apportion(4.0, &[1.0, 1.0, 98.0]).unwrap();
        assert_eq!(p.iter().map(|p| p.cpus).collect::<Vec<_>>(), vec![1, 1, 2]);
    }

    #[test]
    fn more_siblings_than_cpus_share_pools_longest_first() {
        // 4 siblings, budget 2 → 2 pools of 1 CPU; longest first to the
        // least-loaded pool: 9 → p0, 5 → p1, 4 → p1, 1 → p0.
        let p = apportion(2.0, &[4.0, 9.0, 1.0, 5.0]).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(
            p[0],
            PoolPlan {
                cpus: 1,
                siblings: vec![1, 2]
            }
        );
        assert_eq!(
            p[1],
            PoolPlan {
                cpus: 1,
                siblings: vec![3, 0]
            }
        );
    }

    #[test]
    fn budget_below_two_cpus_is_serial() {
        assert_eq!(apportion(1.99, &[1.0, 1.0]), None);
        let c = PolicyConfig::for_cpus(2);
        // 2 CPUs at n = 0.3 → budget 1.4 → serial, operators on the low band's m = 2.
        assert_eq!(
            decide(0.3, Band::Low, &c, &[1.0, 1.0]),
            Decision::Serial { threads: 2 }
        );
        // 2 CPUs at n = 0.55 → mid band, budget M1·0.45 < 2 → serial on M1 = 1.
        assert_eq!(
            decide(0.55, Band::Mid, &c, &[1.0, 1.0]),
            Decision::Serial { threads: 1 }
        );
        assert_eq!(
            decide(0.0, Band::Low, &c, &[1.0, 1.0]).pool_sizes(),
            vec![1, 1]
        );
    }

    #[test]
    fn one_sibling_or_zero_times() {
        assert_eq!(apportion(8.0, &[1.0]), None);
        let p = apportion(4.0, &[0.0, 0.0]).unwrap();
        assert_eq!(p.iter().map(|p| p.cpus).collect::<Vec<_>>(), vec![2, 2]);
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let mut c = PolicyConfig::for_cpus(8);
        c.theta2 = 0.9;
        assert!(c.validate().is_err());
        let mut c = PolicyConfig::for_cpus(8);
        c.m2 = 7;
        assert!(c.validate().is_err());
        for e in [0.0, 1.5, f64::NAN] {
            let mut c = PolicyConfig::for_cpus(8);
            c.intra_op_efficiency = e;
            assert!(c.validate().is_err(), "efficiency {e}");
        }
        let mut c = PolicyConfig::for_cpus(8);
        c.fork_overhead = f64::INFINITY;
        assert!(c.validate().is_err());
    }
}
