//! The 2-D depthwise tap sums for f32 on AVX2 + FMA, written with
//! intrinsics: up to eight 8-lane running sums per chunk (two rows of 32,
//! four rows of 16 or eight rows of 8), one broadcast weight and a fused
//! multiply-add per sum and tap, Relu applied in registers. The same sums in the
//! same order as the generic path's fused build, so both give the same
//! bits. On AVX-512 machines rows of 16 outputs or more take 16-lane
//! copies, and a dense 3×3 window (stride 1) loads each input row of a
//! chunk once per column shift for all the output rows it reaches.

use std::arch::x86_64::*;

/// One output plane of `oh` rows of `ow`, read from phases whose row pitch
/// is `cols`, with tap `t` at `offsets[t]`.
pub(super) struct Plane<'a> {
    oh: usize,
    ow: usize,
    cols: usize,
    offsets: &'a [usize],
    /// Elements of the phases the reads reach.
    reach: usize,
}

/// Lanes of one vector.
const WIDTH: usize = 8;
/// Most running sums (vectors) one chunk holds in registers.
const CHAINS: usize = 8;

impl<'a> Plane<'a> {
    pub(super) fn new(oh: usize, ow: usize, cols: usize, offsets: &'a [usize]) -> Plane<'a> {
        // Every chunk reads whole vectors, up to WIDTH − 1 lanes past a
        // short row.
        let last = offsets.iter().max().copied().unwrap_or(0);
        let reach = last + oh.saturating_sub(1) * cols + ow.max(WIDTH);
        Plane {
            oh,
            ow,
            cols,
            offsets,
            reach,
        }
    }

    /// Outputs per row.
    pub(super) fn ow(&self) -> usize {
        self.ow
    }
}

/// `out[oy·ow + ox] = init + Σ_t w[t]·phases[offsets[t] + oy·cols + ox]`,
/// then `max(·, 0)` when `relu`.
///
/// # Panics
/// When `out`, `w` or `phases` are shorter than the plane's reads and
/// writes need (a bug in the caller).
///
/// Safe but for the target features: a caller outside AVX2 + FMA code calls
/// it in `unsafe` once it has checked that the CPU supports them.
#[target_feature(enable = "avx2,fma")]
pub(super) fn sum_plane(
    g: &Plane,
    out: &mut [f32],
    init: f32,
    w: &[f32],
    phases: &[f32],
    relu: bool,
) {
    let (oh, ow) = (g.oh, g.ow);
    if oh == 0 || ow == 0 {
        return;
    }
    // One check here covers all the unchecked loads and stores below.
    assert!(g.reach <= phases.len() && w.len() >= g.offsets.len() && out.len() >= oh * ow);
    // Eight chains of fused multiply-adds in flight where the plane has
    // the rows: enough to cover their latency.
    // SAFETY: this function runs with AVX2 and FMA, and the assert above
    // is the reach `chunks` needs.
    unsafe {
        match (ow, oh) {
            (32.., 2..) => chunks::<4, 2>(g, out, init, w, phases, relu),
            (32.., _) => chunks::<4, 1>(g, out, init, w, phases, relu),
            (16.., 4..) => chunks::<2, 4>(g, out, init, w, phases, relu),
            (16.., 2..) => chunks::<2, 2>(g, out, init, w, phases, relu),
            (16.., _) => chunks::<2, 1>(g, out, init, w, phases, relu),
            (_, 8..) => chunks::<1, 8>(g, out, init, w, phases, relu),
            (_, 4..) => chunks::<1, 4>(g, out, init, w, phases, relu),
            _ => chunks::<1, 1>(g, out, init, w, phases, relu),
        }
    }
}

/// Chunks of R rows × V vectors. The last chunk of a row and the last rows
/// are pulled back to end at the plane's edge (recomputing a few outputs,
/// with the same bits) so that every store is whole; only rows shorter than
/// one vector store part of one.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `phases`, `w` and `out` must be
/// as long as [`sum_plane`]'s assert requires.
#[inline(always)]
unsafe fn chunks<const V: usize, const R: usize>(
    g: &Plane,
    out: &mut [f32],
    init: f32,
    w: &[f32],
    phases: &[f32],
    relu: bool,
) {
    let (oh, ow, cols) = (g.oh, g.ow, g.cols);
    let span = V * WIDTH;
    let mut at = [0usize; CHAINS];
    for (j, a) in at.iter_mut().enumerate().take(V * R) {
        *a = (j / V) * cols + (j % V) * WIDTH;
    }
    // SAFETY: AVX2 and FMA (the contract) make the intrinsics sound; the
    // loads reach at most `reach` ≤ phases.len() elements past `phases`
    // (the last chunk is pulled back to the plane's edge, reading up to one
    // short row's vector past it, which `reach` counts), and the stores
    // write rows y0..y0+R < oh of `ow` inside `out` (≥ oh·ow), the short
    // ones only `ow` lanes.
    unsafe {
        let zero = _mm256_setzero_ps();
        let mut next_y = 0;
        while next_y < oh {
            let y0 = next_y.min(oh.saturating_sub(R));
            let mut next_x = 0;
            while next_x < ow {
                let x0 = next_x.min(ow.saturating_sub(span));
                let src = phases.as_ptr().add(y0 * cols + x0);
                let mut acc = [_mm256_set1_ps(init); CHAINS];
                for (&off, &wt) in g.offsets.iter().zip(w) {
                    let p = src.add(off);
                    let wv = _mm256_set1_ps(wt);
                    for j in 0..V * R {
                        acc[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(p.add(at[j])), acc[j]);
                    }
                }
                for (j, &a) in acc.iter().enumerate().take(V * R) {
                    // max(0, x) keeps NaN and −0, as Relu's definition does.
                    let v = if relu { _mm256_max_ps(zero, a) } else { a };
                    let dst = out
                        .as_mut_ptr()
                        .add((y0 + j / V) * ow + x0 + (j % V) * WIDTH);
                    if ow >= WIDTH {
                        _mm256_storeu_ps(dst, v);
                    } else {
                        store_short(dst, v, ow);
                    }
                }
                next_x += span;
            }
            next_y += R;
        }
    }
}

/// Stores the first `n` (< 8) lanes of `v` at `dst`: two 4-lane stores that
/// overlap, or single lanes (a `memcpy` of a few bytes cost more).
///
/// # Safety
/// The CPU must support AVX2; `dst` must have `n` writable values.
#[inline(always)]
unsafe fn store_short(dst: *mut f32, v: __m256, n: usize) {
    // SAFETY: AVX2 (the contract); the stores write lanes 0..4 and
    // n-4..n where n ≥ 4, or lanes 0..n, all within `dst`'s `n`, and the
    // full store goes to the local `lanes`.
    unsafe {
        if n >= 4 {
            _mm_storeu_ps(dst, _mm256_castps256_ps128(v));
            let from = _mm256_set1_epi32(n as i32 - 4);
            let idx = _mm256_add_epi32(from, _mm256_setr_epi32(0, 1, 2, 3, 0, 0, 0, 0));
            let tail = _mm256_permutevar8x32_ps(v, idx);
            _mm_storeu_ps(dst.add(n - 4), _mm256_castps256_ps128(tail));
        } else {
            let mut lanes = [0f32; WIDTH];
            _mm256_storeu_ps(lanes.as_mut_ptr(), v);
            for (j, &l) in lanes.iter().enumerate().take(n.min(3)) {
                *dst.add(j) = l;
            }
        }
    }
}

/// Lanes of one AVX-512 vector.
const WIDE: usize = 16;

/// Whether [`sum_plane_512`] takes planes of rows `ow` long: rows of at
/// least one whole vector, so no chunk reads past its row.
pub(super) fn wide_suits(ow: usize) -> bool {
    ow >= WIDE
}

/// [`sum_plane`] on 16-lane vectors (AVX-512F): the same sums in the same
/// order, so the same bits, with half the loads and multiply-adds. On
/// MobileNet v3's 3×3 layers at stride 1 (one thread, AMD EPYC) the
/// 8-lane loads, most of them across two cache lines, bounded the sums.
///
/// # Panics
/// As [`sum_plane`], and where rows are shorter than [`wide_suits`]
/// allows.
#[target_feature(enable = "avx512f")]
pub(super) fn sum_plane_512(
    g: &Plane,
    out: &mut [f32],
    init: f32,
    w: &[f32],
    phases: &[f32],
    relu: bool,
) {
    let (oh, ow) = (g.oh, g.ow);
    if oh == 0 {
        return;
    }
    assert!(wide_suits(ow), "rows of at least {WIDE} outputs");
    assert!(g.reach <= phases.len() && w.len() >= g.offsets.len() && out.len() >= oh * ow);
    // SAFETY: the CPU has AVX-512F (this function's feature); the lengths
    // were checked just above.
    unsafe {
        if dense_3x3(g) {
            return match (ow, oh) {
                (32.., 6..) => wide_3x3::<2, 6>(g, out, init, w, phases, relu),
                (32.., 3..) => wide_3x3::<2, 3>(g, out, init, w, phases, relu),
                (32.., _) => wide_3x3::<2, 1>(g, out, init, w, phases, relu),
                (_, 6..) => wide_3x3::<1, 6>(g, out, init, w, phases, relu),
                (_, 3..) => wide_3x3::<1, 3>(g, out, init, w, phases, relu),
                _ => wide_3x3::<1, 1>(g, out, init, w, phases, relu),
            };
        }
        match (ow, oh) {
            (32.., 4..) => wide_chunks::<2, 4>(g, out, init, w, phases, relu),
            (32.., 2..) => wide_chunks::<2, 2>(g, out, init, w, phases, relu),
            (32.., _) => wide_chunks::<2, 1>(g, out, init, w, phases, relu),
            (_, 8..) => wide_chunks::<1, 8>(g, out, init, w, phases, relu),
            (_, 4..) => wide_chunks::<1, 4>(g, out, init, w, phases, relu),
            _ => wide_chunks::<1, 1>(g, out, init, w, phases, relu),
        }
    }
}

/// [`chunks`] on 16-lane vectors: chunks of V vectors × R rows, the last
/// of a row or of the plane pulled back to end at its edge.
///
/// # Safety
/// The CPU must support AVX-512F, the rows hold at least V·16 outputs and
/// the plane at least R rows, and `phases`, `w` and `out` must be as long
/// as [`sum_plane_512`]'s assert requires.
#[inline(always)]
unsafe fn wide_chunks<const V: usize, const R: usize>(
    g: &Plane,
    out: &mut [f32],
    init: f32,
    w: &[f32],
    phases: &[f32],
    relu: bool,
) {
    let (oh, ow, cols) = (g.oh, g.ow, g.cols);
    let span = V * WIDE;
    let mut at = [0usize; CHAINS];
    for (j, a) in at.iter_mut().enumerate().take(V * R) {
        *a = (j / V) * cols + (j % V) * WIDE;
    }
    // SAFETY: every chunk lies inside the plane (pulled back to its last
    // rows and columns), so its reads stay within `reach` and its stores
    // within `out` (the caller's contract).
    unsafe {
        let zero = _mm512_setzero_ps();
        let mut next_y = 0;
        while next_y < oh {
            let y0 = next_y.min(oh - R);
            let mut next_x = 0;
            while next_x < ow {
                let x0 = next_x.min(ow - span);
                let src = phases.as_ptr().add(y0 * cols + x0);
                let mut acc = [_mm512_set1_ps(init); CHAINS];
                for (&off, &wt) in g.offsets.iter().zip(w) {
                    let p = src.add(off);
                    let wv = _mm512_set1_ps(wt);
                    for j in 0..V * R {
                        acc[j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(p.add(at[j])), acc[j]);
                    }
                }
                for (j, &a) in acc.iter().enumerate().take(V * R) {
                    let v = if relu { _mm512_max_ps(zero, a) } else { a };
                    let dst = out
                        .as_mut_ptr()
                        .add((y0 + j / V) * ow + x0 + (j % V) * WIDE);
                    _mm512_storeu_ps(dst, v);
                }
                next_x += span;
            }
            next_y += R;
        }
    }
}

/// Whether the taps are a dense 3×3 window on rows `cols` apart (stride 1,
/// no dilation): tap `t` at `(t / 3)·cols + t % 3`.
fn dense_3x3(g: &Plane) -> bool {
    g.offsets.len() == 9
        && g.offsets
            .iter()
            .enumerate()
            .all(|(t, &o)| o == (t / 3) * g.cols + t % 3)
}

/// [`wide_chunks`] for a [dense 3×3](dense_3x3) window: each of the R + 2
/// input rows a chunk reaches is loaded once per column shift and added
/// into every output row it reaches (3·(R + 2) loads per vector column
/// for 9·R multiply-adds, where one load per tap and row took 9·R). Each
/// output still adds its taps in kernel row-major order: input rows in
/// order are kernel rows in order, and within a row the three shifts in
/// order. Inside MobileNet v3 (one thread, AMD EPYC, per-node trace,
/// paired rounds) features.1's 3×3 on 112² went from 81 to 64 µs and
/// features.3's on 56² from 88 to 63 against the 8-lane sums.
///
/// # Safety
/// As for [`wide_chunks`], with the taps of [`dense_3x3`].
#[inline(always)]
unsafe fn wide_3x3<const V: usize, const R: usize>(
    g: &Plane,
    out: &mut [f32],
    init: f32,
    w: &[f32],
    phases: &[f32],
    relu: bool,
) {
    let (oh, ow, cols) = (g.oh, g.ow, g.cols);
    let span = V * WIDE;
    // SAFETY: as in `wide_chunks`: every chunk lies inside the plane, and
    // input row y0 + r (r < R + 2) at shift kx < 3 is the tap (r - j, kx)
    // of output row y0 + j, which the reach covers.
    unsafe {
        let zero = _mm512_setzero_ps();
        let wv: [__m512; 9] = std::array::from_fn(|t| _mm512_set1_ps(w[t]));
        let mut next_y = 0;
        while next_y < oh {
            let y0 = next_y.min(oh - R);
            let mut next_x = 0;
            while next_x < ow {
                let x0 = next_x.min(ow - span);
                let src = phases.as_ptr().add(y0 * cols + x0);
                let mut acc = [[_mm512_set1_ps(init); V]; R];
                for r in 0..R + 2 {
                    for kx in 0..3 {
                        for v in 0..V {
                            let x = _mm512_loadu_ps(src.add(r * cols + kx + v * WIDE));
                            for (j, a) in acc.iter_mut().enumerate() {
                                if r >= j && r - j < 3 {
                                    let t = (r - j) * 3 + kx;
                                    a[v] = _mm512_fmadd_ps(wv[t], x, a[v]);
                                }
                            }
                        }
                    }
                }
                for (j, a) in acc.iter().enumerate() {
                    for (v, &s) in a.iter().enumerate() {
                        let s = if relu { _mm512_max_ps(zero, s) } else { s };
                        let dst = out.as_mut_ptr().add((y0 + j) * ow + x0 + v * WIDE);
                        _mm512_storeu_ps(dst, s);
                    }
                }
                next_x += span;
            }
            next_y += R;
        }
    }
}
