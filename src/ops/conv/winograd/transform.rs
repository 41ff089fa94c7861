//! The three Winograd F(4×4, 3×3) transforms (Lavin & Gray, interpolation
//! points 0, ±1, ±2, ∞): weights `U = G·g·Gᵀ` (once per weight tensor), input
//! tiles `V = Bᵀ·d·B` and output tiles `Y = Aᵀ·M·A`. Input and output tiles
//! are transformed `LANES` tiles of one tile row at a time, one tile per
//! vector lane, so the arithmetic vectorises across tiles.

use crate::ops::gemm::simd::multiversion;
use num_traits::Float;

/// Output tile side.
pub(crate) const OUT_TILE: usize = 4;
/// Input tile side (output tile + kernel − 1).
pub(crate) const IN_TILE: usize = 6;
/// Positions in a transformed tile.
pub(crate) const POSITIONS: usize = IN_TILE * IN_TILE;
/// Tiles transformed together, one per vector lane.
pub(crate) const LANES: usize = 16;

/// Six rows of `LANES` tiles: `[row][lane]`.
type Six<T> = [[T; LANES]; IN_TILE];
/// Four rows of `LANES` tiles.
type Four<T> = [[T; LANES]; OUT_TILE];

fn c<T: Float>(v: f64) -> T {
    T::from(v).unwrap_or_else(T::zero)
}

/// `Bᵀ·z` for six vectors of lanes.
#[inline(always)]
fn bt<T: Float>(z: &Six<T>) -> Six<T> {
    let (two, four, five) = (c::<T>(2.0), c::<T>(4.0), c::<T>(5.0));
    let mut o = [[T::zero(); LANES]; IN_TILE];
    for l in 0..LANES {
        let (z0, z1, z2, z3, z4, z5) = (z[0][l], z[1][l], z[2][l], z[3][l], z[4][l], z[5][l]);
        o[0][l] = four * z0 - five * z2 + z4;
        o[1][l] = (z3 + z4) - four * (z1 + z2);
        o[2][l] = (z4 - z3) + four * (z1 - z2);
        o[3][l] = (z4 - z2) + two * (z3 - z1);
        o[4][l] = (z4 - z2) - two * (z3 - z1);
        o[5][l] = four * z1 - five * z3 + z5;
    }
    o
}

/// `Aᵀ·m` for six vectors of lanes.
#[inline(always)]
fn at<T: Float>(m: &Six<T>) -> Four<T> {
    let (two, four, eight) = (c::<T>(2.0), c::<T>(4.0), c::<T>(8.0));
    let mut o = [[T::zero(); LANES]; OUT_TILE];
    for l in 0..LANES {
        let (m0, m1, m2, m3, m4, m5) = (m[0][l], m[1][l], m[2][l], m[3][l], m[4][l], m[5][l]);
        let (s12, d12, s34, d34) = (m1 + m2, m1 - m2, m3 + m4, m3 - m4);
        o[0][l] = m0 + s12 + s34;
        o[1][l] = d12 + two * d34;
        o[2][l] = s12 + four * s34;
        o[3][l] = d12 + eight * d34 + m5;
    }
    o
}

/// Transforms one 3×3 kernel `g` (row-major) into its 36 positions, each
/// written to `u[p * stride]`.
pub(crate) fn weight<T: Float>(g: &[T], u: &mut [T], stride: usize) {
    // G = [[1/4, 0, 0], [-1/6, -1/6, -1/6], [-1/6, 1/6, -1/6],
    //      [1/24, 1/12, 1/6], [1/24, -1/12, 1/6], [0, 0, 1]].
    let g3 = |v: [T; 3]| -> [T; IN_TILE] {
        let (a, b, d) = (v[0], v[1], v[2]);
        let (sixth, twelfth, quarter) = (c::<T>(1.0 / 6.0), c::<T>(1.0 / 12.0), c::<T>(0.25));
        let tw4 = c::<T>(1.0 / 24.0);
        [
            quarter * a,
            -sixth * (a + b + d),
            -sixth * (a - b + d),
            tw4 * a + twelfth * b + sixth * d,
            tw4 * a - twelfth * b + sixth * d,
            d,
        ]
    };
    // Columns first (G·g), then rows ((G·g)·Gᵀ).
    let cols: Vec<[T; IN_TILE]> = (0..3).map(|j| g3([g[j], g[3 + j], g[6 + j]])).collect();
    for a in 0..IN_TILE {
        let row = g3([cols[0][a], cols[1][a], cols[2][a]]);
        for (i, v) in row.into_iter().enumerate() {
            u[(a * IN_TILE + i) * stride] = v;
        }
    }
}

/// Where one block of input tiles lies: the channel plane, its width and
/// height, the top-left input coordinate of the block's first tile (may be
/// negative in the padding) and the number of tiles in the block.
pub(crate) struct InputBlock<'a, T> {
    /// The channel's input plane, row-major.
    pub plane: &'a [T],
    /// Plane width.
    pub width: usize,
    /// Plane height.
    pub height: usize,
    /// Input row of the tiles' first row.
    pub y0: isize,
    /// Input column of the first tile's first column.
    pub x0: isize,
    /// Tiles in the block (≤ `LANES`), side by side along the row.
    pub tiles: usize,
}

multiversion! {
/// Transforms a block of input tiles, writing position `p` of lane `l` to
/// `v[p * stride + l]` for every one of the `LANES` lanes: lanes past the
/// block's tiles hold transforms of zero padding, and `v` must have room for
/// them.
pub(crate) fn input<T: Float>(blk: &InputBlock<T>, v: &mut [T], stride: usize) {
    // One padded input row segment, then the tiles' six columns of it.
    let mut seg = [T::zero(); SEG];
    // cols[i][r]: column i of the row-transformed tiles, input row r.
    let mut cols = [[[T::zero(); LANES]; IN_TILE]; IN_TILE];
    for r in 0..IN_TILE {
        read_segment(blk, blk.y0 + r as isize, &mut seg);
        // Bᵀ on this row's tiles: (Bᵀ·seg[4l..4l+6])_i for tile l.
        let taps: Six<T> =
            std::array::from_fn(|j| std::array::from_fn(|l| seg[OUT_TILE * l + j]));
        for (col, lanes) in cols.iter_mut().zip(bt(&taps)) {
            col[r] = lanes;
        }
    }
    // Bᵀ down the columns: position (a, i) = (Bᵀ·cols[i])_a.
    for (i, col) in cols.iter().enumerate() {
        for (a, lanes) in bt(col).iter().enumerate() {
            let at = (a * IN_TILE + i) * stride;
            v[at..at + LANES].copy_from_slice(lanes);
        }
    }
}
}

/// Input columns a block of tiles reads along one row.
const SEG: usize = OUT_TILE * LANES + 2;

/// Input row `y` from the block's first column on, 0 outside the plane.
#[inline(always)]
fn read_segment<T: Float>(blk: &InputBlock<T>, y: isize, seg: &mut [T; SEG]) {
    let inside_rows = y >= 0 && (y as usize) < blk.height;
    let x0 = blk.x0;
    if inside_rows && x0 >= 0 && x0 as usize + SEG <= blk.width {
        // The common case, a whole segment inside the plane: a fixed-size copy.
        let start = y as usize * blk.width + x0 as usize;
        seg.copy_from_slice(&blk.plane[start..start + SEG]);
        return;
    }
    seg.fill(T::zero());
    if inside_rows {
        let line = &blk.plane[y as usize * blk.width..(y as usize + 1) * blk.width];
        let lo = x0.max(0) as usize;
        let hi = (x0 + (OUT_TILE * blk.tiles + 2) as isize).clamp(0, blk.width as isize) as usize;
        if lo < hi {
            let at = (lo as isize - x0) as usize;
            seg[at..at + hi - lo].copy_from_slice(&line[lo..hi]);
        }
    }
}

/// Output rows of one block of tiles: `[row][column]`, `LANES` tiles side by
/// side.
pub(crate) type OutBlock<T> = [[T; OUT_TILE * LANES]; OUT_TILE];

multiversion! {
/// Transforms a block of `LANES` output tiles whose position `p` of tile `l`
/// is `m[p * stride + l]` into their 4×4 results, side by side in `out`.
pub(crate) fn output<T: Float>(m: &[T], stride: usize, out: &mut OutBlock<T>) {
    let mut cols = [[[T::zero(); LANES]; OUT_TILE]; IN_TILE];
    for (a, col) in cols.iter_mut().enumerate() {
        let mut pos = [[T::zero(); LANES]; IN_TILE];
        for (i, lanes) in pos.iter_mut().enumerate() {
            let at = (a * IN_TILE + i) * stride;
            lanes.copy_from_slice(&m[at..at + LANES]);
        }
        // Aᵀ along the row: col[j][l] = (Aᵀ·m[a][·])_j.
        *col = at(&pos);
    }
    // Aᵀ down the columns: output (i, j) of tile l is y[i][l] for column j.
    for j in 0..OUT_TILE {
        let mut six = [[T::zero(); LANES]; IN_TILE];
        for (a, lanes) in six.iter_mut().enumerate() {
            *lanes = cols[a][j];
        }
        let y = at(&six);
        for (row, lanes) in out.iter_mut().zip(&y) {
            for (l, &v) in lanes.iter().enumerate() {
                row[OUT_TILE * l + j] = v;
            }
        }
    }
}
}
