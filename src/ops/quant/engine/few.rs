//! Tiles of few columns: a matrix-vector product (a classifier's single row
//! of activations, a 1 × 1 convolution on a 1 × 1 plane). The tile kernel
//! always computes all [`NR`] = 32 columns, so with one column it spends 32
//! times the work. Here the reduction runs along k instead: one 64-byte load
//! holds two four-k groups of the block's [`MR`] rows (lanes 0..8 and
//! 8..16), one `vpdpbusd` multiplies them by the column's matching quads,
//! and the two halves are added at the end. The sums are the same integers
//! as the tile kernel's.

use super::{Tile, MR, NR};

/// The most columns [`tile`] takes.
pub(crate) const FEW: usize = 4;

/// For each column `c < n` of a packed panel (`[k4][NR][4]`), its four-k
/// groups in pairs, each pair one 64-byte vector: group `2p`'s quad in
/// lanes 0..8, group `2p + 1`'s (zero past k4) in lanes 8..16.
pub(crate) fn pairs(panel: &[u8], k4: usize, n: usize, out: &mut Vec<u8>) {
    let per = k4.div_ceil(2);
    out.clear();
    out.resize(n * per * 64, 0);
    for c in 0..n {
        for g in 0..k4 {
            let quad = &panel[g * NR * 4 + c * 4..][..4];
            let half = &mut out[(c * per + g / 2) * 64 + (g % 2) * 32..][..32];
            for lane in half.chunks_exact_mut(4) {
                lane.copy_from_slice(quad);
            }
        }
    }
}

/// Columns `0 .. n` (n ≤ [`FEW`]) of one tile, `out[r·NR + c] = Σ_k w[r][k]
/// · x[k][c]`, from a weight block (`[k4][MR][4]`) and the columns'
/// [`pairs`]; the other columns of `out` are left as they were. Returns
/// false (nothing written) where the CPU lacks AVX-512 VNNI.
pub(crate) fn tile(w: &[i8], pairs: &[u8], k4: usize, n: usize, out: &mut Tile) -> bool {
    let per = k4.div_ceil(2);
    assert!(n <= FEW && pairs.len() >= n * per * 64 && w.len() >= k4 * MR * 4);
    #[cfg(target_arch = "x86_64")]
    if super::has_vnni512() {
        // SAFETY: the features were just checked, the bounds asserted.
        unsafe { tile_vnni512(w, pairs, k4, n, out) };
        return true;
    }
    let _ = (w, pairs, k4, n, out);
    false
}

/// [`tile`]'s kernel: the column count as a constant, so that every
/// accumulator stays in a register.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VNNI; `w` must hold k4 groups and
/// `pairs` n columns of `k4.div_ceil(2)` vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_vnni512(w: &[i8], pairs: &[u8], k4: usize, n: usize, out: &mut Tile) {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match n {
            1 => columns_vnni512::<1>(w, pairs, k4, out),
            2 => columns_vnni512::<2>(w, pairs, k4, out),
            3 => columns_vnni512::<3>(w, pairs, k4, out),
            _ => columns_vnni512::<FEW>(w, pairs, k4, out),
        }
    }
}

/// [`tile_vnni512`] for `N` columns.
///
/// # Safety
/// As [`tile_vnni512`]'s, with n = `N`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn columns_vnni512<const N: usize>(w: &[i8], pairs: &[u8], k4: usize, out: &mut Tile) {
    use std::arch::x86_64::*;
    const CHAINS: usize = 4;
    const _: () = assert!(MR == 8, "a 64-byte load holds two groups of MR = 8 rows");
    let per = k4.div_ceil(2);
    // Pairs whose two groups both exist: every pair but a last odd one.
    let whole = k4 / 2;
    // Four sums per column, consecutive pairs in turn, so that consecutive
    // multiply-adds do not wait on each other (one column alone would
    // otherwise wait on `vpdpbusd`'s latency). Constant indices keep them
    // in registers.
    let mut acc = [[_mm512_setzero_si512(); CHAINS]; N];
    let (wp, xp) = (w.as_ptr(), pairs.as_ptr());
    let mut p = 0;
    while p + CHAINS <= whole {
        for j in 0..CHAINS {
            // SAFETY: pair p + j < whole: both its groups lie in `w`, and
            // each column's pair in `pairs` (the contract).
            unsafe {
                let wv = _mm512_loadu_si512(wp.add((p + j) * 64).cast());
                for (c, a) in acc.iter_mut().enumerate() {
                    let xv = _mm512_loadu_si512(xp.add((c * per + p + j) * 64).cast());
                    a[j] = _mm512_dpbusd_epi32(a[j], xv, wv);
                }
            }
        }
        p += CHAINS;
    }
    while p < per {
        // SAFETY: pair p's groups 2p and (if it exists) 2p + 1 lie in `w`:
        // the mask drops the second when k4 is odd.
        unsafe {
            let wv = if 2 * p + 1 < k4 {
                _mm512_loadu_si512(wp.add(p * 64).cast())
            } else {
                _mm512_maskz_loadu_epi32(0x00FF, wp.add(p * 64).cast())
            };
            for (c, a) in acc.iter_mut().enumerate() {
                let xv = _mm512_loadu_si512(xp.add((c * per + p) * 64).cast());
                a[0] = _mm512_dpbusd_epi32(a[0], xv, wv);
            }
        }
        p += 1;
    }
    for (c, a) in acc.iter().enumerate() {
        let s = _mm512_add_epi32(_mm512_add_epi32(a[0], a[1]), _mm512_add_epi32(a[2], a[3]));
        // Lanes 8..16 (the odd groups) onto lanes 0..8.
        let s = _mm512_add_epi32(s, _mm512_shuffle_i64x2::<0b01_00_11_10>(s, s));
        let mut rows = [0i32; 16];
        // SAFETY: `rows` is 64 bytes.
        unsafe { _mm512_storeu_si512(rows.as_mut_ptr().cast(), s) };
        for (r, &v) in rows.iter().take(MR).enumerate() {
            out[r * NR + c] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernel::tile_portable;
    use super::*;

    #[test]
    fn few_columns_give_the_portable_kernel_s_sums() {
        let mut next = crate::ops::testutil::xorshift32(99);
        // Odd and even group counts, one group, whole runs of four pairs
        // with and without a tail, every column count.
        for k4 in [1, 2, 7, 9, 11, 18, 320] {
            for n in 1..=FEW {
                let w: Vec<i8> = (0..k4 * MR * 4).map(|_| next() as i8).collect();
                let panel: Vec<u8> = (0..k4 * NR * 4).map(|_| next() as u8).collect();
                let mut want: Tile = [0; MR * NR];
                tile_portable(&w, &panel, k4, &mut want);
                let mut xs = Vec::new();
                pairs(&panel, k4, n, &mut xs);
                let mut got: Tile = [7; MR * NR];
                if !tile(&w, &xs, k4, n, &mut got) {
                    return;
                }
                for r in 0..MR {
                    assert_eq!(got[r * NR..][..n], want[r * NR..][..n], "k4 {k4} n {n}");
                    assert!(got[r * NR + n..][..NR - n].iter().all(|&v| v == 7));
                }
            }
        }
    }
}
