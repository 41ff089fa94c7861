//! Register-level pieces shared by the x86-64 kernels: the 8×8 f32
//! transpose in AVX registers (patch embeddings, the channel-blocked
//! depthwise kernel's layout changes, the int8 engine's transposing float
//! store) and the 16×16 one in AVX-512 registers (the depthwise layout
//! change on wide rows).

use std::arch::x86_64::*;

/// Transposes the 8×8 block `r` (row j = 8 values) in registers: pairs
/// of rows interleaved, then pairs of pairs, then the 128-bit halves.
#[inline]
#[target_feature(enable = "avx")]
pub(crate) fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// Transposes the 16×16 block `r` (row j = 16 values) in AVX-512
/// registers: pairs of rows interleaved within 128-bit lanes, then pairs of
/// pairs (each lane then holds one column of 4 rows), then the lanes of
/// two groups of 4 rows, then of the two halves.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    let a: [__m512d; 16] = std::array::from_fn(|i| {
        let (x, y) = (r[i & !1], r[i | 1]);
        _mm512_castps_pd(if i & 1 == 0 {
            _mm512_unpacklo_ps(x, y)
        } else {
            _mm512_unpackhi_ps(x, y)
        })
    });
    // b[4g + c]: lane l holds column 4l + c of rows 4g .. 4g + 4.
    let b: [__m512; 16] = std::array::from_fn(|i| {
        let (g, c) = (i / 4, i % 4);
        let (x, y) = (a[4 * g + c / 2], a[4 * g + 2 + c / 2]);
        _mm512_castpd_ps(if c & 1 == 0 {
            _mm512_unpacklo_pd(x, y)
        } else {
            _mm512_unpackhi_pd(x, y)
        })
    });
    // d[8h + c]: columns c and 8 + c (lanes 0, 2 of each group), and e[8h + c]:
    // columns 4 + c and 12 + c, of rows 8h .. 8h + 8.
    let d: [__m512; 16] = std::array::from_fn(|i| {
        let (h, c) = (i / 8, i % 8);
        let (x, y) = (b[8 * h + c % 4], b[8 * h + 4 + c % 4]);
        if c < 4 {
            _mm512_shuffle_f32x4::<0x88>(x, y)
        } else {
            _mm512_shuffle_f32x4::<0xDD>(x, y)
        }
    });
    std::array::from_fn(|col| {
        let (c, e, hi) = (col % 4, (col / 4) % 2, col >= 8);
        let (x, y) = (d[4 * e + c], d[8 + 4 * e + c]);
        if hi {
            _mm512_shuffle_f32x4::<0xDD>(x, y)
        } else {
            _mm512_shuffle_f32x4::<0x88>(x, y)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose8_swaps_rows_and_columns() {
        if !std::arch::is_x86_feature_detected!("avx") {
            eprintln!("skipped: no AVX");
            return;
        }
        let m: Vec<f32> = (0..64).map(|v| v as f32).collect();
        let mut got = [0f32; 64];
        // SAFETY: AVX was checked; every row is 8 floats inside `m`/`got`.
        unsafe {
            let rows: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(m.as_ptr().add(8 * i)));
            for (i, v) in transpose8(rows).into_iter().enumerate() {
                _mm256_storeu_ps(got.as_mut_ptr().add(8 * i), v);
            }
        }
        for i in 0..8 {
            for j in 0..8 {
                assert_eq!(got[8 * i + j], m[8 * j + i], "({i}, {j})");
            }
        }
    }

    #[test]
    fn transpose16_swaps_rows_and_columns() {
        if !crate::ops::gemm::simd::has_avx512() {
            eprintln!("skipped: no AVX-512");
            return;
        }
        let m: Vec<f32> = (0..256).map(|v| v as f32).collect();
        let mut got = [0f32; 256];
        // SAFETY: AVX-512F was checked; every row is 16 floats inside
        // `m`/`got`.
        unsafe {
            let rows: [__m512; 16] =
                std::array::from_fn(|i| _mm512_loadu_ps(m.as_ptr().add(16 * i)));
            for (i, v) in transpose16(rows).into_iter().enumerate() {
                _mm512_storeu_ps(got.as_mut_ptr().add(16 * i), v);
            }
        }
        for i in 0..16 {
            for j in 0..16 {
                assert_eq!(got[16 * i + j], m[16 * j + i], "({i}, {j})");
            }
        }
    }
}
