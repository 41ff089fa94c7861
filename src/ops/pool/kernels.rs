//! The windowed pooling kernels over one (n, c) plane at a time: max (with or
//! without argmax), average and Lp. Each output row is combined with every
//! input line its windows read, one kernel offset at a time, so the inner
//! loops are plain (stride-1: contiguous, vectorisable) slice loops; planes
//! are split over the rayon pool.

use super::rows::{strides_of, Row, Rows};
use crate::ops::util::{par_rows, MIN_PARALLEL_GRAIN};
use num_traits::Float;

/// Element types MaxPool compares.
pub(super) trait MaxElem: Copy + PartialOrd + Send + Sync {
    /// The identity of max (−∞ or the type's minimum).
    const LOWEST: Self;
    /// The larger of the two, where `self` is a running max (never NaN):
    /// a NaN `other` never replaces it. Computed, not selected in place,
    /// so that loops over slices vectorise into plain max instructions (a
    /// select in place becomes a masked store).
    fn max_of(self, other: Self) -> Self;
    /// An output buffer of `len` elements with unspecified contents (every
    /// max kernel writes every output element).
    fn buffer(len: usize) -> Vec<Self> {
        vec![Self::LOWEST; len]
    }
}
impl MaxElem for f32 {
    const LOWEST: f32 = f32::NEG_INFINITY;
    #[inline(always)]
    fn max_of(self, other: f32) -> f32 {
        // One `max` instruction on x86 (which returns its second operand
        // when either is NaN); `f32::max` also checks `self` for NaN, three
        // instructions per compare.
        if other > self {
            other
        } else {
            self
        }
    }
    fn buffer(len: usize) -> Vec<f32> {
        crate::tensor::recycle::Recycled::take_buffer(len)
    }
}
impl MaxElem for f64 {
    const LOWEST: f64 = f64::NEG_INFINITY;
    #[inline(always)]
    fn max_of(self, other: f64) -> f64 {
        // One `max` instruction on x86 (which returns its second operand
        // when either is NaN); `f64::max` also checks `self` for NaN, three
        // instructions per compare.
        if other > self {
            other
        } else {
            self
        }
    }
}
impl MaxElem for i8 {
    const LOWEST: i8 = i8::MIN;
    #[inline(always)]
    fn max_of(self, other: i8) -> i8 {
        Ord::max(self, other)
    }
    fn buffer(len: usize) -> Vec<i8> {
        crate::tensor::recycle::take_or_default(len)
    }
}
impl MaxElem for u8 {
    const LOWEST: u8 = u8::MIN;
    #[inline(always)]
    fn max_of(self, other: u8) -> u8 {
        Ord::max(self, other)
    }
    fn buffer(len: usize) -> Vec<u8> {
        crate::tensor::recycle::take_or_default(len)
    }
}

/// Calls `f(tap_inputs, dst)` combining `dst[j]` with `x[start + j·step]`.
#[inline(always)]
fn combine<T: Copy>(x: &[T], start: usize, step: usize, dst: &mut [T], f: impl Fn(&mut T, T)) {
    if step == 1 {
        let n = dst.len();
        for (d, &v) in dst.iter_mut().zip(&x[start..start + n]) {
            f(d, v);
        }
    } else if let Some(last) = dst.len().checked_sub(1) {
        // One bounds check for the whole strided span.
        let src = &x[start..=start + last * step];
        for (j, d) in dst.iter_mut().enumerate() {
            f(d, src[j * step]);
        }
    }
}

/// Runs `plane(x_plane, y_plane)` for every plane, in parallel.
fn planes<T: Sync, U: Send>(
    rows: &Rows,
    x: &[T],
    y: &mut [U],
    plane: impl Fn(&[T], &mut [U]) + Sync,
) {
    let (in_len, out_len) = (rows.win.in_len(), rows.win.out_len());
    if out_len == 0 {
        return;
    }
    par_rows(y, out_len, |first, chunk| {
        for (i, out) in chunk.chunks_mut(out_len).enumerate() {
            let p = first + i;
            plane(&x[p * in_len..(p + 1) * in_len], out);
        }
    });
}

/// MaxPool without indices.
pub(super) fn max<T: MaxElem>(rows: &Rows, x: &[T], y: &mut [T]) {
    let (w, step) = (rows.width(), rows.step());
    planes(rows, x, y, |xp, yp| {
        rows.for_each(|row: Row| {
            let out = &mut yp[row.index * w..(row.index + 1) * w];
            out.fill(T::LOWEST);
            rows.for_each_tap(&row, |lo, hi, start| {
                // A select, not a branch: branch-free and vectorisable.
                combine(xp, start, step, &mut out[lo..hi], |d, v| {
                    *d = if v > *d { v } else { *d }
                });
            });
        });
    });
}

/// MaxPool with indices: the flat index (over the whole input, N and C
/// included) of the first maximum in kernel row-major order; row-major, or
/// column-major over the spatial dims when `col_major` (`storage_order` 1).
pub(super) fn max_with_indices<T: MaxElem>(
    rows: &Rows,
    x: &[T],
    y: &mut [T],
    idx: &mut [i64],
    col_major: bool,
) {
    let (w, step) = (rows.width(), rows.step());
    let (in_len, out_len) = (rows.win.in_len(), rows.win.out_len());
    if out_len == 0 {
        return;
    }
    let dims = &rows.win.input;
    let rm = strides_of(dims);
    // Column-major strides of the spatial dims.
    let mut cm = vec![1usize; dims.len()];
    for d in 1..dims.len() {
        cm[d] = cm[d - 1] * dims[d - 1];
    }
    let plane = |p: usize, yp: &mut [T], ip: &mut [i64]| {
        let xp = &x[p * in_len..(p + 1) * in_len];
        rows.for_each(|row: Row| {
            let r = row.index * w..(row.index + 1) * w;
            let (out, ind) = (&mut yp[r.clone()], &mut ip[r]);
            out.fill(T::LOWEST);
            ind.fill(-1);
            rows.for_each_tap(&row, |lo, hi, start| {
                for j in 0..hi - lo {
                    let at = start + j * step;
                    let v = xp[at];
                    if v > out[lo + j] || ind[lo + j] < 0 {
                        out[lo + j] = v;
                        ind[lo + j] = at as i64;
                    }
                }
            });
        });
        let base = (p * in_len) as i64;
        for i in ip.iter_mut().filter(|i| **i >= 0) {
            let mut local = *i as usize;
            if col_major {
                let mut c = 0;
                for d in 0..dims.len() {
                    c += (local / rm[d]) * cm[d];
                    local %= rm[d];
                }
                local = c;
            }
            *i = base + local as i64;
        }
    };
    let big = y.len() >= MIN_PARALLEL_GRAIN && crate::ops::util::op_threads() > 1;
    if big {
        crate::ops::parallel::par_chunk_pairs(y, out_len, idx, out_len, plane);
    } else {
        for (p, (yp, ip)) in y
            .chunks_mut(out_len)
            .zip(idx.chunks_mut(out_len))
            .enumerate()
        {
            plane(p, yp, ip);
        }
    }
}

/// AveragePool: the window sum divided by the taps inside the input, or
/// inside the padded input when `include_pad`.
pub(super) fn average<T: Float + Send + Sync>(
    rows: &Rows,
    x: &[T],
    y: &mut [T],
    include_pad: bool,
) {
    let (w, step) = (rows.width(), rows.step());
    planes(rows, x, y, |xp, yp| {
        rows.for_each(|row: Row| {
            let out = &mut yp[row.index * w..(row.index + 1) * w];
            out.fill(T::zero());
            rows.for_each_tap(&row, |lo, hi, start| {
                combine(xp, start, step, &mut out[lo..hi], |d, v| *d = *d + v);
            });
            let (outer, last) = if include_pad {
                (row.outer_padded, &rows.last_padded)
            } else {
                (row.outer_valid, &rows.last_valid)
            };
            for (o, &c) in out.iter_mut().zip(last) {
                let n = T::from(outer * c).unwrap_or_else(T::one);
                *o = *o / n;
            }
        });
    });
}

/// LpPool: `(Σ |x|^p)^(1/p)` over the taps inside the input.
pub(super) fn lp<T: Float + Send + Sync>(rows: &Rows, x: &[T], y: &mut [T], p: f64) {
    let (w, step) = (rows.width(), rows.step());
    let pt = T::from(p).unwrap_or_else(T::one);
    let inv = T::from(1.0 / p).unwrap_or_else(T::one);
    planes(rows, x, y, |xp, yp| {
        rows.for_each(|row: Row| {
            let out = &mut yp[row.index * w..(row.index + 1) * w];
            out.fill(T::zero());
            rows.for_each_tap(&row, |lo, hi, start| {
                let dst = &mut out[lo..hi];
                if p == 1.0 {
                    combine(xp, start, step, dst, |d, v| *d = *d + v.abs());
                } else if p == 2.0 {
                    combine(xp, start, step, dst, |d, v| *d = *d + v * v);
                } else {
                    combine(xp, start, step, dst, |d, v| *d = *d + v.abs().powf(pt));
                }
            });
            if p == 2.0 {
                out.iter_mut().for_each(|o| *o = o.sqrt());
            } else if p != 1.0 {
                out.iter_mut().for_each(|o| *o = o.powf(inv));
            }
        });
    });
}
