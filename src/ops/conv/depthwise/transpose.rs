//! The channel-blocked depthwise kernel's layout changes, on AVX2: channel
//! planes into `[pixel][channel]` rows (zero-padded, as the taps read
//! them) and back, by 8×8 transposes in registers (gathers cost several
//! times more). A plane of fewer than 8 pixels is copied lane by lane.

use crate::ops::conv::regs::transpose8;
use std::arch::x86_64::*;

/// Where the pixels of an input plane go in the padded `[pixel][channel]`
/// layout.
pub(super) struct Spread {
    /// Input rows and columns.
    pub h: usize,
    pub wd: usize,
    /// Input rows and columns the taps read (the rest go to `trash`).
    pub y_end: usize,
    pub x_end: usize,
    /// Padding before, in rows and columns, and the padded row length.
    pub pt: usize,
    pub pl: usize,
    pub wp: usize,
    /// A pixel of the layout no tap reads.
    pub trash: usize,
}

impl Spread {
    /// The layout pixel of input pixel `(iy, ix)`.
    #[inline(always)]
    fn at(&self, iy: usize, ix: usize) -> usize {
        if iy < self.y_end && ix < self.x_end {
            (iy + self.pt) * self.wp + ix + self.pl
        } else {
            self.trash
        }
    }
}

/// Writes channel `l`'s plane (`x + starts[l]`, `h·wd` values) to lanes
/// `l` of `input`'s pixels (`n` lanes each, `n` a multiple of 8).
///
/// # Safety
/// The CPU must support AVX2; every plane must be readable and `input`
/// writable up to pixel `trash` (inclusive) of `n` lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn to_pixels(
    s: &Spread,
    x: *const f32,
    starts: &[usize],
    n: usize,
    input: *mut f32,
) {
    let hw = s.h * s.wd;
    // SAFETY: reads stay inside the planes (p0 + 8 ≤ hw), writes inside
    // pixels ≤ trash (the contract).
    unsafe {
        if hw < 8 {
            for (l, &start) in starts.iter().enumerate().take(n) {
                for p in 0..hw {
                    *input.add(s.at(p / s.wd, p % s.wd) * n + l) = *x.add(start + p);
                }
            }
            return;
        }
        let mut next = 0;
        while next < hw {
            let p0 = next.min(hw - 8);
            let (mut iy, mut ix) = (p0 / s.wd, p0 % s.wd);
            let mut to = [0usize; 8];
            for t in &mut to {
                *t = s.at(iy, ix) * n;
                ix += 1;
                if ix == s.wd {
                    ix = 0;
                    iy += 1;
                }
            }
            for g in (0..n).step_by(8) {
                let rows = std::array::from_fn(|j| _mm256_loadu_ps(x.add(starts[g + j] + p0)));
                for (&t, v) in to.iter().zip(transpose8(rows)) {
                    _mm256_storeu_ps(input.add(t + g), v);
                }
            }
            next += 8;
        }
    }
}

/// Writes lanes `0..lanes` of the `plane` pixels of `sums` (`n` lanes
/// each) to the planes `out + l·plane`.
///
/// # Safety
/// The CPU must support AVX2; `sums` must hold `plane·n` values and `out`
/// `lanes·plane`, `lanes ≤ n`, `n` a multiple of 8.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn to_planes(
    sums: *const f32,
    n: usize,
    plane: usize,
    lanes: usize,
    out: *mut f32,
) {
    // SAFETY: reads stay below pixel p0 + 8 ≤ plane, lane g + 8 ≤ n;
    // writes below plane l·plane + plane for l < lanes (the contract).
    unsafe {
        if plane < 8 {
            for l in 0..lanes {
                for p in 0..plane {
                    *out.add(l * plane + p) = *sums.add(p * n + l);
                }
            }
            return;
        }
        let mut next = 0;
        while next < plane {
            let p0 = next.min(plane - 8);
            for g in (0..lanes).step_by(8) {
                let rows = std::array::from_fn(|k| _mm256_loadu_ps(sums.add((p0 + k) * n + g)));
                for (j, v) in transpose8(rows).into_iter().enumerate().take(lanes - g) {
                    _mm256_storeu_ps(out.add((g + j) * plane + p0), v);
                }
            }
            next += 8;
        }
    }
}
