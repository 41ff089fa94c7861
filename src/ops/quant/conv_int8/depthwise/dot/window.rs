//! Depthwise int8 convolution of small planes with each vector's input
//! window in two registers: no padded copy of the plane. For every vector
//! of 16 outputs ([`Cover`]) the bytes all its taps read lie within 128
//! consecutive bytes of the unpadded input plane (a few rows of a 7×7,
//! 14×14 or 28×28 plane). Two masked loads bring them in, and per tap
//! quad one two-table byte permutation (`vpermi2b`) gathers each lane's
//! four bytes; positions in the padding take the index vector's own byte,
//! the zero point, through the permutation's write mask. The sums are the
//! dot-product kernel's (`vpdpbusd`, the same start value), requantized
//! in registers, and one call runs a whole chunk of planes: on small planes
//! the per-plane set-up was most of the time.
//!
//! The indices and masks depend only on the geometry and the zero point;
//! [`Tables`] holds them, built once and kept with the weights.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use super::{Cover, Quads, LANES, SPAN};
use crate::ops::conv::geom::Window;

/// Bytes the two registers of a window hold.
const WINDOW: usize = 2 * SPAN;
/// Most permutations (vectors × tap quads) a plan may hold: 192 of 64
/// bytes stay well inside L1 beside the planes they read.
const MAX_PERMUTATIONS: usize = 192;

/// What the tables depend on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Key {
    input: [usize; 2],
    output: [usize; 2],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    pad_begin: [usize; 2],
    /// The zero point in the u8 domain: what padding reads.
    fill: u8,
}

impl Key {
    /// For a 2-D window and quads of `kernel`; `None` for other ranks.
    pub(super) fn new(win: &Window, kernel: [usize; 2], fill: u8) -> Option<Key> {
        let two = |v: &[usize]| <[usize; 2]>::try_from(v).ok();
        Some(Key {
            input: two(&win.input)?,
            output: two(&win.output)?,
            kernel,
            strides: two(&win.strides)?,
            dilations: two(&win.dilations)?,
            pad_begin: two(&win.pad_begin)?,
            fill,
        })
    }
}

/// A 64-byte permutation index, aligned for one load.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
struct Index([u8; SPAN]);

/// One vector of outputs: its window and where its sums go.
#[derive(Clone, Copy, Debug)]
struct Vector {
    /// The window's first byte in the input plane.
    start: usize,
    /// Which of the window's two halves' bytes lie inside the plane.
    load: [u64; 2],
    /// Its first output, `oy · ow + ox`.
    first: usize,
}

/// The permutations of one geometry and zero point.
#[derive(Debug)]
pub(crate) struct Tables {
    pub(super) key: Key,
    vectors: Vec<Vector>,
    /// Per vector and tap quad: byte `4j + b` is lane j's tap b, an index
    /// into the window where `keep` has its bit, else the fill byte.
    index: Vec<Index>,
    keep: Vec<u64>,
    /// Tap quads per output (kernel rows × quads per row).
    taps: usize,
    plane_in: usize,
    plane_out: usize,
}

impl Tables {
    /// The tables for `key` with quads of `per_row` per kernel row; `None`
    /// when some vector's bytes do not fit one window, or the tables would
    /// be too many.
    pub(super) fn new(key: Key, per_row: usize) -> Option<Tables> {
        let [oh, ow] = key.output;
        if oh == 0 || ow == 0 || per_row == 0 {
            return None;
        }
        // Whole short rows share a vector where their bytes fit; fewer
        // rows per vector when they do not.
        let mut rows = Cover::most_rows(ow);
        loop {
            let cover = Cover::new(rows, key.output);
            if cover.count * key.kernel[0] * per_row > MAX_PERMUTATIONS {
                return None;
            }
            if let Some(t) = Tables::covering(key, per_row, cover) {
                return Some(t);
            }
            if rows == 1 {
                return None;
            }
            rows -= 1;
        }
    }

    /// The tables for one cover; `None` when a vector's bytes do not fit.
    fn covering(key: Key, per_row: usize, cover: Cover) -> Option<Tables> {
        let [ih, iw] = key.input;
        let [_, ow] = key.output;
        let [kh, kw] = key.kernel;
        let plane_in = ih * iw;
        let taps = kh * per_row;
        let mut t = Tables {
            key,
            vectors: Vec::with_capacity(cover.count),
            index: Vec::with_capacity(cover.count * taps),
            keep: Vec::with_capacity(cover.count * taps),
            taps,
            plane_in,
            plane_out: key.output[0] * ow,
        };
        for v in 0..cover.count {
            let lanes: Vec<Option<(usize, usize)>> =
                (0..LANES).map(|j| key.lane(cover, v, j)).collect();
            // Input byte read by lane j's tap (ky, kx), if inside the plane.
            let read = |j: usize, ky: usize, kx: usize| -> Option<usize> {
                let (oy, ox) = lanes[j]?;
                if kx >= kw {
                    return None;
                }
                let iy =
                    (oy * key.strides[0] + ky * key.dilations[0]).checked_sub(key.pad_begin[0])?;
                let ix =
                    (ox * key.strides[1] + kx * key.dilations[1]).checked_sub(key.pad_begin[1])?;
                (iy < ih && ix < iw).then_some(iy * iw + ix)
            };
            let all = || {
                (0..LANES).flat_map(move |j| {
                    (0..kh)
                        .flat_map(move |ky| (0..per_row * 4).filter_map(move |kx| read(j, ky, kx)))
                })
            };
            let start = all().min().unwrap_or(0);
            if all().any(|at| at - start >= WINDOW) {
                return None;
            }
            let rest = plane_in - start.min(plane_in);
            let bits = |n: usize| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
            let (oy, ox) = cover.first(v);
            t.vectors.push(Vector {
                start,
                load: [bits(rest), bits(rest.saturating_sub(SPAN))],
                first: oy * ow + ox,
            });
            for ky in 0..kh {
                for q in 0..per_row {
                    let mut index = Index([key.fill; SPAN]);
                    let mut keep = 0u64;
                    for (i, byte) in index.0.iter_mut().enumerate() {
                        if let Some(at) = read(i / 4, ky, 4 * q + i % 4) {
                            *byte = (at - start) as u8;
                            keep |= 1 << i;
                        }
                    }
                    t.index.push(index);
                    t.keep.push(keep);
                }
            }
        }
        Some(t)
    }
}

impl Key {
    /// The output lane `j` of vector `v` computes, `None` past its rows.
    fn lane(&self, cover: Cover, v: usize, j: usize) -> Option<(usize, usize)> {
        let [oh, ow] = self.output;
        let (oy, ox) = cover.first(v);
        let (oy, ox) = if cover.rows > 1 {
            (oy + j / ow, j % ow)
        } else {
            (oy, ox + j)
        };
        (oy < oh && ox < ow && (cover.rows == 1 || j / ow < cover.rows)).then_some((oy, ox))
    }
}

/// One run's facts shared by its planes.
pub(crate) struct Planes<'a> {
    /// The whole input, `[n, channels, ih, iw]`.
    pub x: &'a [u8],
    pub channels: usize,
    /// Input read as s8 (moved to u8 by flipping the top bit).
    pub signed: bool,
    /// Per output channel, added to the sums.
    pub bias: Option<&'a [i32]>,
    /// Per output channel (or one) requantization scale.
    pub scale: &'a [f32],
    pub zero: i32,
    /// The clamp, relative to the zero point.
    pub lo: f32,
    pub hi: f32,
}

impl Planes<'_> {
    /// Output planes `first ..` into `out` (whole planes, `n · m` of them
    /// counted from the batch's start).
    pub(crate) fn run(&self, w: &Quads, t: &Tables, first: usize, out: &mut [u8]) {
        assert!(
            out.len().is_multiple_of(t.plane_out.max(1)) && t.taps == w.kernel[0] * w.per_row,
            "whole planes of this geometry"
        );
        #[cfg(target_arch = "x86_64")]
        {
            assert!(
                super::has_dot(),
                "tables exist only where the CPU has the kernel"
            );
            // SAFETY: the CPU has the features (asserted); `run_vnni`
            // checks every plane's bounds.
            unsafe { self.run_vnni(w, t, first, out) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!(
            "tables exist only where the CPU has the kernel ({first}, {})",
            out.len()
        );
    }

    /// [`Planes::run`] on AVX-512 VNNI and VBMI.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW, VNNI and VBMI.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
    unsafe fn run_vnni(&self, w: &Quads, t: &Tables, first: usize, out: &mut [u8]) {
        use crate::ops::quant::engine::sink::Requant16;
        use std::arch::x86_64::*;
        let m = w.channels();
        let per_input = (m / self.channels).max(1);
        let requant = Requant16::new(self.zero, self.lo, self.hi);
        let zx = t.key.fill as i32;
        let flip = _mm512_set1_epi8(if self.signed { 0x80u8 as i8 } else { 0 });
        for (i, dst) in out.chunks_exact_mut(t.plane_out.max(1)).enumerate() {
            let p = first + i;
            let (img, oc) = (p / m, p % m);
            let src = &self.x[(img * self.channels + oc / per_input) * t.plane_in..][..t.plane_in];
            let bias = self.bias.map_or(0, |b| b[oc]);
            let plane = Plane {
                src,
                quads: &w.quads[oc * t.taps..][..t.taps],
                start: _mm512_set1_epi32(bias.wrapping_sub(zx.wrapping_mul(w.sums[oc]))),
                scale: _mm512_set1_ps(self.scale[if self.scale.len() == 1 { 0 } else { oc }]),
                flip,
            };
            let mut v = 0;
            while v + INTERLEAVE <= t.vectors.len() {
                // SAFETY: features as this function's; v + N ≤ vectors.
                unsafe { plane.vectors::<INTERLEAVE>(t, v, &requant, dst) };
                v += INTERLEAVE;
            }
            while v < t.vectors.len() {
                // SAFETY: as above.
                unsafe { plane.vectors::<1>(t, v, &requant, dst) };
                v += 1;
            }
        }
    }
}

/// Vectors computed side by side, so that their dependency chains overlap.
const INTERLEAVE: usize = 4;

/// One plane's inputs and constants.
#[cfg(target_arch = "x86_64")]
struct Plane<'a> {
    src: &'a [u8],
    quads: &'a [i32],
    start: std::arch::x86_64::__m512i,
    scale: std::arch::x86_64::__m512,
    flip: std::arch::x86_64::__m512i,
}

#[cfg(target_arch = "x86_64")]
impl Plane<'_> {
    /// Vectors `v .. v + N` of the plane, requantized into `dst` in order
    /// (a vector's lanes past its rows spill into outputs a later vector
    /// stores; those past the plane are masked off).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW, VNNI and VBMI; `v + N` ≤ vectors.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
    #[inline]
    unsafe fn vectors<const N: usize>(
        &self,
        t: &Tables,
        v: usize,
        requant: &crate::ops::quant::engine::sink::Requant16,
        dst: &mut [u8],
    ) {
        use std::arch::x86_64::*;
        let vectors = &t.vectors[v..v + N];
        let mut lo = [_mm512_setzero_si512(); N];
        let mut hi = [_mm512_setzero_si512(); N];
        for (i, vec) in vectors.iter().enumerate() {
            let at = self.src[vec.start.min(self.src.len())..].as_ptr();
            // SAFETY: the load masks keep both loads inside the plane
            // (`Tables::covering` made them from the bytes past `start`).
            unsafe {
                lo[i] = _mm512_maskz_loadu_epi8(vec.load[0], at.cast());
                hi[i] = _mm512_maskz_loadu_epi8(vec.load[1], at.add(SPAN).cast());
            }
            lo[i] = _mm512_xor_si512(lo[i], self.flip);
            hi[i] = _mm512_xor_si512(hi[i], self.flip);
        }
        let mut sums = [self.start; N];
        let index = &t.index[v * t.taps..][..N * t.taps];
        let keep = &t.keep[v * t.taps..][..N * t.taps];
        for (q, &quad) in self.quads.iter().enumerate() {
            let w = _mm512_set1_epi32(quad);
            for i in 0..N {
                let k = i * t.taps + q;
                // SAFETY: an `Index` is 64 aligned bytes.
                let idx = unsafe { _mm512_load_si512(index[k].0.as_ptr().cast()) };
                let gathered = _mm512_mask2_permutex2var_epi8(lo[i], idx, keep[k], hi[i]);
                sums[i] = _mm512_dpbusd_epi32(sums[i], gathered, w);
            }
        }
        for (i, vec) in vectors.iter().enumerate() {
            let n = dst.len().saturating_sub(vec.first).min(LANES);
            let q = requant.apply(sums[i], self.scale);
            let mask = crate::ops::quant::engine::sink::lanes(n);
            assert!(vec.first < dst.len());
            // SAFETY: the mask keeps the stored bytes below dst.len().
            unsafe {
                _mm512_mask_cvtepi32_storeu_epi8(dst.as_mut_ptr().add(vec.first).cast(), mask, q)
            };
        }
    }
}

#[cfg(test)]
mod tests;
