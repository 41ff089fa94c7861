//! AveragePool of any rank, input rows first: each output row's input rows
//! (those its windows cover, in kernel order) are summed element-wise into
//! one row padded with zeros, then each output is the sum of its `kw` taps
//! of that row at the column stride, divided by its window size. Both
//! passes read contiguous (or evenly strided) slices and vectorise, where
//! the tap-by-tap walk gathered one strided element at a time.

use super::rows::Rows;
use crate::ops::gemm::simd::multiversion;
use crate::ops::util::par_rows;
use num_traits::Float;

/// AveragePool of the planes of `x` into `y` (every element written): the
/// window sums divided by the taps inside the input, or inside the padded
/// input when `include_pad`.
pub(super) fn average<T: Float + Send + Sync>(
    rows: &Rows,
    x: &[T],
    y: &mut [T],
    include_pad: bool,
) {
    let win = &rows.win;
    let d = win.rank() - 1;
    let (wd, pl) = (win.input[d], win.pad_begin[d]);
    let (ow, sw, dw, kw) = (
        win.output[d],
        win.strides[d],
        win.dilations[d],
        win.kernel[d],
    );
    let (in_len, out_len) = (win.in_len(), win.out_len());
    if out_len == 0 || ow == 0 {
        return;
    }
    let padded = (ow - 1) * sw + 1 + kw.saturating_sub(1) * dw;
    // Input column c lands at padded column pl + c; columns past the last
    // window are never read.
    let (lead, cols) = (pl.min(padded), wd.min(padded.saturating_sub(pl)));
    let last = if include_pad {
        &rows.last_padded
    } else {
        &rows.last_valid
    };
    let geo = Taps { kw, dw, sw };
    par_rows(y, out_len, |first, chunk| {
        // The padded row: only its in-input span is ever written, so the
        // padding stays zero.
        let mut sum = vec![T::zero(); padded];
        // Each output's divisor, rebuilt only when a row's count of
        // outer taps changes (the edge rows of a padded window).
        let mut den = vec![T::one(); ow];
        let mut den_outer = None;
        for (i, out) in chunk.chunks_mut(out_len).enumerate() {
            let p = first + i;
            let xp = &x[p * in_len..(p + 1) * in_len];
            rows.for_each(|row| {
                let outer = if include_pad {
                    row.outer_padded
                } else {
                    row.outer_valid
                };
                let inputs = row.inputs.iter().map(|&b| &xp[b..b + cols]);
                let o = &mut out[row.index * ow..(row.index + 1) * ow];
                sum[lead..lead + cols].fill(T::zero());
                for src in inputs {
                    add_row(&mut sum[lead..lead + cols], src);
                }
                sum_taps(&geo, &sum, o);
                if den_outer != Some(outer) {
                    for (d, &c) in den.iter_mut().zip(last) {
                        *d = T::from(outer * c).unwrap_or_else(T::one);
                    }
                    den_outer = Some(outer);
                }
                divide_row(o, &den);
            });
        }
    });
}

/// The innermost dimension's taps.
struct Taps {
    kw: usize,
    dw: usize,
    sw: usize,
}

multiversion! {
    /// `out[j] /= den[j]`.
    fn divide_row<T: Float>(out: &mut [T], den: &[T]) {
        for (o, &d) in out.iter_mut().zip(den) {
            *o = *o / d;
        }
    }
}

multiversion! {
    /// `dst[j] += src[j]`.
    fn add_row<T: Float>(dst: &mut [T], src: &[T]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = *d + s;
        }
    }
}

multiversion! {
    /// `out[j]` = the sum of `row[j·sw + k·dw]` over the taps k, in order.
    fn sum_taps<T: Float>(t: &Taps, row: &[T], out: &mut [T]) {
        let n = out.len();
        if n == 0 || t.kw == 0 {
            out.fill(T::zero());
            return;
        }
        if t.sw == 1 {
            out.copy_from_slice(&row[..n]);
            for k in 1..t.kw {
                for (o, &v) in out.iter_mut().zip(&row[k * t.dw..k * t.dw + n]) {
                    *o = *o + v;
                }
            }
        } else if t.sw == 2 && t.dw == 1 && t.kw == 3 {
            // Pairs of a contiguous span, as in the depthwise phase split.
            let r = &row[..2 * n + 1];
            for (o, w) in out.iter_mut().zip(r.windows(3).step_by(2)) {
                *o = w[0] + w[1] + w[2];
            }
        } else {
            for (j, o) in out.iter_mut().enumerate() {
                let base = j * t.sw;
                let mut acc = row[base];
                for k in 1..t.kw {
                    acc = acc + row[base + k * t.dw];
                }
                *o = acc;
            }
        }
    }
}
