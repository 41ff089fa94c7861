//! An idle session costs nothing, and a dropped one leaves no thread behind:
//! the load monitor parks while no run is in flight, rayon's process-wide pool
//! never starts (load and planning run on the session's own pool), and every
//! pool and sampler thread is joined before the session's drop returns.
//! One test in this binary, so no other test's threads are counted.

#![cfg(target_os = "linux")]

mod common;

use ramify::{Session, Tensor};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Per thread of this process: (name, CPU nanoseconds, context switches).
fn threads() -> BTreeMap<u32, (String, u64, u64)> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/task")
        .expect("procfs")
        .flatten()
    {
        let Ok(tid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).unwrap_or_default();
        let name = read("comm").trim().to_string();
        let cpu_ns = read("schedstat")
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let switches = read("status")
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        out.insert(tid, (name, cpu_ns, switches));
    }
    out
}

fn current_tid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .expect("/proc/thread-self")
}

#[test]
fn an_idle_session_sleeps_and_a_dropped_one_leaves_no_thread() {
    let before: Vec<u32> = threads().into_keys().collect();
    let model = common::repo().join("models/inception_mini.onnx");
    let session = Session::builder()
        .threads(2)
        .build_from_file(&model)
        .expect("the example model loads");
    let input = || Tensor::from_vec(&[1, 3, 96, 96], vec![0.25f32; 3 * 96 * 96]).unwrap();
    for _ in 0..3 {
        session.run([("input", input())]).expect("runs");
    }

    // Idle: after `idle_after` (1 s by default) the sampler parks.
    let monitor = session.scheduler().monitor();
    let end = Instant::now() + Duration::from_secs(5);
    while !monitor.is_parked() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        monitor.is_parked(),
        "the load monitor kept sampling while idle"
    );
    let me = current_tid();
    let start = threads();
    std::thread::sleep(Duration::from_secs(2));
    let stop = threads();
    let mut ours = 0;
    let mut woken = Vec::new();
    let mut cpu_ns = 0;
    for (tid, (name, cpu, switches)) in &stop {
        if *tid == me {
            continue;
        }
        let (_, cpu0, switches0) = start.get(tid).cloned().unwrap_or_default();
        cpu_ns += cpu - cpu0;
        if name.starts_with("ramify") {
            ours += 1;
            if switches > &switches0 {
                woken.push(format!("{name} ({} times)", switches - switches0));
            }
        }
    }
    assert!(
        ours >= 2,
        "expected the sampler and pool threads, saw {ours}"
    );
    assert!(woken.is_empty(), "idle threads woke up: {woken:?}");
    // Under 0.1 ms of CPU per idle second, all threads but this one.
    assert!(cpu_ns < 200_000, "idle CPU use {cpu_ns} ns over 2 s");

    // The next run wakes the sampler and works as before.
    session
        .run([("input", input())])
        .expect("runs after idling");

    drop(session);
    // The drop joined every thread; the kernel drops an exited thread's
    // /proc entry a moment after the join returns.
    let end = Instant::now() + Duration::from_secs(1);
    while threads().len() > before.len() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    let after: Vec<u32> = threads().into_keys().collect();
    assert_eq!(
        after,
        before,
        "threads outlived the session: {:?}",
        threads()
            .into_iter()
            .filter(|(t, _)| !before.contains(t))
            .map(|(_, (name, ..))| name)
            .collect::<Vec<_>>()
    );
}
