//! Reductions: the ReduceX family (Sum, Mean, Max, Min, Prod, L1, L2,
//! LogSum, LogSumExp, SumSquare), ArgMax / ArgMin, and TopK.
//!
//! Work is split over independent outputs only; each output folds its
//! reduced elements sequentially in row-major order, so results are
//! bit-identical whatever the number of threads.

use super::Registrar;

mod arg;
mod reducers;
mod topk;

pub(crate) fn register(r: &mut impl Registrar) {
    reducers::register(r);
    arg::register(r);
    topk::register(r);
}

/// Fills `out` in parallel chunks of whole outputs when the total work
/// (`work_per_output` input elements per output) is large enough:
/// `f(first_output, chunk)`. Each output is written by exactly one call.
pub(crate) fn par_outputs<T: Send>(
    out: &mut [T],
    work_per_output: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let n = out.len();
    let threads = super::util::op_threads();
    let work = n.saturating_mul(work_per_output.max(1));
    if threads <= 1 || n < 2 || work < super::util::MIN_PARALLEL_GRAIN {
        f(0, out);
        return;
    }
    let per = n.div_ceil(super::util::task_count(n, threads));
    super::parallel::par_chunks(out, per, |i, chunk| f(i * per, chunk));
}

/// The input dimensions split into kept and reduced ones, with size-1
/// dimensions dropped and adjacent dimensions of the same kind merged:
/// `(kept, reduced)` as `(length, stride)` lists in row-major order.
pub(crate) type Split = (Vec<(usize, usize)>, Vec<(usize, usize)>);

/// Splits `shape` by the `reduced` mask (see [`Split`]).
pub(crate) fn split_dims(shape: &[usize], reduced: &[bool]) -> Split {
    let strides = super::shape::strides(shape);
    let mut kept: Vec<(usize, usize)> = Vec::new();
    let mut red: Vec<(usize, usize)> = Vec::new();
    let mut last_kind: Option<bool> = None;
    for d in 0..shape.len() {
        let (len, stride) = (shape[d], strides[d]);
        if len == 1 {
            continue;
        }
        let list = if reduced[d] { &mut red } else { &mut kept };
        match list.last_mut() {
            // Merge with the previous dimension of the same kind if adjacent.
            Some(prev) if last_kind == Some(reduced[d]) && prev.1 == len * stride => {
                prev.0 *= len;
                prev.1 = stride;
            }
            _ => list.push((len, stride)),
        }
        last_kind = Some(reduced[d]);
    }
    (kept, red)
}

/// Offset of output number `flat` (row-major over the kept dimensions).
pub(crate) fn kept_offset(mut flat: usize, kept: &[(usize, usize)]) -> usize {
    let mut off = 0;
    for &(len, stride) in kept.iter().rev() {
        off += (flat % len) * stride;
        flat /= len;
    }
    off
}

/// Folds `f` over the elements at `base` + the reduced dimensions, in
/// row-major order.
pub(crate) fn fold<T: Copy, A, F>(
    src: &[T],
    base: usize,
    red: &[(usize, usize)],
    init: A,
    f: &mut F,
) -> A
where
    F: FnMut(A, T) -> A + ?Sized,
{
    match red {
        [] => f(init, src[base]),
        [(len, stride)] => {
            let mut acc = init;
            if *stride == 1 {
                for &v in &src[base..base + len] {
                    acc = f(acc, v);
                }
            } else {
                for i in 0..*len {
                    acc = f(acc, src[base + i * stride]);
                }
            }
            acc
        }
        [(len, stride), rest @ ..] => {
            let mut acc = init;
            for i in 0..*len {
                acc = fold(src, base + i * stride, rest, acc, f);
            }
            acc
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::*;

    #[test]
    fn split_merges_adjacent_dims() {
        let (k, r) = split_dims(&[2, 3, 4, 5], &[false, true, true, false]);
        assert_eq!(k, vec![(2, 60), (5, 1)]);
        assert_eq!(r, vec![(12, 5)]);
        let (k, r) = split_dims(&[2, 1, 4], &[true, false, true]);
        assert!(k.is_empty());
        assert_eq!(r, vec![(8, 1)]);
    }

    #[test]
    fn fold_visits_in_row_major_order() {
        let src: Vec<i32> = (0..24).collect();
        let (kept, red) = split_dims(&[2, 3, 4], &[true, false, true]);
        let mut seen = Vec::new();
        let base = kept_offset(1, &kept);
        fold(&src, base, &red, (), &mut |_, v| seen.push(v));
        assert_eq!(seen, vec![4, 5, 6, 7, 16, 17, 18, 19]);
    }
}
