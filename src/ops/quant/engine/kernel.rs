//! The int8 micro-kernels: one [`MR`] × [`NR`] tile of exact i32 sums
//! `Σ_k w[r][k] · x[k][c]` from a packed weight block and a packed panel.
//! AVX-512 VNNI (`vpdpbusd`: sixteen columns × four k per instruction, u8 ×
//! s8 into i32 with no intermediate saturation) where the CPU has it; a
//! portable kernel (compiled for AVX2 as well) elsewhere. Both compute the
//! same integers.

use super::{Tile, MR, NR};

/// Computes one tile: `out[r·NR + c] = Σ_k w[r][k] · x[k][c]`.
pub(crate) fn tile(w: &[i8], x: &[u8], k4: usize, out: &mut Tile) {
    debug_assert!(w.len() >= k4 * MR * 4 && x.len() >= k4 * NR * 4);
    #[cfg(target_arch = "x86_64")]
    if has_vnni512() {
        // SAFETY: the features are present (checked), and the slices hold
        // k4 groups of both operands (asserted by the callers' packing).
        unsafe { tile_vnni512(w, x, k4, out) };
        return;
    }
    tile_portable(w, x, k4, out);
}

/// True when the CPU has AVX-512 F/BW and VNNI.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_vnni512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
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
    let mut acc = [[_mm512_setzero_si512(); 2]; MR];
    let (mut wp, mut xp) = (w.as_ptr().cast::<i32>(), x.as_ptr().cast::<__m512i>());
    for _ in 0..k4 {
        let x0 = _mm512_loadu_si512(xp);
        let x1 = _mm512_loadu_si512(xp.add(1));
        for (r, a) in acc.iter_mut().enumerate() {
            let wr = _mm512_set1_epi32(wp.add(r).read_unaligned());
            a[0] = _mm512_dpbusd_epi32(a[0], x0, wr);
            a[1] = _mm512_dpbusd_epi32(a[1], x1, wr);
        }
        wp = wp.add(MR);
        xp = xp.add(2);
    }
    let o = out.as_mut_ptr().cast::<__m512i>();
    for (r, a) in acc.iter().enumerate() {
        _mm512_storeu_si512(o.add(2 * r), a[0]);
        _mm512_storeu_si512(o.add(2 * r + 1), a[1]);
    }
}
