//! The 2-D depthwise kernel for f32 planes wider than 16 on AVX-512F: X is
//! read in place (no phase copy). A chunk of R output rows × V vectors of
//! 16 outputs keeps its sums in registers; each tap loads its vector of
//! inputs per output row straight from X (masked at the plane's left and
//! right edges, so the padding reads as zeros; rows above and below the
//! plane read a row of zeros; a stride of 2 loads two vectors and keeps
//! their even lanes). Then the residual, Relu, Clip or hard-swish in
//! registers, and one masked store per vector; other activations run over
//! the stored rows.
//!
//! Every output starts from the bias and adds its taps in kernel row-major
//! order with one fused multiply-add each, padding taps (and rows outside
//! the plane) adding w·0: the sums of the phase-split path, so the same
//! bits.

use std::arch::x86_64::*;

use super::lanes::Epilogue;
use crate::ops::conv::conv_op::ConvPlan;
use crate::ops::gemm::fused::Activation;
use crate::ops::util::par_rows;

/// Lanes of one vector.
pub(super) const LANES: usize = 16;

/// Most vectors of one row a chunk holds.
const MAX_V: usize = 4;

/// Rows of a chunk for each width in vectors (1 to [`MAX_V`]): about 8 to
/// 12 running sums, enough fused multiply-adds in flight.
const ROWS_FOR: [usize; MAX_V] = [8, 6, 4, 3];

/// Widest kernel taken (its columns' edge masks are kept per segment).
const MAX_KW: usize = 8;

/// Narrowest output rows taken (narrower ones take the channel-blocked
/// kernel).
const MIN_OW: usize = 17;

/// The kernel for one 2-D depthwise layer on f32, where it runs.
pub(super) struct Rows {
    m: usize,
    mg: usize,
    c: usize,
    g: Geom,
}

/// The sizes of one plane's window.
#[derive(Clone, Copy)]
pub(super) struct Geom {
    pub(super) h: usize,
    pub(super) wd: usize,
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) kh: usize,
    pub(super) kw: usize,
    pub(super) sh: usize,
    pub(super) sw: usize,
    pub(super) pt: isize,
    pub(super) pl: isize,
}

impl Rows {
    /// The kernel for `p` where it runs: AVX-512F with FMA, a 2-D window
    /// without dilation, at most [`MAX_KW`] wide, horizontal stride 1 or 2,
    /// vertical stride at most 8, output rows at least [`MIN_OW`] wide.
    pub(super) fn new(p: &ConvPlan) -> Option<Rows> {
        let win = &p.win;
        let ok = win.rank() == 2
            && p.group == p.c
            && p.c > 0
            && p.m.is_multiple_of(p.c)
            && win.dilations.iter().all(|&d| d == 1)
            && (1..=2).contains(&win.strides[1])
            && (1..=8).contains(&win.strides[0])
            && win.output[1] >= MIN_OW
            && win.output[0] > 0
            && win.kernel.iter().all(|&k| k > 0)
            && win.kernel[1] <= MAX_KW
            && crate::ops::gemm::simd::has_avx512();
        if !ok {
            return None;
        }
        let as_isize = |v: usize| isize::try_from(v).ok();
        Some(Rows {
            m: p.m,
            mg: p.mg(),
            c: p.c,
            g: Geom {
                h: win.input[0],
                wd: win.input[1],
                oh: win.output[0],
                ow: win.output[1],
                kh: win.kernel[0],
                kw: win.kernel[1],
                sh: win.strides[0],
                sw: win.strides[1],
                pt: as_isize(win.pad_begin[0])?,
                pl: as_isize(win.pad_begin[1])?,
            },
        })
    }

    /// `y = act(conv(x, w) + b + z)` for the whole layer, planes split over
    /// the current rayon pool.
    ///
    /// # Panics
    /// When a slice is shorter than the layer needs (a bug in the caller).
    pub(super) fn run(
        &self,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        z: Option<&[f32]>,
        act: Option<Activation>,
        y: &mut [f32],
    ) {
        let g = self.g;
        let (plane, in_plane, taps) = (g.oh * g.ow, g.h * g.wd, g.kh * g.kw);
        let epi = Epilogue::of(act);
        let zeros = vec![0f32; g.wd];
        par_rows(y, plane, |first, chunk| {
            let halves = super::halves::takes(&g);
            for (r, out) in chunk.chunks_exact_mut(plane).enumerate() {
                let row = first + r;
                let (ni, oc) = (row / self.m, row % self.m);
                let ch = ni * self.c + oc / self.mg;
                let pa = PlaneArgs {
                    x: &x[ch * in_plane..(ch + 1) * in_plane],
                    zeros: &zeros,
                    w: &w[oc * taps..(oc + 1) * taps],
                    bias: b.map_or(0.0, |b| b[oc]),
                    z: z.map(|z| &z[row * plane..(row + 1) * plane]),
                    y: out,
                };
                // SAFETY: `new` checked AVX-512F and FMA.
                unsafe {
                    if halves {
                        let mut pa = pa;
                        super::halves::sum_plane(&g, &mut pa, epi)
                    } else if g.sw == 1 {
                        sum_plane::<1>(&g, pa, epi)
                    } else {
                        sum_plane::<2>(&g, pa, epi)
                    }
                }
            }
        });
    }
}

/// One plane's operands: `x` `h × wd`, `w` `kh × kw`, `z` and `y` `oh ×
/// ow`.
pub(super) struct PlaneArgs<'a> {
    pub(super) x: &'a [f32],
    /// `wd` zeros: the rows above and below the plane.
    pub(super) zeros: &'a [f32],
    pub(super) w: &'a [f32],
    pub(super) bias: f32,
    pub(super) z: Option<&'a [f32]>,
    pub(super) y: &'a mut [f32],
}

/// One plane at horizontal stride S: the row in segments. A vector whose
/// loads all lie inside the row (for every column tap) is clean: runs of
/// clean vectors go in segments of up to [`MAX_V`] with plain loads; a
/// vector at an edge goes alone, with masked loads (a few mask registers,
/// where a wide segment's masks would not fit in the eight and be
/// reloaded from the stack at every tap). Each segment is taken in chunks
/// of R rows (the last rows one at a time).
///
/// # Safety
/// The CPU must support AVX-512F and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn sum_plane<const S: usize>(g: &Geom, mut pa: PlaneArgs, epi: Epilogue) {
    // One check here covers all the unchecked loads and stores below.
    assert!(
        pa.x.len() >= g.h * g.wd
            && pa.zeros.len() >= g.wd
            && pa.w.len() >= g.kh * g.kw
            && pa.y.len() >= g.oh * g.ow
            && pa.z.is_none_or(|z| z.len() >= g.oh * g.ow)
    );
    let vectors = g.ow.div_ceil(LANES);
    let mut v0 = 0;
    while v0 < vectors {
        let x0 = v0 * LANES;
        if !clean::<S>(g, v0) {
            // SAFETY: AVX-512F and FMA (the contract); the assert above is
            // what `segment` needs.
            unsafe { segment::<S, 1, { ROWS_FOR[0] }, true>(g, &mut pa, x0, epi) };
            v0 += 1;
            continue;
        }
        let mut v = 1;
        while v < MAX_V && v0 + v < vectors && clean::<S>(g, v0 + v) {
            v += 1;
        }
        // SAFETY: as above, and every vector of the segment is clean.
        unsafe {
            match v {
                4 => segment::<S, 4, { ROWS_FOR[3] }, false>(g, &mut pa, x0, epi),
                3 => segment::<S, 3, { ROWS_FOR[2] }, false>(g, &mut pa, x0, epi),
                2 => segment::<S, 2, { ROWS_FOR[1] }, false>(g, &mut pa, x0, epi),
                _ => segment::<S, 1, { ROWS_FOR[0] }, false>(g, &mut pa, x0, epi),
            }
        }
        v0 += v;
    }
}

/// The lanes of a load of 16 columns from column `at` (negative in the
/// left padding) that lie inside a row of `wd` columns.
pub(super) fn lanes_inside(at: isize, wd: usize) -> __mmask16 {
    let lo = (-at).clamp(0, LANES as isize) as u32;
    let hi = (wd as isize - at).clamp(0, LANES as isize) as u32;
    (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as __mmask16
}

/// Whether every load of output vector `v` (columns 16·v ..), for every
/// column tap, reads only columns inside the row: `16·S` of them from
/// column `16·v·S − pl + kx`.
fn clean<const S: usize>(g: &Geom, v: usize) -> bool {
    let first = (v * LANES * S) as isize - g.pl;
    let end = first + (g.kw - 1 + LANES * S) as isize;
    first >= 0 && end <= g.wd as isize
}

/// Columns `x0 .. x0 + 16·V` (cut at `ow`) of every row; the loads masked
/// when M, else whole (every vector [`clean`]).
///
/// # Safety
/// AVX-512F and FMA; `pa`'s slices as long as [`sum_plane`] asserts;
/// `x0 + 16·(V − 1) < ow`; unless M, every vector of the segment clean.
#[inline(always)]
unsafe fn segment<const S: usize, const V: usize, const R: usize, const M: bool>(
    g: &Geom,
    pa: &mut PlaneArgs,
    x0: usize,
    epi: Epilogue,
) {
    // The lanes of each load inside the row, the same for every row: one
    // load per vector (two at stride 2) of columns c0 + 16·h ..
    let mut masks = [[[0 as __mmask16; S]; V]; MAX_KW];
    let c0 = (x0 * S) as isize - g.pl;
    for (kx, m) in masks.iter_mut().enumerate().take(g.kw) {
        for (v, m) in m.iter_mut().enumerate() {
            for (h, m) in m.iter_mut().enumerate() {
                *m = lanes_inside(c0 + ((v * S + h) * LANES + kx) as isize, g.wd);
            }
        }
    }
    let cols = Cols { c0, masks: &masks };
    let mut y0 = 0;
    // SAFETY: the contract, with rows y0 .. y0 + R (or + 1) ≤ oh.
    unsafe {
        while y0 + R <= g.oh {
            chunk::<S, V, R, M>(g, pa, &cols, x0, y0, epi);
            y0 += R;
        }
        while y0 < g.oh {
            chunk::<S, V, 1, M>(g, pa, &cols, x0, y0, epi);
            y0 += 1;
        }
    }
}

/// The input columns a segment reads: the first (column `c0` of tap 0,
/// vector 0) and per tap and vector, the mask of each load's lanes that
/// lie inside the row.
struct Cols<'a, const S: usize, const V: usize> {
    c0: isize,
    masks: &'a [[[__mmask16; S]; V]; MAX_KW],
}

/// Output rows `y0 .. y0 + R`, columns `x0 .. x0 + 16·V` (cut at `ow`).
///
/// # Safety
/// As [`segment`], and `y0 + R ≤ oh`; `cols` that segment's columns.
#[inline(always)]
unsafe fn chunk<const S: usize, const V: usize, const R: usize, const M: bool>(
    g: &Geom,
    pa: &mut PlaneArgs,
    cols: &Cols<S, V>,
    x0: usize,
    y0: usize,
    epi: Epilogue,
) {
    let (kh, kw, sh) = (g.kh, g.kw, g.sh);
    // SAFETY: AVX-512F and FMA (the contract) make the intrinsics sound;
    // the loads read rows iy < h of `x` or `zeros` (only the lanes in 0 ..
    // wd), the
    // stores and the residual's loads rows y0 + r < oh of `y` and `z`
    // (only the lanes below ow), all inside the lengths `sum_plane`
    // asserts.
    unsafe {
        let mut acc = [[_mm512_set1_ps(pa.bias); V]; R];
        // The rows the next chunk reads first, into the cache meanwhile:
        // the hardware prefetcher does not follow this many row streams.
        let next = ((y0 + R) * sh + kh) as isize - g.pt;
        for iy in next..next + (R * sh) as isize {
            if (0..g.h as isize).contains(&iy) {
                let row = pa.x.as_ptr().add(iy as usize * g.wd);
                let from = (cols.c0.max(0) as usize).min(g.wd);
                let to = (from + V * S * LANES + kw).min(g.wd);
                for c in (from..to).step_by(LANES) {
                    _mm_prefetch::<_MM_HINT_T0>(row.add(c).cast());
                }
            }
        }
        for ky in 0..kh {
            // Each output row's input row, or a row of zeros outside the
            // plane (adding w·0, as the padding does).
            let rows: [*const f32; R] = std::array::from_fn(|r| {
                let iy = ((y0 + r) * sh + ky) as isize - g.pt;
                if (0..g.h as isize).contains(&iy) {
                    pa.x.as_ptr().add(iy as usize * g.wd)
                } else {
                    pa.zeros.as_ptr()
                }
            });
            for kx in 0..kw {
                let wv = _mm512_set1_ps(*pa.w.get_unchecked(ky * kw + kx));
                let masks = &cols.masks[kx];
                for (acc, &row) in acc.iter_mut().zip(&rows) {
                    for (v, a) in acc.iter_mut().enumerate() {
                        let c0 = cols.c0 + (v * S * LANES + kx) as isize;
                        let x = if M {
                            load::<S>(row, c0, &masks[v])
                        } else {
                            load_whole::<S>(row, c0)
                        };
                        *a = _mm512_fmadd_ps(wv, x, *a);
                    }
                }
            }
        }
        finish::<V, R>(g, pa, &acc, x0, y0, epi);
    }
}

/// Output rows `y0 .. y0 + R`, columns `x0 .. x0 + 16·V` (cut at `ow`)
/// from their sums `acc`: the residual, the activation, one masked store
/// per vector.
///
/// # Safety
/// AVX-512F; `pa`'s slices as long as [`sum_plane`] asserts; `y0 + R ≤
/// oh` and `x0 + 16·(V − 1) < ow`.
#[inline(always)]
pub(super) unsafe fn finish<const V: usize, const R: usize>(
    g: &Geom,
    pa: &mut PlaneArgs,
    acc: &[[__m512; V]; R],
    x0: usize,
    y0: usize,
    epi: Epilogue,
) {
    // SAFETY: AVX-512F (the contract); the stores and the residual's loads
    // touch rows y0 + r < oh of `y` and `z`, only the lanes below ow.
    unsafe {
        let y = pa.y.as_mut_ptr();
        for (r, acc) in acc.iter().enumerate() {
            let at = (y0 + r) * g.ow + x0;
            for (v, &a) in acc.iter().enumerate() {
                let n = (g.ow - x0 - v * LANES).min(LANES);
                let mask = ((1u32 << n) - 1) as __mmask16;
                let at = at + v * LANES;
                let mut s = a;
                if let Some(z) = pa.z {
                    s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, z.as_ptr().add(at)));
                }
                _mm512_mask_storeu_ps(y.add(at), mask, activate(s, epi));
            }
            if let Epilogue::After(act) = epi {
                // The row's outputs, re-borrowed from `y`'s pointer, which
                // nothing else uses while the slice lives.
                let n = (g.ow - x0).min(V * LANES);
                act.apply(std::slice::from_raw_parts_mut(y.add(at), n));
            }
        }
    }
}

/// The in-register activations (bit for bit `Activation::eval`: the bound
/// first keeps NaN, and hard-swish multiplies then adds).
///
/// # Safety
/// The CPU must support AVX-512F.
#[inline(always)]
pub(super) unsafe fn activate(s: __m512, epi: Epilogue) -> __m512 {
    // SAFETY: AVX-512F (the contract).
    unsafe {
        match epi {
            Epilogue::Clamp(lo, hi) => {
                let s = _mm512_max_ps(_mm512_set1_ps(lo), s);
                _mm512_min_ps(_mm512_set1_ps(hi), s)
            }
            Epilogue::HardSwish => {
                let g = _mm512_mul_ps(s, _mm512_set1_ps(1.0 / 6.0));
                let g = _mm512_add_ps(g, _mm512_set1_ps(0.5));
                let g = _mm512_max_ps(_mm512_setzero_ps(), g);
                _mm512_mul_ps(s, _mm512_min_ps(_mm512_set1_ps(1.0), g))
            }
            Epilogue::None | Epilogue::After(_) => s,
        }
    }
}

/// The 16 values of a row at columns `c0 + S·l` (l < 16): one load, or at
/// stride 2 two and their even lanes.
///
/// # Safety
/// AVX-512F; columns `c0 .. c0 + 16·S` of `row` must be readable.
#[inline(always)]
unsafe fn load_whole<const S: usize>(row: *const f32, c0: isize) -> __m512 {
    // SAFETY: AVX-512F and the columns readable (the contract).
    unsafe {
        let lo = _mm512_loadu_ps(row.offset(c0));
        if S == 1 {
            return lo;
        }
        let hi = _mm512_loadu_ps(row.offset(c0 + LANES as isize));
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        _mm512_permutex2var_ps(lo, even, hi)
    }
}

/// The 16 values of a row at columns `c0 + S·l` (l < 16), zero in the
/// lanes `masks` leaves out: one masked load, or at stride 2 two (of
/// columns `c0 ..` and `c0 + 16 ..`) and their even lanes.
///
/// # Safety
/// AVX-512F; the lanes `masks` keeps must be readable values of `row`.
#[inline(always)]
unsafe fn load<const S: usize>(row: *const f32, c0: isize, masks: &[__mmask16; S]) -> __m512 {
    // SAFETY: AVX-512F, and the masks keep readable lanes only (the
    // contract); masked-off lanes are not accessed, so their addresses
    // (computed with wrapping arithmetic) may lie outside the row.
    unsafe {
        let lo = _mm512_maskz_loadu_ps(masks[0], row.wrapping_offset(c0));
        if S == 1 {
            return lo;
        }
        let hi = _mm512_maskz_loadu_ps(masks[S - 1], row.wrapping_offset(c0 + LANES as isize));
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        _mm512_permutex2var_ps(lo, even, hi)
    }
}
