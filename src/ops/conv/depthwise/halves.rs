//! The AVX-512 rows kernel's loop for horizontal stride 2: per chunk of
//! output rows, each input row it reads is split once into its even and
//! odd columns in registers (two masked loads and two permutes per 32
//! columns, the padding and the row's end read as zeros); tap kx then
//! takes half kx mod 2 from lane kx / 2 on (one `valignd` of two
//! neighbouring vectors), for every output row of the chunk that reads
//! that input row. Reading X in place took two loads and a permute per
//! tap; splitting each row into an L1 scratch first and loading every tap
//! from there took 1.05–1.7× this loop's time (one thread, 3×3 on planes
//! of 48 to 224; MobileNet v3's features.2 0.146 → 0.117 ms). Only the
//! vectors of each half that stored outputs read are split (a 56-wide
//! output row, MobileNet v3's features.2, needs 4 of the 5 that a
//! 4-vector segment holds). (A split copy at stride 1, with its padding,
//! ran no faster than the phase path there, so stride 1 stays on it.)
//!
//! Every output still starts from the bias and adds its taps in kernel
//! row-major order, one fused multiply-add each, padding adding w·0: the
//! bits of the other loops.

use std::arch::x86_64::*;

use super::lanes::Epilogue;
use super::rows::{finish, lanes_inside, Geom, PlaneArgs, LANES};

/// Most vectors of one row a chunk holds.
const MAX_V: usize = 4;

/// Rows of a chunk for each width in vectors (1 to [`MAX_V`]): 4 to 12
/// running sums, with the split row and its taps beside them in the 32
/// vector registers (6 rows of 2 vectors spilled and ran 1.4× slower).
const ROWS_FOR: [usize; MAX_V] = [4, 4, 4, 3];

/// How many input rows past a chunk's last the prefetches reach.
const PREFETCH_ROWS: usize = 12;

/// Widest and tallest kernel taken, and the largest vertical stride.
const MAX_KW: usize = 7;
const MAX_KH: usize = 7;
const MAX_SH: usize = 2;

/// Whether the loop takes a plane of this geometry: horizontal stride 2,
/// a kernel at most 7 × 7, a vertical stride of 1 or 2.
pub(super) fn takes(g: &Geom) -> bool {
    g.sw == 2
        && (1..=MAX_KW).contains(&g.kw)
        && (1..=MAX_KH).contains(&g.kh)
        && (1..=MAX_SH).contains(&g.sh)
}

/// One plane (of a geometry [`takes`] accepts), in segments of up to
/// [`MAX_V`] vectors, each in chunks of R rows (the last rows one at a
/// time).
///
/// # Safety
/// The CPU must support AVX-512F and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn sum_plane(g: &Geom, pa: &mut PlaneArgs, epi: Epilogue) {
    // One check here covers all the unchecked loads and stores below.
    assert!(
        pa.x.len() >= g.h * g.wd
            && pa.w.len() >= g.kh * g.kw
            && pa.y.len() >= g.oh * g.ow
            && pa.z.is_none_or(|z| z.len() >= g.oh * g.ow)
            && takes(g)
    );
    let vectors = g.ow.div_ceil(LANES);
    let mut v0 = 0;
    while v0 < vectors {
        let v = (vectors - v0).min(MAX_V);
        // SAFETY: the contract.
        unsafe {
            match v {
                4 => segment::<4, { ROWS_FOR[3] }>(g, pa, v0, epi),
                3 => segment::<3, { ROWS_FOR[2] }>(g, pa, v0, epi),
                2 => segment::<2, { ROWS_FOR[1] }>(g, pa, v0, epi),
                _ => segment::<1, { ROWS_FOR[0] }>(g, pa, v0, epi),
            }
        }
        v0 += v;
    }
}

/// Output vectors `v0 .. v0 + V` of every row (R = `ROWS_FOR[V − 1]`).
///
/// # Safety
/// As [`sum_plane`], and `v0 + V` ≤ the row's vectors.
#[inline(always)]
unsafe fn segment<const V: usize, const R: usize>(
    g: &Geom,
    pa: &mut PlaneArgs,
    v0: usize,
    epi: Epilogue,
) {
    let x0 = v0 * LANES;
    // Half p's value e is column 2·(x0 + e) − pl + p: vector i of both
    // halves comes from columns c0 + 32·i .. + 32, two loads of 16, each
    // masked to the lanes inside the row.
    let c0 = (2 * x0) as isize - g.pl;
    let mut masks = [[0 as __mmask16; 2]; MAX_V + 1];
    for (i, m) in masks.iter_mut().enumerate().take(V + 1) {
        for (h, m) in m.iter_mut().enumerate() {
            *m = lanes_inside(c0 + ((2 * i + h) * LANES) as isize, g.wd);
        }
    }
    // Only the vectors of each half that the stored outputs read: the
    // last outputs below ow and the (kw − 1) / 2 lanes past them (the
    // lanes beyond feed outputs that are never stored).
    let need = (g.ow - x0).min(V * LANES) + (g.kw - 1) / 2;
    let pairs = need.div_ceil(LANES).min(V + 1);
    let cols = Cols {
        c0,
        masks: &masks,
        pairs,
    };
    let mut y0 = 0;
    // SAFETY: the contract, with rows y0 .. y0 + R (or + 1) ≤ oh.
    unsafe {
        while y0 + R <= g.oh {
            chunk::<V, R>(g, pa, &cols, x0, y0, epi);
            y0 += R;
        }
        while y0 < g.oh {
            chunk::<V, 1>(g, pa, &cols, x0, y0, epi);
            y0 += 1;
        }
    }
}

/// The columns a segment splits: the first, and the masks of each load.
struct Cols<'a> {
    c0: isize,
    masks: &'a [[__mmask16; 2]; MAX_V + 1],
    /// Vectors of each half split (at most V + 1).
    pairs: usize,
}

/// Output rows `y0 .. y0 + R`, columns `x0 .. x0 + 16·V` (cut at `ow`).
///
/// # Safety
/// As [`segment`], `y0 + R ≤ oh`, R ≤ `ROWS_FOR[V − 1]`, `cols` that
/// segment's.
#[inline(always)]
unsafe fn chunk<const V: usize, const R: usize>(
    g: &Geom,
    pa: &mut PlaneArgs,
    cols: &Cols,
    x0: usize,
    y0: usize,
    epi: Epilogue,
) {
    let (kh, kw, sh) = (g.kh, g.kw, g.sh);
    let rows_in = (R - 1) * sh + kh;
    let iy0 = (y0 * sh) as isize - g.pt;
    // SAFETY: AVX-512F and FMA (the contract) make the intrinsics sound;
    // the loads of X read rows 0 ≤ iy < h, only the lanes in 0 .. wd
    // (masked-off lanes are not accessed, so their addresses, computed
    // with wrapping arithmetic, may lie outside); W's kh × kw taps;
    // `finish` gets rows y0 .. y0 + R ≤ oh.
    unsafe {
        // The rows a later chunk reads, into the cache meanwhile: X comes
        // from L2 or L3, and the hardware prefetcher does not keep up.
        // Past the plane's last row, the next plane's first (planes lie
        // end to end; a prefetch never faults, wherever it points).
        let ahead = iy0 + rows_in as isize + PREFETCH_ROWS as isize;
        for iy in ahead.max(0)..ahead.max(0) + (R * sh) as isize {
            let row = pa.x.as_ptr().wrapping_add(iy as usize * g.wd);
            let from = cols.c0.max(0) as usize;
            for c in (from..from + 2 * V * LANES + kw).step_by(LANES) {
                _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(c).cast());
            }
        }
        let mut acc = [[_mm512_set1_ps(pa.bias); V]; R];
        // Input rows in order: each output row meets its kernel rows in
        // order, and each kernel row's taps in order.
        for j in 0..rows_in {
            let halves = split_row::<V>(g, pa, cols, iy0 + j as isize);
            for kx in 0..kw {
                let taps = tap_vectors::<V>(&halves[kx % 2], kx / 2);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let Some(ky) = j.checked_sub(r * sh).filter(|&ky| ky < kh) else {
                        continue;
                    };
                    let wv = _mm512_set1_ps(*pa.w.get_unchecked(ky * kw + kx));
                    for (a, &t) in acc.iter_mut().zip(&taps) {
                        *a = _mm512_fmadd_ps(wv, t, *a);
                    }
                }
            }
        }
        finish::<V, R>(g, pa, &acc, x0, y0, epi);
    }
}

/// Input row `iy` split into its even and odd columns: vector i of half p
/// holds columns c0 + 32·i + p + 2·l, the first [`Cols::pairs`] vectors
/// loaded (two masked loads and two permutes each; zeros outside the
/// row), the rest zero (they feed only outputs never stored). A row
/// outside the plane is zeros (adding w·0, as the padding does).
///
/// # Safety
/// AVX-512F; `pa.x` holds `h × wd` values; `cols` the segment's.
#[inline(always)]
unsafe fn split_row<const V: usize>(
    g: &Geom,
    pa: &PlaneArgs,
    cols: &Cols,
    iy: isize,
) -> [[__m512; MAX_V + 1]; 2] {
    // SAFETY: AVX-512F (the contract); the loads read row iy < h, only
    // the lanes in 0 .. wd (masked-off lanes are not accessed).
    unsafe {
        let mut halves = [[_mm512_setzero_ps(); MAX_V + 1]; 2];
        if !(0..g.h as isize).contains(&iy) {
            return halves;
        }
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let row = pa.x.as_ptr().add(iy as usize * g.wd);
        for (i, m) in cols.masks.iter().enumerate().take(V + 1) {
            // A fixed count with an exit keeps the loop unrolled.
            if i == cols.pairs {
                break;
            }
            let at = cols.c0 + (2 * i * LANES) as isize;
            let lo = _mm512_maskz_loadu_ps(m[0], row.wrapping_offset(at));
            let hi = _mm512_maskz_loadu_ps(m[1], row.wrapping_offset(at + LANES as isize));
            halves[0][i] = _mm512_permutex2var_ps(lo, even, hi);
            halves[1][i] = _mm512_permutex2var_ps(lo, odd, hi);
        }
        halves
    }
}

/// The V vectors of a half from lane `shift` on (vector v: lanes shift ..
/// 16 of vector v, then the first `shift` of vector v + 1): the inputs of
/// the tap `2·shift + p` for 16·V consecutive outputs.
///
/// # Safety
/// AVX-512F; `shift` < 4.
#[inline(always)]
unsafe fn tap_vectors<const V: usize>(half: &[__m512; MAX_V + 1], shift: usize) -> [__m512; V] {
    // SAFETY: AVX-512F (the contract).
    unsafe {
        let at = |v: usize| {
            let (lo, hi) = (
                _mm512_castps_si512(half[v]),
                _mm512_castps_si512(half[v + 1]),
            );
            _mm512_castsi512_ps(match shift {
                0 => lo,
                1 => _mm512_alignr_epi32::<1>(hi, lo),
                2 => _mm512_alignr_epi32::<2>(hi, lo),
                _ => _mm512_alignr_epi32::<3>(hi, lo),
            })
        };
        std::array::from_fn(at)
    }
}
