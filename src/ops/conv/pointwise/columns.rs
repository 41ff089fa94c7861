//! 1×1 convolutions on small planes (f32, AVX-512): Y computed as Yᵀ
//! tiles, a vector over 16 or 32 output channels per position, up to 8
//! positions a tile, each tile transposed in registers into Y's rows.
//!
//! The panel GEMM's blocks run 16 positions wide, so a 7×7 plane (49
//! positions) took four blocks, 64 columns' worth of products for 49, and a
//! 14×14 one thirteen for 12.25. Here the positions are broadcasts and the
//! tiles split the plane into near-equal runs of at most 8, so no product
//! is wasted; W is packed a panel of 32 output channels per step of k (16
//! for a last panel of 16 or fewer rows, zero past the last row).
//!
//! A layer of many input channels sums k in passes (`K_PASS` steps at
//! most), each over all of a task's tiles while the panel's slice of W
//! stays in L1; the tiles carry their sums from pass to pass as stored f32.
//! Meanwhile each tile asks L2 for its share of the slice the next pass
//! reads: inside a model W comes from memory, and the first tile of a pass
//! waited on every line (SqueezeNet 0.95×, MobileNet v3 0.93× with it).
//!
//! Each output is the in-order chain of fused multiply-adds from zero that
//! the panel GEMM computes, plus the bias, plus the residual, then Relu,
//! Clip or hard-swish in registers (other activations run over each task's
//! rows after its tiles), so the two paths give the same bits.

use super::super::conv_op::{ConvArgs, ConvPlan};
#[cfg(target_arch = "x86_64")]
use super::clamp::Clamp;
#[cfg(target_arch = "x86_64")]
use crate::ops::gemm::fused::Activation;

#[cfg(target_arch = "x86_64")]
mod x86;

/// Output channels per panel: two vectors of 16.
const CW: usize = 32;
/// Positions per tile at most (one transposed row of 8 per channel).
#[cfg(target_arch = "x86_64")]
const PX: usize = 8;
/// Most positions of a plane this kernel takes, whatever its channels: a
/// 16×16 plane (the panel GEMM's blocks of 16 left 49 positions a quarter of their
/// products to waste, 196 a sixteenth). Larger planes, where X has at
/// most 256 channels, take the rows kernel (positions in the vectors, no
/// transpose): it once took 28×28 planes where X held at most 128 Ki
/// floats, but inside MobileNet v3 (per-node trace, median of 8 runs, one
/// thread, AMD EPYC) the rows kernel ran its 28×28 layers 8 to 25 % faster
/// (72→40 70 → 53 µs, 40→120 122 → 100, 120→40 109 → 81, 40→240 with
/// hard-swish 223 → 205).
const MAX_POSITIONS: usize = 256;

/// Whether `p` (a pointwise layer) runs here: f32 on an AVX-512 CPU, a
/// plane of at most [`MAX_POSITIONS`] positions, at least 16 output
/// channels per group.
pub(in crate::ops::conv) fn suits(p: &ConvPlan) -> bool {
    let (n, k) = (p.win.out_len(), p.cg());
    (1..=MAX_POSITIONS).contains(&n) && p.mg() >= 16 && k >= 1 && cpu_has_kernel()
}

/// Whether this CPU has the kernel (AVX-512F).
fn cpu_has_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::ops::gemm::simd::has_avx512()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Width of panel `q` of a matrix of `rows` rows: 32, or 16 for a last
/// panel of 16 rows or fewer.
fn width(q: usize, rows: usize) -> usize {
    if rows - q * CW > CW / 2 {
        CW
    } else {
        CW / 2
    }
}

/// Floats of one packed `rows × k` matrix.
fn matrix_len(rows: usize, k: usize) -> usize {
    let panels = rows.div_ceil(CW);
    if panels == 0 {
        return 0;
    }
    ((panels - 1) * CW + width(panels - 1, rows)) * k
}

/// Packs `matrices` row-major `rows × k` matrices (one after another in
/// `w`) into panels: per matrix, per panel of 32 rows (16 for a short last
/// one), per step of k, the panel's weights of that column, zero past the
/// last row. Matrix `g` starts at `g · matrix_len(rows, k)`.
pub(in crate::ops::conv) fn pack(matrices: usize, rows: usize, k: usize, w: &[f32]) -> Vec<f32> {
    let len = matrix_len(rows, k);
    let mut data = vec![0.0; matrices * len];
    if len == 0 {
        return data;
    }
    for (g, matrix) in data.chunks_exact_mut(len).enumerate() {
        for q in 0..rows.div_ceil(CW) {
            let wide = width(q, rows);
            let panel = &mut matrix[q * CW * k..][..wide * k];
            for r in 0..(rows - q * CW).min(CW) {
                let row = &w[(g * rows + q * CW + r) * k..][..k];
                for (slot, &v) in panel[r..].iter_mut().step_by(wide).zip(row) {
                    *slot = v;
                }
            }
        }
    }
    data
}

/// The row-major weights that [`pack`] packed: its exact inverse, for a
/// layer whose original W was let go.
pub(in crate::ops::conv) fn unpack(
    matrices: usize,
    rows: usize,
    k: usize,
    packed: &[f32],
) -> Vec<f32> {
    let len = matrix_len(rows, k);
    let mut w = vec![0.0; matrices * rows * k];
    if len == 0 {
        return w;
    }
    for (g, matrix) in packed.chunks_exact(len).take(matrices).enumerate() {
        for q in 0..rows.div_ceil(CW) {
            let wide = width(q, rows);
            let panel = &matrix[q * CW * k..][..wide * k];
            for r in 0..(rows - q * CW).min(CW) {
                let row = &mut w[(g * rows + q * CW + r) * k..][..k];
                for (v, &slot) in row.iter_mut().zip(panel[r..].iter().step_by(wide)) {
                    *v = slot;
                }
            }
        }
    }
    w
}

/// Runs a layer that [`suits`] this kernel, with W packed once into the
/// node's cache for this form when W is constant.
pub(in crate::ops::conv) fn run(a: &ConvArgs<f32>, y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = a.p;
        a.weights.columns.with(
            a.weights.constant,
            || pack(p.group, p.mg(), p.cg(), a.w),
            |packed| product(Layer::of(p), a.x, packed, a.b, a.z, a.act, y),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, y);
        unreachable!("the columns kernel is chosen on x86-64 only");
    }
}

/// Most steps of k in one pass over a panel's tiles: the panel's slice of
/// W (32 channels × 512 steps, 64 KiB) stays near while the tiles run
/// over it; whole, a 1024-channel layer's panel (128 KiB) was read from L2
/// by every tile. On a Sapphire Rapids-class Xeon, one thread, medians of
/// 10 alternating rounds: 1024→1024 on 14×14 3.30 → 2.78 ms, 2048→1024 on
/// 7×7 1.85 → 1.61, 512→2048 on 7×7 0.90 → 0.80, 256→1024 on 14×14 0.78 →
/// 0.71 (passes of 96 to 256 steps all gained, within noise of each other).
/// On AMD EPYC (Zen 4, 32 KiB L1), where W's slices come from L2 fast
/// enough, shorter passes cost more than they saved: against passes of
/// 192 steps, 96 took 1.04–1.08× as long and 512 0.95–0.96×, while 1024
/// and whole layers ran as 512 did (one thread, 7 alternating rounds:
/// 2048→1024 and 1024→2048 on 7×7, 1024→512 on 14×14). 512 keeps passes
/// for the largest layers.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const K_PASS: usize = 512;

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each thread's tile sums between passes.
    static CARRY: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Start of tile `t` of `tiles` near-equal tiles of `n` positions.
#[cfg(target_arch = "x86_64")]
fn tile_start(t: usize, tiles: usize, n: usize) -> usize {
    t * n / tiles.max(1)
}

/// Range `t` of `tasks` near-equal ranges of `total` items.
#[cfg(target_arch = "x86_64")]
pub(super) fn share(t: usize, tasks: usize, total: usize) -> std::ops::Range<usize> {
    let tasks = tasks.max(1);
    t * total / tasks..(t + 1) * total / tasks
}

/// The sizes of a product the kernel runs as a pointwise layer: per image
/// and group, `Y (m/group × positions) = W · X (c/group × positions)`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(in crate::ops::conv) struct Layer {
    pub images: usize,
    pub group: usize,
    /// Rows of X, all groups (input channels, or im2col's rows).
    pub c: usize,
    /// Rows of Y, all groups (output channels).
    pub m: usize,
    pub positions: usize,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl Layer {
    /// A pointwise layer's sizes.
    fn of(p: &ConvPlan) -> Layer {
        Layer {
            images: p.n,
            group: p.group,
            c: p.c,
            m: p.m,
            positions: p.win.out_len(),
        }
    }

    fn mg(&self) -> usize {
        self.m / self.group.max(1)
    }

    fn cg(&self) -> usize {
        self.c / self.group.max(1)
    }
}

/// The whole product: per image and group, tasks over ranges of panels and
/// of tiles, each writing its own outputs. `packed` is W as [`pack`] lays
/// it out for `l`'s groups, rows and k.
#[cfg(target_arch = "x86_64")]
pub(in crate::ops::conv) fn product(
    p: Layer,
    x: &[f32],
    packed: &[f32],
    b: Option<&[f32]>,
    z: Option<&[f32]>,
    act: Option<Activation>,
    y: &mut [f32],
) {
    use crate::ops::gemm::engine::scratch;
    use crate::ops::parallel::{op_threads, par_for, SendPtr, TASKS_PER_THREAD};
    let (mg, cg, n) = (p.mg(), p.cg(), p.positions);
    let count = p.images * p.group;
    let (panels, tiles) = (mg.div_ceil(CW), n.div_ceil(PX));
    let len = matrix_len(mg, cg);
    // Every operand's extent, once: the tiles then read within these.
    assert!(x.len() >= p.images * p.c * n && y.len() >= p.images * p.m * n);
    assert!(packed.len() >= p.group * len);
    assert!(b.is_none_or(|b| b.len() >= p.m) && z.is_none_or(|z| z.len() >= y.len()));
    let per = (TASKS_PER_THREAD * op_threads()).div_ceil(count).max(1);
    let panel_tasks = per.min(panels);
    let tile_tasks = per.div_ceil(panel_tasks).min(tiles);
    let (clamp, after) = Clamp::of(act);
    let passes = cg.div_ceil(K_PASS);
    let yp = SendPtr(y.as_mut_ptr());
    par_for(count * panel_tasks * tile_tasks, |t| {
        let (i, rest) = (
            t / (panel_tasks * tile_tasks),
            t % (panel_tasks * tile_tasks),
        );
        let (ni, g) = (i / p.group, i % p.group);
        let x_at = (ni * p.c + g * cg) * n;
        let y_at = (ni * p.m + g * mg) * n;
        let tile_range = share(rest % tile_tasks, tile_tasks, tiles);
        let (c0, c1) = (
            tile_start(tile_range.start, tiles, n),
            tile_start(tile_range.end, tiles, n),
        );
        let carry_len = if passes > 1 {
            tile_range.len() * PX * CW
        } else {
            0
        };
        scratch(&CARRY, carry_len, |carry| {
            let my_panels = share(rest / tile_tasks, panel_tasks, panels);
            for q in my_panels.clone() {
                let rows = (mg - q * CW).min(CW);
                let bias = b.map(|b| &b[g * mg + q * CW..][..rows]);
                for pass in 0..passes {
                    let slice = |q: usize, pass: usize| {
                        let (k0, k1) = (pass * cg / passes, (pass + 1) * cg / passes);
                        let wide = width(q, mg);
                        &packed[g * len + q * CW * cg + k0 * wide..][..wide * (k1 - k0)]
                    };
                    let (k0, k1) = (pass * cg / passes, (pass + 1) * cg / passes);
                    let w = slice(q, pass);
                    // The slice the tiles sum over next, asked of L2 a
                    // share per tile while this one is summed from L1.
                    let next = if pass + 1 < passes {
                        Some(slice(q, pass + 1))
                    } else if q + 1 < my_panels.end {
                        Some(slice(q + 1, 0))
                    } else {
                        None
                    };
                    for (i, tile) in tile_range.clone().enumerate() {
                        if let Some(next) = next {
                            let share = share(i, tile_range.len(), next.len());
                            x86::prefetch_l2(&next[share]);
                        }
                        let (j0, j1) = (tile_start(tile, tiles, n), tile_start(tile + 1, tiles, n));
                        let xt = &x[x_at + k0 * n + j0..x_at + (k1 - 1) * n + j1];
                        let out = y_at + q * CW * n + j0;
                        let zt = z.map(|z| z[out..].as_ptr());
                        let c = carry.get_mut(i * PX * CW..(i + 1) * PX * CW);
                        let c = c.map_or(std::ptr::null_mut(), |c| c.as_mut_ptr());
                        let args = x86::Tile {
                            x: xt.as_ptr(),
                            pitch: n,
                            k: k1 - k0,
                            rows,
                            w,
                            bias,
                            z: zt,
                            y: yp.offset(out).0,
                            clamp,
                            pass: x86::Pass::nth(pass, passes, c),
                        };
                        // SAFETY: the CPU has AVX-512F (`suits`); the tile's
                        // rows k0..k1 of X at pitch n (sliced above), its
                        // `rows` rows of Y and Z at pitch n from `out`
                        // (inside Y: the asserts above), no other task writes
                        // them (tasks split panels and tiles), and its carry
                        // is this task's (PX·CW floats per tile).
                        unsafe { x86::tile(j1 - j0, args) };
                    }
                }
                if let Some(a) = after {
                    for r in 0..rows {
                        // SAFETY: row r of this panel over this task's
                        // columns, which only this task writes.
                        let row = unsafe { yp.slice(y_at + (q * CW + r) * n + c0, c1 - c0) };
                        a.apply(row);
                    }
                }
            }
        });
    });
}

#[cfg(test)]
mod tests;
