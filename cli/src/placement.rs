//! Placement options shared by `run`, `bench` and `inspect`: the policy
//! (`--placement`), an application's power table (`--power-table`, JSON)
//! and a simulated device (`--sysfs-root`); and the topology printout.

use anyhow::{bail, Context, Result};
use clap::Args;
use ramify::load::{ClusterPower, PowerTable, Topology};
use ramify::{Placement, SessionBuilder};
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Args, Clone, Debug)]
pub struct PlacementArgs {
    /// Which cores threads run on: performance (fastest first), power
    /// (seed 002: the cluster that fits with the fewest idle cores, then
    /// the least power), or auto (power on low battery or heat).
    #[arg(long, default_value = "auto")]
    pub placement: Placement,
    /// Per-cluster power as JSON: {"clusters": [{"cpus": [0, 1],
    /// "active_power": 150, "standby_power": 10, "capacity": 325}, ...]}
    /// (capacity optional; power in any one unit).
    #[arg(long, value_name = "FILE", value_parser = read_power_table)]
    pub power_table: Option<PowerTable>,
    /// Read the CPU topology from this sysfs root (a simulated device)
    /// instead of /sys.
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,
}

impl PlacementArgs {
    /// `b` with these options.
    pub fn apply(&self, mut b: SessionBuilder) -> SessionBuilder {
        b = b.placement(self.placement);
        if let Some(t) = &self.power_table {
            b = b.power_table(t.clone());
        }
        if let Some(root) = &self.sysfs_root {
            b = b.sysfs_root(root);
        }
        b
    }
}

fn read_power_table(path: &str) -> Result<PowerTable> {
    let text =
        std::fs::read_to_string(Path::new(path)).with_context(|| format!("reading {path}"))?;
    let doc: Value = serde_json::from_str(&text).with_context(|| format!("parsing {path}"))?;
    parse_power_table(&doc).with_context(|| format!("in {path}"))
}

/// The power table in a JSON document.
pub fn parse_power_table(doc: &Value) -> Result<PowerTable> {
    let Some(list) = doc.get("clusters").and_then(Value::as_array) else {
        bail!("expected an object with a \"clusters\" array");
    };
    let mut clusters = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let number = |key: &str| c.get(key).and_then(Value::as_f64);
        let Some(cpus) = c.get("cpus").and_then(Value::as_array) else {
            bail!("cluster {i}: expected a \"cpus\" array");
        };
        let cpus = cpus
            .iter()
            .map(|v| v.as_u64().and_then(|n| usize::try_from(n).ok()))
            .collect::<Option<Vec<usize>>>()
            .with_context(|| format!("cluster {i}: CPUs must be non-negative integers"))?;
        let (Some(active_power), Some(standby_power)) =
            (number("active_power"), number("standby_power"))
        else {
            bail!("cluster {i}: expected numbers \"active_power\" and \"standby_power\"");
        };
        let capacity = match c.get("capacity") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .with_context(|| format!("cluster {i}: \"capacity\" must be a number"))?,
            ),
        };
        clusters.push(ClusterPower {
            cpus,
            active_power,
            standby_power,
            capacity,
        });
    }
    Ok(PowerTable { clusters })
}

/// The clusters, one line each: CPUs, capacity, top frequency and power.
pub fn describe_topology(t: &Topology, placement: Placement) -> String {
    let mut out = format!(
        "topology ({}): {} cluster(s), placement {placement}\n",
        t.source,
        t.clusters.len()
    );
    for c in &t.clusters {
        let khz = c
            .max_khz
            .map_or(String::new(), |k| format!(", {:.2} GHz", k as f64 / 1e6));
        let power = match (c.active_power, c.standby_power) {
            (Some(a), Some(s)) => format!(", power {a} per busy core, {s} standby"),
            (Some(a), None) => format!(", power {a} per busy core"),
            _ => String::new(),
        };
        out += &format!(
            "  CPUs {:?}: capacity {:.2}{khz}{power}\n",
            c.cpus, c.capacity
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_tables_parse_and_bad_ones_say_where() {
        let doc = serde_json::json!({"clusters": [
            {"cpus": [0, 1], "active_power": 150, "standby_power": 10, "capacity": 325},
            {"cpus": [2], "active_power": 900.5, "standby_power": 40}
        ]});
        let t = parse_power_table(&doc).unwrap();
        assert_eq!(t.clusters.len(), 2);
        assert_eq!(t.clusters[0].cpus, vec![0, 1]);
        assert_eq!(t.clusters[0].capacity, Some(325.0));
        assert_eq!(t.clusters[1].active_power, 900.5);
        assert_eq!(t.clusters[1].capacity, None);
        for (bad, text) in [
            (serde_json::json!([]), "\"clusters\" array"),
            (
                serde_json::json!({"clusters": [{"active_power": 1, "standby_power": 1}]}),
                "cluster 0: expected a \"cpus\"",
            ),
            (
                serde_json::json!({"clusters": [{"cpus": [-1], "active_power": 1, "standby_power": 1}]}),
                "non-negative",
            ),
            (
                serde_json::json!({"clusters": [{"cpus": [0], "active_power": "x", "standby_power": 1}]}),
                "active_power",
            ),
            (
                serde_json::json!({"clusters": [{"cpus": [0], "active_power": 1, "standby_power": 1, "capacity": "big"}]}),
                "capacity",
            ),
        ] {
            let err = format!("{:#}", parse_power_table(&bad).unwrap_err());
            assert!(err.contains(text), "{err}");
        }
    }
}
