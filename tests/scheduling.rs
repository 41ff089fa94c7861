//! The scheduler's decisions on real runs: the makespan check keeps a fork
//! serial when parallel siblings would finish later (unbalanced siblings on
//! two CPUs), keeps it parallel when they finish sooner, is skipped in
//! `parallel` mode and when turned off, and never changes the outputs.

mod common;

use common::*;
use ramify::sched::{Decision, ForkReport};
use ramify::{Mode, SessionBuilder, Tensor};

/// The decisions depend on measured node times: the tests of this file take
/// turns, so that one's threads do not slow the other's nodes on a 2-CPU
/// machine.
static QUIET: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A session of `model` on two unpinned CPUs in `mode`, and its plan for
/// [`input`]'s shape (the one its runs use).
fn unpinned_two_cpus(
    model: &[u8],
    mode: Mode,
) -> (ramify::Session, std::sync::Arc<ramify::exec::Plan>) {
    let session = SessionBuilder::new()
        .cpus(2)
        .mode(mode)
        .pin_threads(false)
        .build_from_bytes(model)
        .expect("valid model");
    let plan = session
        .plan_for(&[std::sync::Arc::new(chains_input())])
        .expect("a plan");
    (session, plan)
}

/// The fork decisions and output of `runs` runs on 2 CPUs at load 0.
fn decisions(model: &[u8], mode: Mode, check: bool, runs: usize) -> (Vec<Decision>, Tensor) {
    let (reports, mut outputs) = fork_reports(model, mode, check, runs);
    let seen = reports.into_iter().map(|r| r.decision).collect();
    (seen, outputs.pop().expect("an output"))
}

/// The fork report and output of each of `runs` runs of `model` with one
/// fork, on 2 CPUs at load 0.
fn fork_reports(
    model: &[u8],
    mode: Mode,
    check: bool,
    runs: usize,
) -> (Vec<ForkReport>, Vec<Tensor>) {
    let _turn = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    let session = SessionBuilder::new()
        .cpus(2)
        .mode(mode)
        .fixed_load(0.0)
        .pin_threads(false)
        .makespan_check(check)
        .build_from_bytes(model)
        .expect("valid model");
    let (mut reports, mut outputs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (out, report) = session
            .run_with_report([("x", chains_input())])
            .expect("runs");
        assert_eq!(report.forks.len(), 1, "one fork per run");
        reports.extend(report.forks);
        outputs.push(out.into_iter().next().expect("an output").1);
    }
    (reports, outputs)
}

fn parallel_one_cpu_each(d: &Decision) -> bool {
    matches!(d, Decision::Parallel(p) if p.iter().map(|p| p.cpus).collect::<Vec<_>>() == [1, 1])
}

#[test]
fn unbalanced_siblings_on_two_cpus_run_serially() {
    // 1:9 on two CPUs: one CPU each finishes after 9 products, both CPUs
    // on every product after about 10/1.7. Before any measurement (first
    // run, the cost model's estimates) the check says serial. Later runs
    // decide from measured node times: on a machine whose second CPU is at
    // times taken by the host, two threads can measure no faster than one,
    // and one CPU per sibling is then the right call; either way the
    // decision is one of the two.
    let m = chains_model(1, 9);
    let (adaptive, serial_out) = decisions(&m, Mode::Adaptive, true, 4);
    assert_eq!(adaptive[0], Decision::Serial { threads: 2 }, "{adaptive:?}");
    for d in &adaptive[1..] {
        assert!(
            *d == Decision::Serial { threads: 2 } || parallel_one_cpu_each(d),
            "{adaptive:?}"
        );
    }
    // The method alone (check off) and parallel mode fork on one CPU each,
    // with the same output bits.
    let (method, method_out) = decisions(&m, Mode::Adaptive, false, 2);
    assert!(method.iter().all(parallel_one_cpu_each), "{method:?}");
    let (parallel, parallel_out) = decisions(&m, Mode::Parallel, true, 2);
    assert!(parallel.iter().all(parallel_one_cpu_each), "{parallel:?}");
    assert_eq!(serial_out, method_out);
    assert_eq!(serial_out, parallel_out);
}

#[test]
fn long_balanced_siblings_fork_on_the_first_run() {
    // 100:100 products on two CPUs: one CPU each saves about 0.18 of a
    // chain's time (100 products against 200/1.7), milliseconds, far more
    // than forking costs. The first run decides from the cost model and the
    // fork's probed overhead, before any node time is measured.
    let m = chains_model(100, 100);
    let (adaptive, _) = decisions(&m, Mode::Adaptive, true, 1);
    assert!(parallel_one_cpu_each(&adaptive[0]), "{adaptive:?}");
}

#[test]
fn the_first_run_is_a_warm_up_and_is_not_measured() {
    // A cold first run (buffers faulting in) once steered the makespan
    // check for good: its slow serial times were never measured again
    // once the fork went parallel. Node times count from the second run.
    let _turn = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    let (session, plan) = unpinned_two_cpus(&chains_model(1, 2), Mode::Serial);
    let speedup = |k: usize| k as f64;
    let modelled = |plan: &ramify::exec::Plan| {
        (0..plan.graph.nodes.len())
            .filter(|&i| plan.node_seconds_at(i, 2, &speedup) == plan.estimate[i] / 2.0)
            .count()
    };
    let nodes = plan.graph.nodes.len();
    session.run([("x", chains_input())]).expect("runs");
    assert_eq!(modelled(&plan), nodes, "nothing measured in the first run");
    session.run([("x", chains_input())]).expect("runs");
    assert_eq!(modelled(&plan), 0, "every node measured in the second");
}

/// Sessions given one load monitor share it (no sampler thread each), take
/// its configuration, and a fixed load still overrides it.
#[test]
fn sessions_share_a_given_load_monitor() {
    use ramify::load::{LoadConfig, LoadMonitor, LoadSource};
    use std::sync::Arc;
    let config = LoadConfig {
        sources: vec![LoadSource::Runnable],
        ..LoadConfig::default()
    };
    let monitor = LoadMonitor::start(config);
    let model = bytes(&relu_add_model());
    let build = |b: SessionBuilder| b.build_from_bytes(&model).expect("valid model");
    let a = build(SessionBuilder::new().load_monitor(Arc::clone(&monitor)));
    let b = build(
        SessionBuilder::new()
            .mode(Mode::Serial)
            .load_sources(vec![LoadSource::SystemCpu])
            .load_monitor(Arc::clone(&monitor)),
    );
    for s in [&a, &b] {
        assert!(Arc::ptr_eq(s.scheduler().monitor(), &monitor));
        assert_eq!(s.scheduler().config().load.sources, [LoadSource::Runnable]);
    }
    let fixed = build(
        SessionBuilder::new()
            .load_monitor(Arc::clone(&monitor))
            .fixed_load(0.9),
    );
    assert!(!Arc::ptr_eq(fixed.scheduler().monitor(), &monitor));
    assert_eq!(fixed.scheduler().monitor().utilisation(), 0.9);
    // Without one, each session starts its own.
    let own = build(SessionBuilder::new());
    assert!(!Arc::ptr_eq(own.scheduler().monitor(), &monitor));
}

#[test]
fn parallel_forks_measure_their_overhead() {
    // The makespan check charges a fork what forking measured to cost
    // (waking the pools' threads, handing results back): probed with an
    // empty fork before the first parallel run (whose node times are not
    // kept), then measured on the parallel runs; never by serial runs.
    let _turn = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    let model = chains_model(2, 2);
    let overhead_after = |mode: Mode| {
        let (session, plan) = unpinned_two_cpus(&model, mode);
        session.run([("x", chains_input())]).expect("runs");
        let first = plan.forks.overhead(0);
        session.run([("x", chains_input())]).expect("runs");
        (first, plan.forks.overhead(0))
    };
    let (first, second) = overhead_after(Mode::Parallel);
    assert!(
        first.is_some_and(|s| s > 0.0 && s < 1.0),
        "probed: {first:?}"
    );
    assert!(second.is_some_and(|s| s > 0.0 && s < 1.0), "{second:?}");
    assert_eq!(overhead_after(Mode::Serial), (None, None));
}

#[test]
fn one_slow_run_moves_a_node_time_by_at_most_a_quarter() {
    // A node that waited for a sleeping thread once must not double its
    // estimate: each run counts at most twice the known time.
    let _turn = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    let (session, plan) = unpinned_two_cpus(&chains_model(1, 1), Mode::Serial);
    session.run([("x", chains_input())]).expect("runs");
    plan.record(0, 2, 1_000);
    let speedup = |k: usize| k as f64;
    let before = plan.node_seconds_at(0, 2, &speedup);
    plan.record(0, 2, 1_000_000_000);
    let after = plan.node_seconds_at(0, 2, &speedup);
    assert!(
        after > before && after <= before * 1.25 + 1e-12,
        "{before} -> {after}"
    );
}

#[test]
fn one_cpu_pools_run_as_tasks_of_the_runs_pool() {
    // On 2 CPUs every parallel plan gives each pool one CPU: the run's own
    // pool of two threads runs them (no thread is started for siblings),
    // and the output keeps serial execution's bits.
    let _turn = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    let model = chains_model(2, 2);
    let (session, _) = unpinned_two_cpus(&model, Mode::Parallel);
    for _ in 0..3 {
        let (_, report) = session
            .run_with_report([("x", chains_input())])
            .expect("runs");
        assert!(parallel_one_cpu_each(&report.forks[0].decision));
    }
    assert_eq!(session.scheduler().pools().thread_count(), 2);
    // On 3 CPUs the plan has a pool of two: the siblings get pools of
    // their own.
    let three = SessionBuilder::new()
        .cpus(3)
        .oversubscribe(true)
        .mode(Mode::Parallel)
        .pin_threads(false)
        .build_from_bytes(&model)
        .expect("valid model");
    let (out, report) = three
        .run_with_report([("x", chains_input())])
        .expect("runs");
    let Decision::Parallel(plans) = &report.forks[0].decision else {
        panic!("{:?}", report.forks[0].decision);
    };
    assert_eq!(plans.iter().map(|p| p.cpus).sum::<usize>(), 3);
    assert!(three.scheduler().pools().thread_count() > 3);
    let serial = SessionBuilder::new()
        .cpus(1)
        .mode(Mode::Serial)
        .build_from_bytes(&model)
        .expect("valid model");
    let (want, _) = serial
        .run_with_report([("x", chains_input())])
        .expect("runs");
    let (got, _) = session
        .run_with_report([("x", chains_input())])
        .expect("runs");
    assert_eq!(got[0].1, want[0].1);
    assert_eq!(out[0].1, want[0].1);
}

#[test]
fn the_eighth_run_explores_the_option_turned_down() {
    // One run in eight takes, at every fork, the option the makespan check
    // turned down (on 2 CPUs: serial on both, or one CPU each), so that
    // its times stay measured; one in 64 once exploring was measured more
    // than a tenth slower than the other runs. Which option the check
    // picks depends on the times measured here (a busy CPU made it fork),
    // and so does whether run 15 explores; that run 7 does, and that
    // exploring runs take the other option, does not.
    let (reports, outputs) = fork_reports(&chains_model(1, 9), Mode::Adaptive, true, 17);
    let explored: Vec<usize> = (0..reports.len())
        .filter(|&i| reports[i].explored_from.is_some())
        .collect();
    assert!(explored == [7] || explored == [7, 15], "{reports:?}");
    let serial = Decision::Serial { threads: 2 };
    for i in explored {
        let (taken, checked) = (&reports[i].decision, reports[i].explored_from.as_ref());
        let options = [taken, checked.expect("explored")];
        assert!(options.contains(&&serial), "run {i}: {options:?}");
        assert!(
            options.into_iter().any(parallel_one_cpu_each),
            "run {i}: {options:?}"
        );
    }
    // Exploring or not, serial or parallel: the same bits.
    assert!(outputs.iter().all(|o| *o == outputs[0]));
}

#[test]
fn one_fast_run_undoes_most_of_a_slow_one() {
    // Other processes only ever slow a node down: a faster run counts three
    // quarters, so an estimate a slow run raised comes back at once.
    let _turn = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    let (session, plan) = unpinned_two_cpus(&chains_model(1, 1), Mode::Serial);
    session.run([("x", chains_input())]).expect("runs");
    let speedup = |k: usize| k as f64;
    plan.record(0, 2, 1_000_000);
    plan.record(0, 2, 2_000_000);
    let slow = plan.node_seconds_at(0, 2, &speedup);
    assert!((slow - 1.25e-3).abs() < 1e-9, "{slow}");
    plan.record(0, 2, 1_000_000);
    let back = plan.node_seconds_at(0, 2, &speedup);
    assert!((back - 1.0625e-3).abs() < 1e-9, "{back}");
}

/// The thread names of the operator spans of one traced run of `model` on
/// one CPU at load 0 (so that `pin` pins), made from a thread named `app`.
fn span_threads_on_one_cpu(
    model: Vec<u8>,
    input: (&'static str, Tensor),
    pin: bool,
) -> Vec<String> {
    std::thread::Builder::new()
        .name("app".into())
        .spawn(move || {
            let session = SessionBuilder::new()
                .cpus(1)
                .fixed_load(0.0)
                .pin_threads(pin)
                .build_from_bytes(&model)
                .expect("valid model");
            let (_, report) = session.run_traced([input]).expect("a run");
            let trace = report.trace.expect("a trace");
            trace
                .spans
                .into_iter()
                .filter(|s| s.category != "fork")
                .map(|s| s.thread_name)
                .collect()
        })
        .expect("a thread")
        .join()
        .expect("no panic")
}

/// A one-thread run of a model without forks runs on the caller's thread
/// (no handoff to a pool thread and back), pinning or not; one with a fork
/// runs on the session's pool.
#[test]
fn one_thread_runs_without_forks_stay_on_the_callers_thread() {
    let plain = bytes(&relu_add_model());
    let x = || {
        (
            "x",
            Tensor::from_vec(&[1, 4], vec![-1.0f32, 0.5, 2.0, -3.0]).unwrap(),
        )
    };
    let threads = span_threads_on_one_cpu(plain.clone(), x(), false);
    assert!(!threads.is_empty());
    assert!(threads.iter().all(|t| t == "app"), "{threads:?}");
    let pinned = span_threads_on_one_cpu(plain, x(), true);
    assert!(pinned.iter().all(|t| t == "app"), "{pinned:?}");
    let forked = span_threads_on_one_cpu(chains_model(3, 3), ("x", chains_input()), false);
    assert!(!forked.is_empty());
    assert!(forked.iter().all(|t| t != "app"), "{forked:?}");
}

/// On two CPUs a model without forks is measured both ways, on the pool
/// and on the caller's thread, then runs the faster way, and now and then
/// takes the other so that both times stay current; the outputs are the
/// same bits either way. `parallel` mode always takes the pool.
#[test]
fn runs_without_forks_measure_the_callers_thread_against_the_pool() {
    use ramify::sched::SoloWay;
    let _turn = QUIET.lock().unwrap_or_else(|p| p.into_inner());
    // 200 cheap nodes: a pooled run stays far under the 50 µs per node
    // below which the caller's thread is tried, even on a busy machine.
    let chain: Vec<_> = (0..200)
        .map(|i| {
            let x = if i == 0 {
                "x".to_string()
            } else {
                format!("v{}", i - 1)
            };
            let y = if i == 199 {
                "y".to_string()
            } else {
                format!("v{i}")
            };
            node(if i % 2 == 0 { "Neg" } else { "Relu" }, &[&x], &[&y])
        })
        .collect();
    let model = bytes(&model(
        graph(
            chain,
            vec![value_info("x", 1, &[1, 4])],
            vec![value_info("y", 1, &[1, 4])],
            vec![],
        ),
        13,
    ));
    let runs = |mode: Mode| {
        let model = model.clone();
        std::thread::Builder::new()
            .name("app".into())
            .spawn(move || {
                let session = SessionBuilder::new()
                    .cpus(2)
                    .mode(mode)
                    .fixed_load(0.0)
                    .pin_threads(false)
                    .build_from_bytes(&model)
                    .expect("valid model");
                let x = Tensor::from_vec(&[1, 4], vec![-1.0f32, 0.5, 2.0, -3.0]).unwrap();
                (0..70)
                    .map(|_| {
                        let (out, report) = session.run_traced([("x", x.clone())]).expect("a run");
                        let spans = report.trace.expect("a trace").spans;
                        let on_app = spans.iter().filter(|s| s.thread_name == "app").count();
                        assert!(
                            on_app == 0 || on_app == spans.len(),
                            "one thread or the pool"
                        );
                        (report.solo, on_app > 0, out[0].1.clone())
                    })
                    .collect::<Vec<_>>()
            })
            .expect("a thread")
            .join()
            .expect("no panic")
    };
    let adaptive = runs(Mode::Adaptive);
    let ways: Vec<_> = adaptive
        .iter()
        .map(|(w, _, _)| w.expect("a choice"))
        .collect();
    // The first run is a warm-up (not timed); then the two ways in turn
    // until each has been timed twice.
    use SoloWay::{Inline, Pooled};
    assert_eq!(ways[..5], [Pooled, Pooled, Inline, Pooled, Inline]);
    for (way, on_app, _) in &adaptive {
        assert_eq!(*on_app, *way == Some(SoloWay::Inline), "{way:?}");
    }
    // Then runs take the faster way (which may change as the times move)
    // and now and then the other, so both keep being taken.
    let later = &ways[5..];
    assert!(
        later.contains(&Inline) && later.contains(&Pooled),
        "{ways:?}"
    );
    let first = &adaptive[0].2;
    assert!(adaptive.iter().all(|(_, _, out)| out == first));
    let parallel = runs(Mode::Parallel);
    assert!(parallel
        .iter()
        .all(|(way, on_app, out)| way.is_none() && !on_app && out == first));
}
