//! Tiles with output channels in the lanes (AVX-512 VNNI), for panels of
//! fewer than [`NR`] columns: the tile kernel puts 32 columns in its lanes,
//! so a 7 × 7 plane (49 pixels) fills 64 lanes and a 14 × 14 one 224.
//! Here a tile is [`ROWS`] = 32 rows (two vectors of sixteen) by up to
//! [`PX`] = 14 columns: each column's four-k quad is broadcast from the
//! panel (`[k4][NR][4]`, as packed for the tile kernel) and multiplied by
//! the sixteen rows' quads (`vpdpbusd`), so only the panel's `n` columns
//! are computed. The rows' quads come straight from the packed weights:
//! group g of a block of [`MR`] = 8 rows is 32 bytes, two blocks one
//! vector. The sums are the same integers as the tile kernel's; the
//! requantization, where fused, is the same f32 operations per element.

use super::sink::Requant;
use super::{MR, NR};

/// Most columns per tile (28 accumulators).
pub(crate) const PX: usize = 14;
/// Rows per tile: two vectors of sixteen.
pub(crate) const ROWS: usize = 32;
/// Blocks of [`MR`] rows per tile.
pub(crate) const BLOCKS: usize = ROWS / MR;

/// One tile's sums: `sums[c][r]` for column c, row r.
pub(crate) type Sums = [[i32; ROWS]; PX];

/// Whether the kernel takes a panel of `n` columns (`n < NR`) of a product
/// with `rows` rows: where the CPU has AVX-512 VNNI and a panel leaves
/// lanes of the tile kernel idle.
pub(crate) fn takes(n: usize, rows: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        n < NR && rows >= 16 && super::has_vnni512()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (n, rows);
        false
    }
}

/// Splits `n` columns into near-equal tiles of at most [`PX`]: (first
/// column, count) pairs.
pub(crate) fn tiles(n: usize) -> impl Iterator<Item = (usize, usize)> {
    let parts = n.div_ceil(PX).max(1);
    (0..parts).map(move |i| {
        let (a, b) = (n * i / parts, n * (i + 1) / parts);
        (a, b - a)
    })
}

/// The exact sums of rows of `blocks` (each `k4 · MR · 4` bytes; a missing
/// block may repeat another, its rows are then not meaningful) by panel
/// columns `c0 .. c0 + p` (p ≤ [`PX`]) into `out[c][r]`. Returns false
/// (nothing written) where the CPU lacks AVX-512 VNNI.
pub(crate) fn sums(
    blocks: [&[i8]; BLOCKS],
    panel: &[u8],
    k4: usize,
    (c0, p): (usize, usize),
    out: &mut Sums,
) -> bool {
    assert!(
        (1..=PX).contains(&p)
            && c0 + p <= NR
            && panel.len() >= k4 * NR * 4
            && blocks.iter().all(|b| b.len() >= k4 * MR * 4)
    );
    #[cfg(target_arch = "x86_64")]
    if super::has_vnni512() {
        let ptrs = blocks.map(|b| b.as_ptr());
        // SAFETY: the features were just checked and the bounds asserted.
        let acc = unsafe { dispatch(ptrs, panel[c0 * 4..].as_ptr(), k4, p) };
        for (c, a) in acc.iter().enumerate().take(p) {
            // SAFETY: row arrays of 32 i32, two vectors each.
            unsafe {
                use std::arch::x86_64::*;
                let o = out[c].as_mut_ptr().cast::<__m512i>();
                _mm512_storeu_si512(o, a[0]);
                _mm512_storeu_si512(o.add(1), a[1]);
            }
        }
        return true;
    }
    let _ = (blocks, panel, k4, c0, p, out);
    false
}

/// [`sums`] requantized in registers (rows in lanes: one scale and one
/// addition vector per sixteen rows) and written to rows `r0 .. r0 + nr`
/// (nr ≤ [`ROWS`]), columns `col .. col + p` of `dst`; `add[r]` is added to
/// row r's sums. Returns false (nothing written) where the CPU lacks the
/// kernel.
#[allow(clippy::too_many_arguments)]
pub(crate) fn requant(
    blocks: [&[i8]; BLOCKS],
    panel: &[u8],
    k4: usize,
    (c0, p): (usize, usize),
    add: &[i32],
    dst: &Requant,
    (r0, nr): (usize, usize),
    col: usize,
) -> bool {
    assert!(
        (1..=PX).contains(&p)
            && c0 + p <= NR
            && (1..=ROWS).contains(&nr)
            && add.len() >= nr
            && panel.len() >= k4 * NR * 4
            && blocks.iter().all(|b| b.len() >= k4 * MR * 4)
    );
    #[cfg(target_arch = "x86_64")]
    if super::has_vnni512() {
        let mut adds = [0i32; ROWS];
        adds[..nr].copy_from_slice(&add[..nr]);
        let scales: [f32; ROWS] = std::array::from_fn(|r| dst.scale_of(r0 + r.min(nr - 1)));
        let mut bytes = [[0u8; ROWS]; PX];
        let ptrs = blocks.map(|b| b.as_ptr());
        // SAFETY: the features were just checked and the bounds asserted.
        unsafe {
            let acc = dispatch(ptrs, panel[c0 * 4..].as_ptr(), k4, p);
            requant_vnni512(&acc, p, &adds, &scales, dst, &mut bytes);
        }
        for b in 0..nr.div_ceil(MR) {
            let rb = MR.min(nr - b * MR);
            let rows = dst.rows(r0 + b * MR, col, rb, p);
            for (r, &row) in rows.iter().enumerate().take(rb) {
                for (c, column) in bytes.iter().enumerate().take(p) {
                    // SAFETY: `Requant::rows` checked that rows hold p bytes;
                    // this tile alone writes them.
                    unsafe { *row.add(c) = column[b * MR + r] };
                }
            }
        }
        return true;
    }
    let _ = (blocks, panel, k4, c0, p, add, dst, r0, nr, col);
    false
}

/// The accumulators of one tile: column c, rows 0..16 and 16..32 (columns
/// past p left zero).
#[cfg(target_arch = "x86_64")]
type Acc = [[std::arch::x86_64::__m512i; 2]; PX];

/// [`kernel`] for `p` columns.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VNNI; each block must hold k4 groups
/// of `MR · 4` bytes and `x` p columns' quads of k4 panel groups.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dispatch(w: [*const i8; BLOCKS], x: *const u8, k4: usize, p: usize) -> Acc {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_si512(); 2]; PX];
    macro_rules! go {
        ($($n:literal)*) => {
            match p {
                // SAFETY: this function's contract.
                $($n => unsafe { kernel::<$n>(w, x, k4, &mut acc) },)*
                _ => {}
            }
        };
    }
    go!(1 2 3 4 5 6 7 8 9 10 11 12 13 14);
    acc
}

/// The multiply-add loop for `P` columns.
///
/// # Safety
/// As [`dispatch`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn kernel<const P: usize>(w: [*const i8; BLOCKS], x: *const u8, k4: usize, out: &mut Acc) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_si512(); 2]; P];
    for g in 0..k4 {
        // SAFETY: group g < k4 of each block: 32 bytes at g·MR·4 (the
        // contract); the pixel quads of group g at g·NR·4 + 4c, c < P.
        unsafe {
            let at = g * MR * 4;
            let half = |b: usize| _mm256_loadu_si256(w[b].add(at).cast());
            let w0 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(half(0)), half(1));
            let w1 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(half(2)), half(3));
            let xg = x.add(g * NR * 4).cast::<i32>();
            for (c, a) in acc.iter_mut().enumerate() {
                let xb = _mm512_set1_epi32(xg.add(c).read_unaligned());
                a[0] = _mm512_dpbusd_epi32(a[0], xb, w0);
                a[1] = _mm512_dpbusd_epi32(a[1], xb, w1);
            }
        }
    }
    out[..P].copy_from_slice(&acc);
}

/// Requantizes the accumulators of `p` columns into `bytes[c][r]`.
///
/// # Safety
/// The CPU must have AVX-512 F, BW, DQ and VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vnni")]
unsafe fn requant_vnni512(
    acc: &Acc,
    p: usize,
    adds: &[i32; ROWS],
    scales: &[f32; ROWS],
    dst: &Requant,
    bytes: &mut [[u8; ROWS]; PX],
) {
    use super::sink::Requant16;
    use std::arch::x86_64::*;
    let requant = Requant16::new(dst.zero, dst.lo, dst.hi);
    // SAFETY: 32 values each: two vectors of sixteen.
    let (add, s) = unsafe {
        let (a, s) = (adds.as_ptr().cast::<__m512i>(), scales.as_ptr());
        (
            [_mm512_loadu_si512(a), _mm512_loadu_si512(a.add(1))],
            [_mm512_loadu_ps(s), _mm512_loadu_ps(s.add(16))],
        )
    };
    for (a, out) in acc.iter().zip(bytes.iter_mut()).take(p) {
        for h in 0..2 {
            let q = requant.apply(_mm512_add_epi32(a[h], add[h]), s[h]);
            // SAFETY: sixteen bytes at 16·h of a 32-byte column.
            unsafe { _mm_storeu_si128(out[16 * h..].as_mut_ptr().cast(), _mm512_cvtepi32_epi8(q)) };
        }
    }
}
