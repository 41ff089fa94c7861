//! The channel-blocked depthwise kernel's layout changes: channel planes
//! into `[pixel][channel]` rows (zero-padded, as the taps read them) and
//! back, by transposes in registers (gathers cost several times more):
//! 16×16 in AVX-512 registers for blocks of 16 channels (rows under 16
//! columns in masked loads; planes of 16 pixels or more on the way back),
//! else 8×8 in AVX registers. The input is walked row by row, a row's
//! pixels being one run of the padded layout; with 8 lanes, planes under 8
//! columns wide go 8 pixels at a time across rows, and a plane of fewer
//! than 8 pixels lane by lane.

use crate::ops::conv::regs::{transpose16, transpose8};
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
/// `l` of `input`'s pixels (`n` lanes each, `n` a multiple of 8). Pixels
/// no tap reads are skipped, except with 8 lanes on planes under 8
/// columns wide, which write them to `trash`.
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
    // SAFETY: passed on (the contract).
    unsafe {
        if n == 16 && crate::ops::gemm::simd::has_avx512() {
            return to_pixels_wide(s, x, starts, input);
        }
        if s.x_end < 8 {
            return to_pixels_narrow(s, x, starts, n, input);
        }
        // Row by row, 8 columns at a time (the last 8 of a row overlap the
        // previous ones where the row is not a multiple of 8), each group
        // of 8 channels with its planes' pointers held in registers: the
        // destination of a row's pixels is one run of the layout.
        for g in (0..n).step_by(8) {
            let planes: [*const f32; 8] = std::array::from_fn(|j| x.add(starts[g + j]));
            for iy in 0..s.y_end {
                let src = iy * s.wd;
                let dst = input.add(((iy + s.pt) * s.wp + s.pl) * n + g);
                let mut next = 0;
                while next < s.x_end {
                    // SAFETY: c + 8 ≤ x_end ≤ wd: inside row iy of each
                    // plane; pixels (iy + pt)·wp + pl + c + j ≤ trash.
                    let c = next.min(s.x_end - 8);
                    let rows = std::array::from_fn(|j| _mm256_loadu_ps(planes[j].add(src + c)));
                    for (j, v) in transpose8(rows).into_iter().enumerate() {
                        _mm256_storeu_ps(dst.add((c + j) * n), v);
                    }
                    next += 8;
                }
            }
        }
    }
}

/// [`to_pixels`] for 16 lanes: 16 columns of the 16 planes at a time (a
/// row under 16 in one masked load per plane), transposed in AVX-512
/// registers (a third fewer shuffles per value than two 8×8 transposes,
/// one store per pixel instead of two, and no destination table for rows
/// under 8).
///
/// # Safety
/// As [`to_pixels`], with AVX-512F and `n` = 16.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn to_pixels_wide(s: &Spread, x: *const f32, starts: &[usize], input: *mut f32) {
    const N: usize = 16;
    // SAFETY: as in `to_pixels`: c + 16 ≤ x_end ≤ wd (a masked load reads
    // only x_end < 16 values), pixels ≤ trash.
    unsafe {
        let planes: [*const f32; N] = std::array::from_fn(|j| x.add(starts[j]));
        if s.x_end < N {
            // The lanes past x_end are neither read nor stored.
            let mask: __mmask16 = (1 << s.x_end) - 1;
            for iy in 0..s.y_end {
                let src = iy * s.wd;
                let dst = input.add(((iy + s.pt) * s.wp + s.pl) * N);
                let rows = std::array::from_fn(|j| _mm512_maskz_loadu_ps(mask, planes[j].add(src)));
                for (j, v) in transpose16(rows).into_iter().enumerate().take(s.x_end) {
                    _mm512_storeu_ps(dst.add(j * N), v);
                }
            }
            return;
        }
        for iy in 0..s.y_end {
            let src = iy * s.wd;
            let dst = input.add(((iy + s.pt) * s.wp + s.pl) * N);
            let mut next = 0;
            while next < s.x_end {
                let c = next.min(s.x_end - N);
                let rows = std::array::from_fn(|j| _mm512_loadu_ps(planes[j].add(src + c)));
                for (j, v) in transpose16(rows).into_iter().enumerate() {
                    _mm512_storeu_ps(dst.add((c + j) * N), v);
                }
                next += N;
            }
        }
    }
}

/// [`to_pixels`] for planes of fewer than 8 readable columns: 8 pixels at a
/// time in plane order, across rows (each to its own place, or `trash`).
///
/// # Safety
/// As [`to_pixels`].
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn to_pixels_narrow(s: &Spread, x: *const f32, starts: &[usize], n: usize, input: *mut f32) {
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
        if n == 16 && plane >= 16 && crate::ops::gemm::simd::has_avx512() {
            return to_planes_wide(sums, plane, lanes, out);
        }
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

/// [`to_planes`] for 16 lanes and planes of at least 16 pixels: 16 pixels
/// at a time, transposed in AVX-512 registers.
///
/// # Safety
/// As [`to_planes`], with AVX-512F, `n` = 16 and `plane` ≥ 16.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn to_planes_wide(sums: *const f32, plane: usize, lanes: usize, out: *mut f32) {
    const N: usize = 16;
    // SAFETY: reads stay below pixel p0 + 16 ≤ plane; writes below plane
    // l·plane + plane for l < lanes (the contract).
    unsafe {
        let mut next = 0;
        while next < plane {
            let p0 = next.min(plane - N);
            let rows = std::array::from_fn(|k| _mm512_loadu_ps(sums.add((p0 + k) * N)));
            for (l, v) in transpose16(rows).into_iter().enumerate().take(lanes) {
                _mm512_storeu_ps(out.add(l * plane + p0), v);
            }
            next += N;
        }
    }
}
