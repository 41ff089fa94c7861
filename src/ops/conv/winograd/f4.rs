//! Winograd F(4×4, 3×3) (Lavin & Gray, interpolation points 0, ±1, ±2, ∞):
//! 6×6 input tiles, 36 positions, 4×4 output tiles; 4 times fewer
//! multiplications than the direct product, at a little more rounding.

use super::transform::{
    c, input_block, kernel, output_block, InputBlock, Lanes, OutBlock, OutRows, Variant, LANES,
};
use crate::ops::gemm::simd::multiversion;
use num_traits::Float;

/// Output tile side.
const OUT_TILE: usize = 4;
/// Input tile side (output tile + kernel − 1).
const IN_TILE: usize = 6;

/// The F(4×4, 3×3) transforms.
pub(crate) struct F4;

impl Variant for F4 {
    const OUT: usize = OUT_TILE;
    const POSITIONS: usize = IN_TILE * IN_TILE;
    #[inline]
    fn weight<T: Float>(g: &[T], u: &mut [T], stride: usize) {
        weight(g, u, stride)
    }
    fn input<T: Float>(blk: &InputBlock<T>, v: &mut [T], stride: usize) {
        input(blk, v, stride)
    }
    fn input_f32(blk: &InputBlock<f32>, v: &mut [f32], stride: usize) {
        if !super::input512::f4(blk, v, stride) {
            input(blk, v, stride)
        }
    }
    fn output<T: Float>(m: &[T], stride: usize, tiles: usize, out: &mut OutBlock<T>) {
        output(m, stride, tiles, out)
    }
    fn output_into_f32(m: &[f32], stride: usize, tiles: usize, dst: &mut OutRows<f32>) {
        if !super::output512::f4(m, stride, tiles, dst) {
            Self::output_into(m, stride, tiles, dst)
        }
    }
}

/// `Bᵀ·z` for six vectors of lanes.
#[inline(always)]
fn bt<T: Float, const L: usize>(z: &Lanes<T, IN_TILE, L>) -> Lanes<T, IN_TILE, L> {
    let (two, four, five) = (c::<T>(2.0), c::<T>(4.0), c::<T>(5.0));
    let mut o = [[T::zero(); L]; IN_TILE];
    for l in 0..L {
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
fn at<T: Float, const L: usize>(m: &Lanes<T, IN_TILE, L>) -> Lanes<T, OUT_TILE, L> {
    let (two, four, eight) = (c::<T>(2.0), c::<T>(4.0), c::<T>(8.0));
    let mut o = [[T::zero(); L]; OUT_TILE];
    for l in 0..L {
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
#[inline(always)]
fn weight<T: Float>(g: &[T], u: &mut [T], stride: usize) {
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
    kernel(g, u, stride, g3)
}

multiversion! {
    /// [`Variant::input`] for F(4×4, 3×3).
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
    /// [`Variant::output`] for F(4×4, 3×3).
    fn output<T: Float>(m: &[T], stride: usize, tiles: usize, out: &mut OutBlock<T>) {
        if tiles <= LANES / 2 {
            output_block::<T, IN_TILE, OUT_TILE, { LANES / 2 }>(m, stride, out, at)
        } else {
            output_block::<T, IN_TILE, OUT_TILE, LANES>(m, stride, out, at)
        }
    }
}
