//! 1×1 convolutions on large planes with few input channels (f32,
//! AVX-512): per image and group, tiles of up to 6 output channels × 64
//! positions, X read in place from its channel rows and W from the panel
//! GEMM's packed panels (the same cache, the same adopted form).
//!
//! Where the plane is larger than the panel GEMM reads in place, it packs
//! X into strips of 16 positions and runs blocks of 12 channels × 16
//! positions; with few input channels the packing and the epilogue of each
//! short block outweighed the products (MobileNet v3's 16→64 on 112², one
//! thread: 350 µs against onnxruntime's 121). Here a tile of K rows × 64
//! positions of X stays in L1 while every panel of W sweeps it, and each
//! step of k loads 4 vectors of X for 24 fused multiply-adds (one thread,
//! per-node trace on a loaded machine: 16→64 on 112² 221 against 446 µs,
//! 64→24 on 56² 66 against 118).
//!
//! Each output is the in-order chain of fused multiply-adds from zero that
//! the panel GEMM computes, plus the bias, plus the residual, then Relu,
//! Clip or hard-swish in registers (other activations run over each tile's
//! rows after it), so the two paths give the same bits.

use super::super::conv_op::ConvPlan;
use super::super::panels::MR;
use crate::ops::gemm::fused::Activation;

mod x86;

/// Fewest positions: larger planes than the panel GEMM reads in place
/// (and the columns kernel takes whatever its channels).
const MIN_POSITIONS: usize = 257;
/// Most input channels per group. On 56×56 and 28×28 planes (one
/// thread, 24 to 256 output channels) this kernel beat the panel GEMM at
/// every K measured, 48 to 384, by 15 to 40 % (per-node trace); past 256
/// a tile's rows of X outgrow L1, so the bound keeps a margin.
const MAX_K: usize = 256;
/// Tiles a task runs one panel at a time before the next panel: the
/// tiles' X stays in cache for all the panels, and each row of Y is
/// written 1024 positions at a stretch (tile by tile, every panel of each
/// tile in turn, MobileNet v3's 16→64 on 112² took half as long again).
/// Inside MobileNet v3 (per-node trace, median of 12 alternating runs, one
/// thread, AMD EPYC) 16 tiles ran its 112×112 and 56×56 layers 5 to 14 %
/// faster than 8 (16→64 on 112² 441 → 392 µs, 16→16 with the residual
/// 156 → 135, 24→72 on 56² 158 → 150 and 121 → 112); alone, and on
/// SqueezeNet's 55×55 layers, both ran alike; 4 ran 5 to 30 % slower.
const BLOCK_TILES: usize = 16;

/// Whether `p` (a pointwise layer that the panel GEMM takes) runs here:
/// an AVX-512 CPU, more than 256 positions, at most [`MAX_K`] input
/// channels per group.
pub(super) fn suits(p: &ConvPlan) -> bool {
    let (n, k) = (p.win.out_len(), p.cg());
    n >= MIN_POSITIONS && (1..=MAX_K).contains(&k) && p.mg() >= 1 && cpu_has_kernel()
}

/// Whether this CPU has the kernel (AVX-512F).
fn cpu_has_kernel() -> bool {
    crate::ops::gemm::simd::has_avx512()
}

/// The whole layer on W packed by `panels::pack`: per image and group,
/// tasks over ranges of tiles, each computing every output channel of its
/// positions, [`BLOCK_TILES`] tiles at a time.
///
/// # Panics
/// Where the CPU lacks AVX-512F (callers check [`suits`]) or an operand
/// is shorter than the plan says.
pub(super) fn rows(
    p: &ConvPlan,
    x: &[f32],
    packed: &[f32],
    b: Option<&[f32]>,
    z: Option<&[f32]>,
    act: Option<Activation>,
    y: &mut [f32],
) {
    use super::clamp::Clamp;
    use super::columns::share;
    use crate::ops::parallel::{op_threads, par_for, SendPtr, TASKS_PER_THREAD};
    assert!(cpu_has_kernel(), "the rows kernel needs AVX-512F");
    let (mg, cg, n) = (p.mg(), p.cg(), p.win.out_len());
    let count = p.n * p.group;
    let width = x86::VECS * 16;
    let tiles = n.div_ceil(width);
    let panels = mg.div_ceil(MR);
    let len = panels * cg * MR;
    // Every operand's extent, once: the tiles then read within these.
    assert!(x.len() >= p.n * p.c * n && y.len() >= p.n * p.m * n);
    assert!(packed.len() >= p.group * len);
    assert!(b.is_none_or(|b| b.len() >= p.m) && z.is_none_or(|z| z.len() >= y.len()));
    let per = (TASKS_PER_THREAD * op_threads())
        .div_ceil(count)
        .clamp(1, tiles.max(1));
    let (clamp, after) = Clamp::of(act);
    let yp = SendPtr(y.as_mut_ptr());
    par_for(count * per, |t| {
        let (i, part) = (t / per, t % per);
        let (ni, g) = (i / p.group, i % p.group);
        let x_at = (ni * p.c + g * cg) * n;
        let y_at = (ni * p.m + g * mg) * n;
        let range = share(part, per, tiles);
        let mut first = range.start;
        while first < range.end {
            let these = first..(first + BLOCK_TILES).min(range.end);
            first = these.end;
            for q in 0..panels {
                let rows = MR.min(mg - q * MR);
                for tile in these.clone() {
                    let j0 = tile * width;
                    let cols = width.min(n - j0);
                    let xt = &x[x_at + j0..x_at + (cg - 1) * n + j0 + cols];
                    let out = y_at + q * MR * n + j0;
                    let args = x86::Tile {
                        x: xt.as_ptr(),
                        pitch: n,
                        k: cg,
                        w: &packed[g * len + q * cg * MR..][..cg * MR],
                        bias: b.map(|b| &b[g * mg + q * MR..][..rows]),
                        z: z.map(|z| z[out..].as_ptr()),
                        y: yp.offset(out).0,
                        clamp,
                    };
                    // SAFETY: the CPU has AVX-512F (the assert above); the
                    // tile's k rows of X at pitch n (sliced above), its
                    // `rows` rows of Y and Z at pitch n from `out` (inside
                    // Y: the asserts above), and no other task writes them
                    // (tasks split the positions).
                    unsafe { x86::tile(rows, cols, args) };
                    if let Some(a) = after {
                        for r in 0..rows {
                            // SAFETY: row r of this tile, which only this
                            // task writes.
                            a.apply(unsafe { yp.slice(out + r * n, cols) });
                        }
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests;
