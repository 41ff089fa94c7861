//! The register blocks of the implicit-GEMM convolution: [`MB`] output
//! channels at a few output positions, summed over every (channel, tap) of
//! a band's padded planes. The AVX2 block takes [`NQ`] positions in raster
//! order (each through its own offset); the AVX-512 block takes up to
//! [`NW`] positions of one row, which read their inputs at fixed
//! displacements from one pointer, each broadcast folded into its
//! multiply-add. Both do the same products in the same order.
#![cfg_attr(not(target_arch = "x86_64"), allow(unused_imports))]

use super::{Job, MB, NQ, NW};

/// The AVX2 + FMA register block.
#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::{Job, MB, NQ};
    use std::arch::x86_64::*;

    /// Sums of the [`MB`] channels of packed weights `w` at the [`NQ`]
    /// positions whose padded-plane offsets are `qs`, into
    /// `out[position][channel]`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA, and every `q + tap offset` must
    /// lie inside a padded plane.
    #[target_feature(enable = "avx2,fma")]
    pub(in super::super) unsafe fn block(
        job: &Job<'_>,
        w: &[f32],
        qs: &[usize; NQ],
        out: &mut [[f32; MB]; NQ],
    ) {
        let plane = job.lay.plane();
        let taps = job.taps;
        assert!(w.len() >= job.lay.c * taps.len() * MB);
        assert!(qs.iter().all(|&q| q + taps[taps.len() - 1] < plane));
        assert!(job.xp.len() >= job.lay.c * plane);
        let mut acc = [[_mm256_setzero_ps(); 2]; NQ];
        let mut wp = w.as_ptr();
        // SAFETY: the asserts above bound every access: `wp` walks the
        // c × taps groups of MB weights in `w`; channel ci < c's plane is in
        // `job.xp`, and q + t < plane for every position q and tap t (the
        // taps ascend, so the last is the largest, and the contract puts
        // them inside the padded plane); `out` rows hold MB = 16 each.
        unsafe {
            for ci in 0..job.lay.c {
                let base = job.xp.as_ptr().add(ci * plane);
                let srcs: [*const f32; NQ] = std::array::from_fn(|j| base.add(qs[j]));
                for &t in taps {
                    let w0 = _mm256_loadu_ps(wp);
                    let w1 = _mm256_loadu_ps(wp.add(8));
                    for (j, a) in acc.iter_mut().enumerate() {
                        let xv = _mm256_broadcast_ss(&*srcs[j].add(t));
                        a[0] = _mm256_fmadd_ps(xv, w0, a[0]);
                        a[1] = _mm256_fmadd_ps(xv, w1, a[1]);
                    }
                    wp = wp.add(MB);
                }
            }
            for (a, o) in acc.iter().zip(out.iter_mut()) {
                _mm256_storeu_ps(o.as_mut_ptr(), a[0]);
                _mm256_storeu_ps(o.as_mut_ptr().add(8), a[1]);
            }
        }
    }
}

/// The AVX-512 register block: the positions of one row, so that each
/// reads its inputs at a fixed displacement from one pointer.
#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::{Job, MB, NW};
    use std::arch::x86_64::*;

    /// Sums of the [`MB`] channels of packed weights `w` at the `N`
    /// consecutive positions from padded-plane offset `q0`, into
    /// `out[position][channel]`; the same products in the same order as
    /// the AVX2 block, so the same bits.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(in super::super) unsafe fn row_block<const N: usize>(
        job: &Job<'_>,
        w: &[f32],
        q0: usize,
        out: &mut [[f32; MB]; NW],
    ) {
        const { assert!(N <= NW) };
        let plane = job.lay.plane();
        let taps = job.taps;
        assert!(w.len() >= job.lay.c * taps.len() * MB);
        assert!(q0 + N - 1 + taps[taps.len() - 1] < plane);
        assert!(job.xp.len() >= job.lay.c * plane);
        let mut acc = [_mm512_setzero_ps(); N];
        let mut wp = w.as_ptr();
        // SAFETY: the asserts above bound every access: `wp` walks the
        // c × taps groups of MB = 16 weights in `w`; channel ci < c's plane
        // is in `job.xp`, and q0 + j + t < plane for j < N and every tap t
        // (the taps ascend, so the last is the largest); `out` rows hold
        // MB = 16 each.
        unsafe {
            for ci in 0..job.lay.c {
                let base = job.xp.as_ptr().add(ci * plane + q0);
                for &t in taps {
                    let wv = _mm512_loadu_ps(wp);
                    let src = base.add(t);
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(_mm512_set1_ps(*src.add(j)), wv, *a);
                    }
                    wp = wp.add(MB);
                }
            }
            for (a, o) in acc.iter().zip(out.iter_mut()) {
                _mm512_storeu_ps(o.as_mut_ptr(), *a);
            }
        }
    }
}
