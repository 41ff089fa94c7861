//! Criterion benchmarks of the scheduler's own overhead per fork.
//!
//! - `decide`: reading the load and deciding at one fork of four siblings
//!   (`Scheduler::observe` + `Scheduler::decide`).
//! - `run per fork`: a model of K forks, each a tiny Relu fork node, two
//!   one-Relu siblings and an Add join, on 16 floats, so that nearly all the
//!   time is the executor's. It runs in `parallel` mode on 2 CPUs (decision
//!   plus dispatch of the siblings onto two pools and the wait for both), in
//!   `serial` mode (decision only), and as a chain of the same operators with
//!   no fork (the node work alone); `parallel` once more with pool threads
//!   not pinned, to show what re-pinning at every fork costs. Times are reported per fork: the
//!   scheduler's overhead per fork is `parallel − chain` (decision plus
//!   dispatch) and `serial − chain` (decision alone).
//!
//! Run with `cargo bench --bench scheduler`.

// `criterion_main!` below writes an undocumented `main`.
#![allow(missing_docs)]

/// Tensors start on a cache line, as in the command line and the C
/// library (see `ramify::AlignedAllocator`).
#[global_allocator]
static ALLOCATOR: ramify::AlignedAllocator = ramify::AlignedAllocator;

use criterion::{criterion_group, criterion_main, Criterion};
use model_builder::onnx_protobuf::{NodeProto, ValueInfoProto};
use model_builder::{bytes, graph, model, named_node, FLOAT};
use ramify::load::LoadMonitor;
use ramify::sched::{PolicyConfig, Scheduler, SchedulerConfig};
use ramify::{DType, Mode, Session, SessionBuilder, Tensor};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Forks per model.
const K: usize = 64;
/// Floats per tensor.
const WIDTH: usize = 16;

/// A float value of shape [1, WIDTH].
fn value_info(name: &str) -> ValueInfoProto {
    model_builder::value_info(name, FLOAT, &[1, WIDTH as i64])
}

/// A node with one output, named after it.
fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    named_node(output, op, inputs, &[output])
}

/// K blocks of Relu → (Relu, Relu) → Add: forks when `forked`, else the
/// same four operators in a chain (Relu → Relu → Relu → Add(x, x)).
fn forks_model(forked: bool) -> Vec<u8> {
    let mut g = graph(vec![], vec![], vec![], vec![]);
    g.name = "forks".into();
    let mut prev = "x".to_string();
    for k in 0..K {
        let (a, b, c, d) = (
            format!("a{k}"),
            format!("b{k}"),
            format!("c{k}"),
            format!("d{k}"),
        );
        g.node.push(node("Relu", &[&prev], &a));
        g.node.push(node("Relu", &[&a], &b));
        if forked {
            g.node.push(node("Relu", &[&a], &c));
            g.node.push(node("Add", &[&b, &c], &d));
        } else {
            g.node.push(node("Relu", &[&b], &c));
            g.node.push(node("Add", &[&c, &c], &d));
        }
        prev = d;
    }
    g.input.push(value_info("x"));
    g.output.push(value_info(&prev));
    bytes(&model(g, 13))
}

fn session(forked: bool, mode: Mode, pin: bool) -> Session {
    SessionBuilder::new()
        .cpus(2)
        .mode(mode)
        .pin_threads(pin)
        .build_from_bytes(&forks_model(forked))
        .expect("valid model")
}

fn bench_decide(c: &mut Criterion) {
    let config = SchedulerConfig {
        mode: Mode::Adaptive,
        policy: PolicyConfig::for_cpus(8),
        pin_threads: false,
        ..SchedulerConfig::default()
    };
    let sched = Scheduler::new(config, LoadMonitor::fixed(0.3)).expect("valid policy");
    let times = [4e-3, 1e-3, 2e-3, 3e-3];
    c.bench_function("decide (observe + decide, 4 siblings, m = 8)", |b| {
        b.iter(|| {
            let (n, band) = sched.observe();
            black_box(sched.decide(
                n,
                band,
                8,
                false,
                black_box(&times),
                &|s, k| times[s] / k as f64,
                None,
            ))
        })
    });
}

fn bench_runs(c: &mut Criterion) {
    let x = Tensor::zeros(DType::F32, &[1, WIDTH]);
    let cases = [
        (
            "parallel, 2 CPUs (decision + dispatch)",
            true,
            Mode::Parallel,
            true,
        ),
        (
            "parallel, 2 CPUs, threads not pinned",
            true,
            Mode::Parallel,
            false,
        ),
        ("serial (decision only)", true, Mode::Serial, true),
        (
            "chain, no forks (node work alone)",
            false,
            Mode::Serial,
            true,
        ),
    ];
    let mut group = c.benchmark_group(format!("run per fork ({K} forks of tiny siblings)"));
    for (label, forked, mode, pin) in cases {
        let s = session(forked, mode, pin);
        let forks = s
            .plan([("x", x.clone())])
            .expect("plan")
            .structure
            .forks
            .iter()
            .filter(|f| f.parallel)
            .count();
        assert_eq!(forks, if forked { K } else { 0 }, "{label}: parallel forks");
        group.bench_function(label, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let input = x.clone();
                    let start = Instant::now();
                    black_box(s.run([("x", input)]).expect("runs"));
                    total += start.elapsed();
                }
                total / K as u32
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_decide, bench_runs);
criterion_main!(benches);
