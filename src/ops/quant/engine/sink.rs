//! Where the int8 engine's finished tiles go: [`QuantSink`] requantizes to
//! u8/s8 as QLinearConv and QLinearMatMul define it (`round(v · scale) +
//! zp`, ties to even, saturated; `scale` in f32 as onnxruntime computes
//! it), [`WideSink`] stores i32 (ConvInteger, MatMulInteger); the float
//! sink is in [`super::float_sink`]. Both write
//! C[r][c] at `r·row_stride + c·col_stride` of a caller's buffer through a
//! raw pointer: tiles are disjoint, so parallel tasks never write the same
//! element.

use super::{Tile, MR, NR};

/// Receives finished tiles: rows `r0 .. r0 + nr`, columns `c0 .. c0 + nc`,
/// `tile[r·NR + c]` (exact sums, zero points and bias applied).
pub(crate) trait Sink: Sync {
    /// Stores one tile.
    fn store(&self, r0: usize, c0: usize, nr: usize, nc: usize, tile: &Tile);

    /// Where a micro-kernel may requantize its tiles itself, straight from
    /// its registers (see [`Requant`]); `None` when tiles must come through
    /// [`Sink::store`].
    fn requant(&self) -> Option<Requant<'_>> {
        None
    }
}

/// A requantizing destination with contiguous rows: C[r][c] goes to
/// `out + r·row_stride + c` as `requantize(v, scale[r], zero, lo, hi)`.
/// Written through a raw pointer by disjoint tiles, like the sinks. Only
/// the x86-64 VNNI kernel fuses requantization.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Requant<'a> {
    out: Shared<u8>,
    len: usize,
    pub row_stride: usize,
    /// Per row of C (or one for all).
    pub scale: &'a [f32],
    pub zero: i32,
    pub lo: f32,
    pub hi: f32,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl Requant<'_> {
    /// Rows `r0 .. r0 + nr`, columns `c0 .. c0 + nc`: a pointer to each
    /// row's first byte, after checking the whole tile is in bounds.
    pub(crate) fn rows(&self, r0: usize, c0: usize, nr: usize, nc: usize) -> [*mut u8; MR] {
        let first = r0 * self.row_stride + c0;
        assert!(
            nr <= MR && nc <= NR && first + (nr - 1) * self.row_stride + nc <= self.len,
            "int8 engine stored outside its output"
        );
        // SAFETY: every row pointer is in bounds (checked above); rows past
        // `nr` repeat the first and are not written.
        std::array::from_fn(|r| unsafe {
            self.out
                .0
                .add(first + if r < nr { r * self.row_stride } else { 0 })
        })
    }

    /// Rows `r0 .. r0 + nr` from their column 0: a pointer to each, after
    /// checking that the first `end` bytes of every one are in bounds.
    pub(crate) fn row_starts(&self, r0: usize, nr: usize, end: usize) -> [*mut u8; MR] {
        assert!(
            (1..=MR).contains(&nr) && (r0 + nr - 1) * self.row_stride + end <= self.len,
            "int8 engine stored outside its output"
        );
        // SAFETY: every row's start is in bounds (checked above); rows past
        // `nr` repeat the first and are not written.
        std::array::from_fn(|r| unsafe {
            self.out
                .0
                .add((r0 + if r < nr { r } else { 0 }) * self.row_stride)
        })
    }

    /// The scale of row `r`.
    pub(crate) fn scale_of(&self, r: usize) -> f32 {
        self.scale[if self.scale.len() == 1 { 0 } else { r }]
    }
}

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub(super) struct Shared<T>(pub(super) *mut T);
// SAFETY: tasks write disjoint elements (see the module header), and the
// buffer outlives the product (it is borrowed for the sink's lifetime).
unsafe impl<T> Sync for Shared<T> {}
// SAFETY: as for Sync: the pointer is only written through at disjoint
// elements of a buffer that outlives every task.
unsafe impl<T> Send for Shared<T> {}

/// Stores i32 results.
pub(crate) struct WideSink<'a> {
    out: Shared<i32>,
    len: usize,
    strides: (usize, usize),
    _buf: std::marker::PhantomData<&'a mut [i32]>,
}

impl<'a> WideSink<'a> {
    /// A sink writing C[r][c] to `out[r·strides.0 + c·strides.1]`.
    pub(crate) fn new(out: &'a mut [i32], strides: (usize, usize)) -> Self {
        WideSink {
            out: Shared(out.as_mut_ptr()),
            len: out.len(),
            strides,
            _buf: std::marker::PhantomData,
        }
    }
}

impl Sink for WideSink<'_> {
    fn store(&self, r0: usize, c0: usize, nr: usize, nc: usize, tile: &Tile) {
        let (rs, cs) = self.strides;
        for r in 0..nr {
            for c in 0..nc {
                let at = (r0 + r) * rs + (c0 + c) * cs;
                assert!(at < self.len, "int8 engine stored outside its output");
                // SAFETY: in bounds (checked); disjoint across tasks.
                unsafe { *self.out.0.add(at) = tile[r * NR + c] };
            }
        }
    }
}

/// Requantizes to 8-bit: `clamp(round_even(v · scale[r]) + zp, lo, hi)`,
/// stored as raw bytes (u8, or s8 bits).
pub(crate) struct QuantSink<'a> {
    out: Shared<u8>,
    len: usize,
    strides: (usize, usize),
    /// Per row of C (or one for all).
    scale: &'a [f32],
    zero: i32,
    range: (i32, i32),
    _buf: std::marker::PhantomData<&'a mut [u8]>,
}

impl<'a> QuantSink<'a> {
    /// A sink writing C[r][c] to `out[r·strides.0 + c·strides.1]`, with
    /// output zero point `zero` and the type's range `range` (0..255 or
    /// −128..127; s8 values stored as their bits).
    pub(crate) fn new(
        out: &'a mut [u8],
        strides: (usize, usize),
        scale: &'a [f32],
        zero: i32,
        range: (i32, i32),
    ) -> Self {
        QuantSink {
            out: Shared(out.as_mut_ptr()),
            len: out.len(),
            strides,
            scale,
            zero,
            range,
            _buf: std::marker::PhantomData,
        }
    }
}

/// `clamp(round_even(v · s) + zp, lo, hi)` in f32, as onnxruntime computes
/// it: the clamp comes first (on `lo − zp ..= hi − zp`, integers, so it
/// commutes with rounding; NaN goes to the low end), then
/// [`round_small`] rounds.
#[inline(always)]
pub(crate) fn requantize(v: i32, s: f32, zp: i32, lo: f32, hi: f32) -> i32 {
    round_small(clamp_nan_low(v as f32 * s, lo, hi)) + zp
}

/// `x` clamped to `lo ..= hi`, NaN to `lo`: two compare-and-selects that
/// compile to one `maxps` and one `minps` (`f32::max` adds NaN fix-ups).
#[inline(always)]
pub(crate) fn clamp_nan_low(x: f32, lo: f32, hi: f32) -> f32 {
    let x = if x > lo { x } else { lo };
    if x < hi {
        x
    } else {
        hi
    }
}

/// `x` rounded to the nearest integer, ties to even, for |x| ≤ 2²²: adding
/// 1.5·2²³ leaves the integer in the low mantissa bits (the addition rounds
/// ties to even), read back with integer operations only, so loops of it
/// vectorize (a float-to-int cast would not).
#[inline(always)]
pub(crate) fn round_small(x: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    (x + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32
}

crate::ops::gemm::simd::multiversion! {
    wide
    /// One row segment, contiguous in the output (16 lanes where the CPU
    /// has AVX-512: the same f32 operations, so the same bytes).
    pub(crate) fn requantize_row(src: &[i32], dst: &mut [u8], s: f32, zp: i32, lo: f32, hi: f32) {
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = requantize(v, s, zp, lo, hi) as u8;
        }
    }
}

impl Sink for QuantSink<'_> {
    fn requant(&self) -> Option<Requant<'_>> {
        (self.strides.1 == 1).then_some(Requant {
            out: self.out,
            len: self.len,
            row_stride: self.strides.0,
            scale: self.scale,
            zero: self.zero,
            lo: (self.range.0 - self.zero) as f32,
            hi: (self.range.1 - self.zero) as f32,
        })
    }

    fn store(&self, r0: usize, c0: usize, nr: usize, nc: usize, tile: &Tile) {
        let (rs, cs) = self.strides;
        let lo = (self.range.0 - self.zero) as f32;
        let hi = (self.range.1 - self.zero) as f32;
        let first = r0 * rs + c0 * cs;
        let last = first + (nr - 1) * rs + (nc - 1) * cs;
        assert!(last < self.len, "int8 engine stored outside its output");
        let scales = if self.scale.len() == 1 {
            self.scale
        } else {
            &self.scale[r0..][..nr]
        };
        if cs == 1 {
            let mut rows: [&mut [u8]; MR] = std::array::from_fn(|_| <&mut [u8]>::default());
            for (r, row) in rows.iter_mut().enumerate().take(nr) {
                // SAFETY: rows `first + r·rs .. + nc` are in bounds
                // (checked), disjoint (rs ≥ nc), and written by this task
                // alone.
                *row =
                    unsafe { std::slice::from_raw_parts_mut(self.out.0.add(first + r * rs), nc) };
            }
            requantize_tile(tile, &mut rows[..nr], scales, self.zero, lo, hi);
            return;
        }
        for r in 0..nr {
            let s = scales[if scales.len() == 1 { 0 } else { r }];
            for (c, &v) in tile[r * NR..][..nc].iter().enumerate() {
                // SAFETY: in bounds (checked above) and written by this
                // task alone.
                unsafe {
                    *self.out.0.add(first + r * rs + c * cs) =
                        requantize(v, s, self.zero, lo, hi) as u8
                };
            }
        }
    }
}

/// Tile row `r` requantized into `rows[r]` (with scale `scales[r]`, or
/// `scales[0]` for all): one call per tile, the same f32 operations as
/// [`requantize_row`], with AVX-512 where the CPU has it.
pub(crate) fn requantize_tile(
    tile: &Tile,
    rows: &mut [&mut [u8]],
    scales: &[f32],
    zp: i32,
    lo: f32,
    hi: f32,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::gemm::simd::has_avx512_wide() {
        // SAFETY: the features are present (checked).
        unsafe { requantize_tile_avx512(tile, rows, scales, zp, lo, hi) };
        return;
    }
    for (r, dst) in rows.iter_mut().enumerate() {
        let s = scales[if scales.len() == 1 { 0 } else { r }];
        requantize_row(&tile[r * NR..][..dst.len()], dst, s, zp, lo, hi);
    }
}

/// [`requantize_tile`] 16 values per instruction, stored with masks.
///
/// # Safety
/// The CPU must have the target features; no row may be longer than the
/// tile's NR columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn requantize_tile_avx512(
    tile: &Tile,
    rows: &mut [&mut [u8]],
    scales: &[f32],
    zp: i32,
    lo: f32,
    hi: f32,
) {
    use std::arch::x86_64::*;
    let requant = Requant16::new(zp, lo, hi);
    for (r, dst) in rows.iter_mut().enumerate() {
        let s = _mm512_set1_ps(scales[if scales.len() == 1 { 0 } else { r }]);
        let src = &tile[r * NR..][..NR];
        let mut c = 0;
        while c < dst.len() {
            let n = (dst.len() - c).min(16);
            // SAFETY: c is a multiple of 16 below dst.len() ≤ NR = 32 (the
            // contract), so src[c..c + 16] is inside the row.
            let q = requant.apply(unsafe { _mm512_loadu_si512(src[c..].as_ptr().cast()) }, s);
            let mask = lanes(n);
            // SAFETY: lanes past `n` are masked off; `dst[c..]` holds n bytes.
            unsafe { _mm512_mask_cvtepi32_storeu_epi8(dst[c..].as_mut_ptr().cast(), mask, q) };
            c += 16;
        }
    }
}

/// [`requantize`] for sixteen i32 lanes at once (AVX-512): the same f32
/// operations, so the same values; shared by the tile requantizer and the
/// fused VNNI kernel.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Requant16 {
    lo: std::arch::x86_64::__m512,
    hi: std::arch::x86_64::__m512,
    magic: std::arch::x86_64::__m512,
    /// round_small's integer step and the zero point, in one subtraction.
    offset: std::arch::x86_64::__m512i,
}

#[cfg(target_arch = "x86_64")]
impl Requant16 {
    /// For output zero point `zp` and the clamp `lo ..= hi` (relative to it).
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(crate) fn new(zp: i32, lo: f32, hi: f32) -> Requant16 {
        use std::arch::x86_64::*;
        const MAGIC: f32 = 12_582_912.0;
        Requant16 {
            lo: _mm512_set1_ps(lo),
            hi: _mm512_set1_ps(hi),
            magic: _mm512_set1_ps(MAGIC),
            offset: _mm512_set1_epi32((MAGIC.to_bits() as i32).wrapping_sub(zp)),
        }
    }

    /// `requantize(v, s, …)` in each lane, as i32.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(crate) fn apply(
        &self,
        v: std::arch::x86_64::__m512i,
        s: std::arch::x86_64::__m512,
    ) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        let x = _mm512_mul_ps(_mm512_cvtepi32_ps(v), s);
        // clamp_nan_low: max keeps its second operand (lo) for NaN.
        let x = _mm512_min_ps(_mm512_max_ps(x, self.lo), self.hi);
        _mm512_sub_epi32(
            _mm512_castps_si512(_mm512_add_ps(x, self.magic)),
            self.offset,
        )
    }
}

/// The mask of the first `n` of sixteen lanes.
#[cfg(target_arch = "x86_64")]
pub(crate) fn lanes(n: usize) -> u16 {
    if n >= 16 {
        0xFFFF
    } else {
        (1u16 << n) - 1
    }
}
