//! Placement on cores of different capacity: on a simulated 8-core
//! big.LITTLE phone (a sysfs tree), `performance` gives the longest sibling
//! the prime and big cores and `power` follows seed 002; with a capacity
//! table mapped onto this machine's CPUs, a session's pinned threads land
//! on the CPUs its fork report names (read back with `sched_getaffinity`),
//! and the outputs stay those of serial execution.

mod common;

use common::*;
use ramify::load::{ClusterPower, PowerTable, Topology};
use ramify::sched::placement::{fit_capacity, place};
use ramify::sched::{apportion, Decision};
use ramify::{Mode, Placement, SessionBuilder};
use std::path::Path;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// 4 little cores (capacity 325), 3 big (870) and a prime core (1024),
/// one frequency domain each.
fn phone_tree(root: &Path) {
    for (cpus, capacity, policy) in [(0..4, 325, 0), (4..7, 870, 4), (7..8, 1024, 7)] {
        for cpu in cpus.clone() {
            write(
                root,
                &format!("devices/system/cpu/cpu{cpu}/cpu_capacity"),
                &format!("{capacity}"),
            );
        }
        let p = format!("devices/system/cpu/cpufreq/policy{policy}");
        write(
            root,
            &format!("{p}/related_cpus"),
            &format!("{}-{}", cpus.start, cpus.end - 1),
        );
    }
}

fn phone() -> Topology {
    let root = temp_dir("placement-phone");
    phone_tree(&root);
    let t = Topology::read(&root, &(0..8).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&root);
    t
}

#[test]
fn performance_gives_the_longest_sibling_the_fastest_cores_of_a_phone() {
    let t = phone();
    let all: Vec<usize> = (0..8).collect();
    // Three siblings of 1, 6 and 2 ms on all 8 cores.
    let times = [1e-3, 6e-3, 2e-3];
    let plans = apportion(8.0, &times).unwrap();
    let cpus = place(Placement::Performance, &t, &[], &all, 8, &[]);
    assert_eq!(cpus[..4], [7, 4, 5, 6], "prime, then big, then little");
    let caps: Vec<f64> = cpus.iter().map(|&c| t.capacity_of(c)).collect();
    let fit = fit_capacity(plans, &times, &caps);
    assert_eq!(fit[0].siblings, vec![1], "the longest first: {fit:?}");
    assert_eq!(fit.iter().map(|p| p.cpus).sum::<usize>(), 8);
    // The longest sibling's block holds the prime core and big ones.
    assert!(fit[0].cpus >= 2, "{fit:?}");
    // Its work per unit of capacity is no worse than the others'.
    let mut at = 0;
    let spans: Vec<f64> = fit
        .iter()
        .map(|p| {
            let cap: f64 = caps[at..at + p.cpus].iter().sum();
            at += p.cpus;
            p.siblings.iter().map(|&s| times[s]).sum::<f64>() / cap
        })
        .collect();
    let worst = spans.iter().cloned().fold(0.0, f64::max);
    assert!(spans[0] <= worst + 1e-12, "{spans:?}");
}

#[test]
fn power_follows_seed_002_on_a_phone() {
    let t = phone();
    let all: Vec<usize> = (0..8).collect();
    // No energy model: each busy core counts 1, standby 0. Two threads:
    // the prime cluster has too few idle cores; big (3 idle) goes before
    // little (4 idle).
    assert_eq!(place(Placement::Power, &t, &[], &all, 2, &[]), vec![4, 5]);
    assert_eq!(
        place(Placement::Power, &t, &[], &all, 4, &[]),
        vec![0, 1, 2, 3]
    );
    // With a power table, equal idle counts are ordered by power: two big
    // cores busy leaves big with 1 idle core, like the prime cluster; the
    // prime core's 1100 loses to a big core's 600.
    let table = PowerTable {
        clusters: vec![
            ClusterPower {
                cpus: vec![7],
                active_power: 1100.0,
                standby_power: 60.0,
                capacity: None,
            },
            ClusterPower {
                cpus: vec![4, 5, 6],
                active_power: 600.0,
                standby_power: 40.0,
                capacity: None,
            },
            ClusterPower {
                cpus: vec![0, 1, 2, 3],
                active_power: 150.0,
                standby_power: 10.0,
                capacity: None,
            },
        ],
    };
    let t = t.with_table(&table).unwrap();
    let mut loads = vec![0.0; 8];
    loads[4] = 0.9;
    loads[5] = 0.9;
    assert_eq!(place(Placement::Power, &t, &loads, &all, 1, &[]), vec![6]);
}

/// The CPUs each thread of a pool may run on.
fn masks(pool: &ramify::sched::Pool) -> Vec<Vec<usize>> {
    let seen = std::sync::Mutex::new(Vec::new());
    pool.pool.broadcast(|ctx| {
        // SAFETY: cpu_set_t is plain bits; sched_getaffinity writes at most
        // the size it is given; CPU_ISSET reads below the set's capacity.
        let cpus = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
            (0..8 * size)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect::<Vec<_>>()
        };
        seen.lock().unwrap().push((ctx.index(), cpus));
    });
    let mut v = seen.into_inner().unwrap();
    v.sort();
    v.into_iter().map(|(_, c)| c).collect()
}

#[cfg(target_os = "linux")]
#[test]
fn pinned_threads_land_where_the_plan_says() {
    let allowed = ramify::available_cpus();
    assert!(allowed.len() >= 2, "the test needs 2 CPUs: {allowed:?}");
    let (little, big) = (allowed[0], allowed[1]);
    // The second CPU stands for a big core, the first for a little one.
    let table = PowerTable {
        clusters: vec![
            ClusterPower {
                cpus: vec![little],
                active_power: 150.0,
                standby_power: 10.0,
                capacity: Some(400.0),
            },
            ClusterPower {
                cpus: vec![big],
                active_power: 900.0,
                standby_power: 40.0,
                capacity: Some(1024.0),
            },
        ],
    };
    let build = |mode: Mode| {
        SessionBuilder::new()
            .cpu_set([little, big])
            .mode(mode)
            .fixed_load(0.0)
            .pin_threads(true)
            .placement(Placement::Performance)
            .power_table(table.clone())
            .build_from_bytes(&chains_model(1, 6))
            .unwrap()
    };
    let session = build(Mode::Parallel);
    assert!(!session.topology().is_uniform());
    let (out, report) = session.run_with_report([("x", chains_input())]).unwrap();
    let fork = &report.forks[0];
    let Decision::Parallel(plans) = &fork.decision else {
        panic!("parallel mode forks: {fork:?}");
    };
    // The longer chain (sibling 1) first, on the big core.
    assert_eq!(plans[0].siblings, vec![1], "{plans:?}");
    assert_eq!(fork.cpus, vec![big, little]);
    assert_eq!(fork.placement, Placement::Performance);
    let pools = session.scheduler().pools();
    let root = pools.get(0, 0, 2).unwrap();
    assert_eq!(masks(&root), vec![vec![big], vec![little]]);
    assert_eq!(masks(&pools.get(root.id, 0, 1).unwrap()), vec![vec![big]]);
    assert_eq!(
        masks(&pools.get(root.id, 1, 1).unwrap()),
        vec![vec![little]]
    );
    // Changed at run time: power keeps to the cluster seed 002 picks for
    // two threads (none has 2 idle cores: both, in the seed's order) and
    // the outputs never change.
    session.set_placement(Placement::Power);
    let (again, report) = session.run_with_report([("x", chains_input())]).unwrap();
    assert_eq!(report.forks[0].placement, Placement::Power);
    assert_eq!(report.forks[0].cpus.len(), 2);
    let (serial, _) = build(Mode::Serial)
        .run_with_report([("x", chains_input())])
        .unwrap();
    assert_eq!(out, serial);
    assert_eq!(again, serial);
}
