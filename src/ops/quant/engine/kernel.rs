//! The int8 micro-kernels: one [`MR`] × [`NR`] tile of exact i32 sums
//! `Σ_k w[r][k] · x[k][c]` from a packed weight block and a packed panel.
//! Three kernels, chosen per run ([`crate::ops::overflow`]): AVX-512 VNNI
//! (`vpdpbusd`: sixteen columns × four k per instruction, u8 × s8 into i32
//! with no intermediate saturation; it can also requantize a tile straight
//! from its registers); the narrow AVX2 kernel (`vpmaddubsw` pair sums in
//! saturating i16, which reports when a tile may have saturated so that the
//! guard recomputes it); and a portable kernel (compiled for AVX2 as well).
//! Where no pair sum saturates, all three compute the same integers. On
//! aarch64 the NEON kernels of [`super::neon`] (exact) take their place.

use super::sink::Requant;
use super::{Tile, MR, NR};
use crate::ops::overflow::Resolved;

/// Computes one tile, `out[r·NR + c] = Σ_k w[r][k] · x[k][c]`, on the
/// kernel `kind` (resolved for this CPU). Returns false when the narrow
/// kernel's pair sums reached the i16 limits: the tile may have saturated
/// (see [`crate::ops::overflow`]).
pub(crate) fn tile(kind: Resolved, w: &[i8], x: &[u8], k4: usize, out: &mut Tile) -> bool {
    debug_assert!(w.len() >= k4 * MR * 4 && x.len() >= k4 * NR * 4);
    #[cfg(target_arch = "x86_64")]
    match kind {
        Resolved::Vnni => {
            // SAFETY: `Resolved` names a kernel only when the CPU has its
            // features, and the slices hold k4 groups of both operands
            // (asserted by the callers' packing).
            unsafe { tile_vnni512(w, x, k4, out) };
            return true;
        }
        // SAFETY: as above.
        Resolved::Narrow => return unsafe { tile_narrow_avx2(w, x, k4, out) },
        Resolved::Portable => {}
    }
    #[cfg(target_arch = "aarch64")]
    match kind {
        Resolved::NeonDot => {
            // SAFETY: `NeonDot` is resolved only where the CPU has dotprod;
            // the slices hold k4 groups of both operands (as above).
            unsafe { super::neon::tile_dot(w, x, k4, out) };
            return true;
        }
        Resolved::NeonWide => {
            // SAFETY: NEON is part of the target; the slices as above.
            unsafe { super::neon::tile_widening(w, x, k4, out) };
            return true;
        }
        _ => {}
    }
    let _ = kind;
    tile_portable(w, x, k4, out);
    true
}

/// True when the CPU has AVX-512 F/BW/VL/DQ and VNNI (every CPU with
/// VNNI-512 has the others; the kernels use them).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_vnni512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512dq")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

crate::ops::gemm::simd::multiversion! {
    /// The reference kernel: plain i32 multiply-adds.
    pub(crate) fn tile_portable(w: &[i8], x: &[u8], k4: usize, out: &mut Tile) {
        out.fill(0);
        for g in 0..k4 {
            let xg = &x[g * NR * 4..][..NR * 4];
            let wg = &w[g * MR * 4..][..MR * 4];
            for r in 0..MR {
                let wr = [0, 1, 2, 3].map(|j| wg[r * 4 + j] as i32);
                let row = &mut out[r * NR..][..NR];
                for (c, acc) in row.iter_mut().enumerate() {
                    let xc = &xg[c * 4..][..4];
                    *acc = acc.wrapping_add(
                        xc[0] as i32 * wr[0]
                            + xc[1] as i32 * wr[1]
                            + xc[2] as i32 * wr[2]
                            + xc[3] as i32 * wr[3],
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_vnni512(w: &[i8], x: &[u8], k4: usize, out: &mut Tile) {
    use std::arch::x86_64::*;
    // SAFETY: `w` and `x` hold k4 groups (this function's contract).
    let acc = unsafe { sums_vnni512(w, x, k4) };
    let o = out.as_mut_ptr().cast::<__m512i>();
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: row r < MR of the tile is NR = 32 i32, two vectors of 16.
        unsafe {
            _mm512_storeu_si512(o.add(2 * r), a[0]);
            _mm512_storeu_si512(o.add(2 * r + 1), a[1]);
        }
    }
}

/// The VNNI sums of one tile, in registers: row r, columns 0..16 and 16..32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn sums_vnni512(w: &[i8], x: &[u8], k4: usize) -> [[std::arch::x86_64::__m512i; 2]; MR] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_si512(); 2]; MR];
    let (mut wp, mut xp) = (w.as_ptr().cast::<i32>(), x.as_ptr().cast::<__m512i>());
    for _ in 0..k4 {
        // SAFETY: `x` holds k4 groups of NR·4 = 128 bytes (the contract),
        // two vectors each, and `xp` is at the start of one.
        let (x0, x1) = unsafe { (_mm512_loadu_si512(xp), _mm512_loadu_si512(xp.add(1))) };
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: `w` holds k4 groups of MR·4 bytes (the contract):
            // row r < MR's four bytes of the group at `wp`.
            let wr = _mm512_set1_epi32(unsafe { wp.add(r).read_unaligned() });
            a[0] = _mm512_dpbusd_epi32(a[0], x0, wr);
            a[1] = _mm512_dpbusd_epi32(a[1], x1, wr);
        }
        // SAFETY: the next group, or one past the last when the loop ends.
        unsafe {
            wp = wp.add(MR);
            xp = xp.add(2);
        }
    }
    acc
}

/// The narrow kernel (AVX2): `vpmaddubsw` adds each column's products in
/// pairs into saturating i16, `vpmaddwd` the two pairs into i32. Four rows
/// by sixteen columns at a time. The extremes of every pair sum are kept;
/// returns false when one reached i16::MIN or i16::MAX (a saturated pair
/// ends there; an exact one may too, which only costs a recomputation).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile_narrow_avx2(w: &[i8], x: &[u8], k4: usize, out: &mut Tile) -> bool {
    use std::arch::x86_64::*;
    let ones = _mm256_set1_epi16(1);
    let mut high = _mm256_set1_epi16(i16::MIN);
    let mut low = _mm256_set1_epi16(i16::MAX);
    for rows in 0..MR / 4 {
        for cols in 0..NR / 16 {
            let mut acc = [[_mm256_setzero_si256(); 2]; 4];
            for g in 0..k4 {
                // SAFETY: `x` holds k4 groups of NR·4 bytes (the contract):
                // bytes 64·cols..64·cols + 64 < NR·4 of group g < k4.
                let (x0, x1) = unsafe {
                    let xp = x.as_ptr().add(g * NR * 4 + cols * 64);
                    (
                        _mm256_loadu_si256(xp.cast()),
                        _mm256_loadu_si256(xp.add(32).cast()),
                    )
                };
                // SAFETY: `w` holds k4 groups of MR·4 bytes (the contract):
                // rows 4·rows..4·rows + 4 < MR of group g.
                let wp = unsafe { w.as_ptr().add(g * MR * 4 + rows * 16).cast::<i32>() };
                for (r, a) in acc.iter_mut().enumerate() {
                    // SAFETY: row 4·rows + r of the group at `wp`, r < 4.
                    let wr = _mm256_set1_epi32(unsafe { wp.add(r).read_unaligned() });
                    let p0 = _mm256_maddubs_epi16(x0, wr);
                    let p1 = _mm256_maddubs_epi16(x1, wr);
                    high = _mm256_max_epi16(high, _mm256_max_epi16(p0, p1));
                    low = _mm256_min_epi16(low, _mm256_min_epi16(p0, p1));
                    a[0] = _mm256_add_epi32(a[0], _mm256_madd_epi16(p0, ones));
                    a[1] = _mm256_add_epi32(a[1], _mm256_madd_epi16(p1, ones));
                }
            }
            for (r, a) in acc.iter().enumerate() {
                // SAFETY: columns 16·cols..16·cols + 16 ≤ NR of row
                // 4·rows + r < MR of the MR × NR tile.
                unsafe {
                    let o = out.as_mut_ptr().add((rows * 4 + r) * NR + cols * 16);
                    _mm256_storeu_si256(o.cast(), a[0]);
                    _mm256_storeu_si256(o.add(8).cast(), a[1]);
                }
            }
        }
    }
    let limits = _mm256_or_si256(
        _mm256_cmpeq_epi16(high, _mm256_set1_epi16(i16::MAX)),
        _mm256_cmpeq_epi16(low, _mm256_set1_epi16(i16::MIN)),
    );
    _mm256_testz_si256(limits, limits) == 1
}

/// [`tile`] with the requantization fused in, where the CPU has AVX-512
/// VNNI: `requantize(sum + add[r], …)` of rows `r0 .. r0 + nr`, columns
/// `c0 .. c0 + nc`, written from registers to `dst`. The same f32
/// operations as the sink's requantization, so the same bytes. Returns
/// false (nothing written) where the CPU lacks the kernel.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tile_requant(
    w: &[i8],
    x: &[u8],
    k4: usize,
    add: &[i32],
    dst: &Requant,
    (r0, c0): (usize, usize),
    (nr, nc): (usize, usize),
) -> bool {
    debug_assert!(w.len() >= k4 * MR * 4 && x.len() >= k4 * NR * 4 && add.len() >= nr);
    #[cfg(target_arch = "x86_64")]
    if has_vnni512() {
        let rows = dst.rows(r0, c0, nr, nc);
        // SAFETY: the features are present (checked); the operands hold k4
        // groups (asserted by the callers' packing); `rows` are in bounds
        // for nc bytes each (checked by `Requant::rows`) and written by
        // this tile alone.
        unsafe { tile_requant_vnni512(w, x, k4, add, dst, r0, &rows, (nr, nc)) };
        return true;
    }
    let _ = (w, x, k4, add, dst, r0, c0, nr, nc);
    false
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_requant_vnni512(
    w: &[i8],
    x: &[u8],
    k4: usize,
    add: &[i32],
    dst: &Requant,
    r0: usize,
    rows: &[*mut u8; MR],
    (nr, nc): (usize, usize),
) {
    use super::sink::{lanes, Requant16};
    use std::arch::x86_64::*;
    // SAFETY: `w` and `x` hold k4 groups (this function's contract).
    let acc = unsafe { sums_vnni512(w, x, k4) };
    let requant = Requant16::new(dst.zero, dst.lo, dst.hi);
    // Both halves narrowed in registers and stored as one 32-byte run: a
    // narrowing store to memory (`vpmovdb m128`) is several times slower
    // than the register form on some cores (AMD Zen 4 and 5).
    let mask = (lanes(nc) as u32) | ((lanes(nc.saturating_sub(16)) as u32) << 16);
    for (r, a) in acc.iter().enumerate().take(nr) {
        let bias = _mm512_set1_epi32(add[r]);
        let s = _mm512_set1_ps(dst.scale_of(r0 + r));
        let low = _mm512_cvtepi32_epi8(requant.apply(_mm512_add_epi32(a[0], bias), s));
        let high = _mm512_cvtepi32_epi8(requant.apply(_mm512_add_epi32(a[1], bias), s));
        let bytes = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(low), high);
        // SAFETY: `rows[r]` holds nc bytes (the contract) and the mask
        // keeps the columns below nc.
        unsafe { _mm256_mask_storeu_epi8(rows[r].cast(), mask, bytes) };
    }
}
