//! 3×3 stride-1 convolutions by Winograd F(m×m, 3×3), m = 4 or 2: each
//! (m+2)×(m+2) input tile and each kernel go to a transform domain of
//! (m+2)² positions where the convolution becomes that many independent
//! GEMMs (output channels × input channels × tiles) with fewer
//! multiplications per output than the direct product (4 times fewer for
//! m = 4, 2.25 for m = 2), and each product tile comes back as an m×m
//! output tile. Tiles are processed a band of tile rows at a time, so the
//! transformed input and products stay within the cache; the band height,
//! like every other split, depends on the sizes alone, so results do not
//! depend on the thread count.

use super::conv_op::{ConvArgs, ConvPlan};
use super::finish_row;
use super::panels;
use crate::ops::gemm::engine::{Batched, GemmFloat, Mat};
use crate::ops::gemm::fused::Activation;
use crate::ops::parallel::par_for;
use crate::ops::parallel::SendPtr;
use crate::ops::util::as_f32;
use num_traits::Float;
use std::any::Any;
use std::sync::OnceLock;

mod f2;
mod f4;
mod input512;
mod output512;
pub(crate) mod transform;

pub(crate) use f2::F2;
pub(crate) use f4::F4;
use transform::{InputBlock, OutRows, Variant, LANES};

/// Fewest channels per group, on each side, for which the transforms pay.
const MIN_CHANNELS: usize = 8;
/// Fewest 4×4 tiles per image for F(4×4, 3×3): at 16 (13×13 and 14×14
/// planes) its 36 GEMMs were too thin to beat im2col.
const MIN_TILES_F4: usize = 25;
/// Fewest 2×2 tiles per image for F(2×2, 3×3), which takes the planes too
/// small for F(4×4, 3×3) (at 7×7, 16 tiles, im2col wins).
const MIN_TILES_F2: usize = 36;
/// Fewest channels per group, on each side, for F(2×2, 3×3): its 16 GEMMs
/// are thin. With the 512-bit panel block and the half-lane transforms it
/// beats implicit GEMM from 64 channels (Zen 4, single conv + Relu on
/// 12×12, 7 alternated rounds, 1 / 2 threads: 128→128 396 → 312 /
/// 249 → 198 µs, 96→128 305 → 245 / 201 → 179, 64→128 211 → 177 /
/// 152 → 143). At 256 it was chosen while the transforms were slower.
const MIN_CHANNELS_F2: usize = 64;
/// Elements of transformed input and products held per band (1 MiB of
/// f32). At 8 MiB, SqueezeNet's 16→64 layers on 55×55 took one band whose
/// 1.8 MB of products left L2 before the output transform read them back;
/// at 1 MiB (three bands) they ran 11 % faster (p25 of 30 alternated
/// processes), and whole runs 3 % faster at p25 on SqueezeNet, 9 % on
/// Inception v1 and 8 % on VGG-19, ResNet-50 even.
const BAND_ELEMS: usize = 1 << 18;
/// Fewest tiles per band, whatever the budget: a band of one tile row
/// (7 tiles on 28×28) is narrower than a strip of the panel GEMM, which
/// then computes more than twice the columns it keeps.
const MIN_BAND_TILES: usize = 64;
/// Smallest amount of transform work (elements written) per parallel task.
const TASK_ELEMS: usize = 1 << 14;

/// A Winograd algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Algo {
    /// F(4×4, 3×3).
    F4x4,
    /// F(2×2, 3×3).
    F2x2,
}

/// The algorithm for `p`, if this module computes it: 2-D, 3×3, stride 1,
/// no dilation, enough channels per group and enough tiles.
pub(super) fn choose(p: &ConvPlan) -> Option<Algo> {
    let w = &p.win;
    let fits = w.rank() == 2
        && w.kernel == [3, 3]
        && w.strides == [1, 1]
        && w.dilations == [1, 1]
        && p.cg() >= MIN_CHANNELS
        && p.mg() >= MIN_CHANNELS;
    let tiles = |side: usize| w.output[0].div_ceil(side) * w.output[1].div_ceil(side);
    if !fits {
        None
    } else if tiles(F4::OUT) >= MIN_TILES_F4 {
        Some(Algo::F4x4)
    } else if tiles(F2::OUT) >= MIN_TILES_F2
        && p.cg() >= MIN_CHANNELS_F2
        && p.mg() >= MIN_CHANNELS_F2
    {
        Some(Algo::F2x2)
    } else {
        None
    }
}

/// Transformed weights, computed once per constant weight tensor and
/// algorithm.
#[derive(Debug, Default)]
pub(super) struct WeightCache {
    f4: OnceLock<Box<dyn Any + Send + Sync>>,
    f2: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl WeightCache {
    /// The weights of `w` transformed for `algo`, from the cache when it
    /// holds them for this element type (`w` must then be the tensor it was
    /// filled from), else computed into `fresh`.
    pub(super) fn get<'a, T: GemmFloat>(
        &'a self,
        algo: Algo,
        cacheable: bool,
        p: &ConvPlan,
        w: &[T],
        fresh: &'a mut Option<Vec<T>>,
    ) -> &'a [T] {
        let (cell, make): (_, Transform<T>) = match algo {
            Algo::F4x4 => (&self.f4, transform_weights::<F4, T>),
            Algo::F2x2 => (&self.f2, transform_weights::<F2, T>),
        };
        if cacheable {
            let any = cell.get_or_init(|| Box::new(make(p, w)));
            if let Some(u) = any.downcast_ref::<Vec<T>>() {
                return u;
            }
        }
        fresh.insert(make(p, w))
    }
}

/// Computes the transformed weights of W for a plan.
type Transform<T> = fn(&ConvPlan, &[T]) -> Vec<T>;

/// `U[p][m][cg]`: position `p` of every kernel, one m×cg matrix per
/// position; where the products run on the panel GEMM, its matrices (one
/// per position and group) packed for it.
fn transform_weights<V: Variant, T: GemmFloat>(p: &ConvPlan, w: &[T]) -> Vec<T> {
    transform_into::<V, T>(p, w, panels::takes::<T>())
}

/// [`transform_weights`], written straight into the panel layout when
/// `packed` ([`panels::pack`] of the plain `U` by position and group: the
/// same values in the same places, without the plain `U` first), else
/// into the plain `U[p][m][cg]`. Either way one kernel's positions lie a
/// fixed distance apart, which is all [`Variant::weight`] needs.
pub(super) fn transform_into<V: Variant, T: GemmFloat>(
    p: &ConvPlan,
    w: &[T],
    packed: bool,
) -> Vec<T> {
    let (m, mg, cg) = (p.m, p.mg(), p.cg());
    let kernels = m * cg;
    let (mr, panel_len) = (panels::MR, cg * panels::MR);
    let matrix_len = mg.div_ceil(mr) * panel_len;
    let stride = if packed {
        p.group * matrix_len
    } else {
        kernels
    };
    let mut u = vec![T::zero(); V::POSITIONS * stride];
    for (kc, g) in w.chunks_exact(9).take(kernels).enumerate() {
        let at = if packed {
            // Kernel kc = oc·cg + ic: output channel r of group gi goes to
            // panel r / 6, slot r % 6 of step ic.
            let (oc, ic) = (kc / cg, kc % cg);
            let (gi, r) = (oc / mg, oc % mg);
            gi * matrix_len + (r / mr) * panel_len + ic * mr + r % mr
        } else {
            kc
        };
        V::weight(g, &mut u[at..], stride);
    }
    u
}

/// The tile grid of one image and its bands.
struct Grid {
    /// Tiles per tile row.
    across: usize,
    /// Tile rows.
    down: usize,
    /// Tile rows per band.
    band: usize,
}

impl Grid {
    fn new<V: Variant>(p: &ConvPlan, band_elems: usize) -> Grid {
        let (across, down) = (
            p.win.output[1].div_ceil(V::OUT),
            p.win.output[0].div_ceil(V::OUT),
        );
        let per_row = Self::per_row::<V>(p);
        let band = (band_elems / per_row).clamp(1, down);
        Grid { across, down, band }
    }

    /// Scratch elements (transformed input and products) per tile row.
    fn per_row<V: Variant>(p: &ConvPlan) -> usize {
        V::POSITIONS * (p.c + p.m) * p.win.output[1].div_ceil(V::OUT)
    }

    /// The scratch budget of a band for `p`: [`BAND_ELEMS`], or more where
    /// that would hold fewer than [`MIN_BAND_TILES`] tiles.
    fn budget<V: Variant>(p: &ConvPlan) -> usize {
        let across = p.win.output[1].div_ceil(V::OUT).max(1);
        BAND_ELEMS.max(Self::per_row::<V>(p) * MIN_BAND_TILES.div_ceil(across))
    }
}

/// Winograd convolution of every image by `algo`: Y = conv(X, W) + bias,
/// plus the residual, activated, with W's transform for `algo` from the
/// node's cache (see [`WeightCache::get`]).
pub(super) fn winograd<T: GemmFloat>(algo: Algo, a: &ConvArgs<T>, y: &mut [T]) {
    let p = a.p;
    let mut fresh = None;
    let u = a
        .weights
        .winograd
        .get(algo, a.weights.constant, p, a.w, &mut fresh);
    let (x, b, z, act) = (a.x, a.b, a.z, a.act);
    match algo {
        Algo::F4x4 => banded::<F4, T>(p, u, x, b, z, act, y, Grid::budget::<F4>(p)),
        Algo::F2x2 => banded::<F2, T>(p, u, x, b, z, act, y, Grid::budget::<F2>(p)),
    }
}

/// [`winograd`] with bands of at most `band_elems` scratch elements (at
/// least one tile row).
#[allow(clippy::too_many_arguments)]
pub(super) fn banded<V: Variant, T: GemmFloat>(
    p: &ConvPlan,
    u: &[T],
    x: &[T],
    b: Option<&[T]>,
    z: Option<&[T]>,
    act: Option<Activation>,
    y: &mut [T],
    band_elems: usize,
) {
    let grid = Grid::new::<V>(p, band_elems);
    let width = grid.band * grid.across;
    // The transforms read and write whole blocks of LANES tiles, up to
    // LANES − 1 elements past a band's last tile: V's rows have that much
    // room at their end, and the products that much after the last row.
    let pitch = width + LANES;
    let positions = V::POSITIONS;
    // The panel GEMM takes at least a strip of columns: a narrower band's
    // products are computed that wide (V's rows have the room).
    let min_cols = if panels::takes::<T>() { panels::NR } else { 1 };
    let cols = |tiles: usize| tiles.max(min_cols);
    let (vlen, mlen) = (
        p.c * positions * pitch,
        p.m * positions * cols(width) + LANES,
    );
    T::with_scratch(vlen + mlen, |scratch| {
        let (v, prod) = scratch.split_at_mut(vlen);
        let (in_plane, out_plane) = (p.win.in_len(), p.win.out_len());
        for ni in 0..p.n {
            let xi = &x[ni * p.c * in_plane..(ni + 1) * p.c * in_plane];
            let image = ni * p.m * out_plane..(ni + 1) * p.m * out_plane;
            let zi = z.map(|z| &z[image.clone()]);
            let yi = &mut y[image];
            for ty0 in (0..grid.down).step_by(grid.band) {
                let rows = grid.band.min(grid.down - ty0);
                let band = Band {
                    p,
                    grid: &grid,
                    ty0,
                    rows,
                    pitch,
                    cols: cols(rows * grid.across),
                    layout: ProductLayout::new::<V, T>(p.m, cols(rows * grid.across)),
                };
                band.inputs::<V, T>(xi, v);
                band.products::<V, T>(u, v, prod);
                band.outputs::<V, T>(prod, b, zi, act, yi);
            }
        }
    });
}

/// One band of tile rows of one image. Tile `t` of the band (row-major over
/// its tile rows) is column `t` of every transformed matrix.
struct Band<'a> {
    p: &'a ConvPlan,
    grid: &'a Grid,
    /// First tile row.
    ty0: usize,
    /// Tile rows.
    rows: usize,
    /// Row pitch of the transformed input.
    pitch: usize,
    /// Columns of the products: the band's tiles, or more (see `banded`).
    cols: usize,
    /// Where the products lie.
    layout: ProductLayout,
}

/// Where row `k` (output channel) of position `pos`'s product lies in the
/// products buffer: at `pos · pos + k · chan`, `cols` wide.
#[derive(Debug, Clone, Copy)]
struct ProductLayout {
    /// Distance between positions.
    pos: usize,
    /// Distance between output channels.
    chan: usize,
}

impl ProductLayout {
    /// Channel-major (each channel's positions side by side, so the output
    /// transform of a channel reads one contiguous block) where the panel
    /// GEMM computes the products, as it takes any row pitch; else
    /// position-major, one `m × cols` matrix per position.
    fn new<V: Variant, T: 'static>(m: usize, cols: usize) -> ProductLayout {
        if panels::takes::<T>() {
            ProductLayout {
                pos: cols,
                chan: V::POSITIONS * cols,
            }
        } else {
            ProductLayout {
                pos: m * cols,
                chan: cols,
            }
        }
    }
}

impl Band<'_> {
    /// Splits `n` items into parallel tasks of at least `TASK_ELEMS` written
    /// elements (`per_item` each) and runs `f` on each range.
    ///
    /// Where that makes several tasks, their count is rounded up to a
    /// multiple of the pool's threads and the items spread evenly: 48
    /// channels made tasks of 11, 11, 11, 11 and 4, so on two threads one
    /// ran three of them while the other waited.
    fn par_items(n: usize, per_item: usize, f: impl Fn(std::ops::Range<usize>) + Sync + Send) {
        let per_task = TASK_ELEMS.div_ceil(per_item.max(1)).max(1);
        let mut tasks = n.div_ceil(per_task);
        if tasks > 1 {
            tasks = tasks
                .next_multiple_of(crate::ops::util::op_threads().max(1))
                .min(n);
        }
        let per_task = n.div_ceil(tasks.max(1)).max(1);
        par_for(n.div_ceil(per_task), |t| {
            f(t * per_task..((t + 1) * per_task).min(n))
        });
    }

    /// `V[c][p][t]`: the transformed input tiles of every channel.
    fn inputs<V: Variant, T: GemmFloat>(&self, x: &[T], v: &mut [T]) {
        if let (Some(x), Some(v)) = (as_f32(x), crate::ops::util::as_f32_mut(v)) {
            return self.inputs_by::<V, f32>(x, v, V::input_f32);
        }
        self.inputs_by::<V, T>(x, v, V::input::<T>)
    }

    /// [`Band::inputs`] with `input` transforming each block of tiles.
    fn inputs_by<V: Variant, E: Float + Send + Sync>(
        &self,
        x: &[E],
        v: &mut [E],
        input: fn(&InputBlock<E>, &mut [E], usize),
    ) {
        let win = &self.p.win;
        let (h, wd) = (win.input[0], win.input[1]);
        let (pt, pl) = (win.pad_begin[0] as isize, win.pad_begin[1] as isize);
        let chan = V::POSITIONS * self.pitch;
        let vp = SendPtr(v.as_mut_ptr());
        let across = self.grid.across;
        Self::par_items(self.p.c, chan, |range| {
            for ch in range {
                let plane = &x[ch * h * wd..(ch + 1) * h * wd];
                // SAFETY: channel `ch` owns V[ch], which lies inside `v`.
                let vc = unsafe { vp.slice(ch * chan, chan) };
                for r in 0..self.rows {
                    let ty = self.ty0 + r;
                    for tx in (0..across).step_by(LANES) {
                        let blk = InputBlock {
                            plane,
                            width: wd,
                            height: h,
                            y0: (ty * V::OUT) as isize - pt,
                            x0: (tx * V::OUT) as isize - pl,
                            tiles: LANES.min(across - tx),
                        };
                        // A block past the row's end spills into the next
                        // tile row (written after it) or the row's room.
                        let t = r * across + tx;
                        input(&blk, &mut vc[t..], self.pitch);
                    }
                }
            }
        });
    }

    /// `M[p][m][t] = U[p][m][·] · V[·][p][t]`, group by group, packed
    /// `cols` wide.
    fn products<V: Variant, T: GemmFloat>(&self, u: &[T], v: &[T], prod: &mut [T]) {
        let p = self.p;
        let (m, cg, mg, group) = (p.m, p.cg(), p.mg(), p.group);
        let (pitch, cols) = (self.pitch, self.cols);
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        if panels::takes::<T>() {
            if let (Some(u), Some(v), Some(prod)) =
                (as_f32(u), as_f32(v), crate::ops::util::as_f32_mut(prod))
            {
                let at = |i: usize| {
                    let (pos, g) = (i / group, i % group);
                    panels::At {
                        x: g * cg * V::POSITIONS * pitch + pos * pitch,
                        w: i,
                        y: pos * self.layout.pos + g * mg * self.layout.chan,
                        bias: 0,
                    }
                };
                let job = panels::Products {
                    count: V::POSITIONS * group,
                    rows: mg,
                    k: cg,
                    n: cols,
                    x_pitch: V::POSITIONS * pitch,
                    y_pitch: self.layout.chan,
                    at: &at,
                    x: v,
                    packed: u,
                    bias: None,
                    z: None,
                    act: None,
                };
                // SAFETY: the CPU has the kernel (`panels::takes`); each
                // (position, group) writes its own rows of M.
                unsafe { job.run(prod) };
                return;
            }
        }
        let pp = SendPtr(prod.as_mut_ptr());
        let a = |bi: usize| {
            let (pos, g) = (bi / group, bi % group);
            Mat::row_major(u.as_ptr(), cg).offset(pos * m * cg + g * mg * cg)
        };
        let bm = |bi: usize| {
            let (pos, g) = (bi / group, bi % group);
            Mat {
                ptr: v.as_ptr(),
                rs: (V::POSITIONS * pitch) as isize,
                cs: 1,
            }
            .offset(g * cg * V::POSITIONS * pitch + pos * pitch)
        };
        let cm = |bi: usize| {
            let (pos, g) = (bi / group, bi % group);
            pp.offset(pos * self.layout.pos + g * mg * self.layout.chan)
        };
        let job = Batched {
            batches: V::POSITIONS * group,
            m: mg,
            n: self.rows * self.grid.across,
            k: cg,
            alpha: T::one(),
            a: &a,
            b: &bm,
            c: &cm,
            epilogue: None,
        };
        // SAFETY: U is positions×m×cg, V is c×positions×pitch and M (packed
        // positions×m×cols) fits its buffer; each (position, group)
        // product lies inside them and distinct products' C are disjoint.
        unsafe { job.run() };
    }

    /// Y from the products: the inverse transform of every output channel's
    /// tiles, then bias, residual and activation on the band's output rows.
    fn outputs<V: Variant, T: GemmFloat>(
        &self,
        prod: &[T],
        b: Option<&[T]>,
        z: Option<&[T]>,
        act: Option<Activation>,
        y: &mut [T],
    ) {
        if let (Some(prod), Some(y)) = (as_f32(prod), crate::ops::util::as_f32_mut(y)) {
            // T is f32: so are the bias and the residual.
            let (b, z) = (b.and_then(as_f32), z.and_then(as_f32));
            return self.outputs_by::<V, f32>(prod, b, z, act, y, V::output_into_f32);
        }
        self.outputs_by::<V, T>(prod, b, z, act, y, V::output_into::<T>)
    }

    /// [`Band::outputs`] with `output` transforming each block of tiles.
    fn outputs_by<V: Variant, E: GemmFloat>(
        &self,
        prod: &[E],
        b: Option<&[E]>,
        z: Option<&[E]>,
        act: Option<Activation>,
        y: &mut [E],
        output: fn(&[E], usize, usize, &mut OutRows<E>),
    ) {
        let p = self.p;
        let (oh, ow) = (p.win.output[0], p.win.output[1]);
        let layout = self.layout;
        let plane = oh * ow;
        let (row0, row1) = (self.ty0 * V::OUT, ((self.ty0 + self.rows) * V::OUT).min(oh));
        let yp = SendPtr(y.as_mut_ptr());
        let across = self.grid.across;
        let m = p.m;
        Self::par_items(m, (row1 - row0) * ow, |range| {
            for k in range {
                // SAFETY: channel `k` owns rows row0..row1 of its output
                // plane, inside `y`.
                let rows = unsafe { yp.slice(k * plane + row0 * ow, (row1 - row0) * ow) };
                for r in 0..self.rows {
                    let oy = (self.ty0 + r) * V::OUT;
                    for tx in (0..across).step_by(LANES) {
                        // Lanes past the row's last tile are not written out.
                        let t = r * across + tx;
                        let tiles = LANES.min(across - tx);
                        let x0 = tx * V::OUT;
                        let mut dst = OutRows {
                            y: &mut *rows,
                            at: (oy - row0) * ow + x0,
                            pitch: ow,
                            rows: V::OUT.min(oh - oy),
                            cols: (V::OUT * LANES).min(ow - x0),
                        };
                        output(&prod[k * layout.chan + t..], layout.pos, tiles, &mut dst);
                    }
                }
                let span = k * plane + row0 * ow..k * plane + row1 * ow;
                finish_row(rows, b.map(|b| b[k]), z.map(|z| &z[span]), act);
            }
        });
    }
}
