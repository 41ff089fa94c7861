//! The AVX-512 rows kernel's loop for horizontal stride 2: per chunk of
//! output rows, each input row it reads is split once into its even and
//! odd columns (two masked loads and two permutes per 32 columns, the
//! padding and the row's end read as zeros) in a small scratch that stays
//! in the L1 cache; every tap then reads 16 consecutive values of one half
//! with one plain load (tap kx reads half kx mod 2 from lane kx / 2),
//! where reading X in place took two loads and a permute per tap; only
//! the vectors of each half that stored outputs read are split (a 56-wide
//! output row, MobileNet v3's features.2, needs 4 of the 5 that a
//! 4-vector segment holds). (The
//! same copy at stride 1, with its padding, ran no faster than the phase
//! path there, so stride 1 stays on it.)
//!
//! Every output still starts from the bias and adds its taps in kernel
//! row-major order, one fused multiply-add each, padding adding w·0: the
//! bits of the other loops.

use std::arch::x86_64::*;

use super::lanes::Epilogue;
use super::rows::{finish, lanes_inside, Geom, PlaneArgs, LANES};

/// Most vectors of one row a chunk holds.
const MAX_V: usize = 4;

/// Rows of a chunk for each width in vectors (1 to [`MAX_V`]): 8 to 12
/// running sums.
const ROWS_FOR: [usize; MAX_V] = [8, 6, 4, 3];

/// How many input rows past a chunk's last the prefetches reach.
const PREFETCH_ROWS: usize = 12;

/// Widest and tallest kernel taken, and the largest vertical stride.
const MAX_KW: usize = 7;
const MAX_KH: usize = 7;
const MAX_SH: usize = 2;

/// Values a half row holds for a segment of `v` vectors: its 16·v
/// outputs' first columns and the kw / 2 ≤ 3 lanes the taps reach past
/// them, in whole vectors.
const fn half_len(v: usize) -> usize {
    LANES * (v + 1)
}

/// Values of the scratch a segment of `v` vectors (and so `ROWS_FOR[v −
/// 1]` rows) needs: each input row its chunk reads, as two halves.
const fn split_len(v: usize) -> usize {
    ((ROWS_FOR[v - 1] - 1) * MAX_SH + MAX_KH) * 2 * half_len(v)
}

/// Values of [`Split`]: enough for every segment width.
const SPLIT_LEN: usize = 1760;
const _: () = assert!(
    split_len(1) <= SPLIT_LEN
        && split_len(2) <= SPLIT_LEN
        && split_len(3) <= SPLIT_LEN
        && split_len(4) <= SPLIT_LEN,
    "the scratch holds every segment's rows"
);

/// The scratch of the split input rows, 64-byte aligned (so each half's
/// vectors are whole cache lines).
#[repr(C, align(64))]
pub(super) struct Split([f32; SPLIT_LEN]);

impl Split {
    /// A zeroed scratch.
    pub(super) fn new() -> Split {
        Split([0.0; SPLIT_LEN])
    }
}

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
pub(super) unsafe fn sum_plane(g: &Geom, pa: &mut PlaneArgs, split: &mut Split, epi: Epilogue) {
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
                4 => segment::<4, { ROWS_FOR[3] }>(g, pa, split, v0, epi),
                3 => segment::<3, { ROWS_FOR[2] }>(g, pa, split, v0, epi),
                2 => segment::<2, { ROWS_FOR[1] }>(g, pa, split, v0, epi),
                _ => segment::<1, { ROWS_FOR[0] }>(g, pa, split, v0, epi),
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
    split: &mut Split,
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
            chunk::<V, R>(g, pa, split, &cols, x0, y0, epi);
            y0 += R;
        }
        while y0 < g.oh {
            chunk::<V, 1>(g, pa, split, &cols, x0, y0, epi);
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
    split: &mut Split,
    cols: &Cols,
    x0: usize,
    y0: usize,
    epi: Epilogue,
) {
    let (kh, kw, sh) = (g.kh, g.kw, g.sh);
    let half = half_len(V);
    let rows_in = (R - 1) * sh + kh;
    let iy0 = (y0 * sh) as isize - g.pt;
    let s = split.0.as_mut_ptr();
    // SAFETY: AVX-512F and FMA (the contract) make the intrinsics sound;
    // the loads of X read rows 0 ≤ iy < h, only the lanes in 0 .. wd
    // (masked-off lanes are not accessed, so their addresses, computed
    // with wrapping arithmetic, may lie outside); the scratch's rows_in ·
    // 2 · half values fit in it (`split_len`, as sh ≤ 2 and kh ≤ 7), and
    // its loads read values 16·v + kx / 2 .. + 16 ≤ 16·V + 3 of a half,
    // within its 16·(V + 1); W's kh × kw taps; `finish` gets rows y0 ..
    // y0 + R ≤ oh.
    unsafe {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        for j in 0..rows_in {
            let iy = iy0 + j as isize;
            let dst = s.add(j * 2 * half);
            if (0..g.h as isize).contains(&iy) {
                let row = pa.x.as_ptr().add(iy as usize * g.wd);
                for (i, m) in cols.masks.iter().enumerate().take(V + 1) {
                    // A fixed count with an exit keeps the loop unrolled.
                    if i == cols.pairs {
                        break;
                    }
                    let at = cols.c0 + (2 * i * LANES) as isize;
                    let lo = _mm512_maskz_loadu_ps(m[0], row.wrapping_offset(at));
                    let hi = _mm512_maskz_loadu_ps(m[1], row.wrapping_offset(at + LANES as isize));
                    _mm512_store_ps(dst.add(i * LANES), _mm512_permutex2var_ps(lo, even, hi));
                    let o = _mm512_permutex2var_ps(lo, odd, hi);
                    _mm512_store_ps(dst.add(half + i * LANES), o);
                }
            } else {
                // A row outside the plane: zeros, adding w·0 as the
                // padding does.
                for i in 0..V + 1 {
                    if i == cols.pairs {
                        break;
                    }
                    _mm512_store_ps(dst.add(i * LANES), _mm512_setzero_ps());
                    _mm512_store_ps(dst.add(half + i * LANES), _mm512_setzero_ps());
                }
            }
        }
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
        for ky in 0..kh {
            let rows: [*const f32; R] =
                std::array::from_fn(|r| s.add((r * sh + ky) * 2 * half).cast_const());
            for kx in 0..kw {
                let wv = _mm512_set1_ps(*pa.w.get_unchecked(ky * kw + kx));
                let at = (kx % 2) * half + kx / 2;
                for (acc, &row) in acc.iter_mut().zip(&rows) {
                    for (v, a) in acc.iter_mut().enumerate() {
                        let x = _mm512_loadu_ps(row.add(at + v * LANES));
                        *a = _mm512_fmadd_ps(wv, x, *a);
                    }
                }
            }
        }
        finish::<V, R>(g, pa, &acc, x0, y0, epi);
    }
}
