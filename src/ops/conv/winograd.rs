//! 3×3 stride-1 convolutions by Winograd F(4×4, 3×3): each 6×6 input tile
//! and each kernel go to a 36-position transform domain where the
//! convolution becomes 36 independent GEMMs (output channels × input
//! channels × tiles) with 4 times fewer multiplications per output than
//! the direct product, and each product tile comes back as a 4×4 output
//! tile. Tiles are processed a band of tile rows at a time, so the
//! transformed input and products stay within the cache; the band height,
//! like every other split, depends on the sizes alone, so results do not
//! depend on the thread count.

use super::conv_op::ConvPlan;
use super::finish_row;
use crate::ops::gemm::engine::{par_for, Batched, GemmFloat, Mat, SendPtr};
use crate::ops::gemm::fused::Activation;
use std::any::Any;
use std::sync::OnceLock;

pub(crate) mod transform;

use transform::{InputBlock, OutBlock, LANES, OUT_TILE, POSITIONS};

/// Fewest channels per group, on each side, for which the transforms pay.
const MIN_CHANNELS: usize = 8;
/// Fewest tiles per image: below this the 36 GEMMs are too thin to beat
/// im2col and the transformed weights too big to stream for so little work.
const MIN_TILES: usize = 25;
/// Elements of transformed input and products held per band (8 MiB of f32).
const BAND_ELEMS: usize = 1 << 21;
/// Smallest amount of transform work (elements written) per parallel task.
const TASK_ELEMS: usize = 1 << 14;

/// Whether `p` is a convolution this module computes: 2-D, 3×3, stride 1,
/// no dilation, enough channels per group and enough tiles.
pub(super) fn applies(p: &ConvPlan) -> bool {
    let w = &p.win;
    w.rank() == 2
        && w.kernel == [3, 3]
        && w.strides == [1, 1]
        && w.dilations == [1, 1]
        && p.cg() >= MIN_CHANNELS
        && p.mg() >= MIN_CHANNELS
        && tiles(w.output[0]) * tiles(w.output[1]) >= MIN_TILES
}

/// Output tiles along an output side.
fn tiles(side: usize) -> usize {
    side.div_ceil(OUT_TILE)
}

/// Transformed weights, computed once per constant weight tensor.
#[derive(Debug, Default)]
pub(super) struct WeightCache(OnceLock<Box<dyn Any + Send + Sync>>);

impl WeightCache {
    /// The transformed weights of `w` for `p`, from the cache when it holds
    /// them for this element type (`w` must then be the tensor it was filled
    /// from), else computed into `fresh`.
    pub(super) fn get<'a, T: GemmFloat>(
        &'a self,
        cacheable: bool,
        p: &ConvPlan,
        w: &[T],
        fresh: &'a mut Option<Vec<T>>,
    ) -> &'a [T] {
        if cacheable {
            let any = self.0.get_or_init(|| Box::new(transform_weights(p, w)));
            if let Some(u) = any.downcast_ref::<Vec<T>>() {
                return u;
            }
        }
        fresh.insert(transform_weights(p, w))
    }
}

/// `U[p][m][cg]`: position `p` of every kernel, one m×cg matrix per position.
fn transform_weights<T: GemmFloat>(p: &ConvPlan, w: &[T]) -> Vec<T> {
    let (m, cg) = (p.m, p.cg());
    let stride = m * cg;
    let mut u = vec![T::zero(); POSITIONS * stride];
    for (kc, g) in w.chunks_exact(9).take(stride).enumerate() {
        transform::weight(g, &mut u[kc..], stride);
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
    fn new(p: &ConvPlan, band_elems: usize) -> Grid {
        let (across, down) = (tiles(p.win.output[1]), tiles(p.win.output[0]));
        let per_row = POSITIONS * (p.c + p.m) * across;
        let band = (band_elems / per_row).clamp(1, down);
        Grid { across, down, band }
    }
}

/// Winograd convolution of every image: Y = conv(X, W) + bias, activated,
/// with `u` the transformed weights of W (see [`WeightCache::get`]).
pub(super) fn winograd<T: GemmFloat>(
    p: &ConvPlan,
    u: &[T],
    x: &[T],
    b: Option<&[T]>,
    act: Option<Activation>,
    y: &mut [T],
) {
    banded(p, u, x, b, act, y, BAND_ELEMS)
}

/// [`winograd`] with bands of at most `band_elems` scratch elements (at
/// least one tile row).
pub(super) fn banded<T: GemmFloat>(
    p: &ConvPlan,
    u: &[T],
    x: &[T],
    b: Option<&[T]>,
    act: Option<Activation>,
    y: &mut [T],
    band_elems: usize,
) {
    let grid = Grid::new(p, band_elems);
    let width = grid.band * grid.across;
    // The transforms read and write whole blocks of LANES tiles, up to
    // LANES − 1 elements past a band's last tile: V's rows have that much
    // room at their end, and the products that much after the last row.
    let pitch = width + LANES;
    let (vlen, mlen) = (p.c * POSITIONS * pitch, p.m * POSITIONS * width + LANES);
    T::with_scratch(vlen + mlen, |scratch| {
        let (v, prod) = scratch.split_at_mut(vlen);
        let (in_plane, out_plane) = (p.win.in_len(), p.win.out_len());
        for ni in 0..p.n {
            let xi = &x[ni * p.c * in_plane..(ni + 1) * p.c * in_plane];
            let yi = &mut y[ni * p.m * out_plane..(ni + 1) * p.m * out_plane];
            for ty0 in (0..grid.down).step_by(grid.band) {
                let rows = grid.band.min(grid.down - ty0);
                let band = Band {
                    p,
                    grid: &grid,
                    ty0,
                    rows,
                    pitch,
                };
                band.inputs(xi, v);
                band.products(u, v, prod);
                band.outputs(prod, b, act, yi);
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
}

impl Band<'_> {
    /// Splits `n` items into parallel tasks of at least `TASK_ELEMS` written
    /// elements (`per_item` each) and runs `f` on each range.
    fn par_items(n: usize, per_item: usize, f: impl Fn(std::ops::Range<usize>) + Sync + Send) {
        let per_task = TASK_ELEMS.div_ceil(per_item.max(1)).max(1);
        let tasks = n.div_ceil(per_task);
        par_for(tasks, |t| f(t * per_task..((t + 1) * per_task).min(n)));
    }

    /// `V[c][p][t]`: the transformed input tiles of every channel.
    fn inputs<T: GemmFloat>(&self, x: &[T], v: &mut [T]) {
        let win = &self.p.win;
        let (h, wd) = (win.input[0], win.input[1]);
        let (pt, pl) = (win.pad_begin[0] as isize, win.pad_begin[1] as isize);
        let chan = POSITIONS * self.pitch;
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
                            y0: (ty * OUT_TILE) as isize - pt,
                            x0: (tx * OUT_TILE) as isize - pl,
                            tiles: LANES.min(across - tx),
                        };
                        // A block past the row's end spills into the next
                        // tile row (written after it) or the row's room.
                        let t = r * across + tx;
                        transform::input(&blk, &mut vc[t..], self.pitch);
                    }
                }
            }
        });
    }

    /// `M[p][m][t] = U[p][m][·] · V[·][p][t]`, group by group, packed
    /// `tiles` wide.
    fn products<T: GemmFloat>(&self, u: &[T], v: &[T], prod: &mut [T]) {
        let p = self.p;
        let (m, cg, mg, group) = (p.m, p.cg(), p.mg(), p.group);
        let tiles = self.rows * self.grid.across;
        let pitch = self.pitch;
        let pp = SendPtr(prod.as_mut_ptr());
        let a = |bi: usize| {
            let (pos, g) = (bi / group, bi % group);
            Mat::row_major(u.as_ptr(), cg).offset(pos * m * cg + g * mg * cg)
        };
        let bm = |bi: usize| {
            let (pos, g) = (bi / group, bi % group);
            Mat {
                ptr: v.as_ptr(),
                rs: (POSITIONS * pitch) as isize,
                cs: 1,
            }
            .offset(g * cg * POSITIONS * pitch + pos * pitch)
        };
        let cm = |bi: usize| {
            let (pos, g) = (bi / group, bi % group);
            pp.offset(pos * m * tiles + g * mg * tiles)
        };
        let job = Batched {
            batches: POSITIONS * group,
            m: mg,
            n: tiles,
            k: cg,
            alpha: T::one(),
            a: &a,
            b: &bm,
            c: &cm,
            epilogue: None,
        };
        // SAFETY: U is POSITIONS×m×cg, V is c×POSITIONS×pitch and M (packed
        // POSITIONS×m×tiles) fits its buffer; each (position,
        // group) product lies inside them and distinct products' C are
        // disjoint.
        unsafe { job.run() };
    }

    /// Y from the products: the inverse transform of every output channel's
    /// tiles, then bias and activation on the band's output rows.
    fn outputs<T: GemmFloat>(
        &self,
        prod: &[T],
        b: Option<&[T]>,
        act: Option<Activation>,
        y: &mut [T],
    ) {
        let p = self.p;
        let (oh, ow) = (p.win.output[0], p.win.output[1]);
        // The products are packed `tiles` wide (see `products`).
        let tiles = self.rows * self.grid.across;
        let plane = oh * ow;
        let (row0, row1) = (
            self.ty0 * OUT_TILE,
            ((self.ty0 + self.rows) * OUT_TILE).min(oh),
        );
        let yp = SendPtr(y.as_mut_ptr());
        let across = self.grid.across;
        let m = p.m;
        Self::par_items(m, (row1 - row0) * ow, |range| {
            for k in range {
                // SAFETY: channel `k` owns rows row0..row1 of its output
                // plane, inside `y`.
                let rows = unsafe { yp.slice(k * plane + row0 * ow, (row1 - row0) * ow) };
                let mut blk: OutBlock<T> = [[T::zero(); OUT_TILE * LANES]; OUT_TILE];
                for r in 0..self.rows {
                    let oy = (self.ty0 + r) * OUT_TILE;
                    let avail = OUT_TILE.min(oh - oy);
                    for tx in (0..across).step_by(LANES) {
                        // Lanes past the row's last tile are not written out.
                        let t = r * across + tx;
                        transform::output(&prod[k * tiles + t..], m * tiles, &mut blk);
                        let x0 = tx * OUT_TILE;
                        let n = (OUT_TILE * LANES).min(ow - x0);
                        for (i, line) in blk.iter().enumerate().take(avail) {
                            let at = (oy - row0 + i) * ow + x0;
                            rows[at..at + n].copy_from_slice(&line[..n]);
                        }
                    }
                }
                finish_row(rows, b.map(|b| b[k]), act);
            }
        });
    }
}
