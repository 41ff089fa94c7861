//! Thread pools for siblings: rayon pools created once per (parent pool,
//! position, size) and reused by every later run and fork, each optionally
//! pinned to the CPUs it was last given (core_affinity; no pinning where the
//! OS does not allow it, e.g. iOS), or given back the process's whole CPU
//! mask (unpinned). A pool's threads are ramify's own: dropping the pool
//! joins them, so nothing of ours runs after a session is gone.

use super::affinity::{self, Mask};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One reusable pool.
pub struct Pool {
    /// Unique id (0 is never used: it names the caller's thread).
    pub id: u64,
    /// Number of threads.
    pub size: usize,
    /// The rayon pool. Declared before `threads`: dropping it tells the
    /// workers to exit, and `_threads` then waits for them.
    pub pool: rayon::ThreadPool,
    held: Mutex<Held>,
    _threads: Joined,
}

/// Where a pool's threads are held.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    /// On the whole mask (the process's, or the session's CPU set).
    Whole,
    /// Thread i on CPU i (mod the count) of these.
    Each(Vec<usize>),
    /// Every thread free to move among these CPUs.
    Within(Vec<usize>),
}

/// The pool's threads, joined on drop (except the dropping thread itself,
/// should the last handle go on one of them).
struct Joined(Vec<JoinHandle<()>>);

impl Drop for Joined {
    fn drop(&mut self) {
        let me = std::thread::current().id();
        for h in self.0.drain(..) {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pool#{}({} threads)", self.id, self.size)
    }
}

impl Pool {
    /// A pool of `size` threads named `{name}-{i}`, spawned and joined by
    /// ramify (rayon's own threads would outlive the pool for a while).
    pub fn new(id: u64, size: usize, name: &str) -> crate::Result<Pool> {
        Pool::confined(id, size, name, None)
    }

    /// Like [`new`](Self::new), with every thread confined to `mask` from
    /// its start (a session's CPU set) where the OS allows it.
    fn confined(id: u64, size: usize, name: &str, mask: Option<Mask>) -> crate::Result<Pool> {
        let size = size.max(1);
        let mut handles = Vec::with_capacity(size);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(size)
            .spawn_handler(|thread| {
                let mut b = std::thread::Builder::new();
                if let Some(n) = thread.name() {
                    b = b.name(n.to_string());
                }
                if let Some(bytes) = thread.stack_size() {
                    b = b.stack_size(bytes);
                }
                handles.push(b.spawn(move || {
                    if let Some(m) = &mask {
                        affinity::set(m);
                    }
                    thread.run()
                })?);
                Ok(())
            })
            .thread_name({
                let name = name.to_string();
                move |i| format!("{name}-{i}")
            })
            .build()
            .map_err(|e| crate::Error::Config(format!("cannot start {size} threads: {e}")))?;
        Ok(Pool {
            id,
            size,
            pool,
            held: Mutex::new(Held::Whole),
            _threads: Joined(handles),
        })
    }

    /// Pins thread i of the pool to `cpus[i % len]`, unless it is already so
    /// pinned. Returns false where pinning is unsupported.
    pub fn pin(&self, cpus: &[usize]) -> bool {
        if cpus.is_empty() {
            return false;
        }
        self.hold(Held::Each(cpus.to_vec()), |index| {
            core_affinity::set_for_current(core_affinity::CoreId {
                id: cpus[index % cpus.len()],
            })
        })
    }

    /// Lets every thread of the pool run on any of `cpus` and no other
    /// (where a placement keeps the other cores idle but the device is too
    /// busy to pin a thread per core). Returns false where masks are
    /// unsupported.
    pub fn confine(&self, cpus: &[usize]) -> bool {
        let Some(mask) = affinity::of_cpus(cpus) else {
            return false;
        };
        self.hold(Held::Within(cpus.to_vec()), |_| affinity::set(&mask))
    }

    /// Gives every thread of a pinned or confined pool the whole `mask`
    /// back (nothing to do when it has it). Best effort, like
    /// [`pin`](Self::pin).
    pub fn unpin(&self, mask: &Mask) {
        self.hold(Held::Whole, |_| affinity::set(mask));
    }

    /// Moves every thread to `target` with `apply(thread index)`, unless it
    /// is already there; true when every thread moved (or none had to).
    fn hold(&self, target: Held, apply: impl Fn(usize) -> bool + Sync) -> bool {
        // Never wait for this lock: `broadcast` below blocks, and a rayon
        // worker blocked there runs other queued jobs meanwhile, which may
        // be another run reaching this same pool. Moving is best effort, so
        // while another thread moves the pool, this one leaves it to that
        // thread.
        let mut current = match self.held.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return true,
        };
        if *current == target {
            return true;
        }
        let ok = AtomicU64::new(0);
        self.pool.broadcast(|ctx| {
            if apply(ctx.index()) {
                ok.fetch_add(1, Ordering::Relaxed);
            }
        });
        let all = ok.load(Ordering::Relaxed) as usize == self.size;
        if all {
            *current = target;
        }
        all
    }

    /// True while the pool's threads are pinned one per CPU.
    pub fn is_pinned(&self) -> bool {
        matches!(
            *self.held.lock().unwrap_or_else(|e| e.into_inner()),
            Held::Each(_)
        )
    }
}

/// The set of pools of one scheduler.
#[derive(Debug)]
pub struct Pools {
    pools: Mutex<HashMap<(u64, usize, usize), Arc<Pool>>>,
    next_id: AtomicU64,
    whole: Option<Mask>,
    confine: Option<Mask>,
}

impl Default for Pools {
    fn default() -> Self {
        Pools::new()
    }
}

impl Pools {
    /// An empty set; the calling thread's CPU mask is what unpinned pools
    /// get back.
    pub fn new() -> Pools {
        Pools {
            pools: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            whole: affinity::current(),
            confine: None,
        }
    }

    /// An empty set whose threads only ever run on `cpus` (unpinned pools
    /// get that set as their mask). Where masks are unsupported (iOS), the
    /// set is not enforced.
    pub fn on_cpus(cpus: &[usize]) -> Pools {
        let mask = affinity::of_cpus(cpus);
        Pools {
            pools: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            whole: mask.or_else(affinity::current),
            confine: mask,
        }
    }

    /// Unpins `pool` (see [`Pool::unpin`]), where the mask is known.
    pub fn unpin(&self, pool: &Pool) {
        if let Some(mask) = &self.whole {
            pool.unpin(mask);
        }
    }

    /// The pool for slot `position` of a fork run from pool `parent` (0 for
    /// the caller's thread), with `size` threads; created on first use.
    pub fn get(&self, parent: u64, position: usize, size: usize) -> crate::Result<Arc<Pool>> {
        let size = size.max(1);
        let mut map = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = map.get(&(parent, position, size)) {
            return Ok(p.clone());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let p = Arc::new(Pool::confined(
            id,
            size,
            &format!("ramify-p{id}"),
            self.confine,
        )?);
        map.insert((parent, position, size), p.clone());
        Ok(p)
    }

    /// Total threads across all pools created so far.
    pub fn thread_count(&self) -> usize {
        self.pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|p| p.size)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_are_reused() {
        let pools = Pools::new();
        let a = pools.get(0, 0, 2).unwrap();
        let b = pools.get(0, 0, 2).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = pools.get(0, 1, 2).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(a.pool.current_num_threads(), 2);
        assert_eq!(pools.thread_count(), 4);
    }

    /// How many of this process's threads have a name starting with `prefix`.
    #[cfg(target_os = "linux")]
    fn threads_named(prefix: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.starts_with(prefix))
            .count()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dropping_a_pool_joins_its_threads() {
        let pool = Pool::new(7, 3, "ramify-jointest").unwrap();
        assert_eq!(pool.pool.install(rayon::current_num_threads), 3);
        pool.pool.broadcast(|_| ());
        // All three ran a job; their /proc entries are read while other
        // tests start and end threads, which once counted two (CI): look
        // again for up to a second.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while threads_named("ramify-jointest") != 3 && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(threads_named("ramify-jointest"), 3);
        drop(pool);
        // The drop returned only after they exited; the kernel drops an
        // exited thread's /proc entry a moment after a join returns.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while threads_named("ramify-jointest") > 0 && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(threads_named("ramify-jointest"), 0);
    }

    #[test]
    fn pinned_pools_are_unpinned_to_the_whole_mask() {
        let Some(whole) = affinity::current() else {
            return;
        };
        let pools = Pools::new();
        let p = pools.get(0, 0, 2).unwrap();
        if !p.pin(&[0, 0]) {
            return; // pinning refused here
        }
        assert!(p.is_pinned());
        let masks = |p: &Pool| {
            let seen = Mutex::new(Vec::new());
            p.pool.broadcast(|_| {
                let n = affinity::current().map_or(0, |m| affinity::count(&m));
                seen.lock().unwrap().push(n);
            });
            seen.into_inner().unwrap()
        };
        assert_eq!(masks(&p), vec![1, 1]);
        pools.unpin(&p);
        assert!(!p.is_pinned());
        let n = affinity::count(&whole);
        assert_eq!(masks(&p), vec![n, n]);
    }
}
