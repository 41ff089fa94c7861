//! Tests of the live monitor: its thread's lifetime, fixed monitors, host
//! pushes and event delivery.

use std::time::{Duration, Instant};

use super::*;

fn config(sources: Vec<LoadSource>, period_ms: u64) -> LoadConfig {
    LoadConfig {
        sources,
        period: Duration::from_millis(period_ms),
        smoothing: 1.0,
        idle_after: None,
        ..LoadConfig::default()
    }
}

fn wait_for(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn task_name(tid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

#[test]
fn fixed_monitor() {
    let m = LoadMonitor::fixed(0.4);
    assert_eq!(m.utilisation(), 0.4);
    assert!(m.is_fixed());
    let allowed = crate::load::allowed::allowed_cpus();
    assert_eq!(m.least_loaded_cpus(3), allowed[..allowed.len().min(3)]);
    assert_eq!(LoadMonitor::fixed(7.0).utilisation(), 1.0);
    assert_eq!(LoadMonitor::fixed(f64::NAN).utilisation(), 0.0);
    m.push_host(HostState {
        cpu_utilisation: Some(0.9),
        ..HostState::default()
    });
    assert_eq!(m.utilisation(), 0.4);
    assert_eq!(m.sampler_tid(), None);
}

#[test]
fn sampler_thread_runs_and_stops_on_drop() {
    let m = LoadMonitor::start(config(
        vec![LoadSource::SystemCpu, LoadSource::RunQueue],
        10,
    ));
    assert!(wait_for(|| m.samples() >= 3), "sampler never sampled");
    let n = m.utilisation();
    assert!((0.0..=1.0).contains(&n));
    if cfg!(target_os = "linux") {
        let tid = m.sampler_tid().expect("sampler tid");
        assert_eq!(task_name(tid).as_deref(), Some("ramify-load"));
        let k = m.least_loaded_cpus(usize::MAX);
        assert_eq!(k.len(), num_cpus::get().max(1).min(k.len().max(1)));
        let mut sorted = k.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), k.len());
        drop(m);
        // Dropping joined the thread: its task is gone (the kernel, or
        // qemu-user's thread under emulation, may take a moment after the
        // join to drop it from /proc).
        assert!(
            wait_for(|| task_name(tid).is_none()),
            "sampler thread survived its monitor"
        );
    }
}

#[test]
fn sampler_parks_while_no_run_is_in_flight_and_wakes_for_the_next() {
    let m = LoadMonitor::start(LoadConfig {
        idle_after: Some(Duration::from_millis(30)),
        ..config(vec![LoadSource::Memory], 5)
    });
    assert!(wait_for(|| m.is_parked()), "the sampler never parked");
    let parked_at = m.samples();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(m.samples(), parked_at, "a parked sampler sampled");
    // A run in flight wakes it at once and keeps it sampling.
    let run = m.activity();
    assert!(
        wait_for(|| m.samples() > parked_at),
        "a run did not wake it"
    );
    let during = m.samples();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!m.is_parked(), "parked during a run");
    assert!(m.samples() >= during + 3, "stopped sampling during a run");
    drop(run);
    assert!(wait_for(|| m.is_parked()), "did not park after the run");
    // Dropping a parked monitor still stops and joins its thread.
    drop(m);
}

#[test]
fn without_idle_after_the_sampler_never_parks() {
    let m = LoadMonitor::start(config(vec![LoadSource::Memory], 5));
    let first = m.samples();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!m.is_parked());
    assert!(m.samples() >= first + 3);
}

#[test]
fn thread_stops_when_last_arc_goes() {
    let m = LoadMonitor::start(config(vec![LoadSource::SystemCpu], 1000));
    let other = m.clone();
    assert!(wait_for(
        || m.sampler_tid().is_some() || !cfg!(target_os = "linux")
    ));
    let tid = m.sampler_tid();
    drop(m);
    if let Some(tid) = tid {
        assert!(task_name(tid).is_some(), "stopped while still owned");
    }
    // A long period must not delay the drop: the thread is woken.
    let t = Instant::now();
    drop(other);
    assert!(t.elapsed() < Duration::from_millis(500));
    if let Some(tid) = tid {
        // Joined; the kernel drops the task's /proc entry a moment after
        // the join returns.
        assert!(wait_for(|| task_name(tid).is_none()));
    }
}

#[test]
fn host_source_drives_utilisation() {
    let m = LoadMonitor::start(config(vec![LoadSource::Host], 5));
    assert_eq!(m.utilisation(), 0.0);
    m.push_host(HostState {
        cpu_utilisation: Some(0.3),
        thermal: Some(0.6),
        battery_level: Some(0.9),
    });
    assert!(
        wait_for(|| (m.utilisation() - 0.6).abs() < 1e-9),
        "{}",
        m.utilisation()
    );
    m.push_host(HostState {
        battery_level: Some(0.0),
        ..HostState::default()
    });
    assert!(wait_for(|| m.utilisation() == 1.0), "{}", m.utilisation());
}

#[test]
fn memory_source_counts_at_once() {
    let m = LoadMonitor::start(config(vec![LoadSource::Memory], 1000));
    let s = m.last_sample();
    if let Some(used) = s.memory_used {
        assert_eq!(m.utilisation(), smooth::memory_pressure(used));
    }
}

#[test]
fn host_events_are_delivered_without_blocking() {
    let m = LoadMonitor::fixed(0.0);
    let rx = m.subscribe();
    let dropped = m.subscribe();
    drop(dropped);
    m.push_host(HostState {
        battery_level: Some(0.5),
        ..HostState::default()
    });
    m.push_host(HostState {
        battery_level: Some(0.1),
        ..HostState::default()
    });
    let got: Vec<LoadEvent> = rx.try_iter().collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(matches!(
        got[0],
        LoadEvent::Anomaly {
            metric: Metric::Battery,
            ..
        }
    ));
    // Nobody reads: the queue fills and pushes still return.
    for i in 0..(3 * monitor::EVENT_QUEUE) {
        m.push_host(HostState {
            thermal: Some(if i % 2 == 0 { 0.95 } else { 0.1 }),
            ..HostState::default()
        });
    }
    assert_eq!(rx.try_iter().count(), monitor::EVENT_QUEUE);
}

#[test]
fn live_sample_cost_is_small() {
    let m = LoadMonitor::start(config(vec![LoadSource::SystemCpu, LoadSource::RunQueue], 5));
    assert!(wait_for(|| m.samples() >= 5));
    // Loose bound on a shared machine; the strict median check is in sample.rs.
    assert!(
        m.sample_cost() < Duration::from_millis(20),
        "{:?}",
        m.sample_cost()
    );
}

#[test]
fn a_busy_process_is_load_from_the_first_sample() {
    // The runnable-threads source needs no interval: a monitor started
    // while another process spins reports it at once, before the sampler
    // thread's first period has passed (here an hour).
    if !cfg!(target_os = "linux") || runnable::others_runnable(1).is_none() {
        return;
    }
    let Some(child) = super::spinner::SpinningChild::start() else {
        return;
    };
    let cpus = num_cpus::get().max(1) as f64;
    let seen: Vec<f64> = (0..5)
        .map(|_| {
            let m = LoadMonitor::start(config(vec![LoadSource::Runnable], 3_600_000));
            m.utilisation()
        })
        .collect();
    child.stop();
    // The spinning child is one runnable thread of another process: at
    // least 1/cpus (more when the machine is busier); a read racing with
    // our own threads' state changes may miss it, so most reads must see it.
    let hits = seen.iter().filter(|&&n| n >= 1.0 / cpus - 1e-9).count();
    assert!(hits >= 3, "loads seen {seen:?} on {cpus} CPUs");
}

#[test]
fn the_first_background_sample_comes_soon_after_start() {
    // However long the period (here an hour), the start-up baseline is
    // replaced within FIRST_SAMPLE_AFTER, so a short-lived process does not
    // keep a transient reading for its whole life.
    let m = LoadMonitor::start(config(vec![LoadSource::SystemCpu], 3_600_000));
    let start = Instant::now();
    assert!(wait_for(|| m.samples() >= 2), "no sample after start");
    assert!(start.elapsed() < Duration::from_secs(2));
    std::thread::sleep(super::monitor::FIRST_SAMPLE_AFTER * 5);
    assert_eq!(m.samples(), 2, "later samples wait one period");
}

#[test]
fn a_host_push_raises_the_load_at_once_and_keeps_it_through_samples() {
    let mut c = config(vec![LoadSource::Host], 10);
    c.smoothing = 0.3;
    let m = LoadMonitor::start(c);
    assert_eq!(m.utilisation(), 0.0);
    let generation = m.generation();
    m.push_host(HostState {
        cpu_utilisation: Some(0.8),
        battery_level: Some(0.5),
        ..HostState::default()
    });
    // At once, before any sample: the next fork sees it.
    assert_eq!(m.utilisation(), 0.8);
    assert!(m.generation() > generation);
    // Samples smooth from the pushed value, not from the one before it.
    let seen = m.samples();
    assert!(wait_for(|| m.samples() >= seen + 3));
    assert!((m.utilisation() - 0.8).abs() < 1e-9, "{}", m.utilisation());
    let readings = m.readings();
    assert!(
        readings.contains(&(Metric::Cpu, Source::Host, 0.8)),
        "{readings:?}"
    );
    assert!(readings.contains(&(Metric::Battery, Source::Host, 0.5)));
    // Without the Host source a push changes nothing.
    let quiet = LoadMonitor::start(config(vec![LoadSource::Memory], 1000));
    let before = quiet.utilisation();
    quiet.push_host(HostState {
        cpu_utilisation: Some(0.99),
        ..HostState::default()
    });
    assert_eq!(quiet.utilisation(), before);
}

#[test]
fn host_pushed_cpu_use_is_an_event_of_the_host() {
    let m = LoadMonitor::fixed(0.0);
    let rx = m.subscribe();
    m.push_host(HostState {
        cpu_utilisation: Some(0.95),
        thermal: Some(0.2),
        ..HostState::default()
    });
    let got: Vec<LoadEvent> = rx.try_iter().collect();
    assert_eq!(
        got,
        vec![LoadEvent::Anomaly {
            metric: Metric::Cpu,
            value: 0.95,
            threshold: 0.9,
            source: Source::Host,
        }]
    );
}

#[test]
fn events_since_a_number_are_kept_without_a_queue_per_reader() {
    let m = LoadMonitor::fixed(0.0);
    assert_eq!(m.event_seq(), 0);
    let push = |thermal: f64| {
        m.push_host(HostState {
            thermal: Some(thermal),
            ..HostState::default()
        })
    };
    push(0.1);
    push(0.95); // anomaly (and a change)
    let (got, last) = m.events_since(0);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(last, m.event_seq());
    assert!(m.events_since(last).0.is_empty());
    // Only the last RECENT_EVENTS are kept.
    for i in 0..monitor::RECENT_EVENTS {
        push(if i % 2 == 0 { 0.1 } else { 0.95 });
    }
    let (kept, _) = m.events_since(0);
    assert_eq!(kept.len(), monitor::RECENT_EVENTS);
}

#[test]
fn the_first_background_sample_replaces_a_transient_baseline() {
    // A competitor runnable only while the monitor starts (here a spinning
    // child killed right after) is gone from the first background sample:
    // that sample replaces the baseline. Smoothed into it with this
    // weight, the baseline would keep 99 % of its value.
    if !cfg!(target_os = "linux") || runnable::others_runnable(1).is_none() {
        return;
    }
    let cpus = num_cpus::get().max(1) as f64;
    let mut c = config(vec![LoadSource::Runnable], 3_600_000);
    c.smoothing = 0.01;
    // Other processes of a busy test machine may be runnable at either
    // moment: one attempt of three that starts busy and ends idle shows it.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let Some(child) = super::spinner::SpinningChild::start() else {
            return;
        };
        let m = LoadMonitor::start(c.clone());
        let baseline = m.utilisation();
        child.stop();
        assert!(wait_for(|| m.samples() >= 2), "no background sample");
        let after = m.utilisation();
        seen.push((baseline, after));
        if baseline >= 1.0 / cpus - 1e-9 && after < 0.9 * baseline {
            return;
        }
    }
    panic!("(baseline, first sample) on {cpus} CPUs: {seen:?}");
}
