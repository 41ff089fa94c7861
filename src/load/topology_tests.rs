//! Tests of the topology reader on simulated sysfs trees.

use super::*;
use std::fs;
use std::path::PathBuf;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ramify-topo-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// An 8-core phone: 4 little (capacity 325, 1.8 GHz), 3 big (870, 2.4 GHz)
/// and 1 prime core (1024, 3.0 GHz), one frequency domain each, and the
/// energy model's top states.
fn phone(root: &Path, energy_model: bool) {
    let kinds = [
        (0..4, 325, 1_800_000, 0),
        (4..7, 870, 2_400_000, 4),
        (7..8, 1024, 3_000_000, 7),
    ];
    for (cpus, capacity, khz, policy) in kinds {
        let last = cpus.end - 1;
        for cpu in cpus.clone() {
            write(
                root,
                &format!("devices/system/cpu/cpu{cpu}/cpu_capacity"),
                &format!("{capacity}\n"),
            );
            write(
                root,
                &format!("devices/system/cpu/cpu{cpu}/topology/cluster_id"),
                "0\n",
            );
        }
        let p = format!("devices/system/cpu/cpufreq/policy{policy}");
        write(
            root,
            &format!("{p}/related_cpus"),
            &format!("{}-{last}\n", cpus.start),
        );
        write(root, &format!("{p}/cpuinfo_max_freq"), &format!("{khz}\n"));
        if energy_model {
            let d = format!("kernel/debug/energy_model/cpu{policy}");
            write(
                root,
                &format!("{d}/cpus"),
                &format!("{}-{last}\n", cpus.start),
            );
            let top = [150, 600, 1100][[0, 4, 7].iter().position(|&x| x == policy).unwrap()];
            write(root, &format!("{d}/ps:{}/power", khz / 2), "20\n");
            write(root, &format!("{d}/ps:{khz}/power"), &format!("{top}\n"));
        }
    }
}

#[test]
fn a_simulated_big_little_phone() {
    let dir = scratch("phone");
    phone(&dir, true);
    let t = Topology::read(&dir, &(0..8).collect::<Vec<_>>());
    assert_eq!(t.source, TopologySource::Sysfs);
    let cpus: Vec<Vec<usize>> = t.clusters.iter().map(|c| c.cpus.clone()).collect();
    assert_eq!(cpus, vec![vec![7], vec![4, 5, 6], vec![0, 1, 2, 3]]);
    assert_eq!(t.capacity_of(7), 1.0);
    assert!((t.capacity_of(5) - 870.0 / 1024.0).abs() < 1e-12);
    assert!((t.capacity_of(0) - 325.0 / 1024.0).abs() < 1e-12);
    assert_eq!(t.clusters[1].max_khz, Some(2_400_000));
    let power: Vec<Option<f64>> = t.clusters.iter().map(|c| c.active_power).collect();
    assert_eq!(power, vec![Some(1100.0), Some(600.0), Some(150.0)]);
    assert!(!t.is_uniform());
    assert_eq!(t.cpus(), vec![7, 4, 5, 6, 0, 1, 2, 3]);
    // Only the CPUs asked for.
    let big = Topology::read(&dir, &[4, 5]);
    assert_eq!(big.clusters.len(), 1);
    assert_eq!(big.clusters[0].cpus, vec![4, 5]);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn frequencies_stand_in_for_missing_capacities() {
    let dir = scratch("freq");
    phone(&dir, false);
    for cpu in 0..8 {
        let _ = fs::remove_file(dir.join(format!("devices/system/cpu/cpu{cpu}/cpu_capacity")));
    }
    let t = Topology::read(&dir, &(0..8).collect::<Vec<_>>());
    assert!((t.capacity_of(0) - 0.6).abs() < 1e-12, "1.8 of 3.0 GHz");
    assert!((t.capacity_of(4) - 0.8).abs() < 1e-12);
    assert_eq!(t.clusters[0].active_power, None);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn nothing_readable_is_uniform() {
    let dir = scratch("empty");
    let t = Topology::read(&dir, &[0, 1, 2]);
    assert_eq!(t, Topology::uniform(&[2, 1, 0]));
    assert!(t.is_uniform());
    assert_eq!(t.capacity_of(1), 1.0);
    assert_eq!(t.capacity_of(99), 1.0);
    // Hostile files: garbage, negative and huge values read as nothing.
    write(&dir, "devices/system/cpu/cpu0/cpu_capacity", "lots\n");
    write(&dir, "devices/system/cpu/cpu1/cpu_capacity", "-5\n");
    write(
        &dir,
        "devices/system/cpu/cpufreq/policy0/related_cpus",
        "0-99999999\n",
    );
    assert!(Topology::read(&dir, &[0, 1]).is_uniform());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn an_application_table_maps_clusters_onto_real_cpus() {
    let table = PowerTable {
        clusters: vec![
            ClusterPower {
                cpus: vec![1],
                active_power: 150.0,
                standby_power: 10.0,
                capacity: Some(300.0),
            },
            ClusterPower {
                cpus: vec![0],
                active_power: 900.0,
                standby_power: 40.0,
                capacity: Some(1200.0),
            },
        ],
    };
    let t = Topology::uniform(&[0, 1]).with_table(&table).unwrap();
    assert_eq!(t.source, TopologySource::Table);
    assert_eq!(t.clusters[0].cpus, vec![0]);
    assert_eq!(t.capacity_of(0), 1.0);
    assert_eq!(t.capacity_of(1), 0.25);
    assert_eq!(t.clusters[1].standby_power, Some(10.0));
    // Power without capacities keeps sysfs's capacities.
    let power_only = PowerTable {
        clusters: vec![ClusterPower {
            cpus: vec![0, 1],
            active_power: 1.0,
            standby_power: 0.0,
            capacity: None,
        }],
    };
    let t = Topology::uniform(&[0, 1]).with_table(&power_only).unwrap();
    assert!(t.is_uniform());
    assert_eq!(t.clusters[0].active_power, Some(1.0));
}

#[test]
fn bad_tables_are_refused_by_entry() {
    let entry = |cpus: Vec<usize>, active: f64, capacity: Option<f64>| ClusterPower {
        cpus,
        active_power: active,
        standby_power: 1.0,
        capacity,
    };
    let cases = [
        (vec![entry(vec![], 1.0, None)], "names no CPU"),
        (
            vec![entry(vec![5], 1.0, None)],
            "not one of the device's CPUs",
        ),
        (vec![entry(vec![0, 0], 1.0, None)], "named twice"),
        (
            vec![entry(vec![0], 1.0, None), entry(vec![0], 1.0, None)],
            "named twice",
        ),
        (vec![entry(vec![0], f64::NAN, None)], "active power"),
        (vec![entry(vec![0], -1.0, None)], "active power"),
        (vec![entry(vec![0], 1.0, Some(0.0))], "capacity"),
    ];
    for (clusters, text) in cases {
        let err = Topology::uniform(&[0, 1])
            .with_table(&PowerTable { clusters })
            .unwrap_err();
        assert!(err.contains(text), "{err}");
    }
}
