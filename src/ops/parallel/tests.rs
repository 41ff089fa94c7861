//! Tests of the work splitting: coverage, order, the thread cap, and
//! robustness to a preempted thread.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// Operators split for the pool's threads, or for the cap while one
/// is set; the previous cap comes back after, even after a panic.
#[test]
fn a_thread_cap_holds_operators_to_fewer_threads() {
    pool(3).install(|| {
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
        let calls = AtomicUsize::new(0);
        with_thread_cap(1, || {
            par_rows(&mut v, 16, |_, _| {
                calls.fetch_add(1, Ordering::Relaxed);
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
    let ran: Mutex<Vec<(usize, Option<usize>)>> = Mutex::new(Vec::new());
    pool(2).install(|| {
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
    let (tasks, others) = with_a_stalled_thread(|task| par_for(16, task));
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
    let mut v = vec![0usize; 1 << 16];
    pool(3).install(|| {
        par_rows(&mut v, 16, |first, chunk| {
            for (i, x) in chunk.iter_mut().enumerate() {
                *x = first * 16 + i;
            }
        })
    });
    assert!(v.iter().enumerate().all(|(i, &x)| i == x));
}

/// Blocks of rows: every row once, and every task's first row a multiple
/// of the block (its chunk whole blocks but the last), on 1, 2 and 3
/// threads; 72 rows of 16-row blocks on two threads take 5 tasks, not 8
/// part-filled ones.
#[test]
fn par_row_blocks_cut_on_whole_blocks() {
    for threads in [1, 2, 3] {
        for (rows, block) in [(72, 16), (240, 16), (7, 8), (1000, 1), (33, 16)] {
            let row = 1 << 10;
            let mut v = vec![usize::MAX; rows * row];
            let firsts = std::sync::Mutex::new(Vec::new());
            pool(threads).install(|| {
                par_row_blocks(&mut v, row, block, |first, chunk| {
                    firsts.lock().unwrap().push((first, chunk.len() / row));
                    for (i, x) in chunk.iter_mut().enumerate() {
                        *x = first * row + i;
                    }
                })
            });
            assert!(v.iter().enumerate().all(|(i, &x)| i == x), "{rows} {block}");
            let mut firsts = firsts.into_inner().unwrap();
            firsts.sort();
            for &(first, len) in &firsts {
                assert_eq!(first % block, 0, "{rows} rows, blocks of {block}");
                assert!(len % block == 0 || first + len == rows);
            }
            if (threads, rows, block) == (2, 72, 16) {
                assert_eq!(firsts.len(), 5);
            }
        }
    }
}

/// Every element is in exactly one chunk, chunk i starts at i·chunk, and
/// the last chunk is the remainder; on one thread and on three.
#[test]
fn par_chunks_hands_out_each_element_once() {
    for threads in [1, 3] {
        for (len, chunk) in [(0, 4), (1, 4), (10, 3), (12, 3), (1000, 7), (5, 0)] {
            let mut v = vec![0usize; len];
            let calls = AtomicUsize::new(0);
            pool(threads).install(|| {
                par_chunks(&mut v, chunk, |i, part| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    let width = chunk.max(1);
                    assert!(part.len() == width || (i + 1) * width >= len, "{i} {len}");
                    for (j, x) in part.iter_mut().enumerate() {
                        *x += i * width + j + 1;
                    }
                })
            });
            let expected: Vec<usize> = (1..=len).collect();
            assert_eq!(v, expected, "len {len} chunk {chunk} threads {threads}");
            assert_eq!(calls.into_inner(), len.div_ceil(chunk.max(1)));
        }
    }
}

/// Pairs of chunks line up by index, and the shorter slice bounds the tasks.
#[test]
fn par_chunk_pairs_line_up() {
    let mut a = vec![0u32; 30];
    let mut b = vec![0i64; 12];
    pool(2).install(|| {
        par_chunk_pairs(&mut a, 5, &mut b, 2, |i, x, y| {
            x.iter_mut().for_each(|v| *v = i as u32 + 1);
            y.iter_mut().for_each(|v| *v = -(i as i64) - 1);
        })
    });
    for (i, v) in a.iter().enumerate() {
        assert_eq!(*v, (i / 5) as u32 + 1);
    }
    for (i, v) in b.iter().enumerate() {
        assert_eq!(*v, -((i / 2) as i64) - 1);
    }
    // b has 6 chunks of 2, a only 2 of 5 here: 2 tasks, the rest untouched.
    let mut a = vec![0u8; 10];
    let mut b = vec![0u8; 12];
    par_chunk_pairs(&mut a, 5, &mut b, 2, |_, x, y| {
        x.fill(1);
        y.fill(1);
    });
    assert_eq!(b.iter().filter(|&&v| v == 1).count(), 4);
}

/// Results come back in index order whatever the pool and the grain.
#[test]
fn par_collect_keeps_order() {
    for threads in [1, 2, 5] {
        for (n, min) in [(0, 1), (1, 1), (17, 1), (100, 8), (100, 1000)] {
            let got = pool(threads).install(|| par_collect(n, min, |i| i * i));
            let expected: Vec<usize> = (0..n).map(|i| i * i).collect();
            assert_eq!(got, expected, "n {n} min {min} threads {threads}");
        }
    }
}
