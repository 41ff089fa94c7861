//! Unit tests: the seed's worked example, invariants over generated DAGs,
//! termination, stage order, balance, the initial split, validation, critical
//! marking and the construction from a graph.

use super::refine::Adjacency;
use super::*;
use crate::error::Error;

/// A task graph from seconds and `(from, to, critical)` edges (bytes 1 each).
fn graph(seconds: &[f64], edges: &[(usize, usize, bool)]) -> TaskGraph {
    TaskGraph {
        tasks: seconds
            .iter()
            .enumerate()
            .map(|(i, &s)| Task {
                name: format!("t{i}"),
                seconds: s,
                flops: 10 * i as u64,
            })
            .collect(),
        edges: edges
            .iter()
            .map(|&(from, to, critical)| TaskEdge {
                from,
                to,
                values: vec![format!("v{from}_{to}")],
                bytes: 1,
                critical,
            })
            .collect(),
    }
}

/// Options for hand-made, not forward-only examples.
fn unordered() -> PartitionOptions {
    PartitionOptions {
        parts: 3,
        threshold: 0,
        balance: f64::INFINITY,
        ordered: false,
        max_iterations: 1000,
    }
}

// ---- The seed's worked example (paragraphs 50-84, Figs. 3-5) ----

/// Seed task number (1..=14) to index.
fn s(n: usize) -> usize {
    n - 1
}

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

/// Fig. 3. From the text: critical 1-2, 1-3, 2-4, 3-6, 7-9, 9-10 and the
/// non-critical 3-9. Added here to connect each part (the text does not give
/// them): in a, 3-4 (non-critical) and 4-7 (critical); in b, 6-8 and 8-9
/// (critical) and 9-11 (non-critical); in c, 1-10, 5-10, 12-13, 13-14
/// (non-critical) and 10-12 (critical). The critical ones give tasks 6, 7, 9
/// and 10 a first gain of 1, so that, as in paragraphs 69-75, only tasks 1
/// and 3 are candidates; task 1 joins c through 10 (already a boundary task),
/// so that moving it creates no new boundary task, as paragraph 83 says.
fn seed_example() -> (TaskGraph, Partition) {
    let edges = [
        (1, 2, true),
        (1, 3, true),
        (2, 4, true),
        (3, 6, true),
        (7, 9, true),
        (9, 10, true),
        (3, 9, false),
        (3, 4, false),
        (4, 7, true),
        (6, 8, true),
        (8, 9, true),
        (9, 11, false),
        (1, 10, false),
        (5, 10, false),
        (10, 12, true),
        (12, 13, false),
        (13, 14, false),
    ];
    let edges: Vec<_> = edges.iter().map(|&(f, t, c)| (s(f), s(t), c)).collect();
    let g = graph(&[1.0; 14], &edges);
    let mut assignment = vec![C; 14];
    for n in [2, 3, 4, 7] {
        assignment[s(n)] = A;
    }
    for n in [6, 8, 9, 11] {
        assignment[s(n)] = B;
    }
    (
        g,
        Partition {
            parts: 3,
            assignment,
        },
    )
}

fn seed_numbers(tasks: &[usize]) -> Vec<usize> {
    tasks.iter().map(|t| t + 1).collect()
}

#[test]
fn seed_example_fig3_cut_and_boundary() {
    let (g, p) = seed_example();
    assert_eq!(
        p.cut(&g),
        CutStats {
            edges: 6,
            bytes: 6,
            critical: 5
        }
    );
    assert_eq!(seed_numbers(&p.boundary(&g)), vec![1, 2, 3, 6, 7, 9, 10]);
}

#[test]
fn seed_example_gains() {
    let (g, p) = seed_example();
    let adj = Adjacency::new(&g);
    let gains = |n: usize| adj.gains(&p.assignment, 3, s(n));
    // Paragraph 56: task 1 (in c): first 0, second 2 toward a, 0 toward b.
    let (first, second) = gains(1);
    assert_eq!(first, 0);
    assert_eq!((second[A], second[B]), (2, 0));
    // The text is not self-consistent here. Paragraph 68 gives task 3 a
    // difference of -1 toward c, yet 1-3 is critical and task 3 has no
    // critical edge inside a (Fig. 5's count of 4 needs exactly that), so its
    // difference is +1 toward c as well as toward b (paragraph 69 lists it as
    // a candidate toward c too). Paragraph 68 also gives task 2 a difference
    // of 0 toward b, but task 2 has no edge to b: with 2-4 critical inside a
    // it is 0 - 1 = -1 (and 1 - 1 = 0 toward c). The self-consistent values:
    let (first, second) = gains(3);
    assert_eq!(first, 0);
    assert_eq!((second[B], second[C]), (1, 1));
    let (first, second) = gains(2);
    assert_eq!((first, second[B], second[C]), (1, 0, 1));
    // Paragraphs 72-74: no candidate in b, none in c but task 1.
    for n in [2, 6, 7, 9, 10] {
        let (first, second) = gains(n);
        let part = p.assignment[s(n)];
        for (q, &sg) in second.iter().enumerate() {
            if q != part {
                assert!(sg <= first, "task {n} toward part {q}");
            }
        }
    }
}

#[test]
fn seed_example_refinement_moves_task_1_first() {
    let (g, p) = seed_example();
    let r = refine(&g, p.clone(), &unordered());
    assert_eq!(r.initial, p);
    assert_eq!(r.history.len(), 2);
    assert_eq!(r.history[0].cut.critical, 5);
    assert!(r.history[0].moves.is_empty());
    assert_eq!(r.history[0].boundary, 7);
    // Flow order: task 1 moves to a; then task 3 (first gain now 1 through
    // 1-3, second gains 1 toward b and 0 toward c) is no longer a candidate.
    assert_eq!(
        r.history[1].moves,
        vec![Move {
            task: s(1),
            from: C,
            to: A,
            first_gain: 0,
            second_gain: 2
        }]
    );
    // Fig. 4: critical cut edges 7-9, 3-6, 9-10.
    assert_eq!(r.history[1].cut.critical, 3);
    assert_eq!(r.best_iteration, 1);
    assert_eq!(r.best.cut(&g).critical, 3);
    assert_eq!(r.best.assignment[s(1)], A);
    assert_eq!(r.best.assignment[s(3)], A);
    // It stops because every boundary task of Fig. 4 was one in Fig. 3.
    assert_eq!(seed_numbers(&r.best.boundary(&g)), vec![1, 3, 6, 7, 9, 10]);
    assert_eq!(r.history[1].boundary, 6);
    assert_eq!(r.history[1].new_boundary, 0);
}

#[test]
fn seed_example_fig5_moving_task_3_leaves_4() {
    let (g, mut p) = seed_example();
    p.assignment[s(3)] = B;
    assert_eq!(p.cut(&g).critical, 4);
}

// ---- Generated DAGs ----

/// A tiny deterministic linear congruential generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random DAG of 6 to 30 tasks; every task after the first has a
/// predecessor; about half the edges are critical.
fn random_dag(seed: u64) -> TaskGraph {
    let mut rng = Lcg(seed);
    let n = 6 + rng.below(25) as usize;
    let seconds: Vec<f64> = (0..n).map(|_| 0.1 + rng.below(100) as f64 / 50.0).collect();
    let mut edges = Vec::new();
    for to in 1..n {
        let before = edges.len();
        for from in 0..to {
            if rng.below(100) < 20 {
                edges.push((from, to, rng.below(2) == 0));
            }
        }
        if edges.len() == before {
            edges.push((rng.below(to as u64) as usize, to, rng.below(2) == 0));
        }
    }
    graph(&seconds, &edges)
}

fn dags() -> Vec<TaskGraph> {
    (1..=12).map(random_dag).collect()
}

/// Every task in exactly one part (below `parts`) and every part non-empty.
fn assert_complete(p: &Partition, g: &TaskGraph, parts: usize) {
    assert_eq!(p.parts, parts);
    assert_eq!(p.assignment.len(), g.tasks.len());
    assert!(p.assignment.iter().all(|&q| q < parts));
    for q in 0..parts {
        assert!(!p.members(q).is_empty(), "part {q} is empty");
    }
    let total: usize = (0..parts).map(|q| p.members(q).len()).sum();
    assert_eq!(total, g.tasks.len());
}

fn options(parts: usize, ordered: bool) -> PartitionOptions {
    PartitionOptions {
        parts,
        ordered,
        ..PartitionOptions::default()
    }
}

#[test]
fn every_task_in_one_non_empty_part() {
    for g in dags() {
        for parts in 1..=4 {
            for ordered in [true, false] {
                let r = partition(&g, &options(parts, ordered)).expect("valid parts");
                assert_complete(&r.initial, &g, parts);
                assert_complete(&r.best, &g, parts);
            }
        }
    }
}

#[test]
fn critical_cut_never_worse_and_falls_with_every_move() {
    let mut moved = 0;
    for g in dags() {
        for parts in 1..=4 {
            for ordered in [true, false] {
                let mut o = options(parts, ordered);
                o.balance = f64::INFINITY;
                let r = partition(&g, &o).expect("valid parts");
                assert!(r.best.cut(&g).critical <= r.initial.cut(&g).critical);
                assert_eq!(
                    r.history[r.best_iteration].cut.critical,
                    r.best.cut(&g).critical
                );
                for w in r.history.windows(2) {
                    if w[1].moves.is_empty() {
                        assert_eq!(w[1].cut.critical, w[0].cut.critical);
                    } else {
                        assert!(w[1].cut.critical < w[0].cut.critical);
                    }
                }
                moved += r.history.iter().map(|i| i.moves.len()).sum::<usize>();
            }
        }
    }
    assert!(moved > 0, "the generated cases should exercise some moves");
}

/// A ladder that needs three iterations: tasks 3 and 4 move to part 1, then
/// task 2 (newly a boundary task), then task 1; task 0 keeps part 0.
fn ladder() -> (TaskGraph, Partition) {
    let g = graph(
        &[1.0; 9],
        &[
            (1, 2, true),
            (2, 3, true),
            (2, 4, true),
            (3, 5, true),
            (3, 6, true),
            (4, 7, true),
            (4, 8, true),
        ],
    );
    let assignment = vec![0, 0, 0, 0, 0, 1, 1, 1, 1];
    (
        g,
        Partition {
            parts: 2,
            assignment,
        },
    )
}

#[test]
fn max_iterations_caps_the_refinement() {
    let (g, p) = ladder();
    let full = refine(&g, p.clone(), &unordered());
    assert_eq!(full.history.len(), 4);
    let moved: Vec<Vec<usize>> = full
        .history
        .iter()
        .map(|i| i.moves.iter().map(|m| m.task).collect())
        .collect();
    assert_eq!(moved, vec![vec![], vec![3, 4], vec![2], vec![1]]);
    assert_eq!(full.best.cut(&g).critical, 0);
    assert_eq!(full.best.assignment, vec![0, 1, 1, 1, 1, 1, 1, 1, 1]);

    let mut once = unordered();
    once.max_iterations = 1;
    let r = refine(&g, p.clone(), &once);
    assert_eq!(r.history.len(), 2);
    assert_eq!(r.best_iteration, 1);
    assert_eq!(r.best.cut(&g).critical, 2);

    once.max_iterations = 0;
    let r = refine(&g, p, &once);
    assert_eq!(r.history.len(), 1);
    assert_eq!(r.best, r.initial);

    for g in dags() {
        for max_iterations in [0, 1, 2, 1000] {
            for ordered in [true, false] {
                let o = PartitionOptions {
                    parts: 3,
                    ordered,
                    balance: f64::INFINITY,
                    max_iterations,
                    ..PartitionOptions::default()
                };
                let r = partition(&g, &o).expect("valid parts");
                assert!(r.history.len() <= max_iterations + 1);
            }
        }
    }
}

#[test]
fn ordered_keeps_edges_forward() {
    for g in dags() {
        for parts in 1..=4 {
            for balance in [0.0, 0.25, f64::INFINITY] {
                let o = PartitionOptions {
                    balance,
                    ..options(parts, true)
                };
                let r = partition(&g, &o).expect("valid parts");
                for p in [&r.initial, &r.best] {
                    for e in &g.edges {
                        assert!(p.assignment[e.from] <= p.assignment[e.to]);
                    }
                }
            }
        }
    }
}

#[test]
fn zero_balance_keeps_the_bottleneck() {
    for g in dags() {
        for parts in 1..=4 {
            let o = PartitionOptions {
                balance: 0.0,
                ..options(parts, true)
            };
            let r = partition(&g, &o).expect("valid parts");
            let bottleneck = r.initial.part_seconds(&g).into_iter().fold(0.0, f64::max);
            for s in r.best.part_seconds(&g) {
                assert!(s <= bottleneck + 1e-12, "{s} > {bottleneck}");
            }
        }
    }
}

#[test]
fn balance_limit_blocks_a_move() {
    // Task 2 (5 s) wants to join task 0 (10 s) through a critical edge, but
    // that would put part 0 at 15 s, above the initial bottleneck of 10 s.
    let g = graph(&[10.0, 1.0, 5.0], &[(0, 2, true), (1, 2, false)]);
    let p = Partition {
        parts: 2,
        assignment: vec![0, 1, 1],
    };
    let mut o = unordered();
    o.parts = 2;
    o.balance = 0.0;
    assert!(refine(&g, p.clone(), &o).history[1].moves.is_empty());
    o.balance = f64::NEG_INFINITY;
    assert!(refine(&g, p.clone(), &o).history[1].moves.is_empty());
    o.balance = f64::INFINITY;
    assert_eq!(refine(&g, p, &o).best.cut(&g).critical, 0);
}

// ---- The initial split ----

#[test]
fn initial_split_balances_a_chain() {
    let chain: Vec<_> = (1..8).map(|i| (i - 1, i, false)).collect();
    let g = graph(&[1.0; 8], &chain);
    let p = initial_split(&g, 4);
    assert_eq!(p.assignment, vec![0, 0, 1, 1, 2, 2, 3, 3]);
    assert_eq!(p.part_seconds(&g), vec![2.0; 4]);
    assert_eq!(p.part_flops(&g), vec![10, 50, 90, 130]);

    let chain: Vec<_> = (1..6).map(|i| (i - 1, i, false)).collect();
    let g = graph(&[5.0, 1.0, 1.0, 1.0, 1.0, 1.0], &chain);
    let p = initial_split(&g, 2);
    assert_eq!(p.part_seconds(&g), vec![5.0, 5.0]);
    assert_eq!(p.assignment, vec![0, 1, 1, 1, 1, 1]);
}

#[test]
fn initial_split_prefers_fewer_critical_cuts() {
    // Bottleneck 2 with 3 parts: {0,1}{2}{3} or {0}{1}{2,3} cut one critical
    // edge, {0}{1,2}{3} cuts two.
    let g = graph(&[1.0; 4], &[(0, 1, true), (1, 2, false), (2, 3, true)]);
    let p = initial_split(&g, 3);
    assert_eq!(p.part_seconds(&g).into_iter().fold(0.0, f64::max), 2.0);
    assert_eq!(p.cut(&g).critical, 1);
    // 0-3 is cut by every split; only {0}{1,2}{3} keeps 1-2 whole.
    let g = graph(&[1.0; 4], &[(0, 3, true), (1, 2, true)]);
    let p = initial_split(&g, 3);
    assert_eq!(p.assignment, vec![0, 1, 1, 2]);
    assert_eq!(p.cut(&g).critical, 1);
}

#[test]
fn initial_split_survives_odd_input() {
    let g = graph(
        &[f64::NAN, -1.0, f64::INFINITY, 1.0],
        &[(3, 0, true), (1, 9, true)],
    );
    for parts in 0..6 {
        let p = initial_split(&g, parts);
        assert_complete(&p, &g, parts.clamp(1, 4));
        let r = refine(&g, p, &PartitionOptions::default());
        assert_complete(&r.best, &g, parts.clamp(1, 4));
    }
    let empty = TaskGraph::default();
    assert!(initial_split(&empty, 2).assignment.is_empty());
    // An incomplete initial partition comes back unrefined.
    let bad = Partition {
        parts: 2,
        assignment: vec![0, 5],
    };
    let r = refine(&g, bad.clone(), &PartitionOptions::default());
    assert_eq!((r.best, r.history.len()), (bad, 1));
    let absurd = Partition {
        parts: usize::MAX,
        assignment: vec![0, 1, 2, 3],
    };
    let r = refine(&g, absurd.clone(), &PartitionOptions::default());
    assert_eq!((r.best, r.history.len()), (absurd, 1));
    assert_complete(&initial_split(&g, usize::MAX), &g, 4);
}

// ---- Validation ----

#[test]
fn partition_rejects_bad_part_counts() {
    let g = graph(&[1.0; 3], &[(0, 1, true), (1, 2, true)]);
    match partition(&g, &options(0, true)) {
        Err(Error::Config(m)) => assert!(m.contains("0 parts"), "{m}"),
        other => panic!("expected a config error, got {other:?}"),
    }
    match partition(&g, &options(5, true)) {
        Err(Error::Config(m)) => assert!(m.contains("5 parts") && m.contains("3 tasks"), "{m}"),
        other => panic!("expected a config error, got {other:?}"),
    }
    assert!(partition(&g, &options(3, true)).is_ok());
}

// ---- Critical marking ----

fn critical_pairs(g: &TaskGraph) -> Vec<(usize, usize)> {
    g.edges
        .iter()
        .filter(|e| e.critical)
        .map(|e| (e.from, e.to))
        .collect()
}

#[test]
fn mark_critical_path_and_bytes() {
    // A diamond 0 -> {1, 2} -> 3 whose branch through 1 is heavier.
    let mut g = graph(
        &[1.0, 5.0, 2.0, 1.0],
        &[(0, 1, false), (0, 2, true), (1, 3, false), (2, 3, true)],
    );
    for (e, bytes) in g.edges.iter_mut().zip([10, 20, 30, 5]) {
        e.bytes = bytes;
    }
    g.mark_critical(Critical::Path);
    assert_eq!(critical_pairs(&g), vec![(0, 1), (1, 3)]);
    g.tasks[2].seconds = 9.0;
    g.mark_critical(Critical::Path);
    assert_eq!(critical_pairs(&g), vec![(0, 2), (2, 3)]);
    // A tie takes the lowest index.
    g.tasks[2].seconds = 5.0;
    g.mark_critical(Critical::Path);
    assert_eq!(critical_pairs(&g), vec![(0, 1), (1, 3)]);
    g.mark_critical(Critical::Bytes(10));
    assert_eq!(critical_pairs(&g), vec![(0, 2), (1, 3)]);
    g.mark_critical(Critical::Bytes(0));
    assert_eq!(critical_pairs(&g).len(), 4);
}

// ---- Construction from a graph ----

mod from_graph {
    use super::super::{Critical, TaskGraph};
    use crate::graph::test_support::dummy_node;
    use crate::graph::{Graph, Node, Value};
    use crate::ir::Fact;
    use crate::tensor::{DType, Tensor};
    use std::sync::Arc;

    fn node(name: &str, inputs: &[usize], output: usize) -> Node {
        dummy_node(name, inputs, &[output])
    }

    #[test]
    fn edges_per_producer_consumer_pair() {
        // Values: 0 x (input), 1 w (constant), 2 a, 3 b, 4 c.
        let names = ["x", "w", "a", "b", "c"];
        let mut constants = vec![None; 5];
        constants[1] = Some(Arc::new(Tensor::zeros(DType::F32, &[2])));
        let graph = Graph {
            values: names
                .iter()
                .map(|n| Value {
                    name: n.to_string(),
                    declared: None,
                })
                .collect(),
            nodes: vec![
                node("A", &[0, 1], 2),
                node("B", &[2, 1], 3),
                node("C", &[2, 3, 2], 4),
            ],
            inputs: vec![0],
            outputs: vec![4],
            constants,
            released: Vec::new(),
            metadata: Default::default(),
        };
        let mut facts = vec![None; 5];
        facts[2] = Some(Fact::new(DType::F32, vec![2, 3]));
        facts[3] = Some(Fact::unknown_shape(DType::F32));
        let g = TaskGraph::from_graph(&graph, &facts, &[1.0, 2.0], &[7], Critical::Bytes(10));
        let names: Vec<&str> = g.tasks.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["A", "B", "C"]);
        assert_eq!(g.tasks[1].seconds, 2.0);
        assert_eq!(
            (g.tasks[2].seconds, g.tasks[0].flops, g.tasks[1].flops),
            (0.0, 7, 0)
        );
        let edges: Vec<_> = g
            .edges
            .iter()
            .map(|e| (e.from, e.to, e.values.join(","), e.bytes, e.critical))
            .collect();
        assert_eq!(
            edges,
            vec![
                (0, 1, "a".to_string(), 24, true),
                (0, 2, "a".to_string(), 24, true),
                (1, 2, "b".to_string(), 0, false),
            ]
        );
    }
}
