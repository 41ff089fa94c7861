//! The int8 products of the recurrent path: `acc = (x − zx)·(W − zw)` in
//! i32 for u8 rows x (a time step's few rows of h, or X's rows for the
//! input projection) and an s8 matrix W (`k × n`, n the gate columns)
//! packed once so that columns lie in vector lanes: groups of [`GROUP`]
//! columns, each `[k4][GROUP][4]` bytes (four consecutive k of one column
//! side by side, zero past k and past n). One AVX-512 VNNI `vpdpbusd`
//! multiplies a broadcast quad of x by sixteen columns' quads, up to
//! [`ROWS`] rows of x sharing each load of W; on aarch64 one `sdot` by
//! lane multiplies four columns' quads by one quad of x (flipped to s8,
//! `x − 128`, with the zero point moved alike). Integer sums are exact:
//! every kernel gives the portable kernel's values, and so does any split
//! of the rows over threads.

/// Columns per group: four vectors of sixteen i32 lanes.
const GROUP: usize = 64;
/// Rows of x that share one pass over W.
const ROWS: usize = 4;

/// The sums of up to [`ROWS`] rows over one group of columns.
type Wide = [[i32; GROUP]; ROWS];

/// The kernel a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    /// Plain i32 multiply-adds, on every CPU.
    Portable,
    /// AVX-512 VNNI `vpdpbusd`.
    #[cfg(target_arch = "x86_64")]
    Vnni512,
    /// ARMv8.2 dotprod `sdot`.
    #[cfg(target_arch = "aarch64")]
    Dot,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub(super) fn best() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if crate::ops::quant::engine::has_vnni512() {
            return Kernel::Vnni512;
        }
        #[cfg(target_arch = "aarch64")]
        if crate::ops::gemm::simd::neon_kernels() && crate::ops::quant::engine::has_dotprod() {
            return Kernel::Dot;
        }
        Kernel::Portable
    }

    /// Whether x's bytes enter the kernel as s8 (`x − 128`).
    fn flips(self) -> bool {
        #[cfg(target_arch = "aarch64")]
        if self == Kernel::Dot {
            return true;
        }
        false
    }
}

/// An s8 matrix of `k × n` packed for [`PackedGemv::mul`], with each
/// column's sum and zero point (s8 domain).
#[derive(Debug, Clone)]
pub(super) struct PackedGemv {
    /// Output columns.
    pub n: usize,
    /// The reduction length.
    pub k: usize,
    k4: usize,
    data: Vec<i8>,
    /// Per column, `k·zw − Σ_k w` (zero past n): times zx, the part of
    /// every row's sum that does not depend on the row.
    fix: Vec<i32>,
    zero: Vec<i32>,
    /// Some column's zero point is not 0 (then each row's sum is needed).
    any_zero: bool,
}

impl PackedGemv {
    /// Packs `w[kk][j] = src[kk·n + j]` (s8 bytes, or u8 when `from_u8`:
    /// values and zero points shift by −128) with `zero` (one per column,
    /// in the source's domain).
    pub(super) fn pack(src: &[u8], k: usize, n: usize, from_u8: bool, zero: &[i32]) -> PackedGemv {
        let k4 = k.div_ceil(4);
        let groups = n.div_ceil(GROUP);
        let flip = if from_u8 { 0x80 } else { 0 };
        let mut data = vec![0i8; groups * k4 * GROUP * 4];
        let mut col_sums = vec![0i32; n];
        for kk in 0..k {
            for (j, sum) in col_sums.iter_mut().enumerate() {
                let v = (src[kk * n + j] ^ flip) as i8;
                let (g, c) = (j / GROUP, j % GROUP);
                data[((g * k4 + kk / 4) * GROUP + c) * 4 + kk % 4] = v;
                *sum += v as i32;
            }
        }
        let shift = if from_u8 { 128 } else { 0 };
        let zero: Vec<i32> = (0..n).map(|j| zero[j] - shift).collect();
        let any_zero = zero.iter().any(|&z| z != 0);
        let mut fix = vec![0i32; groups * GROUP];
        for ((f, &s), &zw) in fix.iter_mut().zip(&col_sums).zip(&zero) {
            *f = (k as i32).wrapping_mul(zw).wrapping_sub(s);
        }
        PackedGemv {
            n,
            k,
            k4,
            data,
            fix,
            zero,
            any_zero,
        }
    }

    /// `out[i·n + j] = Σ_k (x[i·k + kk] − zx)(w[kk][j] − zw[j])` for the
    /// `m` rows of `x` (u8, `m × k`); `quads` is scratch. Too short slices
    /// leave `out` as it was.
    pub(super) fn mul(&self, x: &[u8], m: usize, zx: i32, out: &mut [i32], quads: &mut Vec<u32>) {
        self.mul_on(Kernel::best(), x, m, zx, out, quads);
    }

    /// [`PackedGemv::mul`] on `kernel` (which the CPU must run).
    fn mul_on(
        &self,
        kernel: Kernel,
        x: &[u8],
        m: usize,
        zx: i32,
        out: &mut [i32],
        quads: &mut Vec<u32>,
    ) {
        let (n, k, k4) = (self.n, self.k, self.k4);
        if x.len() < m * k || out.len() < m * n {
            return;
        }
        if k == 0 {
            out[..m * n].fill(0);
            return;
        }
        let needs_x_sum = self.any_zero;
        // A flipping kernel sees x − 128: its zero point moves alike.
        let (flip, shift) = if kernel.flips() {
            (0x80u8, 128)
        } else {
            (0, 0)
        };
        let zx = zx - shift;
        let mut wide: Wide = [[0; GROUP]; ROWS];
        let rows_in = x[..m * k].chunks(ROWS * k);
        for (xs, dst) in rows_in.zip(out[..m * n].chunks_mut(ROWS * n)) {
            let r = xs.len() / k;
            // Each row's bytes four by four, zero past k.
            quads.clear();
            for row in xs.chunks_exact(k) {
                quads.extend(row.chunks(4).map(|q| {
                    let mut b = [flip; 4];
                    b[..q.len()].copy_from_slice(q);
                    u32::from_le_bytes(b) ^ u32::from_le_bytes([flip; 4])
                }));
            }
            let mut x_sums = [0i32; ROWS];
            if needs_x_sum {
                for (s, row) in x_sums.iter_mut().zip(xs.chunks_exact(k)) {
                    *s = row.iter().map(|&v| v as i32 - shift).sum();
                }
            }
            for g in 0..n.div_ceil(GROUP) {
                let block = &self.data[g * k4 * GROUP * 4..][..k4 * GROUP * 4];
                let mut start = [0i32; GROUP];
                for (s, &f) in start.iter_mut().zip(&self.fix[g * GROUP..]) {
                    *s = zx.wrapping_mul(f);
                }
                dot_group(kernel, block, quads, (r, k4), &start, &mut wide);
                let (j0, j1) = (g * GROUP, n.min((g + 1) * GROUP));
                let zero = &self.zero[j0..j1];
                for (i, sums) in wide.iter().enumerate().take(r) {
                    let row = &mut dst[i * n + j0..i * n + j1];
                    row.copy_from_slice(&sums[..j1 - j0]);
                    if needs_x_sum {
                        for (o, &zw) in row.iter_mut().zip(zero) {
                            *o = o.wrapping_sub(zw.wrapping_mul(x_sums[i]));
                        }
                    }
                }
            }
        }
    }
}

/// `out[i][c] = start[c] + Σ_g Σ_{t<4} quad(i, g)_t · block[g][c][t]` for
/// rows `i < r` (`quads` holds `r` rows of `k4` quads: u8, or s8 on a
/// flipping kernel) and one group, on `kernel`.
fn dot_group(
    kernel: Kernel,
    block: &[i8],
    quads: &[u32],
    (r, k4): (usize, usize),
    start: &[i32; GROUP],
    out: &mut Wide,
) {
    assert!(r <= ROWS && quads.len() >= r * k4 && block.len() >= k4 * GROUP * 4);
    match kernel {
        Kernel::Portable => dot_portable(block, quads, (r, k4), start, out),
        // SAFETY: the CPU runs `kernel` (the callers pick it with
        // `Kernel::best`), the bounds are asserted above.
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni512 => unsafe {
            match r {
                1 => dot_vnni512::<1>(block, quads, k4, start, out),
                2 => dot_vnni512::<2>(block, quads, k4, start, out),
                3 => dot_vnni512::<3>(block, quads, k4, start, out),
                _ => dot_vnni512::<4>(block, quads, k4, start, out),
            }
        },
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        Kernel::Dot => unsafe { dot_sdot(block, quads, (r, k4), start, out) },
    }
}

fn dot_portable(
    block: &[i8],
    quads: &[u32],
    (r, k4): (usize, usize),
    start: &[i32; GROUP],
    out: &mut Wide,
) {
    for (i, o) in out.iter_mut().enumerate().take(r) {
        o.copy_from_slice(start);
        for g in 0..k4 {
            let xb = quads[i * k4 + g].to_le_bytes();
            let w = &block[g * GROUP * 4..][..GROUP * 4];
            for (v, wq) in o.iter_mut().zip(w.chunks_exact(4)) {
                let d: i32 = (0..4).map(|t| xb[t] as i32 * wq[t] as i32).sum();
                *v = v.wrapping_add(d);
            }
        }
    }
}

/// [`dot_group`] with `sdot` by lane, one row at a time (sixteen
/// accumulators of four columns each).
///
/// # Safety
/// The CPU must have dotprod; `block` must hold `k4 · GROUP · 4` bytes and
/// `quads` `r · k4` quads (s8).
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "dotprod")]
unsafe fn dot_sdot(
    block: &[i8],
    quads: &[u32],
    (r, k4): (usize, usize),
    start: &[i32; GROUP],
    out: &mut Wide,
) {
    use crate::ops::quant::engine::neon::sdot_lane;
    use std::arch::aarch64::*;
    const V: usize = GROUP / 4;
    let wp = block.as_ptr();
    for (i, o) in out.iter_mut().enumerate().take(r) {
        let row = &quads[i * k4..(i + 1) * k4];
        // SAFETY: lanes 4v .. 4v + 4 lie in `start`.
        let mut acc: [int32x4_t; V] =
            std::array::from_fn(|v| unsafe { vld1q_s32(start.as_ptr().add(v * 4)) });
        for (c, chunk) in row.chunks(4).enumerate() {
            let mut four = [0u32; 4];
            four[..chunk.len()].copy_from_slice(chunk);
            // SAFETY: `four` is 16 bytes.
            let xv = vreinterpretq_s8_u32(unsafe { vld1q_u32(four.as_ptr()) });
            macro_rules! lane {
                ($l:literal) => {
                    let g = c * 4 + $l;
                    if g < k4 {
                        for (v, a) in acc.iter_mut().enumerate() {
                            // SAFETY: group g < k4's bytes lie in `block`
                            // (the contract); the CPU has dotprod.
                            *a = unsafe {
                                sdot_lane::<$l>(*a, vld1q_s8(wp.add((g * GROUP + v * 4) * 4)), xv)
                            };
                        }
                    }
                };
            }
            lane!(0);
            lane!(1);
            lane!(2);
            lane!(3);
        }
        for (v, a) in acc.iter().enumerate() {
            // SAFETY: lanes 4v .. 4v + 4 lie in the row of `out`.
            unsafe { vst1q_s32(o.as_mut_ptr().add(v * 4), *a) };
        }
    }
}

/// [`dot_group`] for `R` rows with `vpdpbusd`.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VNNI; `block` must hold `k4 · GROUP
/// · 4` bytes and `quads` `R · k4` quads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dot_vnni512<const R: usize>(
    block: &[i8],
    quads: &[u32],
    k4: usize,
    start: &[i32; GROUP],
    out: &mut Wide,
) {
    use std::arch::x86_64::*;
    const V: usize = GROUP / 16;
    let (wp, qp) = (block.as_ptr(), quads.as_ptr());
    // Quad g of every row times group g's columns, added into `acc`.
    let step = |acc: &mut [[__m512i; V]; R], g: usize| {
        // SAFETY: group g's GROUP · 4 bytes lie in `block` (the contract).
        let w: [__m512i; V] = std::array::from_fn(|v| unsafe {
            _mm512_loadu_si512(wp.add((g * GROUP + v * 16) * 4).cast())
        });
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: row i < R's quad g lies in `quads` (the contract).
            let xv = _mm512_set1_epi32(unsafe { *qp.add(i * k4 + g) } as i32);
            for (av, &wv) in a.iter_mut().zip(&w) {
                *av = _mm512_dpbusd_epi32(*av, xv, wv);
            }
        }
    };
    // SAFETY: lanes 16v .. 16v + 16 lie in `start`.
    let first: [__m512i; V] =
        std::array::from_fn(|v| unsafe { _mm512_loadu_si512(start.as_ptr().add(v * 16).cast()) });
    let mut acc = [first; R];
    if R <= 2 {
        // Few rows: even and odd groups in two sets of sums, so that
        // consecutive multiply-adds do not wait on each other.
        let mut odd = [[_mm512_setzero_si512(); V]; R];
        let mut g = 0;
        while g + 1 < k4 {
            step(&mut acc, g);
            step(&mut odd, g + 1);
            g += 2;
        }
        if g < k4 {
            step(&mut acc, g);
        }
        for (a, o) in acc.iter_mut().zip(&odd) {
            for (av, &ov) in a.iter_mut().zip(o) {
                *av = _mm512_add_epi32(*av, ov);
            }
        }
    } else {
        for g in 0..k4 {
            step(&mut acc, g);
        }
    }
    for (o, a) in out.iter_mut().zip(&acc) {
        for (v, &av) in a.iter().enumerate() {
            // SAFETY: lanes v·16 .. v·16 + 16 lie in the row of `out`.
            unsafe { _mm512_storeu_si512(o.as_mut_ptr().add(v * 16).cast(), av) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::xorshift32;

    /// The kernels against the definition, for k and n around the
    /// packing's multiples, s8 and u8 weights, zero and non-zero zero
    /// points, several rows.
    #[test]
    fn products_equal_the_definition() {
        let mut next = xorshift32(11);
        for &(k, n, m) in &[
            (1, 1, 1),
            (5, 17, 2),
            (64, 128, 1),
            (67, 300, 3),
            (8, 70, 4),
            (12, 64, 9),
        ] {
            for (from_u8, zeroed) in [(false, true), (false, false), (true, false)] {
                let w: Vec<u8> = (0..k * n).map(|_| next() as u8).collect();
                let zero: Vec<i32> = (0..n)
                    .map(|j| match (zeroed, from_u8) {
                        (true, _) => 0,
                        (false, true) => 100 + (j % 50) as i32,
                        (false, false) => (j % 9) as i32 - 4,
                    })
                    .collect();
                let x: Vec<u8> = (0..m * k).map(|_| next() as u8).collect();
                let zx = 37;
                let packed = PackedGemv::pack(&w, k, n, from_u8, &zero);
                let value = |kk: usize, j: usize| {
                    let b = w[kk * n + j];
                    if from_u8 {
                        b as i32
                    } else {
                        b as i8 as i32
                    }
                };
                let want: Vec<i32> = (0..m * n)
                    .map(|i| {
                        let (r, j) = (i / n, i % n);
                        (0..k)
                            .map(|kk| (x[r * k + kk] as i32 - zx) * (value(kk, j) - zero[j]))
                            .sum()
                    })
                    .collect();
                // The portable kernel and this CPU's best one.
                for kernel in [Kernel::Portable, Kernel::best()] {
                    let mut got = vec![7i32; m * n];
                    packed.mul_on(kernel, &x, m, zx, &mut got, &mut Vec::new());
                    assert_eq!(
                        got, want,
                        "{kernel:?} k {k} n {n} m {m} u8 {from_u8} zeroed {zeroed}"
                    );
                }
            }
        }
    }

    #[test]
    fn short_slices_leave_the_output_alone() {
        let packed = PackedGemv::pack(&[1, 2, 3, 4, 5, 6], 2, 3, false, &[0, 0, 0]);
        let mut out = vec![9i32; 3];
        packed.mul(&[1], 1, 0, &mut out, &mut Vec::new());
        assert_eq!(out, vec![9, 9, 9]);
        packed.mul(&[1, 2], 1, 0, &mut out, &mut Vec::new());
        assert_eq!(out, vec![1 + 2 * 4, 2 + 2 * 5, 3 + 2 * 6]);
    }
}
