//! What the Winograd variants share: the `Variant` trait (weights
//! `U = G·g·Gᵀ` once per weight tensor, input tiles `V = Bᵀ·d·B`, output
//! tiles `Y = Aᵀ·M·A`), the block of `LANES` tiles of one tile row that the
//! input and output transforms work on (one tile per vector lane, so the
//! arithmetic vectorises across tiles), and reading its input rows.

use num_traits::Float;

/// Tiles transformed together, one per vector lane.
pub(crate) const LANES: usize = 16;
/// Widest output tile of any variant.
pub(crate) const MAX_OUT: usize = 4;

/// Output rows of one block of tiles, `[row][column]`, `LANES` tiles side by
/// side (a variant with smaller tiles uses the top-left corner).
pub(crate) type OutBlock<T> = [[T; MAX_OUT * LANES]; MAX_OUT];

/// One Winograd F(m×m, 3×3) algorithm.
pub(crate) trait Variant {
    /// Output tile side m.
    const OUT: usize;
    /// Positions of a transformed tile, (m + 2)².
    const POSITIONS: usize;
    /// Transforms one 3×3 kernel `g` (row-major), writing position `p` to
    /// `u[p * stride]`.
    fn weight<T: Float>(g: &[T], u: &mut [T], stride: usize);
    /// Transforms a block of input tiles, writing position `p` of lane `l`
    /// to `v[p * stride + l]` for every one of the `LANES` lanes (half as
    /// many where the block has at most that many tiles): lanes past the
    /// block's tiles hold transforms of zero padding, and `v` must have room
    /// for them.
    fn input<T: Float>(blk: &InputBlock<T>, v: &mut [T], stride: usize);
    /// [`Variant::input`] for f32, on a faster kernel where the CPU has one.
    fn input_f32(blk: &InputBlock<f32>, v: &mut [f32], stride: usize) {
        Self::input(blk, v, stride)
    }
    /// Transforms a block of `LANES` output tiles whose position `p` of
    /// tile `l` is `m[p * stride + l]` into their results, side by side in
    /// `out`: at least the first `tiles` (all of them, or half where
    /// `tiles` is at most half).
    fn output<T: Float>(m: &[T], stride: usize, tiles: usize, out: &mut OutBlock<T>);
    /// [`Variant::output`] written straight into `dst`'s rows and columns.
    fn output_into<T: Float>(m: &[T], stride: usize, tiles: usize, dst: &mut OutRows<T>) {
        let mut out: OutBlock<T> = [[T::zero(); MAX_OUT * LANES]; MAX_OUT];
        Self::output(m, stride, tiles, &mut out);
        for (i, line) in out.iter().enumerate().take(dst.rows) {
            let at = dst.at + i * dst.pitch;
            dst.y[at..at + dst.cols].copy_from_slice(&line[..dst.cols]);
        }
    }
    /// [`Variant::output_into`] for f32, on a faster kernel where the CPU
    /// has one.
    fn output_into_f32(m: &[f32], stride: usize, tiles: usize, dst: &mut OutRows<f32>) {
        Self::output_into(m, stride, tiles, dst)
    }
}

/// Where a block's results go: its output row `i < rows`, column `c <
/// cols` (at most `MAX_OUT · LANES`), at `y[at + i·pitch + c]`.
pub(crate) struct OutRows<'a, T> {
    /// The output.
    pub y: &'a mut [T],
    /// Where the block's first row starts.
    pub at: usize,
    /// Distance between rows.
    pub pitch: usize,
    /// Rows to write (at most the tile side).
    pub rows: usize,
    /// Columns to write.
    pub cols: usize,
}

/// A constant of the transforms.
#[inline(always)]
pub(crate) fn c<T: Float>(v: f64) -> T {
    T::from(v).unwrap_or_else(T::zero)
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

/// Input row `y` from the block's first column on, 0 outside the plane: `N`
/// columns, of which the block's tiles read the first `used`.
#[inline(always)]
pub(crate) fn read_segment<T: Float, const N: usize>(
    blk: &InputBlock<T>,
    y: isize,
    used: usize,
    seg: &mut [T; N],
) {
    let inside_rows = y >= 0 && (y as usize) < blk.height;
    let x0 = blk.x0;
    if inside_rows && x0 >= 0 && x0 as usize + N <= blk.width {
        // The common case, a whole segment inside the plane: a fixed-size copy.
        let start = y as usize * blk.width + x0 as usize;
        seg.copy_from_slice(&blk.plane[start..start + N]);
        return;
    }
    seg.fill(T::zero());
    if inside_rows {
        let line = &blk.plane[y as usize * blk.width..(y as usize + 1) * blk.width];
        let lo = x0.max(0) as usize;
        let hi = (x0 + used as isize).clamp(0, blk.width as isize) as usize;
        if lo < hi {
            let at = (lo as isize - x0) as usize;
            seg[at..at + hi - lo].copy_from_slice(&line[lo..hi]);
        }
    }
}

/// `U = G·g·Gᵀ` of one 3×3 kernel `g` (row-major), with `g3` applying G to
/// one column or row: position (a, i) goes to `u[(a·N + i)·stride]`.
#[inline(always)]
pub(crate) fn kernel<T: Float, const N: usize>(
    g: &[T],
    u: &mut [T],
    stride: usize,
    g3: impl Fn([T; 3]) -> [T; N],
) {
    // One bounds check for the N² stores below.
    let u = &mut u[..=(N * N - 1) * stride];
    // Columns first (G·g), then rows ((G·g)·Gᵀ).
    let cols: [[T; N]; 3] = std::array::from_fn(|j| g3([g[j], g[3 + j], g[6 + j]]));
    for a in 0..N {
        let row = g3([cols[0][a], cols[1][a], cols[2][a]]);
        for (i, v) in row.into_iter().enumerate() {
            u[(a * N + i) * stride] = v;
        }
    }
}

/// Rows of lanes: `[row][lane]`, `L` lanes (a block of [`LANES`] tiles, or
/// of half as many on rows of few tiles).
pub(crate) type Lanes<T, const R: usize, const L: usize = LANES> = [[T; L]; R];

/// [`Variant::input`] for input tiles of side `N` and output tiles of side
/// `M`, with `bt` applying Bᵀ to N rows of `L` lanes; `S` = M·L + 2 is the
/// input row segment a block reads.
#[inline(always)]
pub(crate) fn input_block<
    T: Float,
    const N: usize,
    const M: usize,
    const S: usize,
    const L: usize,
>(
    blk: &InputBlock<T>,
    v: &mut [T],
    stride: usize,
    bt: impl Fn(&Lanes<T, N, L>) -> Lanes<T, N, L>,
) {
    let mut seg = [T::zero(); S];
    // cols[i][r]: column i of the row-transformed tiles, input row r.
    let mut cols = [[[T::zero(); L]; N]; N];
    for r in 0..N {
        read_segment(blk, blk.y0 + r as isize, M * blk.tiles + 2, &mut seg);
        // Bᵀ on this row's tiles: (Bᵀ·seg[M·l..M·l + N])_i for tile l.
        let taps: Lanes<T, N, L> = std::array::from_fn(|j| std::array::from_fn(|l| seg[M * l + j]));
        for (col, lanes) in cols.iter_mut().zip(bt(&taps)) {
            col[r] = lanes;
        }
    }
    // Bᵀ down the columns: position (a, i) = (Bᵀ·cols[i])_a.
    for (i, col) in cols.iter().enumerate() {
        for (a, lanes) in bt(col).iter().enumerate() {
            let at = (a * N + i) * stride;
            v[at..at + L].copy_from_slice(lanes);
        }
    }
}

/// [`Variant::output`] for input tiles of side `N` and output tiles of side
/// `M`, with `at` applying Aᵀ to N rows of `L` lanes (the first `L` tiles
/// of `out`).
#[inline(always)]
pub(crate) fn output_block<T: Float, const N: usize, const M: usize, const L: usize>(
    m: &[T],
    stride: usize,
    out: &mut OutBlock<T>,
    at: impl Fn(&Lanes<T, N, L>) -> Lanes<T, M, L>,
) {
    // cols[a][j]: Aᵀ along row a of every tile, column j.
    let mut cols = [[[T::zero(); L]; M]; N];
    for (a, col) in cols.iter_mut().enumerate() {
        let mut pos = [[T::zero(); L]; N];
        for (i, lanes) in pos.iter_mut().enumerate() {
            let from = (a * N + i) * stride;
            lanes.copy_from_slice(&m[from..from + L]);
        }
        *col = at(&pos);
    }
    // Aᵀ down the columns: output (i, j) of tile l is y[i][l] for column j.
    for j in 0..M {
        let mut down = [[T::zero(); L]; N];
        for (a, lanes) in down.iter_mut().enumerate() {
            *lanes = cols[a][j];
        }
        let y = at(&down);
        for (row, lanes) in out.iter_mut().zip(&y) {
            for (l, &v) in lanes.iter().enumerate() {
                row[M * l + j] = v;
            }
        }
    }
}
