//! The device's CPU topology: clusters of cores that share a frequency
//! domain, each core's capacity relative to the fastest (big.LITTLE phones
//! have two or three kinds of core), and the clusters' power where it is
//! known. Read from sysfs (`cpu*/cpu_capacity`, `cpufreq/policy*/related_cpus`
//! and `cpuinfo_max_freq`, `topology/cluster_id`, the kernel's energy model
//! under debugfs), or from a [`PowerTable`] the application supplies.
//! Devices without the files (iOS, some VMs) get uniform cores.

use super::sysfs::{entries, index_after, parse_cpu_list, read_number, read_trimmed, MAX_CPUS};
use std::collections::BTreeMap;
use std::path::Path;

/// Cores of one kind that share a frequency domain.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    /// The CPUs, ascending.
    pub cpus: Vec<usize>,
    /// Each core's capacity relative to the device's fastest core (1.0).
    pub capacity: f64,
    /// The top frequency in kHz, where known.
    pub max_khz: Option<u64>,
    /// Power of one busy core at the top frequency (mW, or any unit the
    /// clusters share), where known.
    pub active_power: Option<f64>,
    /// Power of the whole cluster while every core is idle (the same unit).
    pub standby_power: Option<f64>,
}

impl Cluster {
    /// A busy core's power, 1.0 where unknown (so that, unknown, power
    /// counts cores).
    pub fn core_power(&self) -> f64 {
        self.active_power.unwrap_or(1.0)
    }
}

/// Where the topology came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologySource {
    /// Read from sysfs.
    Sysfs,
    /// Sysfs, with clusters, capacities or power from the application's table.
    Table,
    /// Nothing readable: every core alike.
    Uniform,
}

impl std::fmt::Display for TopologySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TopologySource::Sysfs => "sysfs",
            TopologySource::Table => "table",
            TopologySource::Uniform => "uniform",
        })
    }
}

/// The clusters of the device, fastest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// The clusters, by capacity descending, then first CPU.
    pub clusters: Vec<Cluster>,
    /// Where it came from.
    pub source: TopologySource,
}

/// One cluster's entry in an application's power table.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterPower {
    /// The cluster's CPUs.
    pub cpus: Vec<usize>,
    /// Power of one busy core at its top frequency.
    pub active_power: f64,
    /// Power of the cluster with every core idle.
    pub standby_power: f64,
    /// Each core's capacity (any scale the table shares; normalised to the
    /// fastest); `None` keeps what sysfs says.
    pub capacity: Option<f64>,
}

/// Per-cluster power (and optionally capacity) that an application supplies
/// where the kernel's energy model is not readable.
///
/// ```
/// use ramify::load::topology::{ClusterPower, PowerTable, Topology};
/// let table = PowerTable {
///     clusters: vec![
///         ClusterPower { cpus: vec![0], active_power: 900.0, standby_power: 40.0, capacity: Some(1024.0) },
///         ClusterPower { cpus: vec![1], active_power: 150.0, standby_power: 10.0, capacity: Some(400.0) },
///     ],
/// };
/// let topology = Topology::uniform(&[0, 1]).with_table(&table)?;
/// assert_eq!(topology.clusters[0].cpus, vec![0]);
/// assert!((topology.capacity_of(1) - 400.0 / 1024.0).abs() < 1e-12);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PowerTable {
    /// The clusters; CPUs not named keep what sysfs says.
    pub clusters: Vec<ClusterPower>,
}

/// What sysfs says about one CPU.
#[derive(Debug, Clone, Default)]
struct CpuFacts {
    capacity: Option<f64>,
    max_khz: Option<u64>,
    domain: Option<usize>,
    cluster_id: Option<i64>,
}

impl Topology {
    /// Every CPU of `cpus` alike, in one cluster.
    pub fn uniform(cpus: &[usize]) -> Topology {
        let mut cpus = cpus.to_vec();
        cpus.sort_unstable();
        cpus.dedup();
        Topology {
            clusters: vec![Cluster {
                cpus,
                capacity: 1.0,
                max_khz: None,
                active_power: None,
                standby_power: None,
            }],
            source: TopologySource::Uniform,
        }
    }

    /// The topology of `cpus` as sysfs under `root` (normally `/sys`)
    /// describes it; uniform where it describes nothing.
    pub fn read(root: &Path, cpus: &[usize]) -> Topology {
        let base = root.join("devices/system/cpu");
        let domains = frequency_domains(&base);
        let mut facts: BTreeMap<usize, CpuFacts> = BTreeMap::new();
        for &cpu in cpus.iter().filter(|&&c| c < MAX_CPUS) {
            let dir = base.join(format!("cpu{cpu}"));
            let domain = domains.iter().position(|(cpus, _)| cpus.contains(&cpu));
            let max_khz = read_number(&dir.join("cpufreq/cpuinfo_max_freq"))
                .or_else(|| domain.and_then(|d| domains[d].1))
                .filter(|&k| k > 0.0)
                .map(|k| k as u64);
            facts.insert(
                cpu,
                CpuFacts {
                    capacity: read_number(&dir.join("cpu_capacity")).filter(|&c| c > 0.0),
                    max_khz,
                    domain,
                    cluster_id: read_trimmed(&dir.join("topology/cluster_id"))
                        .and_then(|s| s.parse().ok()),
                },
            );
        }
        let described = facts
            .values()
            .any(|f| f.capacity.is_some() || f.max_khz.is_some() || f.domain.is_some());
        if !described {
            return Topology::uniform(cpus);
        }
        let mut topology = Topology {
            clusters: group(&facts),
            source: TopologySource::Sysfs,
        };
        topology.apply_energy_model(&root.join("kernel/debug/energy_model"));
        topology.sort();
        topology
    }

    /// The topology of `cpus` on this device (sysfs under
    /// `$RAMIFY_SYSFS_ROOT` or `/sys`).
    pub fn detect(cpus: &[usize]) -> Topology {
        Topology::read(&super::sysfs::sysfs_root(), cpus)
    }

    /// Whether every core has the same capacity.
    pub fn is_uniform(&self) -> bool {
        self.clusters
            .windows(2)
            .all(|w| (w[0].capacity - w[1].capacity).abs() < 1e-9)
    }

    /// The capacity of `cpu` (1.0 for a CPU the topology does not name).
    pub fn capacity_of(&self, cpu: usize) -> f64 {
        self.cluster_of(cpu)
            .map_or(1.0, |c| self.clusters[c].capacity)
    }

    /// The index of the cluster holding `cpu`.
    pub fn cluster_of(&self, cpu: usize) -> Option<usize> {
        self.clusters.iter().position(|c| c.cpus.contains(&cpu))
    }

    /// Every CPU, in cluster order (fastest first).
    pub fn cpus(&self) -> Vec<usize> {
        self.clusters.iter().flat_map(|c| c.cpus.clone()).collect()
    }

    /// The topology with `table` applied: each entry becomes a cluster of
    /// its CPUs (taken out of the clusters sysfs gave them), with its power
    /// and, where given, its capacity; capacities are then normalised to the
    /// fastest core. Errors name the entry at fault.
    pub fn with_table(mut self, table: &PowerTable) -> Result<Topology, String> {
        let known = self.cpus();
        let mut named = Vec::new();
        for (i, entry) in table.clusters.iter().enumerate() {
            check_entry(i, entry, &known, &named)?;
            named.extend(entry.cpus.iter().copied());
        }
        let table_scale = table
            .clusters
            .iter()
            .filter_map(|e| e.capacity)
            .fold(0.0f64, f64::max);
        let mut added = Vec::new();
        for entry in &table.clusters {
            let sysfs_capacity = entry
                .cpus
                .iter()
                .map(|&c| self.capacity_of(c))
                .fold(0.0f64, f64::max);
            let mut cpus = entry.cpus.clone();
            cpus.sort_unstable();
            added.push(Cluster {
                max_khz: cpus
                    .first()
                    .and_then(|&c| self.cluster_of(c))
                    .and_then(|k| self.clusters[k].max_khz),
                cpus,
                // A table capacity is on the table's own scale; mixing it
                // with sysfs's happens only after the fastest is found.
                capacity: entry.capacity.map_or(sysfs_capacity, |c| c / table_scale),
                active_power: Some(entry.active_power),
                standby_power: Some(entry.standby_power),
            });
        }
        for c in &mut self.clusters {
            c.cpus.retain(|cpu| !named.contains(cpu));
        }
        self.clusters.retain(|c| !c.cpus.is_empty());
        self.clusters.extend(added);
        let fastest = self.clusters.iter().map(|c| c.capacity).fold(0.0, f64::max);
        if fastest > 0.0 {
            for c in &mut self.clusters {
                c.capacity /= fastest;
            }
        }
        if !table.clusters.is_empty() {
            self.source = TopologySource::Table;
        }
        self.sort();
        Ok(self)
    }

    fn sort(&mut self) {
        crate::order::sort_by(&mut self.clusters, |a, b| {
            b.capacity
                .total_cmp(&a.capacity)
                .then(a.cpus.first().cmp(&b.cpus.first()))
        });
    }

    /// Reads the kernel's energy model (debugfs, `<domain>/cpus` and
    /// `<domain>/ps:<kHz>/power`): each cluster's busy-core power at its top
    /// performance state. Usually readable only by root; absent, nothing
    /// changes.
    fn apply_energy_model(&mut self, dir: &Path) {
        for domain in entries(dir, "") {
            let Some(cpus) = read_trimmed(&domain.join("cpus")).and_then(|s| parse_cpu_list(&s))
            else {
                continue;
            };
            let top = entries(&domain, "ps:")
                .into_iter()
                .filter_map(|ps| {
                    let khz: u64 = ps
                        .file_name()?
                        .to_str()?
                        .strip_prefix("ps:")?
                        .parse()
                        .ok()?;
                    Some((khz, read_number(&ps.join("power"))?))
                })
                .max_by_key(|&(khz, _)| khz);
            if let Some((_, power)) = top.filter(|&(_, p)| p >= 0.0) {
                for c in &mut self.clusters {
                    if c.cpus.iter().any(|cpu| cpus.contains(cpu)) {
                        c.active_power = Some(power);
                    }
                }
            }
        }
    }
}

/// The frequency domains (`cpufreq/policy*`): each one's CPUs and top
/// frequency.
fn frequency_domains(base: &Path) -> Vec<(Vec<usize>, Option<f64>)> {
    entries(&base.join("cpufreq"), "policy")
        .into_iter()
        .filter(|p| index_after(p, "policy").is_some())
        .filter_map(|p| {
            let cpus = read_trimmed(&p.join("related_cpus"))
                .or_else(|| read_trimmed(&p.join("affected_cpus")))
                .and_then(|s| parse_cpu_list(&s))?;
            Some((cpus, read_number(&p.join("cpuinfo_max_freq"))))
        })
        .collect()
}

/// Groups CPUs into clusters: by frequency domain where there are domains,
/// else by `cluster_id`, and within either by capacity; capacity comes from
/// `cpu_capacity`, else from the top frequency, relative to the fastest.
fn group(facts: &BTreeMap<usize, CpuFacts>) -> Vec<Cluster> {
    let all_capacity = facts.values().all(|f| f.capacity.is_some());
    let all_khz = facts.values().all(|f| f.max_khz.is_some());
    let raw = |f: &CpuFacts| {
        if all_capacity {
            f.capacity.unwrap_or(1.0)
        } else if all_khz {
            f.max_khz.unwrap_or(1) as f64
        } else {
            1.0
        }
    };
    let fastest = facts
        .values()
        .map(raw)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let mut by_key: BTreeMap<(i64, u64), Cluster> = BTreeMap::new();
    for (&cpu, f) in facts {
        let capacity = raw(f) / fastest;
        let place = match (f.domain, f.cluster_id) {
            (Some(d), _) => d as i64,
            (None, Some(id)) => 1_000_000 + id,
            (None, None) => -1,
        };
        let key = (place, (capacity * 1e6).round() as u64);
        let c = by_key.entry(key).or_insert_with(|| Cluster {
            cpus: Vec::new(),
            capacity,
            max_khz: f.max_khz,
            active_power: None,
            standby_power: None,
        });
        c.cpus.push(cpu);
    }
    by_key.into_values().collect()
}

/// Checks one table entry: CPUs the topology knows, named once; finite,
/// non-negative power; a positive capacity.
fn check_entry(i: usize, e: &ClusterPower, known: &[usize], named: &[usize]) -> Result<(), String> {
    if e.cpus.is_empty() {
        return Err(format!("power table cluster {i} names no CPU"));
    }
    for (k, cpu) in e.cpus.iter().enumerate() {
        if !known.contains(cpu) {
            return Err(format!(
                "power table cluster {i}: CPU {cpu} is not one of the device's CPUs {known:?}"
            ));
        }
        if named.contains(cpu) || e.cpus[..k].contains(cpu) {
            return Err(format!("power table cluster {i}: CPU {cpu} is named twice"));
        }
    }
    for (what, v) in [
        ("active power", e.active_power),
        ("standby power", e.standby_power),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!(
                "power table cluster {i}: {what} {v} must be a finite number >= 0"
            ));
        }
    }
    if let Some(c) = e.capacity {
        if !(c.is_finite() && c > 0.0) {
            return Err(format!(
                "power table cluster {i}: capacity {c} must be a finite number > 0"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "topology_tests.rs"]
mod tests;
