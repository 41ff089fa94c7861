//! The x86-64 register blocks of the panel GEMM: 6 rows × 16 (or 8)
//! columns in 256-bit registers (AVX2 + FMA), and 12 rows × one 512-bit
//! register (AVX-512F) for whole strips. Each output is an in-order chain
//! of fused multiply-adds from zero, so the two give the same bits.

use super::{BlockArgs, Epilogue, MR, NR};

/// Runs the block of `rows` rows (1 to 12: two panels past 6) and 16
/// columns (`wide`) or 8: [`block512`] or [`block512_narrow`] where `zmm`,
/// else [`block`] for each panel; `packed` where X's rows are a packed
/// strip's (the pitch then a constant of the kernel).
///
/// # Safety
/// As for [`block`] with R = `rows` and V = 2 or 1, `w` holding a panel
/// per 6 rows; `zmm` only on a CPU with AVX-512F.
pub(super) unsafe fn dispatch(rows: usize, wide: bool, zmm: bool, packed: bool, a: BlockArgs) {
    if zmm {
        macro_rules! rows {
            ($($r:literal)*) => {
                match (rows, packed, wide) {
                    $(($r, true, true) => block512::<$r, true>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),
                    ($r, false, true) => block512::<$r, false>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),
                    ($r, true, false) => block512_narrow::<$r, true>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),
                    ($r, false, false) => block512_narrow::<$r, false>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),)*
                    _ => unreachable!("two panels have 1 to {} rows", 2 * MR),
                }
            };
        }
        // SAFETY: this function's contract is the AVX-512 blocks' (R =
        // `rows`), passed on unchanged, and `zmm` says the CPU has AVX-512F.
        return unsafe { rows!(1 2 3 4 5 6 7 8 9 10 11 12) };
    }
    if rows > MR {
        // Two panels for the 256-bit block: one after the other.
        let (x, xs, n, k, w, bias, z, y, epi) = a;
        let first = (x, xs, n, k, &w[..k * MR], bias, z, y, epi);
        // SAFETY: the first 6 of this call's `rows` rows, with the first
        // panel of `w`: within what the caller vouched for.
        unsafe { dispatch(MR, wide, false, packed, first) };
        // SAFETY: `y` and `z` hold `rows` > 6 rows of pitch `n`, so row 6
        // is inside them, and the rest is the remaining `rows - 6` rows
        // with the second panel of `w`.
        unsafe {
            let (bias, z) = (bias.map(|b| &b[MR..]), z.map(|z| z.add(MR * n)));
            let rest = (x, xs, n, k, &w[k * MR..], bias, z, y.add(MR * n), epi);
            dispatch(rows - MR, wide, false, packed, rest)
        }
        return;
    }
    macro_rules! rows {
        ($($r:literal)*) => {
            match (rows, wide, packed) {
                $(($r, true, true) => block::<2, $r, true>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),
                ($r, false, true) => block::<1, $r, true>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),
                ($r, true, false) => block::<2, $r, false>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),
                ($r, false, false) => block::<1, $r, false>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7, a.8),)*
                _ => unreachable!("a panel has 1 to {MR} rows"),
            }
        };
    }
    // SAFETY: this function's contract is the block's (R = `rows` ≤ 6),
    // passed on unchanged; the caller checked AVX2 and FMA.
    unsafe { rows!(1 2 3 4 5 6) }
}

/// One block: `y[r·n + j] = act(Σ_k w[k·6 + r]·x[k·xs + j] + bias[r] +
/// z[r·n + j])` for R rows r and 8·V columns j.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `x` must hold `k` rows of 8·V at
/// pitch `xs` (which is 8·V where `P`, a packed strip), `w`
/// `k` groups of 6, `bias` (if any) R values, and `y` (and `z`) R rows of
/// pitch `n` with 8·V writable (readable) columns each.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const V: usize, const R: usize, const P: bool>(
    x: *const f32,
    xs: usize,
    n: usize,
    k: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    z: Option<*const f32>,
    y: *mut f32,
    epi: &Epilogue,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); V]; R];
    let wp = w.as_ptr();
    // A packed strip's pitch as a constant: at run time it cost the packed
    // path 2–8 % (176→64 on 24×24, 64→64 on 56×56, one thread).
    let xs = if P { 8 * V } else { xs };
    for kk in 0..k {
        // SAFETY: `x` holds `k` rows of 8·V at pitch `xs` (the caller's
        // contract), and kk < k.
        let xr = unsafe { x.add(kk * xs) };
        let mut xv = [_mm256_setzero_ps(); V];
        for (h, v) in xv.iter_mut().enumerate() {
            // SAFETY: columns 8h..8h+8 of row kk, h < V.
            *v = unsafe { _mm256_loadu_ps(xr.add(8 * h)) };
        }
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: `w` holds `k` groups of 6 and r < R ≤ 6, kk < k.
            let wv = _mm256_broadcast_ss(unsafe { &*wp.add(kk * MR + r) });
            for (h, v) in a.iter_mut().enumerate() {
                *v = _mm256_fmadd_ps(wv, xv[h], *v);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (h, &v) in a.iter().enumerate() {
            let mut v = v;
            if let Some(b) = bias {
                v = _mm256_add_ps(v, _mm256_set1_ps(b[r]));
            }
            if let Some(z) = z {
                // SAFETY: `z` holds R rows of pitch `n` with 8·V readable
                // columns; r < R, h < V.
                v = _mm256_add_ps(v, unsafe { _mm256_loadu_ps(z.add(r * n + 8 * h)) });
            }
            // max/min with the bound first keep NaN, as the definitions do.
            match *epi {
                Epilogue::Relu => v = _mm256_max_ps(_mm256_setzero_ps(), v),
                Epilogue::Clip(lo, hi) => {
                    v = _mm256_max_ps(_mm256_set1_ps(lo), v);
                    v = _mm256_min_ps(_mm256_set1_ps(hi), v);
                }
                Epilogue::HardSwish => {
                    let g = _mm256_mul_ps(v, _mm256_set1_ps(1.0 / 6.0));
                    let g = _mm256_add_ps(g, _mm256_set1_ps(0.5));
                    let g = _mm256_max_ps(_mm256_setzero_ps(), g);
                    v = _mm256_mul_ps(v, _mm256_min_ps(_mm256_set1_ps(1.0), g));
                }
                Epilogue::None | Epilogue::Other(_) => {}
            }
            // SAFETY: `y` holds R rows of pitch `n` with 8·V writable
            // columns; r < R, h < V.
            unsafe { _mm256_storeu_ps(y.add(r * n + 8 * h), v) };
        }
        if let Epilogue::Other(a) = *epi {
            // SAFETY: row r's 8·V writable columns of `y`, which nothing
            // else borrows while the slice lives.
            a.apply(unsafe { std::slice::from_raw_parts_mut(y.add(r * n), 8 * V) });
        }
    }
}

/// Expands to a block of up to two panels (R ≤ 12 rows in as many
/// registers) over one vector of `$cols` columns, for AVX-512: each
/// weight's broadcast folds into its multiply-add, and one load of X
/// serves 12 of them. The same products in the same order as [`block`],
/// so the same bits.
macro_rules! two_panel_block {
    ($(#[$doc:meta])* $name:ident, $cols:expr, $zero:ident, $load:ident, $fmadd:ident,
     $set1:ident, $add:ident, $mul:ident, $max:ident, $min:ident, $store:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for [`block`] with `$cols` columns, `w` holding a panel per 6
        /// rows, on a CPU with AVX-512F.
                #[target_feature(enable = "avx512f,fma")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name<const R: usize, const P: bool>(
            x: *const f32,
            xs: usize,
            n: usize,
            k: usize,
            w: &[f32],
            bias: Option<&[f32]>,
            z: Option<*const f32>,
            y: *mut f32,
            epi: &Epilogue,
        ) {
            use std::arch::x86_64::*;
            let mut acc = [$zero(); R];
            let xs = if P { $cols } else { xs };
            assert!(w.len() >= R.div_ceil(MR) * k * MR);
            // Rows past the first panel's take their weights from the second.
            // SAFETY: the assert above: `w` holds a second panel where R > 6.
            let (w0, w1) = (w.as_ptr(), unsafe { w.as_ptr().add(if R > MR { k * MR } else { 0 }) });
            for kk in 0..k {
                // SAFETY: row kk < k of `x` at pitch `xs`, `$cols` readable
                // columns (the caller's contract).
                let xv = unsafe { $load(x.add(kk * xs)) };
                // SAFETY: group kk < k of each panel (the assert above).
                let (p0, p1) = unsafe { (w0.add(kk * MR), w1.add(kk * MR)) };
                for (r, a) in acc.iter_mut().enumerate() {
                    // SAFETY: r < 6 in the first panel's group, r - 6 < 6 in
                    // the second's; both groups are in `w` (the assert above).
                    let wv = unsafe { if r < MR { *p0.add(r) } else { *p1.add(r - MR) } };
                    *a = $fmadd($set1(wv), xv, *a);
                }
            }
            for (r, &a) in acc.iter().enumerate() {
                let mut v = a;
                if let Some(b) = bias {
                    v = $add(v, $set1(b[r]));
                }
                if let Some(z) = z {
                    // SAFETY: row r < R of `z`, pitch `n`, `$cols` readable
                    // columns (the caller's contract).
                    v = $add(v, unsafe { $load(z.add(r * n)) });
                }
                // max/min with the bound first keep NaN, as the definitions do.
                match *epi {
                    Epilogue::Relu => v = $max($zero(), v),
                    Epilogue::Clip(lo, hi) => {
                        v = $max($set1(lo), v);
                        v = $min($set1(hi), v);
                    }
                    Epilogue::HardSwish => {
                        let g = $add($mul(v, $set1(1.0 / 6.0)), $set1(0.5));
                        let g = $max($zero(), g);
                        v = $mul(v, $min($set1(1.0), g));
                    }
                    Epilogue::None | Epilogue::Other(_) => {}
                }
                // SAFETY: row r < R of `y`, pitch `n`, `$cols` writable
                // columns (the caller's contract).
                unsafe { $store(y.add(r * n), v) };
                if let Epilogue::Other(a) = *epi {
                    // SAFETY: the same row, which nothing else borrows
                    // while the slice lives.
                    a.apply(unsafe { std::slice::from_raw_parts_mut(y.add(r * n), $cols) });
                }
            }
        }
    };
}

two_panel_block!(
    /// [`block`] of two vectors of 8 as one of 16, two panels at a time.
    block512, NR, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_fmadd_ps, _mm512_set1_ps,
    _mm512_add_ps, _mm512_mul_ps, _mm512_max_ps, _mm512_min_ps, _mm512_storeu_ps
);
two_panel_block!(
    /// [`block`] of one vector of 8 (a narrow last strip), two panels at a
    /// time: 12 accumulators where the 256-bit block had 6, and one load of
    /// X for both panels.
    block512_narrow, NR / 2, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_fmadd_ps,
    _mm256_set1_ps, _mm256_add_ps, _mm256_mul_ps, _mm256_max_ps, _mm256_min_ps, _mm256_storeu_ps
);
