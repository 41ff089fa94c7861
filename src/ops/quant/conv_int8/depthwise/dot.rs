//! Depthwise int8 convolution as 4-byte dot products. Within one kernel
//! row, up to four taps of an output are the dot product of four input
//! bytes with four weights. For 16 outputs at once, one byte permutation
//! gathers the four bytes each output reads (strides and dilations live in
//! the permutation's indices), and `vpdpbusd` (AVX-512 VNNI) adds the u8 ×
//! s8 products exactly into i32.
//!
//! The input plane is copied into a scratch plane padded with its zero
//! point, so padding adds `zx · w`. Every tap also adds `zx · w` less than
//! the true product, and both are removed by starting each sum at
//! `bias − zx · Σ w`. The sums equal the phase kernel's exactly.
//!
//! Taken when the CPU has AVX-512 VNNI and VBMI, every `w − zw` fits in i8,
//! and 16 outputs' bytes lie within one 64-byte load; elsewhere (other
//! CPUs and architectures: `plan` gives `None`) the phase kernel runs.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use crate::ops::conv::geom::Window;
use std::sync::{Arc, Mutex};

mod window;
pub(super) use window::{Planes, Tables};

/// Outputs per vector.
const LANES: usize = 16;
/// Bytes one load brings in, from which the permutation picks.
const SPAN: usize = 64;

/// Depthwise weights as quads: per output channel, kernel row and group of
/// four taps along the row, four `w − zw` bytes in one i32 (taps past the
/// row's end are zero).
#[derive(Debug)]
pub(crate) struct Quads {
    quads: Vec<i32>,
    /// Per output channel: Σ (w − zw) over the taps.
    sums: Vec<i32>,
    /// Quads per kernel row.
    per_row: usize,
    kernel: [usize; 2],
    /// The window kernel's tables for the last geometry and zero point
    /// asked for (`None` inside: it does not apply there).
    window: Mutex<Option<(window::Key, Option<Arc<Tables>>)>>,
}

impl Quads {
    /// From `w − zw` as `[m][kh·kw]`; `None` when a value does not fit i8.
    pub(super) fn new(taps: &[i16], m: usize, kernel: [usize; 2]) -> Option<Quads> {
        let [kh, kw] = kernel;
        if taps.iter().any(|&t| i8::try_from(t).is_err()) || kw == 0 {
            return None;
        }
        let per_row = kw.div_ceil(4);
        let mut quads = Vec::with_capacity(m * kh * per_row);
        for ch in taps.chunks_exact(kh * kw).take(m) {
            for row in ch.chunks_exact(kw) {
                for four in row.chunks(4) {
                    let mut b = [0u8; 4];
                    for (d, &t) in b.iter_mut().zip(four) {
                        *d = t as i8 as u8;
                    }
                    quads.push(i32::from_le_bytes(b));
                }
            }
        }
        let sums = taps
            .chunks_exact(kh * kw)
            .take(m)
            .map(|ch| ch.iter().map(|&t| t as i32).sum())
            .collect();
        Some(Quads {
            quads,
            sums,
            per_row,
            kernel,
            window: Mutex::new(None),
        })
    }

    /// The [`window`] kernel's tables for this convolution and input zero
    /// point `zx` (of s8 data when `signed`), built on first use and kept
    /// for the runs that follow; `None` where that kernel does not apply.
    pub(super) fn window_tables(&self, win: &Window, zx: i32, signed: bool) -> Option<Arc<Tables>> {
        if !has_dot() {
            return None;
        }
        let fill = u8::try_from(zx + if signed { 128 } else { 0 }).ok()?;
        let key = window::Key::new(win, self.kernel, fill)?;
        let mut cached = self.window.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, tables)) = &*cached {
            if *k == key {
                return tables.clone();
            }
        }
        let tables = Tables::new(key, self.per_row).map(Arc::new);
        *cached = Some((key, tables.clone()));
        tables
    }

    /// Output channels.
    pub(super) fn channels(&self) -> usize {
        self.sums.len()
    }

    /// How this convolution runs on the dot-product kernel; `None` when
    /// the CPU lacks it or 16 outputs' bytes do not fit one load.
    pub(super) fn plan(&self, win: &Window) -> Option<Plan> {
        if win.input.len() != 2 || win.strides.len() != 2 || win.dilations.len() != 2 {
            return None;
        }
        let [kh, kw] = self.kernel;
        let (oh, ow) = (win.output[0], win.output[1]);
        let (sh, sw) = (win.strides[0], win.strides[1]);
        let (dh, dw) = (win.dilations[0], win.dilations[1]);
        let (pt, pl) = (win.pad_begin[0], win.pad_begin[1]);
        if (LANES - 1) * sw + 3 * dw >= SPAN || oh == 0 || ow == 0 || !has_dot() {
            return None;
        }
        let geometry = Geometry {
            pw: ((ow - 1) * sw + (kw - 1) * dw + 1).max(pl + win.input[1]),
            oh,
            ow,
            sh,
            sw,
            dh,
            dw,
            kh,
            per_row: self.per_row,
        };
        let cover = geometry.cover();
        Some(Plan {
            index: geometry.gather_index(cover),
            ph: ((oh - 1) * sh + (kh - 1) * dh + 1).max(pt + win.input[0]),
            input: [win.input[0], win.input[1]],
            pad_begin: [pt, pl],
            cover,
            geometry,
        })
    }
}

/// Where [`Plan::plane`] puts a plane's results.
pub(super) enum Out<'a> {
    /// The i32 sums, in the scratch's `acc` (output `(oy, ox)` at
    /// `oy · ow + ox`).
    Sums,
    /// The sums requantized, `requantize(sum, scale, zero, lo, hi)` of the
    /// engine's sink, into `out`'s `oh · ow` bytes, straight from the
    /// registers that computed them.
    Bytes {
        out: &'a mut [u8],
        scale: f32,
        zero: i32,
        lo: f32,
        hi: f32,
    },
}

/// One convolution's geometry on the dot-product kernel, computed once per
/// run and shared by its planes.
pub(super) struct Plan {
    geometry: Geometry,
    cover: Cover,
    index: [u8; SPAN],
    /// Padded plane height.
    ph: usize,
    input: [usize; 2],
    pad_begin: [usize; 2],
}

impl Plan {
    /// The sums of output channel `oc` over one input plane `src` (8-bit
    /// values read as s8 when `signed`, zero point `zx`), delivered as
    /// `out` says.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plane(
        &self,
        w: &Quads,
        oc: usize,
        src: &[u8],
        signed: bool,
        zx: i32,
        bias: i32,
        scratch: &mut Scratch,
        out: Out,
    ) {
        let g = &self.geometry;
        let [ih, iw] = self.input;
        let [pt, pl] = self.pad_begin;
        // u8 domain: s8 values move up by 128 (x ^ 0x80), their zero point too.
        let zx = zx + if signed { 128 } else { 0 };
        // The slack lets every 64-byte load stay in the buffer.
        let border = Border {
            len: self.ph * g.pw + SPAN,
            pw: g.pw,
            pad_begin: self.pad_begin,
            input: self.input,
            fill: zx as u8,
        };
        // The rows copied below overwrite only the interior, so the border
        // a thread filled for one plane serves every later plane of the
        // same layout and zero point (a layer's planes, as a rule).
        if scratch.border != Some(border) {
            scratch.pad.clear();
            scratch.pad.resize(border.len, border.fill);
            scratch.border = Some(border);
        }
        let src = &src[..ih * iw];
        let flip = if signed { 0x80 } else { 0 };
        let interior = &mut scratch.pad[pt * g.pw + pl..];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a plan exists only where the CPU has AVX-512 BW; `src`
        // holds ih rows of iw bytes, and the padded plane holds them at
        // rows pw apart from the interior's start.
        unsafe {
            copy_rows_avx512(src, iw, interior, g.pw, flip, border.fill)
        };
        #[cfg(not(target_arch = "x86_64"))]
        copy_rows(src, iw, interior, g.pw, flip);
        // Every output is stored by the kernel: no need to clear.
        let acc = &mut scratch.acc;
        if acc.len() < g.oh * g.ow + LANES {
            acc.resize(g.oh * g.ow + LANES, 0);
        }
        let taps = g.kh * g.per_row;
        let quads = &w.quads[oc * taps..][..taps];
        let init = bias.wrapping_sub(zx.wrapping_mul(w.sums[oc]));
        #[cfg(target_arch = "x86_64")]
        {
            let mut sink = match out {
                Out::Sums => VecSink::Wide(acc),
                Out::Bytes {
                    out,
                    scale,
                    zero,
                    lo,
                    hi,
                } => {
                    assert_eq!(out.len(), g.oh * g.ow, "one output plane");
                    // SAFETY: a plan exists only where the CPU has AVX-512.
                    unsafe { VecSink::bytes(out, scale, zero, lo, hi) }
                }
            };
            // SAFETY: a plan exists only where the CPU has the features;
            // `pad` holds the padded plane plus SPAN bytes, `acc` oh·ow +
            // LANES values and `out` oh·ow bytes (asserted), which bound
            // every load and store.
            unsafe {
                plane_vnni(
                    g,
                    self.cover,
                    &self.index,
                    &scratch.pad,
                    quads,
                    init,
                    &mut sink,
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            plane_portable(g, &scratch.pad, quads, init, acc);
            if let Out::Bytes {
                out,
                scale,
                zero,
                lo,
                hi,
            } = out
            {
                let n = g.oh * g.ow;
                crate::ops::quant::engine::sink::requantize_row(
                    &acc[..n],
                    out,
                    scale,
                    zero,
                    lo,
                    hi,
                );
            }
        }
    }
}

/// A thread's scratch for [`Plan::plane`]: the padded plane, the sums, and
/// which border the padded plane holds.
pub(super) struct Scratch {
    pad: Vec<u8>,
    /// Output `(oy, ox)`'s sum at `acc[oy · ow + ox]`.
    pub(super) acc: Vec<i32>,
    border: Option<Border>,
}

impl Scratch {
    /// Nothing allocated, no border.
    pub(super) const EMPTY: Scratch = Scratch {
        pad: Vec::new(),
        acc: Vec::new(),
        border: None,
    };
}

/// What decides a padded plane's border: its layout and fill byte.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Border {
    len: usize,
    pw: usize,
    pad_begin: [usize; 2],
    input: [usize; 2],
    fill: u8,
}

/// Copies rows of `iw` bytes from `src` to `dst`, `pw` apart there, each
/// byte xor `flip`.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn copy_rows(src: &[u8], iw: usize, dst: &mut [u8], pw: usize, flip: u8) {
    for (y, row) in src.chunks_exact(iw.max(1)).enumerate() {
        for (d, &s) in dst[y * pw..][..iw].iter_mut().zip(row) {
            *d = s ^ flip;
        }
    }
}

/// [`copy_rows`] by 64-byte pieces: a masked load and a full store. A
/// row's last piece carries `fill` past the row's end, so it writes the
/// border bytes that follow (the row's right padding, the next row's left
/// padding) with the value they hold, and the start of the next row's
/// interior, which that row's own copy overwrites next. A masked store
/// would avoid those bytes but costs several times a plain one on some
/// CPUs (AMD Zen), where it was most of this copy's time.
///
/// Every byte of `dst` outside the rows must hold `fill`, and `dst` must
/// extend at least 64 bytes past the last row's last 64-byte piece start
/// (the padded plane's slack guarantees both).
///
/// # Safety
/// The CPU must have AVX-512 F and BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn copy_rows_avx512(src: &[u8], iw: usize, dst: &mut [u8], pw: usize, flip: u8, fill: u8) {
    use std::arch::x86_64::*;
    if iw == 0 {
        return;
    }
    let rows = src.len() / iw;
    let last_piece = (iw - 1) / 64 * 64;
    assert!(rows == 0 || (rows - 1) * pw + last_piece + 64 <= dst.len() && pw >= iw);
    let flip = _mm512_set1_epi8(flip as i8);
    let fill = _mm512_set1_epi8(fill as i8);
    for y in 0..rows {
        let mut x = 0;
        while x < iw {
            let n = (iw - x).min(64);
            let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            // SAFETY: the mask limits the load to bytes x .. x + n of row y
            // of `src`; the store's 64 bytes at row y, x lie inside `dst`
            // (by the assert: x ≤ last_piece, y < rows).
            unsafe {
                let v = _mm512_maskz_loadu_epi8(mask, src.as_ptr().add(y * iw + x).cast());
                let v = _mm512_mask_blend_epi8(mask, fill, _mm512_xor_si512(v, flip));
                _mm512_storeu_si512(dst.as_mut_ptr().add(y * pw + x).cast(), v);
            }
            x += 64;
        }
    }
}

/// The shape of one plane's computation.
struct Geometry {
    /// Padded row length.
    pw: usize,
    oh: usize,
    ow: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    kh: usize,
    per_row: usize,
}

impl Geometry {
    /// Where output `(oy, ox)` reads tap quad `q` of kernel row `ky`.
    fn at(&self, oy: usize, ox: usize, ky: usize, q: usize) -> usize {
        (oy * self.sh + ky * self.dh) * self.pw + ox * self.sw + 4 * q * self.dw
    }
}

/// True when this CPU has what [`plane_vnni`] needs.
fn has_dot() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::ops::quant::engine::has_vnni512()
            && std::arch::is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The reference: the same sums, one output and tap at a time.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn plane_portable(g: &Geometry, pad: &[u8], quads: &[i32], init: i32, acc: &mut [i32]) {
    for oy in 0..g.oh {
        for ox in 0..g.ow {
            let mut sum = init;
            for ky in 0..g.kh {
                for q in 0..g.per_row {
                    let w = quads[ky * g.per_row + q].to_le_bytes();
                    let at = g.at(oy, ox, ky, q);
                    for (b, &wb) in w.iter().enumerate() {
                        let x = pad[at + b * g.dw] as i32;
                        sum = sum.wrapping_add(x * wb as i8 as i32);
                    }
                }
            }
            acc[oy * g.ow + ox] = sum;
        }
    }
}

/// How [`plane_vnni`] covers the outputs with vectors of [`LANES`].
#[derive(Clone, Copy)]
struct Cover {
    /// Whole output rows per vector (more than one when rows are short).
    rows: usize,
    /// Vectors per row (when `rows` is 1).
    per_row: usize,
    /// Vectors in all.
    count: usize,
}

impl Cover {
    /// The most whole rows of `ow` outputs one vector can hold.
    fn most_rows(ow: usize) -> usize {
        if ow < LANES {
            LANES / ow.max(1)
        } else {
            1
        }
    }

    /// `rows` whole rows per vector (1: each row split into vectors) over
    /// an `output` plane.
    fn new(rows: usize, output: [usize; 2]) -> Cover {
        let [oh, ow] = output;
        let per_row = if rows > 1 { 1 } else { ow.div_ceil(LANES) };
        let count = if rows > 1 {
            oh.div_ceil(rows)
        } else {
            oh * per_row
        };
        Cover {
            rows,
            per_row,
            count,
        }
    }

    /// Vector `v`'s first output `(oy, ox)`.
    fn first(&self, v: usize) -> (usize, usize) {
        if self.rows > 1 {
            (v * self.rows, 0)
        } else {
            (v / self.per_row, (v % self.per_row) * LANES)
        }
    }
}

impl Geometry {
    /// Short rows share a vector when the bytes they read lie within one
    /// load: lane `r·ow + c` then reads row `oy + r`, column `c`.
    fn cover(&self) -> Cover {
        let mut rows = Cover::most_rows(self.ow);
        while rows > 1
            && (rows - 1) * self.sh * self.pw + (self.ow - 1) * self.sw + 3 * self.dw >= SPAN
        {
            rows -= 1;
        }
        Cover::new(rows, [self.oh, self.ow])
    }

    /// The permutation's indices: byte `4j + b` of the gathered vector is
    /// tap `b` of lane `j`.
    fn gather_index(&self, cover: Cover) -> [u8; SPAN] {
        let mut index = [0u8; SPAN];
        for (i, v) in index.iter_mut().enumerate() {
            let (lane, b) = (i / 4, i % 4);
            let (r, c) = if cover.rows > 1 {
                (lane / self.ow, lane % self.ow)
            } else {
                (0, lane)
            };
            // Lanes past the last whole row repeat a valid byte; their sums
            // land in the slack or are overwritten.
            let at = (r * self.sh * self.pw + c * self.sw + b * self.dw).min(SPAN - 1);
            *v = at as u8;
        }
        index
    }
}

/// Where [`plane_vnni`] stores each vector of sums.
// One lives on the stack per plane, and the kernel reads its registers'
// worth of constants in place: boxing the large variant would only add an
// allocation per plane.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::large_enum_variant)]
enum VecSink<'a> {
    /// As i32, into `oh · ow + LANES` values.
    Wide(&'a mut [i32]),
    /// Requantized, into `oh · ow` bytes; a vector's lanes past the plane
    /// are masked off.
    Bytes {
        out: &'a mut [u8],
        requant: crate::ops::quant::engine::sink::Requant16,
        scale: std::arch::x86_64::__m512,
    },
}

#[cfg(target_arch = "x86_64")]
impl<'a> VecSink<'a> {
    /// # Safety
    /// The CPU must have AVX-512 F.
    #[target_feature(enable = "avx512f")]
    unsafe fn bytes(out: &'a mut [u8], scale: f32, zero: i32, lo: f32, hi: f32) -> Self {
        use crate::ops::quant::engine::sink::Requant16;
        VecSink::Bytes {
            out,
            requant: Requant16::new(zero, lo, hi),
            scale: std::arch::x86_64::_mm512_set1_ps(scale),
        }
    }

    /// Stores the sums of outputs `at .. at + LANES` (those that exist).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and BW; `at` < oh · ow.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn store(&mut self, at: usize, sums: std::arch::x86_64::__m512i) {
        use std::arch::x86_64::*;
        match self {
            VecSink::Wide(acc) => {
                assert!(at + LANES <= acc.len());
                // SAFETY: in bounds (asserted).
                unsafe { _mm512_storeu_si512(acc.as_mut_ptr().add(at).cast(), sums) };
            }
            VecSink::Bytes {
                out,
                requant,
                scale,
            } => {
                let n = out.len().saturating_sub(at).min(LANES);
                let q = requant.apply(sums, *scale);
                let mask = crate::ops::quant::engine::sink::lanes(n);
                // SAFETY: the mask keeps the stored bytes below out.len().
                unsafe {
                    _mm512_mask_cvtepi32_storeu_epi8(out.as_mut_ptr().add(at).cast(), mask, q)
                };
            }
        }
    }
}

/// Vectors computed side by side, so that their dependency chains overlap.
const INTERLEAVE: usize = 4;

/// [`plane_portable`] 16 outputs at a time (see [`Geometry::cover`]),
/// [`INTERLEAVE`] vectors side by side. Vectors are stored in output order:
/// a vector's lanes past its row or plane spill into outputs stored after
/// it or into `acc`'s LANES values of slack.
///
/// # Safety
/// The CPU must have the target features; `pad` must hold the padded plane
/// plus SPAN bytes; `sink` must hold oh·ow + LANES values or oh·ow bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
unsafe fn plane_vnni(
    g: &Geometry,
    cover: Cover,
    index: &[u8; SPAN],
    pad: &[u8],
    quads: &[i32],
    init: i32,
    sink: &mut VecSink,
) {
    use std::arch::x86_64::*;
    // SAFETY: `index` is SPAN = 64 bytes, one vector.
    let index = unsafe { _mm512_loadu_si512(index.as_ptr().cast()) };
    let start = _mm512_set1_epi32(init);
    let mut v = 0;
    while v + INTERLEAVE <= cover.count {
        // SAFETY: this function's contract is `vectors`'; v + 4 ≤ count.
        unsafe { vectors::<INTERLEAVE>(g, cover, v, pad, quads, index, start, sink) };
        v += INTERLEAVE;
    }
    while v < cover.count {
        // SAFETY: as above, v < count.
        unsafe { vectors::<1>(g, cover, v, pad, quads, index, start, sink) };
        v += 1;
    }
}

/// Vectors `v .. v + N` of [`plane_vnni`], side by side.
///
/// # Safety
/// As for [`plane_vnni`], with `v + N` ≤ the cover's count.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn vectors<const N: usize>(
    g: &Geometry,
    cover: Cover,
    v: usize,
    pad: &[u8],
    quads: &[i32],
    index: std::arch::x86_64::__m512i,
    start: std::arch::x86_64::__m512i,
    sink: &mut VecSink,
) {
    use std::arch::x86_64::*;
    let mut base = [0usize; N];
    let mut dst = [0usize; N];
    for i in 0..N {
        let (oy, ox) = cover.first(v + i);
        base[i] = g.at(oy, ox, 0, 0);
        dst[i] = oy * g.ow + ox;
    }
    let mut sums = [start; N];
    for (t, &quad) in quads.iter().enumerate().take(g.kh * g.per_row) {
        let off = g.at(0, 0, t / g.per_row, t % g.per_row);
        let w = _mm512_set1_epi32(quad);
        for i in 0..N {
            debug_assert!(base[i] + off + SPAN <= pad.len());
            // SAFETY: every tap's first byte is inside the padded plane and
            // `pad` has SPAN bytes beyond it.
            let bytes = unsafe { _mm512_loadu_si512(pad.as_ptr().add(base[i] + off).cast()) };
            let gathered = _mm512_permutexvar_epi8(index, bytes);
            sums[i] = _mm512_dpbusd_epi32(sums[i], gathered, w);
        }
    }
    for i in 0..N {
        // SAFETY: dst < oh·ow (a vector's first output exists).
        unsafe { sink.store(dst[i], sums[i]) };
    }
}

#[cfg(test)]
mod tests;
