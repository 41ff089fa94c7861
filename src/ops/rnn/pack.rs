//! The recurrence product of the f32 fast path: `Y = H·Rᵀ` for the few rows
//! of H a time step has (one per batch row), with R (`n × k`, row-major, as
//! ONNX stores it) packed once into panels of [`NR`] output columns so that
//! each panel is one contiguous stream: `panel[kk·NR + l] = R[p·NR + l][kk]`
//! (zero past the last column). Up to four rows share each pass over a
//! panel. Each output is summed over k in order, on one thread, so results
//! never depend on the thread count; AVX-512 machines take an intrinsics
//! kernel with fused multiply-adds, others a plain loop (one machine always
//! takes the same one).

#[cfg(target_arch = "x86_64")]
use crate::ops::gemm::simd::has_avx512;
use crate::ops::gemm::simd::multiversion;

/// Output columns per panel (four AVX-512 registers).
pub(super) const NR: usize = 64;
/// Rows of H that share one pass over a panel.
const MR: usize = 4;

/// A row-major `n × k` matrix packed into column panels.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Packed {
    /// Outputs (rows of R).
    pub n: usize,
    /// Inputs (columns of R).
    pub k: usize,
    data: Vec<f32>,
}

impl Packed {
    /// Packs the row-major `n × k` matrix `r` (`r.len() == n·k`).
    pub(super) fn new(r: &[f32], n: usize, k: usize) -> Packed {
        let panels = n.div_ceil(NR);
        let mut data = vec![0f32; panels * NR * k];
        for (j, row) in r.chunks_exact(k.max(1)).take(n).enumerate() {
            let base = (j / NR) * NR * k + j % NR;
            for (kk, &v) in row.iter().enumerate() {
                data[base + kk * NR] = v;
            }
        }
        Packed { n, k, data }
    }

    /// `y[i] = x[i]·Rᵀ` for rows `i < m` of `x` (row stride `ldx`, at least
    /// `k` used) into `y` (row stride `ldy`, the first `n` written).
    ///
    /// The slices are checked first: with too short ones nothing is written.
    pub(super) fn mul(&self, x: &[f32], m: usize, ldx: usize, y: &mut [f32], ldy: usize) {
        for p in 0..self.panels() {
            self.mul_panel(p, x, m, ldx, y, ldy, p * NR);
        }
    }

    /// [`Packed::mul`] with the panels taken last to first: the same sums.
    ///
    /// A time loop alternates the two orders so that the panels one step
    /// reads last, which the cache still holds, are the first the next
    /// step reads: a matrix about as large as the cache then streams
    /// mostly from it instead of from the next level.
    pub(super) fn mul_backward(&self, x: &[f32], m: usize, ldx: usize, y: &mut [f32], ldy: usize) {
        for p in (0..self.panels()).rev() {
            self.mul_panel(p, x, m, ldx, y, ldy, p * NR);
        }
    }

    /// Panels (of [`NR`] outputs each) in the packed matrix.
    pub(super) fn panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    /// [`Packed::mul`] for the outputs of panel `p` alone (outputs `p·NR ..
    /// min((p + 1)·NR, n)`), with the same sums, written to columns `at ..`
    /// of each row of `y`.
    ///
    /// The slices are checked first: with too short ones nothing is written.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mul_panel(
        &self,
        p: usize,
        x: &[f32],
        m: usize,
        ldx: usize,
        y: &mut [f32],
        ldy: usize,
        at: usize,
    ) {
        let (n, k) = (self.n, self.k);
        if p >= self.panels() {
            return;
        }
        let width = ((p + 1) * NR).min(n) - p * NR;
        let fits = |len: usize, ld: usize, w: usize| m == 0 || (ld >= w && len >= (m - 1) * ld + w);
        if !fits(x.len(), ldx, k) || !fits(y.len(), ldy, at + width) {
            return;
        }
        if k == 0 {
            for i in 0..m {
                y[i * ldy + at..i * ldy + at + width].fill(0.0);
            }
            return;
        }
        let panel = &self.data[p * NR * k..(p + 1) * NR * k];
        let mut r0 = 0;
        while r0 < m {
            let rows = (m - r0).min(MR);
            let mut out = [[0f32; NR]; MR];
            panel_product(panel, k, &x[r0 * ldx..], ldx, rows, &mut out);
            for (i, o) in out.iter().enumerate().take(rows) {
                let row = (r0 + i) * ldy + at;
                y[row..row + width].copy_from_slice(&o[..width]);
            }
            r0 += rows;
        }
    }
}

/// `out[i][l] = Σ_kk x[i·ldx + kk]·panel[kk·NR + l]` for `i < rows` (≤ MR).
fn panel_product(
    panel: &[f32],
    k: usize,
    x: &[f32],
    ldx: usize,
    rows: usize,
    out: &mut [[f32; NR]; MR],
) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512F and FMA (checked just above); the
        // panel holds k·NR values and x holds `rows` rows of k (checked by
        // the caller).
        unsafe {
            match rows {
                4 => avx512::panel::<4>(panel, k, x, ldx, out),
                3 => avx512::panel::<3>(panel, k, x, ldx, out),
                2 => avx512::panel::<2>(panel, k, x, ldx, out),
                _ => avx512::panel::<1>(panel, k, x, ldx, out),
            }
        }
        return;
    }
    for (i, o) in out.iter_mut().enumerate().take(rows) {
        panel_row(panel, &x[i * ldx..i * ldx + k], o);
    }
}

multiversion! {
    /// One row of [`panel_product`] with plain multiplies and adds.
    fn panel_row(panel: &[f32], x: &[f32], out: &mut [f32; NR]) {
        let mut acc = [0f32; NR];
        for (w, &xv) in panel.chunks_exact(NR).zip(x) {
            for l in 0..NR {
                acc[l] += xv * w[l];
            }
        }
        *out = acc;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// [`super::panel_product`] for `R` rows, four registers of columns a row.
    ///
    /// # Safety
    /// AVX-512F and FMA must be available; `panel` holds `k·NR` values and
    /// `x` rows `0..R` of `k` values at stride `ldx`.
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn panel<const R: usize>(
        panel: &[f32],
        k: usize,
        x: &[f32],
        ldx: usize,
        out: &mut [[f32; NR]; MR],
    ) {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        let p = panel.as_ptr();
        let xp = x.as_ptr();
        for kk in 0..k {
            // SAFETY: row kk < k of the panel's k·NR values (the contract),
            // NR = 64: four vectors of 16.
            let wv = unsafe {
                let w = p.add(kk * NR);
                [
                    _mm512_loadu_ps(w),
                    _mm512_loadu_ps(w.add(16)),
                    _mm512_loadu_ps(w.add(32)),
                    _mm512_loadu_ps(w.add(48)),
                ]
            };
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: value kk < k of row i < R of `x` (the contract).
                let xv = _mm512_set1_ps(unsafe { *xp.add(i * ldx + kk) });
                for v in 0..4 {
                    a[v] = _mm512_fmadd_ps(wv[v], xv, a[v]);
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            for (v, &r) in a.iter().enumerate() {
                // SAFETY: values 16·v..16·v + 16 of row i < R ≤ MR, v < 4:
                // inside the row's NR = 64.
                unsafe { _mm512_storeu_ps(out[i].as_mut_ptr().add(v * 16), r) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_product_matches_naive_sums() {
        // n not a multiple of NR, k odd, m crossing the MR blocking.
        let (n, k, m) = (NR + 13, 37, 6);
        let r: Vec<f32> = (0..n * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
            .collect();
        let x: Vec<f32> = (0..m * (k + 3))
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 8.0)
            .collect();
        let p = Packed::new(&r, n, k);
        let ldy = n + 5;
        let mut y = vec![f32::NAN; m * ldy];
        p.mul(&x, m, k + 3, &mut y, ldy);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|kk| x[i * (k + 3) + kk] as f64 * r[j * k + kk] as f64)
                    .sum();
                let got = y[i * ldy + j] as f64;
                assert!((got - want).abs() < 1e-4, "({i}, {j}): {got} vs {want}");
            }
            // Padding between rows is left alone.
            assert!(y[i * ldy + n].is_nan());
        }
    }

    #[test]
    fn panels_taken_backward_give_the_same_bits() {
        let (n, k, m) = (3 * NR + 5, 29, 3);
        let r: Vec<f32> = (0..n * k).map(|i| ((i * 53 % 97) as f32).sin()).collect();
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 31) as f32).cos()).collect();
        let p = Packed::new(&r, n, k);
        let (mut fwd, mut bwd) = (vec![0f32; m * n], vec![1f32; m * n]);
        p.mul(&x, m, k, &mut fwd, n);
        p.mul_backward(&x, m, k, &mut bwd, n);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fwd), bits(&bwd));
    }

    #[test]
    fn short_operands_write_nothing() {
        let p = Packed::new(&[1.0; 6], 2, 3);
        let mut y = vec![0f32; 2];
        p.mul(&[1.0, 1.0], 1, 3, &mut y, 2);
        assert_eq!(y, vec![0.0, 0.0]);
        p.mul(&[1.0, 2.0, 3.0], 1, 3, &mut y, 2);
        assert_eq!(y, vec![6.0, 6.0]);
    }
}
