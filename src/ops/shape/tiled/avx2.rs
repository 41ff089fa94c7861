//! 8×8 blocks of 32-bit elements transposed in AVX2 registers for the
//! tiled transpose: eight 256-bit loads, three rounds of unpacks and lane
//! permutes, eight stores. Bits move unchanged, so the result is the
//! generic path's.

use std::arch::x86_64::*;

/// Writes the transpose of the 8×8 block read from `src` (row `r` at
/// `src[r * from..r * from + 8]`) into `dst` (row `c` at
/// `dst[c * to..c * to + 8]` holds the block's column `c`).
///
/// # Safety
/// The CPU supports AVX2; `src` holds `7 * from + 8` elements and `dst`
/// holds `7 * to + 8`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn block8(src: *const u32, from: usize, dst: *mut u32, to: usize) {
    // SAFETY: every load reads 8 elements at row r < 8 of `src`, inside the
    // `7 * from + 8` elements the caller guarantees; unaligned loads.
    let r: [__m256i; 8] =
        std::array::from_fn(|k| unsafe { _mm256_loadu_si256(src.add(k * from).cast()) });
    let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
    let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
    let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
    let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
    let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    // Columns c and c + 4 of rows 0-3 (u0..u3) and of rows 4-7 (u4..u7).
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    let cols = [
        _mm256_permute2x128_si256::<0x20>(u0, u4),
        _mm256_permute2x128_si256::<0x20>(u1, u5),
        _mm256_permute2x128_si256::<0x20>(u2, u6),
        _mm256_permute2x128_si256::<0x20>(u3, u7),
        _mm256_permute2x128_si256::<0x31>(u0, u4),
        _mm256_permute2x128_si256::<0x31>(u1, u5),
        _mm256_permute2x128_si256::<0x31>(u2, u6),
        _mm256_permute2x128_si256::<0x31>(u3, u7),
    ];
    for (c, v) in cols.into_iter().enumerate() {
        // SAFETY: row c < 8 of `dst`, inside the `7 * to + 8` elements the
        // caller guarantees; unaligned store.
        unsafe { _mm256_storeu_si256(dst.add(c * to).cast(), v) };
    }
}
