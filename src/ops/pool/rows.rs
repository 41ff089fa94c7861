//! Walks the output rows (innermost spatial lines) of a resolved pooling
//! window: for each row, the input rows its windows read (in kernel row-major
//! order), the per-column ranges of the innermost kernel offsets, and the
//! window sizes inside the input and inside the padded input (the divisors
//! of AveragePool).

use crate::ops::conv::geom::Window;

/// Row-major strides of `dims`.
pub(super) fn strides_of(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// One spatial dimension's per-output-position taps.
#[derive(Debug, Clone)]
struct DimTaps {
    /// Per output position: input coordinates of the taps inside the input.
    valid: Vec<Vec<usize>>,
    /// Per output position: taps inside the padded input (pads included,
    /// the extra ceil-mode overhang excluded).
    padded: Vec<usize>,
}

/// The kernel offsets `kk < k` whose tap `start + kk·dil` lies in
/// `[lo, hi)`: computed, not searched, so that a kernel far larger than the
/// input (legal with SAME padding) costs nothing for the taps in padding.
fn taps_within(start: usize, dil: usize, k: usize, lo: usize, hi: usize) -> std::ops::Range<usize> {
    if hi <= start || k == 0 {
        return 0..0;
    }
    let first = lo.saturating_sub(start).div_ceil(dil);
    let last = ((hi - 1 - start) / dil).min(k - 1);
    first..(last + 1).max(first)
}

fn dim_taps(w: &Window, d: usize) -> DimTaps {
    let (s, dil, k) = (w.strides[d], w.dilations[d], w.kernel[d]);
    let (pb, inp, pe) = (w.pad_begin[d], w.input[d], w.pad_end[d]);
    let mut valid = Vec::with_capacity(w.output[d]);
    let mut padded = Vec::with_capacity(w.output[d]);
    for o in 0..w.output[d] {
        let start = o * s;
        let v = taps_within(start, dil, k, pb, pb + inp)
            .map(|kk| start + kk * dil - pb)
            .collect();
        valid.push(v);
        padded.push(taps_within(start, dil, k, 0, pb + inp + pe).len());
    }
    DimTaps { valid, padded }
}

/// For every output row (row-major over the outer output dims), the flat
/// offsets of the input rows its windows read, in kernel row-major order.
fn walk_rows(win: &Window, outer: &[DimTaps]) -> (Vec<RowSpec>, Vec<usize>) {
    let outer_dims = &win.output[..outer.len()];
    let in_strides = strides_of(&win.input);
    let count: usize = outer_dims.iter().product();
    let mut rows = Vec::with_capacity(count);
    let mut inputs = Vec::new();
    let mut o = vec![0usize; outer_dims.len()];
    let mut k = vec![0usize; outer_dims.len()];
    for _ in 0..count {
        let first = inputs.len();
        let taps = |d: usize| outer[d].valid[o[d]].as_slice();
        let outer_valid: usize = (0..o.len()).map(|d| taps(d).len()).product();
        let outer_padded = (0..o.len()).map(|d| outer[d].padded[o[d]]).product();
        if outer_valid > 0 {
            // Odometer over the valid taps of the outer dims.
            k.iter_mut().for_each(|v| *v = 0);
            loop {
                inputs.push((0..k.len()).map(|d| taps(d)[k[d]] * in_strides[d]).sum());
                let mut d = k.len();
                loop {
                    if d == 0 {
                        break;
                    }
                    d -= 1;
                    k[d] += 1;
                    if k[d] < taps(d).len() {
                        break;
                    }
                    k[d] = 0;
                }
                if k.iter().all(|&v| v == 0) {
                    break;
                }
            }
        }
        rows.push(RowSpec {
            first,
            end: inputs.len(),
            outer_valid,
            outer_padded,
        });
        for d in (0..o.len()).rev() {
            o[d] += 1;
            if o[d] < outer_dims[d] {
                break;
            }
            o[d] = 0;
        }
    }
    (rows, inputs)
}

/// One output row's precomputed reads: a range of `Rows::inputs` and the
/// window sizes of the outer dims.
#[derive(Debug, Clone, Copy)]
struct RowSpec {
    first: usize,
    end: usize,
    outer_valid: usize,
    outer_padded: usize,
}

/// The precomputed walk of one window, shared by every plane.
#[derive(Debug, Clone)]
pub(super) struct Rows {
    /// The window.
    pub win: Window,
    /// Per innermost kernel offset: output columns `[lo, hi)` reading inside
    /// the input and the input column offset (`col = o·step + off`).
    pub last: Vec<(usize, usize, isize)>,
    /// Per output column: taps inside the input along the innermost dim.
    pub last_valid: Vec<usize>,
    /// Per output column: taps inside the padded input along the innermost dim.
    pub last_padded: Vec<usize>,
    /// Per output row (row-major over the outer output dims).
    rows: Vec<RowSpec>,
    /// Flat plane offsets of the input rows each output row reads.
    inputs: Vec<usize>,
}

/// What one output row reads.
#[derive(Debug)]
pub(super) struct Row<'a> {
    /// Index of the row among the plane's output rows (its first element is
    /// at `index · out_width`).
    pub index: usize,
    /// Flat plane offsets of the input rows read, kernel row-major.
    pub inputs: &'a [usize],
    /// Product of the outer dims' in-input tap counts.
    pub outer_valid: usize,
    /// Product of the outer dims' in-padded-input tap counts.
    pub outer_padded: usize,
}

impl Rows {
    /// Precomputes the walk of `win` (rank ≥ 1).
    pub(super) fn new(win: &Window) -> Rows {
        let r = win.rank();
        let last_d = r - 1;
        // The innermost kernel offsets any window can read inside the input:
        // the others read only padding.
        let reach = (win.output[last_d].saturating_sub(1)) * win.strides[last_d];
        let last: Vec<_> = taps_within(
            0,
            win.dilations[last_d],
            win.kernel[last_d],
            win.pad_begin[last_d].saturating_sub(reach),
            win.pad_begin[last_d] + win.input[last_d],
        )
        .map(|k| win.valid_range(last_d, k))
        .collect();
        let lt = dim_taps(win, last_d);
        let outer: Vec<DimTaps> = (0..last_d).map(|d| dim_taps(win, d)).collect();
        let (rows, inputs) = walk_rows(win, &outer);
        Rows {
            win: win.clone(),
            last,
            last_valid: lt.valid.iter().map(Vec::len).collect(),
            last_padded: lt.padded,
            rows,
            inputs,
        }
    }

    /// Output row length.
    pub(super) fn width(&self) -> usize {
        *self.win.output.last().unwrap_or(&1)
    }

    /// Input step between neighbouring output columns.
    pub(super) fn step(&self) -> usize {
        *self.win.strides.last().unwrap_or(&1)
    }

    /// Calls `f` for every output row of a plane, in row-major order.
    pub(super) fn for_each(&self, mut f: impl FnMut(Row)) {
        for (index, r) in self.rows.iter().enumerate() {
            f(Row {
                index,
                inputs: &self.inputs[r.first..r.end],
                outer_valid: r.outer_valid,
                outer_padded: r.outer_padded,
            });
        }
    }

    /// For each input row of `row` and each innermost kernel offset (kernel
    /// row-major order), calls `f(out_lo, out_hi, in_start)`: output columns
    /// `out_lo..out_hi` read inputs `in_start + j·step()` (j from 0).
    #[inline]
    pub(super) fn for_each_tap(&self, row: &Row, mut f: impl FnMut(usize, usize, usize)) {
        let s = self.step() as isize;
        for &base in row.inputs {
            for &(lo, hi, off) in &self.last {
                if lo < hi {
                    f(lo, hi, (base as isize + lo as isize * s + off) as usize);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::taps_within;

    #[test]
    fn taps_within_matches_a_search() {
        for (start, dil, k, lo, hi) in [
            (0, 1, 3, 1, 4),
            (5, 2, 4, 1, 8),
            (0, 3, 10, 4, 20),
            (7, 1, 2, 0, 3),
            (0, 1, 0, 0, 9),
            (4, 1, 3, 0, 2),
        ] {
            let searched: Vec<usize> = (0..k)
                .filter(|kk| (lo..hi).contains(&(start + kk * dil)))
                .collect();
            let computed: Vec<usize> = taps_within(start, dil, k, lo, hi).collect();
            assert_eq!(computed, searched, "{start} {dil} {k} {lo} {hi}");
        }
        // A kernel of 2^31 over an input of 4 with SAME padding: the taps
        // inside are few and found without walking the padding.
        assert_eq!(taps_within(0, 1, 1 << 31, 1 << 30, (1 << 30) + 4).len(), 4);
    }
}
