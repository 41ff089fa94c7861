//! Where threads run on a device with several kinds of core, as pure
//! functions: the placement policies (`performance`: fastest cores first;
//! `power`: seed 002's rule over clusters; `auto`: power when the battery
//! is low or the device hot), seed 002's ordering itself, and the
//! capacity-aware split of a fork's cores, where the longest sibling gets
//! the fastest cores.

use super::policy::PoolPlan;
use crate::error::{Error, Result};
use crate::load::smooth;
use crate::load::topology::Topology;

/// How a session chooses the cores its threads run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// Fastest cores first, least loaded among equals.
    Performance,
    /// Seed 002: the cluster that fits the threads with the fewest idle
    /// cores, then the least power; the other clusters stay idle.
    Power,
    /// `power` while the battery is low or the device hot, else
    /// `performance`.
    #[default]
    Auto,
}

impl std::str::FromStr for Placement {
    type Err = Error;
    fn from_str(s: &str) -> Result<Placement> {
        match s {
            "performance" => Ok(Placement::Performance),
            "power" => Ok(Placement::Power),
            "auto" => Ok(Placement::Auto),
            other => Err(Error::Config(format!(
                "unknown placement {other:?} (expected performance, power or auto)"
            ))),
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Placement::Performance => "performance",
            Placement::Power => "power",
            Placement::Auto => "auto",
        })
    }
}

/// `auto` turns to `power` at or below this battery level (fraction).
pub const LOW_BATTERY: f64 = 0.2;
/// `auto` turns to `power` at or above this thermal state (1 = critical).
pub const HOT: f64 = 0.7;
/// A core counts as idle while its load (other work) is below this.
pub const IDLE_CORE: f64 = 0.5;

impl Placement {
    /// The policy in force: `auto` resolved against the battery level and
    /// thermal state (each in [0, 1], where known).
    pub fn resolve(self, battery: Option<f64>, thermal: Option<f64>) -> Placement {
        match self {
            Placement::Auto
                if battery.is_some_and(|b| b <= LOW_BATTERY)
                    || thermal.is_some_and(|t| t >= HOT) =>
            {
                Placement::Power
            }
            Placement::Auto => Placement::Performance,
            fixed => fixed,
        }
    }

    pub(crate) fn code(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_code(code: u8) -> Placement {
        match code {
            0 => Placement::Performance,
            1 => Placement::Power,
            _ => Placement::Auto,
        }
    }
}

/// One node of seed 002 (here, a cluster of cores).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerNode {
    /// Its idle cores ("idle cards").
    pub idle: usize,
    /// The summed power of its idle cores (the "second power value").
    pub idle_power: f64,
    /// Whether every core of it is idle.
    pub wholly_idle: bool,
    /// Its standby power, added when it is wholly idle (the "third power
    /// value" is the second plus this).
    pub standby: f64,
}

impl PowerNode {
    /// The power the order sorts by: the idle cores' power, plus the
    /// standby power for a wholly idle node.
    pub fn power(&self) -> f64 {
        self.idle_power + if self.wholly_idle { self.standby } else { 0.0 }
    }
}

/// Seed 002's order of the nodes that can take a task needing `need`
/// cores: nodes with fewer idle cores than `need` are left out; the rest
/// are grouped by their idle-core count, groups ascending (fill the
/// fullest nodes first, so that others can stay idle), and within a group
/// by [`PowerNode::power`] ascending. Ties keep the input order.
pub fn power_order(nodes: &[PowerNode], need: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].idle >= need.max(1))
        .collect();
    crate::order::sort_indices(&mut order, &|a, b| {
        let (x, y) = (&nodes[a], &nodes[b]);
        x.idle
            .cmp(&y.idle)
            .then(x.power().total_cmp(&y.power()))
            .then(a.cmp(&b))
    });
    order
}

/// The CPUs (of `allowed`) for `need` threads under `placement` (already
/// resolved; `auto` counts as `performance`), ordered as threads should
/// take them: the first for the longest work. `loads` holds each CPU's
/// load by index (empty: all idle); `prev` is the last choice for this
/// many threads, kept where nearly as good (see [`smooth::least_loaded`]).
pub fn place(
    placement: Placement,
    topology: &Topology,
    loads: &[f64],
    allowed: &[usize],
    need: usize,
    prev: &[usize],
) -> Vec<usize> {
    let top = allowed.iter().copied().max().unwrap_or(0);
    let zeros;
    let loads = if loads.len() > top {
        loads
    } else {
        zeros = padded(loads, top + 1);
        &zeros
    };
    let chosen = match placement {
        Placement::Power => power_cpus(topology, loads, allowed, need, prev),
        Placement::Performance | Placement::Auto => {
            fastest_cpus(topology, loads, allowed, need, prev)
        }
    };
    fastest_first(topology, chosen)
}

/// `k` of `cpus`, least loaded first (none of an empty list: the
/// monitor's helper falls back to every CPU there).
fn least_loaded(loads: &[f64], cpus: &[usize], k: usize, prev: &[usize]) -> Vec<usize> {
    if cpus.is_empty() || k == 0 {
        return Vec::new();
    }
    smooth::least_loaded(loads, cpus, k, prev)
}

fn padded(loads: &[f64], len: usize) -> Vec<f64> {
    let mut v = loads.to_vec();
    v.resize(len, 0.0);
    v
}

/// The allowed CPUs of each cluster, fastest cluster first, each cluster's
/// CPUs least loaded first; clusters with none allowed are left out.
fn clusters_in<'a>(
    topology: &'a Topology,
    loads: &[f64],
    allowed: &[usize],
    prev: &[usize],
) -> Vec<(&'a crate::load::topology::Cluster, Vec<usize>)> {
    let mut out: Vec<_> = topology
        .clusters
        .iter()
        .map(|c| {
            let mine: Vec<usize> = c
                .cpus
                .iter()
                .copied()
                .filter(|x| allowed.contains(x))
                .collect();
            let n = mine.len();
            (c, least_loaded(loads, &mine, n, prev))
        })
        .filter(|(_, cpus)| !cpus.is_empty())
        .collect();
    // CPUs the topology does not name form a cluster of their own.
    let known = topology.cpus();
    let unnamed: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| !known.contains(c))
        .collect();
    if !unnamed.is_empty() {
        let n = unnamed.len();
        out.push((&UNNAMED, least_loaded(loads, &unnamed, n, prev)));
    }
    out
}

static UNNAMED: crate::load::topology::Cluster = crate::load::topology::Cluster {
    cpus: Vec::new(),
    capacity: 1.0,
    max_khz: None,
    active_power: None,
    standby_power: None,
};

/// `performance`: the fastest cores, least loaded among equals.
fn fastest_cpus(
    topology: &Topology,
    loads: &[f64],
    allowed: &[usize],
    need: usize,
    prev: &[usize],
) -> Vec<usize> {
    let mut by_speed = clusters_in(topology, loads, allowed, prev);
    crate::order::sort_by(&mut by_speed, |a, b| b.0.capacity.total_cmp(&a.0.capacity));
    // Cores of one speed are taken least loaded first across clusters.
    let mut out = Vec::new();
    let mut i = 0;
    while i < by_speed.len() && out.len() < need {
        let speed = by_speed[i].0.capacity;
        let mut same: Vec<usize> = Vec::new();
        while i < by_speed.len() && (by_speed[i].0.capacity - speed).abs() < 1e-9 {
            same.extend(&by_speed[i].1);
            i += 1;
        }
        let take = need - out.len();
        out.extend(least_loaded(loads, &same, take, prev));
    }
    out
}

/// `power`: seed 002 over the clusters. The first cluster in
/// [`power_order`] takes all the threads; where no cluster has enough idle
/// cores, clusters are taken in the same order (those with any idle core)
/// until the threads are placed, and then the least-loaded busy cores.
fn power_cpus(
    topology: &Topology,
    loads: &[f64],
    allowed: &[usize],
    need: usize,
    prev: &[usize],
) -> Vec<usize> {
    let clusters = clusters_in(topology, loads, allowed, prev);
    let idle_of = |cpus: &[usize]| -> Vec<usize> {
        cpus.iter()
            .copied()
            .filter(|&c| loads[c] < IDLE_CORE)
            .collect()
    };
    let nodes: Vec<PowerNode> = clusters
        .iter()
        .map(|(c, cpus)| {
            let idle = idle_of(cpus).len();
            PowerNode {
                idle,
                idle_power: idle as f64 * c.core_power(),
                wholly_idle: idle == cpus.len(),
                standby: c.standby_power.unwrap_or(0.0),
            }
        })
        .collect();
    let mut out = Vec::new();
    if let Some(&first) = power_order(&nodes, need).first() {
        out.extend(idle_of(&clusters[first].1).into_iter().take(need));
        return out;
    }
    for k in power_order(&nodes, 1) {
        let take = need - out.len();
        out.extend(idle_of(&clusters[k].1).into_iter().take(take));
        if out.len() == need {
            return out;
        }
    }
    let rest: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| !out.contains(c))
        .collect();
    let take = need - out.len();
    out.extend(least_loaded(loads, &rest, take, prev));
    out
}

/// `cpus` reordered fastest first (stable: equals keep their order).
fn fastest_first(topology: &Topology, mut cpus: Vec<usize>) -> Vec<usize> {
    crate::order::sort_indices(&mut cpus, &|a, b| {
        topology.capacity_of(b).total_cmp(&topology.capacity_of(a))
    });
    cpus
}

/// The CPUs of a parallel decision split by capacity: `plans` reordered
/// longest work first (work = the summed `times` of a plan's siblings),
/// and their CPU counts re-chosen so that, with consecutive blocks of
/// `capacities` (the cores the fork runs on, fastest first) going to the
/// plans in that order, the largest work / block capacity is smallest
/// (greedily, one core at a time). Every plan keeps at least one core; the
/// total is `capacities.len()` where that is at least the plan count, else
/// the plans are returned reordered only.
pub fn fit_capacity(mut plans: Vec<PoolPlan>, times: &[f64], capacities: &[f64]) -> Vec<PoolPlan> {
    let work = |p: &PoolPlan| -> f64 {
        p.siblings
            .iter()
            .map(|&s| {
                times
                    .get(s)
                    .copied()
                    .filter(|t| t.is_finite() && *t > 0.0)
                    .unwrap_or(0.0)
            })
            .sum()
    };
    crate::order::sort_by(&mut plans, |a, b| work(b).total_cmp(&work(a)));
    let (k, n) = (plans.len(), capacities.len());
    if k == 0 || n < k {
        return plans;
    }
    let works: Vec<f64> = plans.iter().map(work).collect();
    let span = |sizes: &[usize]| -> f64 {
        let mut at = 0;
        let mut worst = 0.0f64;
        for (j, &size) in sizes.iter().enumerate() {
            let cap: f64 = capacities[at..at + size].iter().sum();
            at += size;
            worst = worst.max(works[j] / cap.max(f64::MIN_POSITIVE));
        }
        worst
    };
    let mut sizes = vec![1usize; k];
    for _ in k..n {
        let best = (0..k)
            .min_by(|&a, &b| {
                let with = |j: usize| {
                    let mut s = sizes.clone();
                    s[j] += 1;
                    span(&s)
                };
                with(a).total_cmp(&with(b)).then(a.cmp(&b))
            })
            .unwrap_or(0);
        sizes[best] += 1;
    }
    for (p, size) in plans.iter_mut().zip(sizes) {
        p.cpus = size;
    }
    plans
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;
