//! The command line's deadline and device-state surfaces: `run --deadline`
//! on the light VGG-19 at one CPU stops early with a deadline error when the
//! deadline is out of reach and succeeds when it is not, `bench --deadline`
//! counts misses, and `watch` prints device state and events as JSON lines.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{generated, repo};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn ramify() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ramify"));
    c.current_dir(repo());
    c
}

fn vgg19() -> PathBuf {
    let m = generated().join("light/vgg19/model.onnx");
    assert!(
        m.exists(),
        "{} is missing: run scripts/ensure_venv.sh && .venv/bin/python scripts/gen_test_data.py",
        m.display()
    );
    m
}

fn timed(cmd: &mut Command) -> (Output, Duration) {
    let start = Instant::now();
    let o = cmd.output().expect("ramify starts");
    (o, start.elapsed())
}

/// The milliseconds after `key` in `text` ("run time 12.3 ms").
fn millis_after(text: &str, key: &str) -> f64 {
    let rest = &text[text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {text}"))
        + key.len()..];
    rest.split_whitespace()
        .next()
        .and_then(|n| n.trim_end_matches(',').parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in {text}"))
}

#[test]
fn run_with_a_deadline_out_of_reach_fails_early_and_one_in_reach_succeeds() {
    let model = vgg19();
    let (full, full_wall) = timed(ramify().arg("run").arg(&model).args(["--cpus", "1"]));
    assert!(
        full.status.success(),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );
    let run_ms = millis_after(&String::from_utf8_lossy(&full.stdout), "run time");

    let (late, late_wall) =
        timed(
            ramify()
                .arg("run")
                .arg(&model)
                .args(["--cpus", "1", "--deadline", "20"]),
        );
    let stderr = String::from_utf8_lossy(&late.stderr);
    assert!(!late.status.success());
    assert!(
        stderr.contains("deadline: cannot finish within 30.0 ms"),
        "{stderr}"
    );
    let stopped_ms = millis_after(&stderr, "stopped after");
    assert!(
        stopped_ms < run_ms / 3.0,
        "stopped after {stopped_ms} ms of a {run_ms} ms run"
    );
    // Both walls include loading the model, which a busy machine (the
    // rest of the suite) can slow by more than the run itself: the faster
    // of two late runs stands for this one.
    let late_wall = late_wall.min(
        timed(
            ramify()
                .arg("run")
                .arg(&model)
                .args(["--cpus", "1", "--deadline", "20"]),
        )
        .1,
    );
    assert!(late_wall < full_wall, "{late_wall:?} against {full_wall:?}");

    let generous = format!("{}", (run_ms * 4.0).max(1000.0));
    let ok = ramify()
        .arg("run")
        .arg(&model)
        .args([
            "--cpus",
            "1",
            "--deadline",
            &generous,
            "--delay-ratio",
            "1.2",
        ])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("prob"));
    // A delay ratio alone is refused by the argument parser.
    let bad = ramify()
        .args(["run", "--delay-ratio", "2"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

#[test]
fn bench_counts_deadline_misses() {
    let o = ramify()
        .args([
            "bench",
            "--runs",
            "3",
            "--warmup",
            "1",
            "--cpus",
            "1",
            "--json",
            "--deadline",
            "0.001",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["deadline_misses"], 3, "{v}");
    assert_eq!(v["results"][0]["runs"], 0, "{v}");
}

#[test]
fn watch_prints_the_state_then_events_as_json_lines() {
    // A CPU threshold of 0: any CPU use by others is an anomaly, so a busy
    // child makes one.
    let busy = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .ok();
    let o = ramify()
        .args([
            "watch",
            "--period",
            "20",
            "--seconds",
            "1.5",
            "--cpu-threshold",
            "0",
        ])
        .output()
        .unwrap();
    if let Some(mut child) = busy {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(lines[0]["type"], "state", "{lines:?}");
    assert!(
        lines[0]["memory"].as_f64().is_some_and(|m| m > 0.0),
        "{lines:?}"
    );
    if cfg!(target_os = "linux") {
        let cpu = lines[1..]
            .iter()
            .find(|l| l["type"] == "anomaly" && l["metric"] == "cpu")
            .unwrap_or_else(|| panic!("no CPU anomaly in {lines:?}"));
        assert_eq!(cpu["source"], "sampler");
        assert!(cpu["value"].as_f64().unwrap() > 0.0);
    }
}
