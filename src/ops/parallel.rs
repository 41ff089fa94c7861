//! How operators split their work over the current rayon pool, through one
//! type-erased core.
//!
//! Every parallel loop in the operators numbers its tasks `0..n` and hands
//! them to [`run_tasks`], which takes the task body as `&dyn Task` (any
//! `Fn(usize) + Sync` closure). So
//! rayon's job, latch and splitting code is compiled once for the whole
//! library. Before, each closure passed to a parallel iterator made its own
//! copy of that machinery, once per element type of a generic kernel: a
//! large share of the shipped library's size. The helpers below are thin
//! generic shells that turn slices into numbered tasks and back.
//!
//! A split depends on the thread count only in where the outputs are cut,
//! never in how an element is computed, so results stay bit-identical on
//! every pool size.

mod steps;

pub(crate) use steps::par_steps;

use std::cell::Cell;

thread_local! {
    /// The most threads an operator started on this thread may split its
    /// work for (0: no cap beyond the pool's).
    static THREAD_CAP: Cell<usize> = const { Cell::new(0) };
}

/// The threads the operator being run splits its work for: the current
/// rayon pool's, or fewer under [`with_thread_cap`].
pub fn op_threads() -> usize {
    match THREAD_CAP.with(Cell::get) {
        // No need to ask rayon, which outside any pool would start its
        // global one: threads an application unloading the library (or a
        // one-thread run on its own thread) never asked for.
        1 => 1,
        0 => rayon::current_num_threads(),
        cap => cap.min(rayon::current_num_threads()),
    }
}

/// Runs `f` with the operators it starts on this thread split for at most
/// `cap` threads (at least 1): the executor runs a one-CPU sibling as a
/// task of a larger pool this way. The previous cap is restored after.
pub fn with_thread_cap<R>(cap: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREAD_CAP.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(THREAD_CAP.with(|c| c.replace(cap.max(1))));
    f()
}

/// Minimum work items per parallel task, so tiny operators stay on one thread.
pub const MIN_PARALLEL_GRAIN: usize = 1 << 14;

/// Tasks per thread a parallel kernel splits its work into, where the work
/// is large enough. More tasks than threads make the split robust to a
/// preempted thread (another process took its core): rayon's work stealing
/// lets the running threads take the tasks it has not started, so the
/// join waits only for the one task it is in, not for its whole share.
pub const TASKS_PER_THREAD: usize = 4;

/// Tasks for `items` independent work items on `threads` threads:
/// [`TASKS_PER_THREAD`] per thread, at most one per item, at least one.
pub fn task_count(items: usize, threads: usize) -> usize {
    if threads <= 1 {
        return 1;
    }
    threads.saturating_mul(TASKS_PER_THREAD).min(items).max(1)
}

/// A numbered task: the one-method trait object [`run_tasks`] takes. Every
/// `Fn(usize) + Sync` closure is one. Not `dyn Fn`: its vtable carries
/// `call_mut` and a `call_once` shim too, compiled for every closure that
/// becomes one (about a thousand in the library), though never called.
pub(crate) trait Task: Sync {
    /// Runs task `i`.
    fn run(&self, i: usize);
}

impl<F: Fn(usize) + Sync> Task for F {
    #[inline]
    fn run(&self, i: usize) {
        self(i)
    }
}

/// Runs `task.run(i)` once for every `i < n`: in parallel on the current
/// pool, one rayon job per task, when it has more than one thread for
/// operators ([`op_threads`]); in order on this thread otherwise. Tasks
/// must write disjoint outputs.
///
/// One rayon job per task (`with_max_len(1)`): left to rayon's adaptive
/// splitting, a thread would take runs of tasks as one job, and a
/// preempted thread would hold the tasks of its run.
///
/// This is the only function here that instantiates rayon's machinery;
/// it is never inlined, so no caller makes its own copy.
#[inline(never)]
pub(crate) fn run_tasks(n: usize, task: &dyn Task) {
    use rayon::prelude::*;
    if n <= 1 || op_threads() <= 1 {
        (0..n).for_each(|i| task.run(i));
    } else {
        (0..n)
            .into_par_iter()
            .with_max_len(1)
            .for_each(|i| task.run(i));
    }
}

/// Runs `f(i)` for every `i < n` (see [`run_tasks`]).
#[inline]
pub(crate) fn par_for(n: usize, f: impl Fn(usize) + Sync) {
    run_tasks(n, &f);
}

/// A raw pointer that may cross threads; every task writes a disjoint part.
#[derive(Debug)]
pub(crate) struct SendPtr<T>(pub *mut T);

// Copy for every `T` (a derive would ask `T: Copy`).
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: used only to hand disjoint output regions to parallel tasks.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The mutable slice `[start, start + len)` of the pointed-to buffer.
    ///
    /// # Safety
    /// The range must lie inside the buffer, and no other live reference may
    /// overlap it.
    pub(crate) unsafe fn slice<'a>(self, start: usize, len: usize) -> &'a mut [T] {
        // SAFETY: the range lies inside the buffer and nothing else
        // borrows it (the contract).
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }

    /// The pointer `off` elements further (no bounds check until used).
    pub(crate) fn offset(self, off: usize) -> SendPtr<T> {
        SendPtr(self.0.wrapping_add(off))
    }
}

/// Cuts `out` into chunks of `chunk` elements (the last may be shorter) and
/// runs `f(i, chunk_i)` on each, in parallel (see [`run_tasks`]).
pub(crate) fn par_chunks<T: Send>(out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let chunk = chunk.max(1);
    run_chunks(out, chunk, out.len().div_ceil(chunk), &f);
}

/// A task on one chunk of a slice, as [`run_chunks`] takes it (a
/// one-method trait object, for the reason [`Task`] gives).
trait ChunkTask<T>: Sync {
    /// Runs task `i` on its chunk.
    fn run(&self, i: usize, chunk: &mut [T]);
}

impl<T, F: Fn(usize, &mut [T]) + Sync> ChunkTask<T> for F {
    #[inline]
    fn run(&self, i: usize, chunk: &mut [T]) {
        self(i, chunk)
    }
}

/// Runs `f(i, chunk_i)` for the first `tasks` chunks of `chunk` elements of
/// `out` (cut at its end: past it a chunk is empty). Generic over the
/// element type only: the task body comes as a trait object, so the
/// slicing here is compiled once per element type, not once per caller's
/// closure.
fn run_chunks<T: Send>(out: &mut [T], chunk: usize, tasks: usize, f: &dyn ChunkTask<T>) {
    let (len, chunk) = (out.len(), chunk.max(1));
    let base = SendPtr(out.as_mut_ptr());
    run_tasks(tasks, &|i: usize| {
        let start = i.saturating_mul(chunk).min(len);
        // SAFETY: task i alone gets elements start .. start + chunk (cut
        // at the end of `out`), and `out` stays mutably borrowed until
        // every task has returned.
        f.run(i, unsafe { base.slice(start, chunk.min(len - start)) })
    });
}

/// Cuts `a` and `b` into chunks of `ca` and `cb` elements and runs
/// `f(i, a_i, b_i)` on the i-th pair, in parallel; as many tasks as the
/// shorter of the two has chunks.
pub(crate) fn par_chunk_pairs<A: Send, B: Send>(
    a: &mut [A],
    ca: usize,
    b: &mut [B],
    cb: usize,
    f: impl Fn(usize, &mut [A], &mut [B]) + Sync,
) {
    let (la, lb, ca, cb) = (a.len(), b.len(), ca.max(1), cb.max(1));
    let (pa, pb) = (SendPtr(a.as_mut_ptr()), SendPtr(b.as_mut_ptr()));
    run_tasks(la.div_ceil(ca).min(lb.div_ceil(cb)), &|i: usize| {
        let (sa, sb) = (i * ca, i * cb);
        // SAFETY: as in `par_chunks`, for each of the two slices.
        let (x, y) = unsafe { (pa.slice(sa, ca.min(la - sa)), pb.slice(sb, cb.min(lb - sb))) };
        f(i, x, y)
    });
}

/// `f(i)` for every `i < n`, in order, computed in parallel in tasks of at
/// least `min_per_task` items ([`task_count`] tasks for the pool at most).
pub(crate) fn par_collect<R: Send>(
    n: usize,
    min_per_task: usize,
    f: impl Fn(usize) -> R + Sync,
) -> Vec<R> {
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(n).collect();
    let per = n
        .div_ceil(task_count(n, op_threads()))
        .max(min_per_task)
        .max(1);
    par_chunks(&mut slots, per, |t, chunk| {
        for (j, slot) in chunk.iter_mut().enumerate() {
            *slot = Some(f(t * per + j));
        }
    });
    // Every slot was filled above.
    slots.into_iter().flatten().collect()
}

/// Splits `out` into contiguous chunks of whole rows of `row` elements and
/// fills them in parallel on the current rayon pool: `f(first_row, chunk)`.
/// Each output element is written by exactly one call, so the result does not
/// depend on the number of threads.
pub fn par_rows<T: Send>(out: &mut [T], row: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    par_row_blocks(out, row, 1, f)
}

/// As [`par_rows`], but every chunk but the last starts and ends on a
/// multiple of `block` rows: a kernel that runs rows `block` at a time (a
/// vector lane per row) fills whole blocks in every task. Cut anywhere, a
/// 72-channel depthwise layer on 16-lane blocks split into 8 tasks of 9
/// planes ran 8 part-empty blocks where one thread runs 5, and was slower
/// on two threads than on one.
pub(crate) fn par_row_blocks<T: Send>(
    out: &mut [T],
    row: usize,
    block: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let (row, block) = (row.max(1), block.max(1));
    let rows = out.len() / row;
    let threads = op_threads();
    let blocks = rows.div_ceil(block);
    // One call site of `f` for both cases (one task on one thread), so its
    // body is compiled once.
    let (rows_per, chunk, tasks) = if threads <= 1 || out.len() < MIN_PARALLEL_GRAIN || blocks < 2 {
        (0, out.len(), 1)
    } else {
        let rows_per = blocks.div_ceil(task_count(blocks, threads)) * block;
        (rows_per, rows_per * row, out.len().div_ceil(rows_per * row))
    };
    run_chunks(out, chunk, tasks, &|i: usize, c: &mut [T]| {
        f(i * rows_per, c)
    });
}

/// Runs `f(start, span)` over equal spans of `out` (multiples of 1024
/// elements, at least [`MIN_PARALLEL_GRAIN`]) in parallel on the current
/// rayon pool, for element-wise work whose row structure does not matter.
pub fn par_spans<T: Send>(out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    let threads = op_threads();
    // One call site of `f`, as in `par_rows`.
    let (span, tasks) = if threads <= 1 || out.len() < 2 * MIN_PARALLEL_GRAIN {
        (out.len(), 1)
    } else {
        let span = out
            .len()
            .div_ceil(task_count(out.len(), threads))
            .next_multiple_of(1024)
            .max(MIN_PARALLEL_GRAIN);
        (span, out.len().div_ceil(span))
    };
    run_chunks(out, span, tasks, &|i: usize, c: &mut [T]| f(i * span, c));
}

#[cfg(test)]
mod tests;
