//! Mapping bytes through a 256-entry table (QLinearConcat's requantization
//! of an input with other scales, QLinearSigmoid, QLinearLeakyRelu). With
//! AVX-512 VBMI, 64 bytes at a time: two two-source byte permutations look
//! up the low and the high half of the table, and each byte's top bit picks
//! between them. Elsewhere, one lookup per byte.

/// `dst[i] = table[src[i]]` for every i (`dst` as long as `src`).
pub(super) fn map_bytes(table: &[u8; 256], src: &[u8], dst: &mut [u8]) {
    let n = src.len().min(dst.len());
    let done = fast(table, &src[..n], &mut dst[..n]);
    scalar(table, &src[done..n], &mut dst[done..n]);
}

/// The reference: one lookup per byte.
fn scalar(table: &[u8; 256], src: &[u8], dst: &mut [u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = table[s as usize];
    }
}

/// Maps the whole 64-byte blocks of `src` when the CPU can; returns how
/// many bytes it mapped.
fn fast(table: &[u8; 256], src: &[u8], dst: &mut [u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vbmi")
    {
        // SAFETY: the features were just detected.
        return unsafe { blocks_vbmi(table, src, dst) };
    }
    let _ = (table, src, dst);
    0
}

/// The whole 64-byte blocks of `src` through `table`; returns their bytes.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VBMI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn blocks_vbmi(table: &[u8; 256], src: &[u8], dst: &mut [u8]) -> usize {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len()) / 64 * 64;
    // SAFETY: `table` is 256 bytes, four vectors.
    let quarter = |q: usize| unsafe { _mm512_loadu_si512(table.as_ptr().add(64 * q).cast()) };
    let (t0, t1, t2, t3) = (quarter(0), quarter(1), quarter(2), quarter(3));
    let mut i = 0;
    while i < n {
        // SAFETY: i + 64 ≤ n ≤ both lengths.
        unsafe {
            let x = _mm512_loadu_si512(src.as_ptr().add(i).cast());
            // Index bits 0–6 pick within 128 bytes; bit 7 picks the half.
            let low = _mm512_permutex2var_epi8(t0, x, t1);
            let high = _mm512_permutex2var_epi8(t2, x, t3);
            let y = _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), low, high);
            _mm512_storeu_si512(dst.as_mut_ptr().add(i).cast(), y);
        }
        i += 64;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_and_byte_maps_as_the_table_says() {
        let mut s = 99u32;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as u8
        };
        let table: [u8; 256] = std::array::from_fn(|_| next());
        // Every byte value appears, at every position within a block.
        let src: Vec<u8> = (0..700).map(|i| (i * 7 + i / 256) as u8).collect();
        for n in [0, 1, 63, 64, 65, 127, 128, 300, 700] {
            let mut got = vec![0xAA; n];
            map_bytes(&table, &src[..n], &mut got);
            let want: Vec<u8> = src[..n].iter().map(|&b| table[b as usize]).collect();
            assert_eq!(got, want, "{n} bytes");
        }
    }
}
