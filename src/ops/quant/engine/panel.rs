//! Panels of the int8 engine's u8 operand: [`NR`] columns laid out
//! `[k4][NR][4]` (four consecutive k of one column side by side), so one
//! 64-byte load gives sixteen columns' four-k groups. Packers for the two
//! source layouts: k-major rows (`[k][cols]`: convolution inputs and
//! im2col rows) and column-major (`[cols][k]`: a matrix product's left
//! operand). Rows past K are zero; columns past `n` are left as they were.

use super::NR;

/// XOR mask turning an s8 byte into the u8 value `x + 128` (or 0 for u8).
pub(crate) fn flip_mask(from_s8: bool) -> u8 {
    if from_s8 {
        0x80
    } else {
        0
    }
}

/// Packs columns `c0 .. c0 + n` of `src[k][·]` (row stride `row_stride`).
pub(crate) fn pack_k_rows(
    panel: &mut [u8],
    src: &[u8],
    k: usize,
    row_stride: usize,
    (c0, n): (usize, usize),
    flip: u8,
) {
    let full = k / 4;
    let row = |kk: usize, len: usize| &src[kk * row_stride + c0..][..len];
    if !groups_fast(panel, src, full, row_stride, (c0, n), flip) {
        for g in 0..full {
            let dst = &mut panel[g * NR * 4..][..NR * 4];
            interleave4([0, 1, 2, 3].map(|j| row(4 * g + j, n)), dst, flip);
        }
    }
    if !k.is_multiple_of(4) {
        // The last, partial group of four rows: zero past K.
        let dst = &mut panel[full * NR * 4..][..NR * 4];
        dst.fill(0);
        for j in 0..k % 4 {
            scatter(dst, row(4 * full + j, n), j, flip);
        }
    }
}

/// The `full` whole groups of four rows of [`pack_k_rows`] in one call,
/// where the CPU has AVX-512 BW and VL (masked loads take a panel of fewer
/// than [`NR`] columns; its columns past `n` get `flip`); returns whether
/// it packed them.
fn groups_fast(
    panel: &mut [u8],
    src: &[u8],
    full: usize,
    row_stride: usize,
    (c0, n): (usize, usize),
    flip: u8,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if full > 0
        && n <= NR
        && (4 * full - 1) * row_stride + c0 + n <= src.len()
        && panel.len() >= full * NR * 4
        && crate::ops::gemm::simd::has_avx512_wide()
    {
        // SAFETY: the features were just checked, and so were the bounds
        // of the last row read and of the groups written.
        unsafe { groups_avx512(panel, src, full, row_stride, (c0, n), flip) };
        return true;
    }
    let _ = (panel, src, full, row_stride, c0, n, flip);
    false
}

/// [`groups_fast`]'s loop.
///
/// # Safety
/// The CPU must have AVX-512 F, BW, DQ and VL; `src` must hold the `4·full`
/// rows' columns `c0 .. c0 + n` (n ≤ NR), and `panel` `full` groups.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2")]
unsafe fn groups_avx512(
    panel: &mut [u8],
    src: &[u8],
    full: usize,
    row_stride: usize,
    (c0, n): (usize, usize),
    flip: u8,
) {
    use std::arch::x86_64::*;
    let mask = if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
    let m = _mm256_set1_epi8(flip as i8);
    let base = src.as_ptr().wrapping_add(c0);
    for g in 0..full {
        // SAFETY: rows 4g .. 4g + 4 < 4·full, columns c0 .. c0 + n, inside
        // `src` (the contract); the mask reads no byte past them.
        let ld = |j: usize| unsafe {
            let p = base.add((4 * g + j) * row_stride);
            _mm256_xor_si256(_mm256_maskz_loadu_epi8(mask, p.cast()), m)
        };
        // SAFETY: group g < full of `panel` (the contract).
        unsafe {
            transpose4(
                [ld(0), ld(1), ld(2), ld(3)],
                panel.as_mut_ptr().add(g * NR * 4),
            )
        };
    }
}

/// Puts four rows of consecutive k (same columns) into one panel group:
/// byte j of each column's group of four from row j. Full rows of `NR`
/// columns take the AVX2 interleave where the CPU has it.
fn interleave4(rows: [&[u8]; 4], dst: &mut [u8], flip: u8) {
    #[cfg(target_arch = "x86_64")]
    if rows.iter().all(|r| r.len() == NR) && crate::ops::gemm::simd::has_avx2() {
        // SAFETY: AVX2 checked just above; each row holds NR bytes and
        // `dst` is a panel group of 4·NR bytes.
        unsafe { interleave4_avx2(rows, dst, flip) };
        return;
    }
    for (j, r) in rows.iter().enumerate() {
        scatter(dst, r, j, flip);
    }
}

/// Interleaves four rows of equal length n into `dst[..4n]` as `[n][4]`
/// (byte j of column c from row j), XOR-ing each byte with `flip`: whole
/// runs of [`NR`] columns in registers (AVX2), the last ones through scratch.
pub(crate) fn interleave_rows(rows: [&[u8]; 4], dst: &mut [u8], flip: u8) {
    let n = rows[0].len();
    debug_assert!(rows.iter().all(|r| r.len() == n) && dst.len() >= 4 * n);
    let whole = n / NR * NR;
    for c in (0..whole).step_by(NR) {
        interleave4(
            rows.map(|r| &r[c..c + NR]),
            &mut dst[4 * c..][..4 * NR],
            flip,
        );
    }
    let tail = n - whole;
    if tail == 0 {
        return;
    }
    // The last columns through a full run of scratch: no byte loop.
    let mut padded = [[0u8; NR]; 4];
    for (p, r) in padded.iter_mut().zip(rows) {
        p[..tail].copy_from_slice(&r[whole..]);
    }
    let mut out = [0u8; 4 * NR];
    interleave4(padded.each_ref().map(|p| &p[..]), &mut out, flip);
    dst[4 * whole..4 * n].copy_from_slice(&out[..4 * tail]);
}

/// Copies of runs of at most a panel group's bytes (4·[`NR`]): masked
/// 64-byte moves where the CPU has AVX-512 BW, instead of a call to
/// `memmove` per run. The CPU is asked once, when the copier is made.
#[derive(Clone, Copy)]
pub(crate) struct RunCopier {
    /// AVX-512 BW is there (always false off x86-64).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    wide: bool,
}

impl RunCopier {
    pub(crate) fn new() -> RunCopier {
        #[cfg(target_arch = "x86_64")]
        let wide = crate::ops::gemm::simd::has_avx512_wide();
        #[cfg(not(target_arch = "x86_64"))]
        let wide = false;
        RunCopier { wide }
    }

    /// `dst.copy_from_slice(src)`.
    #[inline]
    pub(crate) fn copy(self, dst: &mut [u8], src: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        if self.wide && src.len() <= 4 * NR && dst.len() == src.len() {
            // SAFETY: the features were checked when the copier was made;
            // both slices hold len bytes.
            unsafe { copy_run_avx512(dst, src) };
            return;
        }
        dst.copy_from_slice(src);
    }

    /// Every other 4-byte word of `src` into `dst`: word t of `dst` is word
    /// 2t of `src` (a stride-2 run of staged pixels). `src` must hold the
    /// `2·(dst.len() / 4) − 1` words read, `dst` whole words, at most
    /// [`NR`] of them.
    #[inline]
    pub(crate) fn copy_evens(self, dst: &mut [u8], src: &[u8]) {
        let words = dst.len() / 4;
        debug_assert!(dst.len().is_multiple_of(4) && words <= NR);
        debug_assert!(words == 0 || src.len() >= 4 * (2 * words - 1));
        #[cfg(target_arch = "x86_64")]
        if self.wide {
            // SAFETY: the features were checked when the copier was made;
            // the moves stay inside `dst` and the whole words of `src`.
            unsafe { copy_evens_avx512(dst, src) };
            return;
        }
        for (t, d) in dst.chunks_exact_mut(4).enumerate() {
            d.copy_from_slice(&src[8 * t..][..4]);
        }
    }
}

/// [`RunCopier::copy_evens`]'s moves: sixteen words at a time, the even
/// words of two masked 16-word loads picked by one permutation.
///
/// # Safety
/// The CPU must have AVX-512 F and BW. The masks keep every move inside
/// the whole words of both slices, whatever their lengths.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn copy_evens_avx512(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::*;
    let words = dst.len() / 4;
    let avail = src.len() / 4;
    let mask = |n: usize| if n >= 16 { 0xFFFF } else { (1u16 << n) - 1 };
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for t in (0..words).step_by(16) {
        let first = 2 * t;
        let low = mask(avail.saturating_sub(first));
        let high = mask(avail.saturating_sub(first + 16));
        // SAFETY: the masks keep both loads inside the whole words of
        // `src` (a masked-off lane is not read), and the store inside the
        // words of `dst` from t; the addresses are formed without going
        // past either slice's end by more than the masked-off lanes.
        unsafe {
            let at = src.as_ptr().wrapping_add(4 * first);
            let lo = _mm512_maskz_loadu_epi32(low, at.cast());
            let hi = _mm512_maskz_loadu_epi32(high, at.wrapping_add(64).cast());
            let v = _mm512_permutex2var_epi32(lo, evens, hi);
            _mm512_mask_storeu_epi32(dst.as_mut_ptr().add(4 * t).cast(), mask(words - t), v);
        }
    }
}

/// [`RunCopier::copy`]'s moves.
///
/// # Safety
/// The CPU must have AVX-512 F and BW; `dst` and `src` must have the same
/// length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn copy_run_avx512(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::*;
    let n = src.len();
    for at in (0..n).step_by(64) {
        let left = n - at;
        let mask = if left >= 64 {
            u64::MAX
        } else {
            (1u64 << left) - 1
        };
        // SAFETY: the mask keeps both moves inside the len bytes from `at`.
        unsafe {
            let v = _mm512_maskz_loadu_epi8(mask, src.as_ptr().add(at).cast());
            _mm512_mask_storeu_epi8(dst.as_mut_ptr().add(at).cast(), mask, v);
        }
    }
}

/// Puts `row` (one k, consecutive columns) at byte `j` of each column's
/// group of four in `dst`.
fn scatter(dst: &mut [u8], row: &[u8], j: usize, flip: u8) {
    for (c, &v) in row.iter().enumerate() {
        dst[c * 4 + j] = v ^ flip;
    }
}

/// Packs columns `c0 .. c0 + n` of `src[·][k]` (column `c` at
/// `src[c·col_stride ..][..k]`).
pub(crate) fn pack_columns(
    panel: &mut [u8],
    src: &[u8],
    k: usize,
    col_stride: usize,
    (c0, n): (usize, usize),
    flip: u8,
) {
    let flip4 = u32::from_ne_bytes([flip; 4]);
    for c in 0..n {
        let col = &src[(c0 + c) * col_stride..][..k];
        // Whole groups of four as one word each; the last, partial group
        // padded with zeros.
        let mut groups = col.chunks_exact(4);
        for (g, w) in (&mut groups).enumerate() {
            let v = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) ^ flip4;
            panel[g * NR * 4 + c * 4..][..4].copy_from_slice(&v.to_ne_bytes());
        }
        let tail = groups.remainder();
        if !tail.is_empty() {
            let dst = &mut panel[k / 4 * NR * 4 + c * 4..][..4];
            for (j, d) in dst.iter_mut().enumerate() {
                *d = tail.get(j).map_or(0, |&v| v ^ flip);
            }
        }
    }
}

/// Σ_k x[k][c] per column of a packed panel.
pub(crate) fn column_sums(panel: &[u8], k4: usize, sums: &mut [i32; NR]) {
    sums.fill(0);
    for g in panel[..k4 * NR * 4].chunks_exact(NR * 4) {
        for (c, s) in sums.iter_mut().enumerate() {
            *s += g[c * 4..][..4].iter().map(|&v| v as i32).sum::<i32>();
        }
    }
}

/// Interleaves four rows of [`NR`] bytes into `[NR][4]` (a 4 × 32 byte
/// transpose in registers), XOR-ing each byte with `flip`.
///
/// # Safety
/// The CPU must have AVX2; each row must hold 32 bytes and `dst` 128.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn interleave4_avx2(rows: [&[u8]; 4], dst: &mut [u8], flip: u8) {
    use std::arch::x86_64::*;
    debug_assert!(rows.iter().all(|r| r.len() >= 32) && dst.len() >= 128);
    let m = _mm256_set1_epi8(flip as i8);
    // SAFETY: each row holds 32 bytes (the contract).
    let ld = |r: &[u8]| _mm256_xor_si256(unsafe { _mm256_loadu_si256(r.as_ptr().cast()) }, m);
    let rows = [ld(rows[0]), ld(rows[1]), ld(rows[2]), ld(rows[3])];
    // SAFETY: `dst` holds 128 bytes (the contract).
    unsafe { transpose4(rows, dst.as_mut_ptr()) };
}

/// Stores four rows of 32 bytes as `[32][4]` at `dst` (a 4 × 32 byte
/// transpose in registers).
///
/// # Safety
/// The CPU must have AVX2; `dst` must have 128 writable bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn transpose4([r0, r1, r2, r3]: [std::arch::x86_64::__m256i; 4], dst: *mut u8) {
    use std::arch::x86_64::*;
    let a_lo = _mm256_unpacklo_epi8(r0, r1);
    let a_hi = _mm256_unpackhi_epi8(r0, r1);
    let b_lo = _mm256_unpacklo_epi8(r2, r3);
    let b_hi = _mm256_unpackhi_epi8(r2, r3);
    // Per 128-bit lane: q0 = columns 0-3 (16-19), q1 = 4-7 (20-23),
    // q2 = 8-11 (24-27), q3 = 12-15 (28-31).
    let q0 = _mm256_unpacklo_epi16(a_lo, b_lo);
    let q1 = _mm256_unpackhi_epi16(a_lo, b_lo);
    let q2 = _mm256_unpacklo_epi16(a_hi, b_hi);
    let q3 = _mm256_unpackhi_epi16(a_hi, b_hi);
    let out = dst.cast::<__m256i>();
    // SAFETY: four vectors of 32 bytes, the 128 `dst` holds (the contract).
    unsafe {
        _mm256_storeu_si256(out, _mm256_permute2x128_si256(q0, q1, 0x20));
        _mm256_storeu_si256(out.add(1), _mm256_permute2x128_si256(q2, q3, 0x20));
        _mm256_storeu_si256(out.add(2), _mm256_permute2x128_si256(q0, q1, 0x31));
        _mm256_storeu_si256(out.add(3), _mm256_permute2x128_si256(q2, q3, 0x31));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_avx2_interleave_matches_the_scalar_scatter() {
        // Rows of NR bytes, all four different, both flips.
        let rows: Vec<Vec<u8>> = (0..4)
            .map(|j| (0..NR).map(|c| (c * 37 + j * 91 + 5) as u8).collect())
            .collect();
        let rows4 = [&rows[0][..], &rows[1][..], &rows[2][..], &rows[3][..]];
        for flip in [0u8, 0x80] {
            let mut fast = vec![0u8; NR * 4];
            interleave4(rows4, &mut fast, flip);
            let mut slow = vec![0u8; NR * 4];
            for (j, r) in rows4.iter().enumerate() {
                scatter(&mut slow, r, j, flip);
            }
            assert_eq!(fast, slow, "flip {flip:#x}");
            // And the layout itself: column c's group holds its four k.
            for c in 0..NR {
                for j in 0..4 {
                    assert_eq!(fast[c * 4 + j], rows[j][c] ^ flip);
                }
            }
        }
        // Short rows (a last panel) take the scalar path, same layout.
        let short = [&rows[0][..5], &rows[1][..5], &rows[2][..5], &rows[3][..5]];
        let mut dst = vec![0u8; NR * 4];
        interleave4(short, &mut dst, 0x80);
        assert_eq!(dst[4 * 4 + 3], rows[3][4] ^ 0x80);
        assert!(dst[5 * 4..].iter().all(|&b| b == 0));
    }

    #[test]
    fn even_words_are_copied_and_no_more() {
        let src: Vec<u8> = (0..8 * NR + 8).map(|i| (i * 7 + 1) as u8).collect();
        for words in [0usize, 1, 2, 15, 16, 17, 24, 31, NR] {
            // The source exactly as long as the words read, so that a read
            // past them would fall outside the slice (and out of the
            // vector path's masks).
            let need = if words == 0 { 0 } else { 4 * (2 * words - 1) };
            for offset in [0usize, 4, 12] {
                let from = &src[offset..][..need];
                let mut dst = [0xEEu8; 4 * NR + 4];
                RunCopier::new().copy_evens(&mut dst[..4 * words], from);
                for t in 0..words {
                    assert_eq!(
                        dst[4 * t..][..4],
                        from[8 * t..][..4],
                        "words {words}, word {t}"
                    );
                }
                assert!(
                    dst[4 * words..].iter().all(|&b| b == 0xEE),
                    "words {words}: wrote past the run"
                );
            }
        }
    }

    #[test]
    fn copied_runs_hold_their_bytes_and_no_more() {
        let src: Vec<u8> = (0..4 * NR).map(|i| (i * 7 + 1) as u8).collect();
        for n in [0usize, 1, 4, 63, 64, 65, 100, 4 * NR] {
            let mut dst = [0xEEu8; 4 * NR + 1];
            RunCopier::new().copy(&mut dst[..n], &src[..n]);
            assert_eq!(dst[..n], src[..n], "n {n}");
            assert!(
                dst[n..].iter().all(|&b| b == 0xEE),
                "n {n}: wrote past the run"
            );
        }
    }

    #[test]
    fn interleaved_rows_of_any_length_match_the_scalar_scatter() {
        for n in [0usize, 1, 5, 31, 32, 33, 56, 64, 100] {
            let rows: Vec<Vec<u8>> = (0..4)
                .map(|j| (0..n).map(|c| (c * 53 + j * 17 + 3) as u8).collect())
                .collect();
            let rows4 = [&rows[0][..], &rows[1][..], &rows[2][..], &rows[3][..]];
            for flip in [0u8, 0x80] {
                // One guard byte past the end must stay untouched.
                let mut fast = vec![0x5Au8; 4 * n + 1];
                interleave_rows(rows4, &mut fast, flip);
                for c in 0..n {
                    for j in 0..4 {
                        assert_eq!(fast[c * 4 + j], rows[j][c] ^ flip, "n {n} c {c} j {j}");
                    }
                }
                assert_eq!(fast[4 * n], 0x5A, "n {n}: wrote past the rows");
            }
        }
    }

    #[test]
    fn packed_k_rows_hold_every_column_whatever_the_panel_width() {
        // k = 13 (three whole groups and a partial one), 70 columns per row
        // read from column c0 on, widths full and partial, both flips.
        let (k, stride) = (13usize, 70usize);
        let src: Vec<u8> = (0..k * stride).map(|i| (i * 29 + i / 7) as u8).collect();
        for flip in [0u8, 0x80] {
            for (c0, n) in [(0, NR), (3, NR), (38, NR), (0, 1), (5, 17), (40, 30)] {
                let mut panel = vec![0x11u8; k.div_ceil(4) * NR * 4];
                pack_k_rows(&mut panel, &src, k, stride, (c0, n), flip);
                for c in 0..n {
                    for kk in 0..k.div_ceil(4) * 4 {
                        let want = if kk < k {
                            src[kk * stride + c0 + c] ^ flip
                        } else {
                            0
                        };
                        let got = panel[(kk / 4) * NR * 4 + c * 4 + kk % 4];
                        assert_eq!(got, want, "c0 {c0} n {n} column {c} k {kk}");
                    }
                }
            }
        }
    }
}
