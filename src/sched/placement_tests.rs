//! Tests of the placement policies: seed 002's ordering with the seed's
//! own numbers, and the policies on a simulated 8-core phone.

use super::*;
use crate::load::topology::{Cluster, TopologySource};

fn node(idle: usize, idle_power: f64) -> PowerNode {
    PowerNode {
        idle,
        idle_power,
        wholly_idle: false,
        standby: 0.0,
    }
}

#[test]
fn seed_002_groups_by_idle_count_ascending() {
    // The seed's nodes w1..w7 with 1, 5, 5, 5, 5, 8, 8 idle cards form
    // groups y1 = {w1}, y2 = {w2..w5}, y3 = {w6, w7}, in that order.
    let nodes: Vec<PowerNode> = [1, 5, 5, 5, 5, 8, 8]
        .iter()
        .map(|&i| node(i, 10.0))
        .collect();
    assert_eq!(power_order(&nodes, 1), vec![0, 1, 2, 3, 4, 5, 6]);
    // A task needing 3 cards leaves out nodes with fewer than 3 idle.
    assert_eq!(power_order(&nodes, 3), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(power_order(&nodes, 9), Vec::<usize>::new());
}

#[test]
fn seed_002_orders_a_group_by_summed_power() {
    // Node a's idle cards draw 2, 7, 9 and 12: its second power value is 30.
    let a: f64 = [2.0, 7.0, 9.0, 12.0].iter().sum();
    assert_eq!(a, 30.0);
    // A group a, b, c, d with second power values 18, 20, 5, 7 is ordered
    // c, d, a, b.
    let nodes: Vec<PowerNode> = [18.0, 20.0, 5.0, 7.0].iter().map(|&p| node(4, p)).collect();
    assert_eq!(power_order(&nodes, 1), vec![2, 3, 0, 1]);
}

#[test]
fn seed_002_adds_standby_power_to_a_wholly_idle_node() {
    // Node x: second power value 36, CPU standby power 25: third value 61.
    let x = PowerNode {
        idle: 4,
        idle_power: 36.0,
        wholly_idle: true,
        standby: 25.0,
    };
    assert_eq!(x.power(), 61.0);
    // Nodes 1..4 with second power values 15, 20, 30, 50, node 3 wholly
    // idle (61 with its standby): the order becomes 1, 2, 4, 3.
    let mut nodes: Vec<PowerNode> = [15.0, 20.0, 30.0, 50.0]
        .iter()
        .map(|&p| node(4, p))
        .collect();
    nodes[2].wholly_idle = true;
    nodes[2].standby = 31.0;
    assert_eq!(power_order(&nodes, 1), vec![0, 1, 3, 2]);
}

#[test]
fn seed_002_example_that_contradicts_its_rule() {
    // The seed's first example: idle cards a..e = 8, 6, 4, 9, 3 and power
    // sums 14, 14, 14, 10, 8, for which it gives d, a, e, c, b. Its own rule
    // (group by idle count ascending, then power) gives e, c, b, a, d: every
    // group holds one node, so power cannot reorder them. We follow the
    // rule, as the seed's later embodiment states it.
    let nodes: Vec<PowerNode> = [(8, 14.0), (6, 14.0), (4, 14.0), (9, 10.0), (3, 8.0)]
        .iter()
        .map(|&(i, p)| node(i, p))
        .collect();
    assert_eq!(power_order(&nodes, 1), vec![4, 2, 1, 0, 3]);
}

/// The simulated phone: prime core 7, big 4-6, little 0-3, with power.
fn phone() -> Topology {
    let cluster = |cpus: Vec<usize>, capacity: f64, active: f64, standby: f64| Cluster {
        cpus,
        capacity,
        max_khz: None,
        active_power: Some(active),
        standby_power: Some(standby),
    };
    Topology {
        clusters: vec![
            cluster(vec![7], 1.0, 1100.0, 60.0),
            cluster(vec![4, 5, 6], 0.85, 600.0, 40.0),
            cluster(vec![0, 1, 2, 3], 0.32, 150.0, 10.0),
        ],
        source: TopologySource::Sysfs,
    }
}

const ALL: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

#[test]
fn performance_takes_the_fastest_cores_first() {
    let t = phone();
    assert_eq!(
        place(Placement::Performance, &t, &[], &ALL, 1, &[]),
        vec![7]
    );
    assert_eq!(
        place(Placement::Performance, &t, &[], &ALL, 4, &[]),
        vec![7, 4, 5, 6]
    );
    // A loaded big core goes after its idle peers.
    let mut loads = vec![0.0; 8];
    loads[4] = 0.9;
    assert_eq!(
        place(Placement::Performance, &t, &loads, &ALL, 3, &[]),
        vec![7, 5, 6]
    );
    // Six threads: every fast core, then the least-loaded little ones.
    loads[1] = 0.6;
    assert_eq!(
        place(Placement::Performance, &t, &loads, &ALL, 6, &[]),
        vec![7, 5, 6, 4, 0, 2]
    );
    // Only the allowed CPUs.
    assert_eq!(
        place(Placement::Performance, &t, &[], &[0, 5], 2, &[]),
        vec![5, 0]
    );
}

#[test]
fn power_follows_seed_002_on_the_phone() {
    let t = phone();
    // All idle, 2 threads: the prime core (1 idle) cannot take them; big
    // (3 idle) comes before little (4 idle) by the idle-count rule.
    assert_eq!(place(Placement::Power, &t, &[], &ALL, 2, &[]), vec![4, 5]);
    // 4 threads: only the little cluster has 4 idle cores.
    assert_eq!(
        place(Placement::Power, &t, &[], &ALL, 4, &[]),
        vec![0, 1, 2, 3]
    );
    // 1 thread: every cluster fits; the prime core has the fewest idle.
    assert_eq!(place(Placement::Power, &t, &[], &ALL, 1, &[]), vec![7]);
    // Prime busy, 1 thread: big has 3 idle, little 4: big, and there the
    // idle core of least load.
    let mut loads = vec![0.0; 8];
    loads[7] = 0.9;
    loads[4] = 0.2;
    assert_eq!(place(Placement::Power, &t, &loads, &ALL, 1, &[]), vec![5]);
    // Two little cores busy: little has 2 idle, big 3: 2 threads go to the
    // little cluster (fewest idle cores first).
    let mut loads = vec![0.0; 8];
    loads[0] = 0.8;
    loads[1] = 0.8;
    assert_eq!(
        place(Placement::Power, &t, &loads, &ALL, 2, &[]),
        vec![2, 3]
    );
    // Equal idle counts: the lower power wins. Big with one busy core has 2
    // idle (1200), little with two busy 2 idle (300): little.
    loads[4] = 0.9;
    assert_eq!(
        place(Placement::Power, &t, &loads, &ALL, 2, &[]),
        vec![2, 3]
    );
    // 6 threads fit no cluster: clusters in the seed's order, then busy
    // cores; the result is fastest first.
    let placed = place(Placement::Power, &t, &[], &ALL, 6, &[]);
    assert_eq!(placed.len(), 6);
    assert_eq!(placed[0], 7, "{placed:?}");
}

#[test]
fn auto_turns_to_power_on_low_battery_or_heat() {
    assert_eq!(Placement::Auto.resolve(None, None), Placement::Performance);
    assert_eq!(
        Placement::Auto.resolve(Some(0.8), Some(0.3)),
        Placement::Performance
    );
    assert_eq!(Placement::Auto.resolve(Some(0.15), None), Placement::Power);
    assert_eq!(Placement::Auto.resolve(None, Some(0.75)), Placement::Power);
    assert_eq!(
        Placement::Performance.resolve(Some(0.05), Some(1.0)),
        Placement::Performance
    );
    assert_eq!(Placement::Power.resolve(None, None), Placement::Power);
    for p in [Placement::Performance, Placement::Power, Placement::Auto] {
        assert_eq!(p.to_string().parse::<Placement>().unwrap(), p);
        assert_eq!(Placement::from_code(p.code()), p);
    }
    assert!("fast".parse::<Placement>().is_err());
}

#[test]
fn the_longest_sibling_gets_the_fastest_cores() {
    let plans = vec![
        PoolPlan {
            cpus: 2,
            siblings: vec![0],
        },
        PoolPlan {
            cpus: 2,
            siblings: vec![1],
        },
    ];
    // Sibling 1 is 3× longer. On 1 prime + 3 little cores (1, .32, .32, .32)
    // it goes first, on the prime core: 3/1 against 1/0.96.
    let caps = [1.0, 0.32, 0.32, 0.32];
    let fit = fit_capacity(plans.clone(), &[1.0, 3.0], &caps);
    assert_eq!(fit[0].siblings, vec![1]);
    assert_eq!(fit.iter().map(|p| p.cpus).collect::<Vec<_>>(), vec![2, 2]);
    // Equal cores split as the CPU formula does.
    let fit = fit_capacity(plans.clone(), &[1.0, 3.0], &[1.0; 4]);
    assert_eq!(fit.iter().map(|p| p.cpus).collect::<Vec<_>>(), vec![3, 1]);
    // Fewer cores than plans: reordered only.
    let fit = fit_capacity(plans, &[1.0, 3.0], &[1.0]);
    assert_eq!(fit[0].siblings, vec![1]);
    assert_eq!(fit.iter().map(|p| p.cpus).collect::<Vec<_>>(), vec![2, 2]);
}
