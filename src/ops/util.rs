//! Helpers shared by operator implementations: input access, axis and
//! broadcast rules, float-type dispatch, and deterministic work splitting.

use crate::error::{Error, Result};
use crate::ir::{Fact, InferInput};
use crate::tensor::Tensor;

/// Input `i`, which the operator requires.
pub fn input<'a>(op: &str, inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| Error::op(op, format!("required input {i} is missing")))
}

/// Input `i` if present (optional inputs).
pub fn opt_input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

/// The fact of input `i`, which the operator requires.
pub fn fact<'a>(op: &str, inputs: &[InferInput<'a>], i: usize) -> Result<&'a Fact> {
    inputs
        .get(i)
        .and_then(|x| x.fact)
        .ok_or_else(|| Error::op(op, format!("required input {i} is missing")))
}

/// The fact of input `i` if present.
pub fn opt_fact<'a>(inputs: &[InferInput<'a>], i: usize) -> Option<&'a Fact> {
    inputs.get(i).and_then(|x| x.fact)
}

/// The constant value of input `i`, if it is a constant.
pub fn const_value<'a>(inputs: &[InferInput<'a>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).and_then(|x| x.value)
}

/// Normalizes a possibly negative axis against `rank`.
pub fn axis(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) {
        return Err(Error::op(
            op,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(a as usize)
}

/// Normalizes a list of possibly negative axes against `rank`.
pub fn axes(op: &str, list: &[i64], rank: usize) -> Result<Vec<usize>> {
    list.iter().map(|&a| axis(op, a, rank)).collect()
}

/// The numpy-style broadcast of two shapes.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        *o = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::op(
                op,
                format!("shapes {a:?} and {b:?} do not broadcast"),
            ));
        };
    }
    Ok(out)
}

/// The broadcast of several shapes.
pub fn broadcast_all(op: &str, shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = Vec::new();
    for s in shapes {
        out = broadcast_shapes(op, &out, s)?;
    }
    Ok(out)
}

/// Broadcasts the facts of all present inputs; the type is input 0's.
pub fn infer_broadcast(op: &str, inputs: &[InferInput]) -> Result<Fact> {
    let first = fact(op, inputs, 0)?;
    let mut shapes = Vec::new();
    for f in inputs.iter().filter_map(|x| x.fact) {
        match &f.shape {
            Some(s) => shapes.push(s.as_slice()),
            None => return Ok(Fact::unknown_shape(first.dtype)),
        }
    }
    Ok(Fact::new(first.dtype, broadcast_all(op, &shapes)?))
}

/// Output 0 has input 0's fact (elementwise unary operators).
pub fn infer_same(op: &str, inputs: &[InferInput]) -> Result<Vec<Fact>> {
    Ok(vec![fact(op, inputs, 0)?.clone()])
}

/// The element count of output `i`, 0 when unknown.
pub fn out_len(outputs: &[Fact], i: usize) -> u64 {
    outputs.get(i).and_then(|f| f.len()).unwrap_or(0) as u64
}

/// Rejects an input whose type is not floating point.
pub fn require_float(op: &str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(Error::op(
            op,
            format!("expected a floating-point input, found {}", t.dtype()),
        ))
    }
}

/// Runs `$body` with `$a` bound to the array of a floating-point tensor
/// (generic over f32, f64, f16, bf16) and wraps the resulting array back
/// into a tensor of the same type; other types are an error.
#[macro_export]
#[doc(hidden)]
macro_rules! float_map {
    ($op:expr, $t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::Tensor::F32($a) => Ok($crate::Tensor::F32($body)),
            $crate::Tensor::F64($a) => Ok($crate::Tensor::F64($body)),
            $crate::Tensor::F16($a) => Ok($crate::Tensor::F16($body)),
            $crate::Tensor::BF16($a) => Ok($crate::Tensor::BF16($body)),
            other => Err($crate::Error::op(
                $op,
                format!("expected a floating-point input, found {}", other.dtype()),
            )),
        }
    };
}

/// Like [`float_map!`] for numeric types: floats and all integer types.
#[macro_export]
#[doc(hidden)]
macro_rules! numeric_map {
    ($op:expr, $t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::Tensor::F32($a) => Ok($crate::Tensor::F32($body)),
            $crate::Tensor::F64($a) => Ok($crate::Tensor::F64($body)),
            $crate::Tensor::F16($a) => Ok($crate::Tensor::F16($body)),
            $crate::Tensor::BF16($a) => Ok($crate::Tensor::BF16($body)),
            $crate::Tensor::I8($a) => Ok($crate::Tensor::I8($body)),
            $crate::Tensor::I16($a) => Ok($crate::Tensor::I16($body)),
            $crate::Tensor::I32($a) => Ok($crate::Tensor::I32($body)),
            $crate::Tensor::I64($a) => Ok($crate::Tensor::I64($body)),
            $crate::Tensor::U8($a) => Ok($crate::Tensor::U8($body)),
            $crate::Tensor::U16($a) => Ok($crate::Tensor::U16($body)),
            $crate::Tensor::U32($a) => Ok($crate::Tensor::U32($body)),
            $crate::Tensor::U64($a) => Ok($crate::Tensor::U64($body)),
            other => Err($crate::Error::op(
                $op,
                format!("expected a numeric input, found {}", other.dtype()),
            )),
        }
    };
}

thread_local! {
    /// The most threads an operator started on this thread may split its
    /// work for (0: no cap beyond the pool's).
    static THREAD_CAP: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The threads the operator being run splits its work for: the current
/// rayon pool's, or fewer under [`with_thread_cap`].
pub fn op_threads() -> usize {
    let pool = rayon::current_num_threads();
    match THREAD_CAP.with(std::cell::Cell::get) {
        0 => pool,
        cap => cap.min(pool),
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
/// The split depends on the thread count only in where outputs are cut,
/// never in how any element is computed, so results stay bit-identical.
pub const TASKS_PER_THREAD: usize = 4;

/// Tasks for `items` independent work items on `threads` threads:
/// [`TASKS_PER_THREAD`] per thread, at most one per item, at least one.
pub fn task_count(items: usize, threads: usize) -> usize {
    if threads <= 1 {
        return 1;
    }
    threads.saturating_mul(TASKS_PER_THREAD).min(items).max(1)
}

/// Splits `out` into contiguous chunks of whole rows of `row` elements and
/// fills them in parallel on the current rayon pool: `f(first_row, chunk)`.
/// Each output element is written by exactly one call, so the result does not
/// depend on the number of threads.
pub fn par_rows<T: Send>(out: &mut [T], row: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    let row = row.max(1);
    let rows = out.len() / row;
    let threads = op_threads();
    if threads <= 1 || out.len() < MIN_PARALLEL_GRAIN || rows < 2 {
        f(0, out);
        return;
    }
    let rows_per = rows.div_ceil(task_count(rows, threads));
    // One rayon job per chunk (`with_max_len(1)`): left to rayon's
    // adaptive splitting, a thread would take runs of chunks as one job,
    // and a preempted thread would hold the chunks of its run.
    out.par_chunks_mut(rows_per * row)
        .with_max_len(1)
        .enumerate()
        .for_each(|(i, chunk)| f(i * rows_per, chunk));
}

/// Runs `f(start, span)` over equal spans of `out` (multiples of 1024
/// elements, at least [`MIN_PARALLEL_GRAIN`]) in parallel on the current
/// rayon pool, for element-wise work whose row structure does not matter.
pub fn par_spans<T: Send>(out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    let threads = op_threads();
    if threads <= 1 || out.len() < 2 * MIN_PARALLEL_GRAIN {
        f(0, out);
        return;
    }
    let span = out
        .len()
        .div_ceil(task_count(out.len(), threads))
        .next_multiple_of(1024)
        .max(MIN_PARALLEL_GRAIN);
    out.par_chunks_mut(span)
        .with_max_len(1)
        .enumerate()
        .for_each(|(i, chunk)| f(i * span, chunk));
}

/// `s` as the f32 slice it is, when `T` is f32.
pub(crate) fn as_f32<T: 'static>(s: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: T is f32: same layout and length.
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// `out` as the f32 slice it is, when `T` is f32.
pub(crate) fn as_f32_mut<T: 'static>(out: &mut [T]) -> Option<&mut [f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: T is f32: same layout and length.
        .then(|| unsafe {
            std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(
            broadcast_shapes("t", &[2, 1, 3], &[4, 1]).unwrap(),
            vec![2, 4, 3]
        );
        assert_eq!(broadcast_shapes("t", &[], &[5]).unwrap(), vec![5]);
        assert!(broadcast_shapes("t", &[2, 3], &[4, 3]).is_err());
    }

    #[test]
    fn axis_rules() {
        assert_eq!(axis("t", -1, 4).unwrap(), 3);
        assert_eq!(axis("t", 0, 1).unwrap(), 0);
        assert!(axis("t", 4, 4).is_err());
        assert!(axis("t", -5, 4).is_err());
    }

    /// Operators split for the pool's threads, or for the cap while one
    /// is set; the previous cap comes back after, even after a panic.
    #[test]
    fn a_thread_cap_holds_operators_to_fewer_threads() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            assert_eq!(op_threads(), 3);
            with_thread_cap(1, || {
                assert_eq!(op_threads(), 1);
                with_thread_cap(2, || assert_eq!(op_threads(), 2));
                assert_eq!(op_threads(), 1);
                // A cap above the pool's threads leaves the pool's.
                with_thread_cap(8, || assert_eq!(op_threads(), 3));
            });
            let caught = std::panic::catch_unwind(|| with_thread_cap(1, || panic!("in op")));
            assert!(caught.is_err());
            assert_eq!(op_threads(), 3);
            // A capped row split runs as one call.
            let mut v = vec![0u8; 1 << 16];
            let calls = std::sync::atomic::AtomicUsize::new(0);
            with_thread_cap(1, || {
                par_rows(&mut v, 16, |_, _| {
                    calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                })
            });
            assert_eq!(calls.into_inner(), 1);
        });
    }

    /// Runs `split` on a 2-thread pool, whose first task stalls as a
    /// preempted thread would, and returns (tasks, tasks run by a thread
    /// other than the stalled one). `split` calls its argument once per
    /// task with the task's first item.
    fn with_a_stalled_thread(split: impl Fn(&(dyn Fn(usize) + Sync)) + Sync) -> (usize, usize) {
        use std::sync::Mutex;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let ran: Mutex<Vec<(usize, Option<usize>)>> = Mutex::new(Vec::new());
        pool.install(|| {
            split(&|first| {
                if first == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(150));
                }
                let thread = rayon::current_thread_index();
                ran.lock().unwrap().push((first, thread));
            })
        });
        let ran = ran.into_inner().unwrap();
        let stalled = ran.iter().find(|r| r.0 == 0).unwrap().1;
        (ran.len(), ran.iter().filter(|r| r.1 != stalled).count())
    }

    /// Work is split into more tasks than threads, and while one thread is
    /// held up (preempted) in its first task the other takes every task it
    /// had not started: the join waits for one task, not half the work.
    #[test]
    fn a_stalled_threads_share_is_taken_by_the_other() {
        let (tasks, others) = with_a_stalled_thread(|task| {
            let mut v = vec![0u8; 1 << 16];
            par_rows(&mut v, 64, |first, _| task(first));
        });
        assert_eq!(tasks, task_count(1 << 10, 2));
        assert_eq!(tasks, 2 * TASKS_PER_THREAD);
        assert_eq!(others, tasks - 1);
        let (tasks, others) = with_a_stalled_thread(|task| {
            let mut v = vec![0f32; 1 << 17];
            par_spans(&mut v, |first, _| task(first));
        });
        assert!(tasks >= 4, "{tasks}");
        assert_eq!(others, tasks - 1);
        let (tasks, others) = with_a_stalled_thread(|task| {
            crate::ops::gemm::engine::par_for(16, task);
        });
        assert_eq!((tasks, others), (16, 15));
    }

    #[test]
    fn task_counts() {
        assert_eq!(task_count(1000, 1), 1);
        assert_eq!(task_count(1000, 2), 8);
        assert_eq!(task_count(3, 2), 3);
        assert_eq!(task_count(0, 4), 1);
    }

    #[test]
    fn par_rows_covers_every_row_once() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let mut v = vec![0usize; 1 << 16];
        pool.install(|| {
            par_rows(&mut v, 16, |first, chunk| {
                for (i, x) in chunk.iter_mut().enumerate() {
                    *x = first * 16 + i;
                }
            })
        });
        assert!(v.iter().enumerate().all(|(i, &x)| i == x));
    }
}
