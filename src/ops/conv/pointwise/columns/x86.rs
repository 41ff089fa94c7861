//! The AVX-512 tile of the columns kernel: 16 or 32 output channels × up
//! to 8 positions in as many registers per 16 channels, summed over k with
//! W's vector of channels times a broadcast of X, then transposed in
//! registers (16 channels × 8 positions into 16 rows of 8) and stored row
//! by row under a mask of the tile's positions. A long sum over k may be
//! taken in passes: each pass but the last stores its accumulators as
//! they are, and the next resumes the chains from them (the same bits).

use super::super::clamp::Clamp;
use std::arch::x86_64::*;

/// One tile's operands.
pub(super) struct Tile<'a> {
    /// X at the tile's first position: `k` rows at pitch `pitch`.
    pub x: *const f32,
    /// Distance between rows of X, and of Y and Z (the plane's positions).
    pub pitch: usize,
    pub k: usize,
    /// Rows of the panel (channels of Y written): 1 to its width.
    pub rows: usize,
    /// The panel: per step of k, 16 or 32 weights (its width:
    /// `w.len() / k`).
    pub w: &'a [f32],
    /// The biases of the panel's rows.
    pub bias: Option<&'a [f32]>,
    /// The residual at the tile's first output, laid out like Y.
    pub z: Option<*const f32>,
    /// Y at the tile's first output.
    pub y: *mut f32,
    pub clamp: Clamp,
    /// Which part of the sum over k this call computes.
    pub pass: Pass,
}

/// The part of a tile's sums one call computes, with the tile's carry:
/// `P·V·16` floats that hold its accumulators between passes.
#[derive(Clone, Copy)]
pub(super) enum Pass {
    /// All of k: from zero to the stored outputs.
    Whole,
    /// From zero, leaving the sums in the carry.
    First(*mut f32),
    /// From the carry's sums back to it.
    Middle(*mut f32),
    /// From the carry's sums to the stored outputs.
    Last(*mut f32),
}

impl Pass {
    /// Pass `pass` of `passes` over k, with the tile's carry (unused when
    /// there is one pass).
    pub(super) fn nth(pass: usize, passes: usize, carry: *mut f32) -> Pass {
        match (pass, passes) {
            (_, 1) => Pass::Whole,
            (0, _) => Pass::First(carry),
            (p, ps) if p + 1 == ps => Pass::Last(carry),
            _ => Pass::Middle(carry),
        }
    }
}

/// Computes a tile of `positions` (1 to 8) positions.
///
/// # Safety
/// The CPU must have AVX-512F; `x` must hold `k` rows of `positions`
/// readable floats at `pitch`, `w` `k` steps of its width (16 or 32), and
/// `bias` (if any) `rows` values, and `y` (and `z`) `rows` rows at `pitch`, each with `positions` writable (readable) floats;
/// a pass's carry `positions` × the panel's width floats, which nothing
/// else uses meanwhile, holding the previous pass's sums where it resumes.
pub(super) unsafe fn tile(positions: usize, t: Tile) {
    let wide = t.w.len() / t.k.max(1) > 16;
    macro_rules! by {
        ($($p:literal)*) => {
            match (positions, wide) {
                $(($p, true) => tile_of::<2, $p>(t),
                ($p, false) => tile_of::<1, $p>(t),)*
                _ => unreachable!("a tile has 1 to 8 positions"),
            }
        };
    }
    // SAFETY: this function's contract, passed on with P = `positions`.
    unsafe { by!(1 2 3 4 5 6 7 8) }
}

/// [`tile`] for V vectors of 16 channels and P positions.
///
/// # Safety
/// As for [`tile`].
#[target_feature(enable = "avx512f")]
unsafe fn tile_of<const V: usize, const P: usize>(t: Tile) {
    let (k, xs) = (t.k, t.pitch);
    assert!(t.w.len() >= k * 16 * V);
    let rows = t.rows.min(16 * V);
    assert!(t.bias.is_none_or(|b| b.len() >= rows));
    let mut acc = match t.pass {
        // SAFETY: the carry holds P·V·16 floats (the caller's contract).
        Pass::Middle(c) | Pass::Last(c) => unsafe { load_carry::<V, P>(c) },
        Pass::Whole | Pass::First(_) => [[_mm512_setzero_ps(); V]; P],
    };
    let wp = t.w.as_ptr();
    for kk in 0..k {
        // SAFETY: step kk < k of the panel (the assert above) and row kk
        // of X, P readable floats (the caller's contract).
        let (wr, xr) = unsafe { (wp.add(kk * 16 * V), t.x.add(kk * xs)) };
        let mut wv = [_mm512_setzero_ps(); V];
        for (v, w) in wv.iter_mut().enumerate() {
            // SAFETY: channels 16v..16v+16 of the step, v < V.
            *w = unsafe { _mm512_loadu_ps(wr.add(16 * v)) };
        }
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: position j < P of row kk.
            let xb = _mm512_set1_ps(unsafe { *xr.add(j) });
            for (v, s) in a.iter_mut().enumerate() {
                *s = _mm512_fmadd_ps(wv[v], xb, *s);
            }
        }
    }
    if let Pass::First(c) | Pass::Middle(c) = t.pass {
        // SAFETY: as for the carry's load above.
        unsafe { store_carry(c, acc) };
        return;
    }
    let positions: __mmask16 = (1u16 << P) - 1;
    for v in 0..V {
        // Channels 16v.. of this vector that are rows of the panel.
        let live = rows.saturating_sub(16 * v).min(16);
        if live == 0 {
            continue;
        }
        let mut cols = [_mm512_setzero_ps(); PX];
        for (c, a) in cols.iter_mut().zip(&acc) {
            *c = a[v];
            if let Some(b) = t.bias {
                let lanes: __mmask16 = ((1u32 << live) - 1) as u16;
                // SAFETY: `live` biases from 16v, all within `bias`.
                *c = _mm512_add_ps(*c, unsafe {
                    _mm512_maskz_loadu_ps(lanes, b.as_ptr().add(16 * v))
                });
            }
        }
        let out = transpose(&cols);
        for (o, &reg) in out.iter().enumerate() {
            // Register o holds rows lo (lanes 0..8) and lo + 4 (8..16).
            let lo = 16 * v + (o / 4) * 8 + o % 4;
            let hi = lo + 4;
            let m_lo = if lo < 16 * v + live { positions } else { 0 };
            let m_hi = if hi < 16 * v + live {
                positions << 8
            } else {
                0
            };
            // Row hi's positions sit in lanes 8.., so its address is taken
            // 8 floats early: only the unmasked lanes are touched.
            let at_lo = lo * xs;
            let at_hi = (hi * xs).wrapping_sub(8);
            let mut r = reg;
            if let Some(z) = t.z {
                // SAFETY: rows lo and hi of Z, P readable floats each (the
                // caller's contract); masked-off lanes are not read.
                let zv = unsafe {
                    let zv = _mm512_maskz_loadu_ps(m_lo, z.wrapping_add(at_lo));
                    _mm512_mask_loadu_ps(zv, m_hi, z.wrapping_add(at_hi))
                };
                r = _mm512_add_ps(r, zv);
            }
            let r = t.clamp.apply(r);
            // SAFETY: rows lo and hi of Y, P writable floats each (the
            // caller's contract); masked-off lanes are not written.
            unsafe {
                _mm512_mask_storeu_ps(t.y.wrapping_add(at_lo), m_lo, r);
                _mm512_mask_storeu_ps(t.y.wrapping_add(at_hi), m_hi, r);
            }
        }
    }
}

/// Asks L2 for the cache lines of `v` (a share of the W slice the tiles
/// read next: read first from memory by the first tile, a whole model's
/// weights being far more than L2 holds, each step of k waited on its
/// lines).
pub(super) fn prefetch_l2(v: &[f32]) {
    const LINE: usize = 16;
    for at in (0..v.len()).step_by(LINE).chain(v.len().checked_sub(1)) {
        // SAFETY: a prefetch reads nothing the program sees and cannot
        // fault; the address is inside `v`.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(v.as_ptr().add(at).cast()) };
    }
}

/// A tile's sums from its carry (`P·V·16` readable floats at `c`), as
/// values, so the accumulators stay in registers through the loop over k.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load_carry<const V: usize, const P: usize>(c: *const f32) -> [[__m512; V]; P] {
    let mut acc = [[_mm512_setzero_ps(); V]; P];
    for (j, a) in acc.iter_mut().enumerate() {
        for (v, s) in a.iter_mut().enumerate() {
            // SAFETY: j < P, v < V: within the caller's P·V·16 floats.
            *s = unsafe { _mm512_loadu_ps(c.add((j * V + v) * 16)) };
        }
    }
    acc
}

/// Stores a tile's sums into its carry (`P·V·16` writable floats at `c`).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store_carry<const V: usize, const P: usize>(c: *mut f32, acc: [[__m512; V]; P]) {
    for (j, a) in acc.iter().enumerate() {
        for (v, &s) in a.iter().enumerate() {
            // SAFETY: j < P, v < V: within the caller's P·V·16 floats.
            unsafe { _mm512_storeu_ps(c.add((j * V + v) * 16), s) };
        }
    }
}

/// Positions per transposed row.
const PX: usize = 8;

/// Transposes 8 vectors of 16 channels (one per position) into 16 rows of
/// 8 positions, two rows a register: register `o` holds row `(o / 4)·8 +
/// o % 4` in lanes 0..8 and the row 4 after it in lanes 8..16.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose(c: &[__m512; PX]) -> [__m512; PX] {
    // Within each 128-bit lane l (channels 4l..4l+4): pairs of positions,
    // then quads: u[i] holds channel 4l + i of positions 0..4 in lane l,
    // u[4 + i] that of positions 4..8.
    let mut t = [_mm512_setzero_ps(); PX];
    for h in 0..4 {
        t[2 * h] = _mm512_unpacklo_ps(c[2 * h], c[2 * h + 1]);
        t[2 * h + 1] = _mm512_unpackhi_ps(c[2 * h], c[2 * h + 1]);
    }
    let mut td = [_mm512_setzero_pd(); PX];
    for (d, &s) in td.iter_mut().zip(&t) {
        *d = _mm512_castps_pd(s);
    }
    let t = td;
    let mut u = [_mm512_setzero_ps(); PX];
    for (h, base) in [(0, 0), (1, 4)] {
        // Positions 4h..4h+4: from t[base..base + 4].
        let (a0, a1, b0, b1) = (t[base], t[base + 1], t[base + 2], t[base + 3]);
        u[4 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, b0));
        u[4 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, b0));
        u[4 * h + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, b1));
        u[4 * h + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, b1));
    }
    // Lanes (l0 of a, l0 of b, l1 of a, l1 of b): rows i and 4 + i; and
    // lanes 2 and 3 likewise: rows 8 + i and 12 + i.
    let lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    let hi = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    let mut out = [_mm512_setzero_ps(); PX];
    for i in 0..4 {
        out[i] = _mm512_permutex2var_ps(u[i], lo, u[4 + i]);
        out[4 + i] = _mm512_permutex2var_ps(u[i], hi, u[4 + i]);
    }
    out
}
