//! Register-level pieces shared by the x86-64 kernels: the 8×8 f32
//! transpose in AVX registers (patch embeddings, the channel-blocked
//! depthwise kernel's layout changes, the int8 engine's transposing float
//! store).

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
}
