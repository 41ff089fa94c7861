//! Walks the output positions of a sliding window that read inside the input
//! for one kernel offset, one innermost line at a time: the building block of
//! im2col, the direct depthwise kernel and col2im.

use super::geom::Window;

/// Row-major strides of `dims`.
pub(super) fn strides_of(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// Precomputed plane strides of a window.
#[derive(Debug, Clone)]
pub(super) struct Lines<'a> {
    win: &'a Window,
    out_strides: Vec<usize>,
    in_strides: Vec<usize>,
    kernel_strides: Vec<usize>,
}

impl<'a> Lines<'a> {
    /// Line walker for `win`.
    pub(super) fn new(win: &'a Window) -> Lines<'a> {
        Lines {
            win,
            out_strides: strides_of(&win.output),
            in_strides: strides_of(&win.input),
            kernel_strides: strides_of(&win.kernel),
        }
    }

    /// The input step between neighbours of a line (the innermost stride).
    pub(super) fn step(&self) -> usize {
        self.win.strides.last().copied().unwrap_or(1)
    }

    /// For the kernel offset with linear index `k`, calls
    /// `f(out_start, in_start, len)` for every innermost line of output
    /// positions `out_start + j` (j < len) whose input position
    /// `in_start + j·step()` lies inside the input, in row-major order.
    pub(super) fn for_each(&self, k: usize, mut f: impl FnMut(usize, usize, usize)) {
        let w = self.win;
        let r = w.rank();
        if r == 0 {
            return;
        }
        let mut ranges = Vec::with_capacity(r);
        let mut rem = k;
        for d in 0..r {
            let kd = rem / self.kernel_strides[d];
            rem %= self.kernel_strides[d];
            let (lo, hi, off) = w.valid_range(d, kd);
            if lo >= hi {
                return;
            }
            ranges.push((lo, hi, off));
        }
        let input_of =
            |d: usize, o: usize| (o as isize * w.strides[d] as isize + ranges[d].2) as usize;
        let (lo_l, hi_l, _) = ranges[r - 1];
        let mut o: Vec<usize> = ranges.iter().map(|x| x.0).collect();
        loop {
            let mut oo = lo_l;
            let mut ii = input_of(r - 1, lo_l);
            for (d, &od) in o.iter().enumerate().take(r - 1) {
                oo += od * self.out_strides[d];
                ii += input_of(d, od) * self.in_strides[d];
            }
            f(oo, ii, hi_l - lo_l);
            // Advance the odometer over the outer dimensions.
            let mut d = r - 1;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                o[d] += 1;
                if o[d] < ranges[d].1 {
                    break;
                }
                o[d] = ranges[d].0;
            }
        }
    }
}
