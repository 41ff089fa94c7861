//! Soak: eight host threads run one adaptive session over and over while busy
//! background processes come and go, so that every run meets a different
//! load and forks flip between parallel and serial. Every output must equal,
//! bit for bit, the output of a single-threaded serial session on the same
//! input, and every thread must finish (no deadlock). Bounded in time:
//! `RAMIFY_SOAK_SECS` (default 8) seconds of runs.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::repo;
use ramify::{Mode, Session, SessionBuilder, Tensor};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const THREADS: usize = 8;
const INPUTS: usize = 4;

/// Input `k` of the example model's shape: a distinct pattern per k.
fn input(k: usize) -> Tensor {
    let data = (0..3 * 96 * 96)
        .map(|i| ((i * (k + 3) + k * 7) % 29) as f32 * 0.07 - 1.0)
        .collect();
    Tensor::from_vec(&[1, 3, 96, 96], data).unwrap()
}

fn run(session: &Session, name: &str, x: Tensor) -> Vec<Tensor> {
    session
        .run([(name, x)])
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

/// `count` busy processes (the CLI's `burn`), each stopping by itself.
fn burners(count: usize, seconds: f64) -> Vec<Child> {
    (0..count)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_ramify"))
                .args(["burn", "--seconds", &seconds.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("the ramify binary starts")
        })
        .collect()
}

#[test]
fn eight_threads_under_changing_load_agree_with_a_serial_run() {
    let model = repo().join("models/inception_mini.onnx");
    let soak = Duration::from_secs_f64(
        std::env::var("RAMIFY_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(8.0),
    );
    let reference = SessionBuilder::new()
        .cpus(1)
        .mode(Mode::Serial)
        .build_from_file(&model)
        .unwrap();
    let name = reference.inputs()[0].name.clone();
    let expected: Arc<Vec<Vec<Tensor>>> = Arc::new(
        (0..INPUTS)
            .map(|k| run(&reference, &name, input(k)))
            .collect(),
    );

    let session = Arc::new(
        SessionBuilder::new()
            .cpus(2)
            .mode(Mode::Adaptive)
            .build_from_file(&model)
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicUsize::new(0));
    let (done, finished) = mpsc::channel();
    for t in 0..THREADS {
        let (session, expected, name) = (session.clone(), expected.clone(), name.clone());
        let (stop, runs, done) = (stop.clone(), runs.clone(), done.clone());
        std::thread::spawn(move || {
            let mut i = t;
            let mut mismatch = None;
            while !stop.load(Ordering::Relaxed) {
                let k = i % INPUTS;
                let out = run(&session, &name, input(k));
                if out != expected[k] && mismatch.is_none() {
                    mismatch = Some(format!("thread {t}, run {i}: input {k} differs"));
                }
                runs.fetch_add(1, Ordering::Relaxed);
                i += THREADS;
            }
            done.send(mismatch).unwrap();
        });
    }
    drop(done);

    // Background load comes and goes: 0, 1, 2, 1, 0, ... busy processes,
    // one level per half second, each process stopping by itself.
    let start = Instant::now();
    let levels = [0usize, 1, 2, 1];
    let mut step = 0;
    while start.elapsed() < soak {
        let level = levels[step % levels.len()];
        let mut busy = burners(level, 0.5);
        std::thread::sleep(Duration::from_millis(500));
        for c in &mut busy {
            let _ = c.kill();
            let _ = c.wait();
        }
        step += 1;
    }
    stop.store(true, Ordering::Relaxed);

    let mut mismatches = Vec::new();
    for _ in 0..THREADS {
        let outcome = finished
            .recv_timeout(Duration::from_secs(60))
            .expect("a soak thread did not finish within 60 s of the stop (deadlock?)");
        mismatches.extend(outcome);
    }
    let total = runs.load(Ordering::Relaxed);
    eprintln!(
        "soak: {total} runs on {THREADS} threads in {:.1} s, {step} load changes",
        start.elapsed().as_secs_f64()
    );
    assert!(mismatches.is_empty(), "{mismatches:?}");
    assert!(total >= THREADS, "only {total} runs finished");
}
