//! Winograd F(2×2, 3×3) (interpolation points 0, ±1, ∞): 4×4 input tiles,
//! 16 positions, 2×2 output tiles; 2.25 times fewer multiplications than the
//! direct product. Small planes (13×13, 14×14) waste less of their last
//! tiles than with F(4×4, 3×3) and give the GEMMs more columns.

use super::transform::{
    c, input_block, kernel, output_block, InputBlock, Lanes, OutBlock, OutRows, Variant, LANES,
};
use crate::ops::gemm::simd::multiversion;
use num_traits::Float;

/// Output tile side.
const OUT_TILE: usize = 2;
/// Input tile side (output tile + kernel − 1).
const IN_TILE: usize = 4;

/// The F(2×2, 3×3) transforms.
pub(crate) struct F2;

impl Variant for F2 {
    const OUT: usize = OUT_TILE;
    const POSITIONS: usize = IN_TILE * IN_TILE;
    #[inline]
    fn weight<T: Float>(g: &[T], u: &mut [T], stride: usize) {
        kernel(g, u, stride, g3)
    }
    fn input<T: Float>(blk: &InputBlock<T>, v: &mut [T], stride: usize) {
        input(blk, v, stride)
    }
    fn input_f32(blk: &InputBlock<f32>, v: &mut [f32], stride: usize) {
        if !super::input512::f2(blk, v, stride) {
            input(blk, v, stride)
        }
    }
    fn output<T: Float>(m: &[T], stride: usize, tiles: usize, out: &mut OutBlock<T>) {
        output(m, stride, tiles, out)
    }
    fn output_into_f32(m: &[f32], stride: usize, tiles: usize, dst: &mut OutRows<f32>) {
        if !super::output512::f2(m, stride, tiles, dst) {
            Self::output_into(m, stride, tiles, dst)
        }
    }
}

/// `Bᵀ·z` for four vectors of lanes.
#[inline(always)]
fn bt<T: Float, const L: usize>(z: &Lanes<T, IN_TILE, L>) -> Lanes<T, IN_TILE, L> {
    let mut o = [[T::zero(); L]; IN_TILE];
    for l in 0..L {
        let (z0, z1, z2, z3) = (z[0][l], z[1][l], z[2][l], z[3][l]);
        o[0][l] = z0 - z2;
        o[1][l] = z1 + z2;
        o[2][l] = z2 - z1;
        o[3][l] = z1 - z3;
    }
    o
}

/// `Aᵀ·m` for four vectors of lanes.
#[inline(always)]
fn at<T: Float, const L: usize>(m: &Lanes<T, IN_TILE, L>) -> Lanes<T, OUT_TILE, L> {
    let mut o = [[T::zero(); L]; OUT_TILE];
    for l in 0..L {
        let (m0, m1, m2, m3) = (m[0][l], m[1][l], m[2][l], m[3][l]);
        o[0][l] = m0 + m1 + m2;
        o[1][l] = m1 - m2 - m3;
    }
    o
}

/// `G·g` for one column or row of a kernel.
#[inline(always)]
fn g3<T: Float>(v: [T; 3]) -> [T; IN_TILE] {
    // G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]].
    let (a, b, d) = (v[0], v[1], v[2]);
    let half = c::<T>(0.5);
    [a, half * (a + b + d), half * (a - b + d), d]
}

multiversion! {
    /// [`Variant::input`] for F(2×2, 3×3).
    fn input<T: Float>(blk: &InputBlock<T>, v: &mut [T], stride: usize) {
        // Rows of few tiles (6 on a 24×24 plane) take blocks of half the
        // lanes: a full block computed and wrote 16 lanes for 6 tiles.
        const HALF: usize = LANES / 2;
        if blk.tiles <= HALF {
            input_block::<T, IN_TILE, OUT_TILE, { OUT_TILE * HALF + 2 }, HALF>(blk, v, stride, bt)
        } else {
            input_block::<T, IN_TILE, OUT_TILE, { OUT_TILE * LANES + 2 }, LANES>(blk, v, stride, bt)
        }
    }
}

multiversion! {
    /// [`Variant::output`] for F(2×2, 3×3).
    fn output<T: Float>(m: &[T], stride: usize, tiles: usize, out: &mut OutBlock<T>) {
        if tiles <= LANES / 2 {
            output_block::<T, IN_TILE, OUT_TILE, { LANES / 2 }>(m, stride, out, at)
        } else {
            output_block::<T, IN_TILE, OUT_TILE, LANES>(m, stride, out, at)
        }
    }
}
