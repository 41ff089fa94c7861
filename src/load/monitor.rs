//! The [`LoadMonitor`]: one background thread ("ramify-load") per monitor
//! samples the enabled sources every `period`, combines them (maximum),
//! smooths the result (EWMA) and publishes the utilisation `n`, the per-CPU
//! loads and device-state events. The thread sleeps between samples, parks
//! while no run is in flight (after [`LoadConfig::idle_after`]), and is
//! stopped and joined when the monitor drops.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::allowed::allowed_cpus;
use super::config::{HostState, LoadConfig, LoadSource};
use super::report::{LoadEvent, Metric, Reporter, Source};
use super::sample::{current_tid, Sample, Sampler};
use super::smooth::{clamp01, combine, ewma, host_load, least_loaded, memory_pressure};

/// Events a subscriber can have waiting before further ones are dropped.
pub const EVENT_QUEUE: usize = 64;

/// Events kept for [`LoadMonitor::events_since`].
pub const RECENT_EVENTS: usize = 256;

/// The shortest sampling period honoured (shorter ones are raised to it).
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The first background sample comes this soon after start (or one period,
/// if shorter): the baseline taken at start stands until then, and a process
/// that lives less than one period (a short bench, a one-shot inference)
/// would otherwise keep a start-up transient as its load for its whole life.
pub const FIRST_SAMPLE_AFTER: Duration = Duration::from_millis(20);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// State shared by the monitor handle and its sampler thread.
#[derive(Debug)]
struct Shared {
    config: LoadConfig,
    n: AtomicU64,
    samples: AtomicU64,
    /// Bumped whenever a sample or a host push brings new values.
    generation: AtomicU64,
    cost_ns: AtomicU64,
    tid: AtomicU32,
    per_cpu: Mutex<Vec<f64>>,
    /// The CPUs last chosen for each count asked for.
    chosen: Mutex<std::collections::HashMap<usize, Vec<usize>>>,
    last: Mutex<Sample>,
    host: Mutex<Option<HostState>>,
    reporter: Mutex<Reporter>,
    subscribers: Mutex<Vec<SyncSender<LoadEvent>>>,
    /// The last [`RECENT_EVENTS`] events, numbered from 1, for runs to
    /// read what arrived since they last looked (no queue per run).
    recent: Mutex<std::collections::VecDeque<(u64, LoadEvent)>>,
    /// The number of the last event.
    event_seq: AtomicU64,
    /// Runs in flight ([`LoadMonitor::activity`]).
    active: AtomicUsize,
    /// When the last run ended (or the monitor started).
    last_active: Mutex<Instant>,
    /// True while the sampler is parked for idleness.
    parked: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn new(config: LoadConfig, n: f64) -> Shared {
        let reporter = Reporter::new(config.report.clone());
        Shared {
            config,
            n: AtomicU64::new(clamp01(n).to_bits()),
            samples: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            cost_ns: AtomicU64::new(0),
            tid: AtomicU32::new(0),
            per_cpu: Mutex::new(Vec::new()),
            chosen: Mutex::new(Default::default()),
            last: Mutex::new(Sample::default()),
            host: Mutex::new(None),
            reporter: Mutex::new(reporter),
            subscribers: Mutex::new(Vec::new()),
            recent: Mutex::new(std::collections::VecDeque::new()),
            event_seq: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            last_active: Mutex::new(Instant::now()),
            parked: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    /// Whether the sampler should park: no run in flight for `idle_after`.
    fn idle(&self) -> bool {
        match self.config.idle_after {
            Some(after) => {
                self.active.load(Ordering::SeqCst) == 0
                    && lock(&self.last_active).elapsed() >= after
            }
            None => false,
        }
    }

    fn set_n(&self, n: f64) {
        self.n.store(clamp01(n).to_bits(), Ordering::Relaxed);
    }

    /// Feeds metric values observed by `source` to the reporter and
    /// delivers the events without ever blocking: a full or closed
    /// subscriber queue loses the event (closed ones are forgotten).
    fn report(&self, values: &[(Metric, Option<f64>)], source: Source) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut events = Vec::new();
        {
            let mut r = lock(&self.reporter);
            for &(m, v) in values {
                if let Some(v) = v {
                    r.observe(m, source, v, &mut events);
                }
            }
        }
        if events.is_empty() {
            return;
        }
        {
            let mut recent = lock(&self.recent);
            for e in &events {
                let seq = self.event_seq.fetch_add(1, Ordering::SeqCst) + 1;
                if recent.len() == RECENT_EVENTS {
                    recent.pop_front();
                }
                recent.push_back((seq, e.clone()));
            }
        }
        let mut subs = lock(&self.subscribers);
        subs.retain(|tx| {
            events.iter().all(|e| match tx.try_send(e.clone()) {
                Ok(()) | Err(TrySendError::Full(_)) => true,
                Err(TrySendError::Disconnected(_)) => false,
            })
        });
    }

    /// The combined (unsmoothed) value of a sample; `None` when no enabled
    /// source has a value.
    fn combined(&self, s: &Sample) -> Option<f64> {
        let host = lock(&self.host).as_ref().and_then(host_load);
        combine(self.config.sources.iter().map(|src| match src {
            LoadSource::SystemCpu => s.system_cpu,
            LoadSource::RunQueue => s.run_queue,
            LoadSource::Runnable => s.runnable,
            LoadSource::Memory => s.memory_used.map(memory_pressure),
            LoadSource::Host => host,
        }))
    }

    /// Folds one sample into the state; returns the new smoothed value.
    fn absorb(&self, sample: Sample, smoothed: Option<f64>) -> Option<f64> {
        // Smooth from the published value: a host push may have raised it.
        let previous = smoothed.map(|_| f64::from_bits(self.n.load(Ordering::Relaxed)));
        let next = match self.combined(&sample) {
            Some(x) => Some(ewma(previous, x, self.config.smoothing)),
            None => smoothed,
        };
        if let Some(n) = next {
            self.set_n(n);
        }
        if !sample.per_cpu.is_empty() {
            *lock(&self.per_cpu) = sample.per_cpu.clone();
        }
        self.report(&sampled_metrics(&sample), Source::Sampler);
        *lock(&self.last) = sample;
        self.samples.fetch_add(1, Ordering::Relaxed);
        next
    }
}

/// The metric values a sample holds.
fn sampled_metrics(s: &Sample) -> [(Metric, Option<f64>); 4] {
    [
        (Metric::Cpu, s.system_cpu),
        (Metric::Memory, s.memory_used),
        (Metric::Battery, s.battery),
        (Metric::Thermal, s.thermal),
    ]
}

/// The metric values a host state holds.
fn host_metrics(h: &HostState) -> [(Metric, Option<f64>); 3] {
    [
        (Metric::Cpu, h.cpu_utilisation),
        (Metric::Battery, h.battery_level),
        (Metric::Thermal, h.thermal),
    ]
}

/// The sampler thread's loop: wait `period` ([`FIRST_SAMPLE_AFTER`] the
/// first time), or until told to stop; sample; publish. The first sample
/// replaces the start-up baseline; later ones are smoothed.
fn run(shared: Arc<Shared>, mut sampler: Sampler) {
    let mut smoothed = None;
    let tid = current_tid();
    sampler.exclude_thread(tid);
    shared.tid.store(tid.unwrap_or(0), Ordering::Relaxed);
    let period = shared.config.period.max(MIN_PERIOD);
    let mut stop = lock(&shared.stop);
    let mut wait = period.min(FIRST_SAMPLE_AFTER);
    loop {
        let deadline = Instant::now() + wait;
        wait = period;
        while !*stop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            stop = shared
                .wake
                .wait_timeout(stop, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        if *stop {
            return;
        }
        if shared.idle() {
            // Park until a run starts (it notifies under this lock, so the
            // wake-up cannot slip between the check and the wait), then
            // sample at once: the CPU figures then cover the parked time.
            shared.parked.store(true, Ordering::SeqCst);
            while !*stop && shared.active.load(Ordering::SeqCst) == 0 {
                stop = shared.wake.wait(stop).unwrap_or_else(|e| e.into_inner());
            }
            shared.parked.store(false, Ordering::SeqCst);
            if *stop {
                return;
            }
        }
        drop(stop);
        let t = Instant::now();
        let sample = sampler.sample();
        smoothed = shared.absorb(sample, smoothed);
        let busy = t.elapsed().saturating_sub(sampler.spread_sleep());
        let cost = u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX);
        shared.cost_ns.store(cost, Ordering::Relaxed);
        stop = lock(&shared.stop);
    }
}

/// Measures how busy the device is with work other than ours (the
/// utilisation `n` of the method), and reports device-state events.
///
/// A started monitor owns one sleeping background thread named
/// `ramify-load`, stopped and joined when the monitor is dropped (when the
/// last `Arc` goes). A fixed monitor has no thread and always reports its
/// fixed value.
#[derive(Debug)]
pub struct LoadMonitor {
    shared: Arc<Shared>,
    fixed: Option<f64>,
    /// The CPUs this process may run on, read when the monitor starts.
    allowed: Vec<usize>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl LoadMonitor {
    /// Starts a monitor sampling as `config` says.
    ///
    /// A baseline is taken synchronously here, so memory pressure, other
    /// processes' runnable threads (the median of 5 readings 1 ms apart:
    /// this first value stands until the next sample, which replaces it
    /// rather than being smoothed with it) and a later host push
    /// are reflected at once; the run-queue source needs an interval, so it
    /// counts from the first background sample, [`FIRST_SAMPLE_AFTER`] (or
    /// one `period`, if shorter) later, and the system and per-CPU CPU
    /// figures from the first sample at least
    /// [`CPU_WINDOW`](super::sample::CPU_WINDOW) after start (sysinfo
    /// renews them no more often). Until any
    /// enabled source has a value,
    /// [`utilisation`](Self::utilisation) is 0.
    pub fn start(config: LoadConfig) -> Arc<LoadMonitor> {
        let mut sampler = Sampler::new();
        if config.has(LoadSource::Runnable) {
            sampler.spread_runnable(5, Duration::from_millis(1));
        }
        let first = sampler.sample(); // no interval yet: memory and runnable only
                                      // Later samples: the median of 3 readings over 2 ms.
        sampler.spread_runnable(3, Duration::from_millis(1));
        let shared = Arc::new(Shared::new(config, 0.0));
        shared.absorb(first, None);
        let worker = shared.clone();
        // The baseline is a snapshot of a few milliseconds, not a window:
        // the first background sample replaces it instead of being
        // smoothed into it. Blended, a competitor runnable for the moment
        // the process started (onnxruntime's threads spin 40 ms after its
        // last run) kept half its weight for 300 ms of samples, and a
        // short-lived process ran its whole life on one thread.
        let thread = std::thread::Builder::new()
            .name("ramify-load".into())
            .spawn(move || run(worker, sampler))
            .ok();
        Arc::new(LoadMonitor {
            shared,
            fixed: None,
            allowed: allowed_cpus(),
            thread: Mutex::new(thread),
        })
    }

    /// A monitor that always reports `n` (clamped to [0, 1]) and samples
    /// nothing (for experiments, tests and the non-adaptive modes).
    pub fn fixed(n: f64) -> Arc<LoadMonitor> {
        let n = clamp01(n);
        Arc::new(LoadMonitor {
            shared: Arc::new(Shared::new(LoadConfig::default(), n)),
            fixed: Some(n),
            allowed: allowed_cpus(),
            thread: Mutex::new(None),
        })
    }

    /// The utilisation `n` in [0, 1]: the smoothed maximum of the enabled
    /// sources (or the fixed value).
    pub fn utilisation(&self) -> f64 {
        match self.fixed {
            Some(n) => n,
            None => f64::from_bits(self.shared.n.load(Ordering::Relaxed)),
        }
    }

    /// Records the host application's view of the device. With the `Host`
    /// source enabled, a state that makes the device busier raises the
    /// utilisation at once (the next fork sees it) and counts in every
    /// sample from then on. Its CPU, battery and thermal values are
    /// reported to subscribers at once, as events of [`Source::Host`].
    pub fn push_host(&self, state: HostState) {
        let values = host_metrics(&state);
        if self.fixed.is_none() && self.shared.config.has(LoadSource::Host) {
            if let Some(h) = host_load(&state) {
                self.shared.set_n(self.utilisation().max(h));
            }
        }
        *lock(&self.shared.host) = Some(state);
        self.shared.report(&values, Source::Host);
    }

    /// The metric values known now, by source: the last sample's and the
    /// last host state's (what a run's [`Baseline`](super::Baseline)
    /// starts from).
    pub fn readings(&self) -> Vec<(Metric, Source, f64)> {
        let sampled = sampled_metrics(&lock(&self.shared.last));
        let host = lock(&self.shared.host).as_ref().map(host_metrics);
        let sampled = sampled.into_iter().map(|(m, v)| (m, Source::Sampler, v));
        let host = host
            .into_iter()
            .flatten()
            .map(|(m, v)| (m, Source::Host, v));
        sampled
            .chain(host)
            .filter_map(|(m, s, v)| v.map(|v| (m, s, v)))
            .collect()
    }

    /// A counter bumped by every sample and host push: when it has not
    /// moved, [`readings`](Self::readings) has not either.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::SeqCst)
    }

    /// The last host state pushed, if any.
    pub fn host_state(&self) -> Option<HostState> {
        lock(&self.shared.host).clone()
    }

    /// The `k` least-loaded CPU indices (ties by index) among the CPUs this
    /// process may run on (its affinity mask when the monitor started), `k`
    /// clamped to their number, keeping the CPUs last chosen for `k` unless
    /// others are clearly less loaded
    /// ([`STAY_MARGIN`](super::smooth::STAY_MARGIN)); before the first
    /// per-CPU sample, and for fixed monitors, the first `k` of them.
    pub fn least_loaded_cpus(&self, k: usize) -> Vec<usize> {
        self.least_loaded_cpus_in(k, &self.allowed)
    }

    /// Like [`least_loaded_cpus`](Self::least_loaded_cpus), choosing among
    /// `allowed` only (a session's CPU set).
    pub fn least_loaded_cpus_in(&self, k: usize, allowed: &[usize]) -> Vec<usize> {
        let loads = lock(&self.shared.per_cpu).clone();
        if self.fixed.is_some() || loads.is_empty() {
            return allowed.iter().copied().take(k).collect();
        }
        let mut chosen = lock(&self.shared.chosen);
        let prev = chosen.get(&k).map(Vec::as_slice).unwrap_or_default();
        let pick = least_loaded(&loads, allowed, k, prev);
        chosen.insert(k, pick.clone());
        pick
    }

    /// How many CPUs the per-CPU loads (and so `n`) cover, once the first
    /// per-CPU sample is in: `n` times this is the other processes' load in
    /// CPUs. `None` before that sample and for fixed monitors.
    pub fn cpus_seen(&self) -> Option<usize> {
        Some(lock(&self.shared.per_cpu).len()).filter(|&c| c > 0)
    }

    /// Per-CPU loads in [0, 1] from the last sample (empty before the first,
    /// and for fixed monitors).
    pub fn per_cpu(&self) -> Vec<f64> {
        lock(&self.shared.per_cpu).clone()
    }

    /// The last raw sample (all sources, enabled or not).
    pub fn last_sample(&self) -> Sample {
        lock(&self.shared.last).clone()
    }

    /// Other processes' runnable threads per CPU at the last sample
    /// ([`Sample::runnable`]), without copying the rest of it.
    pub fn last_runnable(&self) -> Option<f64> {
        lock(&self.shared.last).runnable
    }

    /// How many samples were taken (the synchronous baseline included).
    pub fn samples(&self) -> u64 {
        self.shared.samples.load(Ordering::Relaxed)
    }

    /// How long the last background sample took (zero before the first),
    /// not counting the pauses between its runnable-thread readings.
    pub fn sample_cost(&self) -> Duration {
        Duration::from_nanos(self.shared.cost_ns.load(Ordering::Relaxed))
    }

    /// The configuration it samples with (the default one for fixed
    /// monitors).
    pub fn config(&self) -> &LoadConfig {
        &self.shared.config
    }

    /// True for a [`fixed`](Self::fixed) monitor.
    pub fn is_fixed(&self) -> bool {
        self.fixed.is_some()
    }

    /// The kernel thread id of the sampler thread (Linux), once it runs.
    pub fn sampler_tid(&self) -> Option<u32> {
        match self.shared.tid.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t),
        }
    }

    /// Marks a run in flight until the returned guard drops: a parked
    /// sampler wakes and samples at once, and the monitor parks again
    /// [`idle_after`](LoadConfig::idle_after) once no run is in flight.
    pub fn activity(&self) -> Activity<'_> {
        // Only a parked sampler is woken: waking a sampler that sleeps out
        // its period would cost a system call and a context switch per run.
        // The sampler sets `parked` before it reads `active`, and this reads
        // `parked` after it raised `active` (both SeqCst), so one of the two
        // sees the other; the notification is sent under the lock the
        // sampler holds from its check to its wait.
        if self.shared.active.fetch_add(1, Ordering::SeqCst) == 0
            && self.shared.parked.load(Ordering::SeqCst)
        {
            let _stop = lock(&self.shared.stop);
            self.shared.wake.notify_all();
        }
        Activity(&self.shared)
    }

    /// True while the sampler thread is parked because no run is in flight.
    pub fn is_parked(&self) -> bool {
        self.shared.parked.load(Ordering::SeqCst)
    }

    /// The number of the last device-state event (0 before the first).
    pub fn event_seq(&self) -> u64 {
        self.shared.event_seq.load(Ordering::SeqCst)
    }

    /// The events numbered after `seq` that are still kept (the last
    /// [`RECENT_EVENTS`]), in order, and the number of the last one.
    pub fn events_since(&self, seq: u64) -> (Vec<LoadEvent>, u64) {
        let recent = lock(&self.shared.recent);
        let last = recent.back().map_or(seq, |(n, _)| *n);
        let events = recent
            .iter()
            .filter(|(n, _)| *n > seq)
            .map(|(_, e)| e.clone())
            .collect();
        (events, last)
    }

    /// A queue of device-state events from now on. It is bounded
    /// ([`EVENT_QUEUE`]); the sampler never waits for a slow subscriber:
    /// events that find the queue full are dropped.
    pub fn subscribe(&self) -> Receiver<LoadEvent> {
        let (tx, rx) = sync_channel(EVENT_QUEUE);
        lock(&self.shared.subscribers).push(tx);
        rx
    }
}

/// A run in flight, from [`LoadMonitor::activity`] until dropped.
#[derive(Debug)]
pub struct Activity<'a>(&'a Shared);

impl Drop for Activity<'_> {
    fn drop(&mut self) {
        *lock(&self.0.last_active) = Instant::now();
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for LoadMonitor {
    fn drop(&mut self) {
        *lock(&self.shared.stop) = true;
        self.shared.wake.notify_all();
        let handle = self
            .thread
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}
