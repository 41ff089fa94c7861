//! A session's CPU set confines its threads: in a process of their own (no
//! other test's session runs here), every pool thread may run only on the
//! CPUs of the set.

mod common;

use common::*;
use ramify::{available_cpus, Error, SessionBuilder, Tensor};

/// The CPUs each of ramify's pool threads may run on, from /proc.
#[cfg(target_os = "linux")]
fn pool_thread_masks() -> Vec<String> {
    let mut masks = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("ramify-p") {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        if let Some(list) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            masks.push(list.trim().to_string());
        }
    }
    masks
}

#[cfg(target_os = "linux")]
#[test]
fn a_cpu_set_confines_the_sessions_threads() {
    let last = *available_cpus().last().unwrap();
    let s = SessionBuilder::new()
        .cpu_set([last])
        .build_from_bytes(&bytes(&relu_add_model()))
        .unwrap();
    assert_eq!((s.cpus(), s.cpu_set()), (1, vec![last]));
    let x = Tensor::from_vec(&[1, 4], vec![1.0f32, -2.0, 3.0, -4.0]).unwrap();
    s.run([("x", x)]).unwrap();
    let masks = pool_thread_masks();
    assert!(!masks.is_empty(), "the session has pool threads");
    assert!(
        masks.iter().all(|m| *m == last.to_string()),
        "threads outside CPU {last}: {masks:?}"
    );
    drop(s);

    for bad in [vec![usize::MAX], vec![], vec![last, last]] {
        let err = SessionBuilder::new()
            .cpu_set(bad.clone())
            .build_from_bytes(&bytes(&relu_add_model()))
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{bad:?}: {err:?}");
    }
}
