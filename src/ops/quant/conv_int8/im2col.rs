//! The u8 operand of an int8 convolution, packed panel by panel: the
//! im2col rows (input channel × kernel tap) of the panel's output pixels,
//! gathered into a per-thread scratch with the input's zero point where the
//! window leaves the image, then interleaved. A 1×1, stride-1, unpadded
//! convolution's input already is its im2col matrix and is packed directly.

use crate::ops::conv::geom::Window;
use crate::ops::quant::engine::panel::{flip_mask, pack_k_rows};
use crate::ops::quant::engine::{PanelSource, NR};
use std::cell::RefCell;

/// One image-group's input `[cg][h·w]` and the window over it.
pub(super) struct Source<'a> {
    x: &'a [u8],
    channels: usize,
    win: &'a Window,
    /// The zero point's raw byte: padding that contributes nothing.
    pad: u8,
    flip: u8,
    direct: bool,
}

impl<'a> Source<'a> {
    pub(super) fn new(
        x: &'a [u8],
        channels: usize,
        win: &'a Window,
        zero_x: i32,
        x_signed: bool,
    ) -> Self {
        let direct = win.kernel.iter().all(|&k| k == 1)
            && win.strides.iter().all(|&s| s == 1)
            && win.pad_begin.iter().chain(&win.pad_end).all(|&p| p == 0);
        Source {
            x,
            channels,
            win,
            pad: zero_x as u8,
            flip: flip_mask(x_signed),
            direct,
        }
    }

    /// K: input channels × kernel taps.
    fn k(&self) -> usize {
        self.channels * self.win.kernel_len()
    }

    /// Fills `rows[k][0..n]` (row stride NR) for output pixels `c0 .. c0+n`.
    fn gather(&self, rows: &mut [u8], c0: usize, n: usize) {
        let w = self.win;
        let (ih, iw) = (w.input[0], w.input[1]);
        let (kh, kw) = (w.kernel[0], w.kernel[1]);
        let ow = w.output[1];
        let (sh, sw) = (w.strides[0] as isize, w.strides[1] as isize);
        let (dh, dw) = (w.dilations[0] as isize, w.dilations[1] as isize);
        let (pt, pl) = (w.pad_begin[0] as isize, w.pad_begin[1] as isize);
        let mut row = 0;
        for ci in 0..self.channels {
            let plane = &self.x[ci * ih * iw..][..ih * iw];
            for ky in 0..kh as isize {
                for kx in 0..kw as isize {
                    let dst = &mut rows[row * NR..][..n];
                    row += 1;
                    let mut p = c0;
                    let mut at = 0;
                    while p < c0 + n {
                        let (oy, ox0) = (p / ow, p % ow);
                        let run = (ow - ox0).min(c0 + n - p);
                        let seg = &mut dst[at..][..run];
                        let y = oy as isize * sh + ky * dh - pt;
                        if y < 0 || y >= ih as isize {
                            fill_short(seg, self.pad);
                        } else {
                            let src = &plane[y as usize * iw..][..iw];
                            let off = kx * dw - pl + ox0 as isize * sw;
                            // Columns j with 0 ≤ off + j·sw < iw.
                            let lo = if off < 0 { ((-off) + sw - 1) / sw } else { 0 } as usize;
                            let hi = if off >= iw as isize {
                                0
                            } else {
                                ((iw as isize - 1 - off) / sw + 1) as usize
                            };
                            let (lo, hi) = (lo.min(run), hi.min(run).max(lo.min(run)));
                            fill_short(&mut seg[..lo], self.pad);
                            fill_short(&mut seg[hi..], self.pad);
                            if hi == lo {
                                // The whole run is padding.
                            } else if sw == 1 {
                                let s0 = (off + lo as isize) as usize;
                                copy_short(&mut seg[lo..hi], &src[s0..][..hi - lo]);
                            } else {
                                for (j, d) in seg[lo..hi].iter_mut().enumerate() {
                                    *d = src[(off + (lo + j) as isize * sw) as usize];
                                }
                            }
                        }
                        p += run;
                        at += run;
                    }
                }
            }
        }
    }
}

thread_local! {
    /// Per-thread im2col rows of one panel.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl PanelSource for Source<'_> {
    fn pack(&self, panel: &mut [u8], c0: usize, n: usize) {
        let k = self.k();
        if self.direct {
            pack_k_rows(panel, self.x, k, self.win.in_len(), (c0, n), self.flip);
            return;
        }
        SCRATCH.with(|s| {
            let mut rows = s.borrow_mut();
            if rows.len() < k * NR {
                rows.resize(k * NR, 0);
            }
            self.gather(&mut rows, c0, n);
            pack_k_rows(panel, &rows, k, NR, (0, n), self.flip);
        });
    }
}

/// `dst.fill(v)` for the short runs of padding, where a call to memset
/// costs more than the fill.
#[inline(always)]
fn fill_short(dst: &mut [u8], v: u8) {
    if dst.len() >= 32 {
        dst.fill(v);
    } else {
        for d in dst {
            *d = v;
        }
    }
}

/// `dst.copy_from_slice(src)` for the short runs of small images, where a
/// call to memcpy costs more than the copy.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    if dst.len() >= 32 {
        dst.copy_from_slice(src);
    } else {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = s;
        }
    }
}
