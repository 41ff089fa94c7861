//! Stride-1 windows larger than 1×1 on small output planes (f32,
//! AVX-512), the layers implicit GEMM would take otherwise: im2col's
//! column matrix of each image, whole, multiplied on the pointwise columns
//! kernel (output channels in the vectors, positions broadcast, sums over
//! k in passes that keep W's slice in L1).
//!
//! On a 7×7 plane the implicit-GEMM kernel and the panel GEMM run blocks
//! of 16 positions, 64 columns' worth of work for 49, and stream their
//! 3×3 layers' long k (4608 for 512 channels) from L2 at every block;
//! ResNet-50's 3×3 layers on 7×7 took 1.9× onnxruntime's time (Sapphire
//! Rapids-class Xeon, one thread). Stride-2 layers stay on im2col and the
//! panel GEMM: measured in ResNet-50, moving them here gained nothing.
//! The column matrix of a plane this small is at most `CHUNK_FLOATS`
//! floats, built once per image; each output is the in-order chain of
//! fused multiply-adds over (channel, offset) that im2col's products
//! compute.

use super::conv_op::{ConvArgs, ConvPlan};
use super::im2col::Segments;
use super::pointwise::columns;
use crate::ops::gemm::engine::scratch;
use std::cell::RefCell;

/// Most floats of one image's column matrix (4 MiB).
const CHUNK_FLOATS: usize = 1 << 20;

thread_local! {
    /// The column matrix, held by the thread that runs the layer.
    static COLUMNS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Fewest output channels per group that pay for the column matrix.
/// With 32 (DenseNet's 3×3 layers, 128 -> 32 on 14×14) building it costs
/// more than implicit GEMM's empty block columns: 0.13 -> 0.18 ms; with 64
/// the two tie on 14×14 and this path wins on 7×7 (0.055 -> 0.048 ms);
/// from 128 it wins on both (160 -> 224 on 7×7: 0.42 -> 0.27 ms).
const MIN_OUTPUT_CHANNELS: usize = 64;

/// Whether `p` (a layer that implicit GEMM takes) is better run here:
/// one that [`can_run`] here with at least [`MIN_OUTPUT_CHANNELS`] per
/// group.
pub(super) fn suits(p: &ConvPlan) -> bool {
    can_run(p) && p.mg() >= MIN_OUTPUT_CHANNELS
}

/// Whether [`run`] computes `p`: f32 on a CPU with the columns kernel, an
/// output plane it takes, and a column matrix within [`CHUNK_FLOATS`].
fn can_run(p: &ConvPlan) -> bool {
    let rows = p.c.saturating_mul(p.win.kernel_len());
    columns::suits(p) && rows.saturating_mul(p.win.out_len()) <= CHUNK_FLOATS
}

/// The rows of a group's column matrix: input channels × kernel offsets.
fn k(p: &ConvPlan) -> usize {
    p.cg() * p.win.kernel_len()
}

/// Packs W (`m × cg × kernel`, row-major) for the columns kernel.
pub(super) fn pack(p: &ConvPlan, w: &[f32]) -> Vec<f32> {
    columns::pack(p.group, p.mg(), k(p), w)
}

/// Runs a layer that [`can_run`] here, with W packed once into the
/// node's columns cache when W is constant.
pub(super) fn run(a: &ConvArgs<f32>, y: &mut [f32]) {
    let p = a.p;
    let (plane, in_plane) = (p.win.out_len(), p.win.in_len());
    let rows = p.c * p.win.kernel_len();
    let layer = columns::Layer {
        images: 1,
        group: p.group,
        c: rows,
        m: p.m,
        positions: plane,
    };
    let segments = Segments::of(&p.win);
    a.weights.columns.with(
        a.weights.constant,
        || pack(p, a.w),
        |packed| {
            scratch(&COLUMNS, rows * plane, |col| {
                for ni in 0..p.n {
                    let xi = &a.x[ni * p.c * in_plane..(ni + 1) * p.c * in_plane];
                    segments.fill(col, xi, in_plane, 0, plane);
                    let out = ni * p.m * plane..(ni + 1) * p.m * plane;
                    let z = a.z.map(|z| &z[out.clone()]);
                    columns::product(layer, col, packed, a.b, z, a.act, &mut y[out]);
                }
            })
        },
    );
}

#[cfg(test)]
mod tests {
    use super::super::conv_op::plan;
    use super::super::geom::{AutoPad, WindowAttrs};
    use super::super::random_layer::RandomLayer;
    use super::*;
    use crate::ops::gemm::fused::Activation;

    /// A k×k layer's sizes: images, channels in and out, plane, kernel,
    /// stride, pad, groups.
    type Shape = (
        usize,
        usize,
        usize,
        (usize, usize),
        usize,
        usize,
        usize,
        usize,
    );

    /// Runs the layer here and compares every output's bits with the naive
    /// in-order chain over (channel, ky, kx), padding's zeros included,
    /// then bias, residual and the activation.
    fn check(shape: Shape, bias: bool, resid: bool, act: Option<Activation>) {
        let (n_img, c, m, (h, w_), k, stride, pad, group) = shape;
        let attrs = WindowAttrs {
            kernel: None,
            strides: Some(vec![stride; 2]),
            dilations: None,
            pads: Some(vec![pad; 4]),
            auto_pad: AutoPad::NotSet,
        };
        let (xs, ws) = ([n_img, c, h, w_], [m, c / group, k, k]);
        let p = plan(&attrs, group, &xs, &ws, bias.then_some(&[m][..])).unwrap();
        assert_eq!(
            can_run(&p),
            crate::ops::gemm::simd::has_avx512(),
            "{shape:?}"
        );
        if !can_run(&p) {
            return;
        }
        let (oh, ow) = (
            (h + 2 * pad - k) / stride + 1,
            (w_ + 2 * pad - k) / stride + 1,
        );
        let data = RandomLayer::new(&p, &xs, &ws);
        let (x, w, b, z) = (&data.x, &data.w, &data.b, &data.z);
        let a = data.args(&p, bias, resid, act);
        let mut got = vec![f32::NAN; z.len()];
        run(&a, &mut got);
        let (cg, mg) = (c / group, m / group);
        for i in 0..n_img {
            for o in 0..m {
                let g = o / mg;
                for (oy, ox) in (0..oh).flat_map(|y| (0..ow).map(move |x| (y, x))) {
                    let mut s = 0f32;
                    for kc in 0..cg {
                        for (ky, kx) in (0..k).flat_map(|y| (0..k).map(move |x| (y, x))) {
                            let (iy, ix) = (oy * stride + ky, ox * stride + kx);
                            let inside =
                                (pad..h + pad).contains(&iy) && (pad..w_ + pad).contains(&ix);
                            let ch = i * c + g * cg + kc;
                            let xv = if inside {
                                x[(ch * h + iy - pad) * w_ + ix - pad]
                            } else {
                                0.0
                            };
                            s = w[((o * cg + kc) * k + ky) * k + kx].mul_add(xv, s);
                        }
                    }
                    let at = ((i * m + o) * oh + oy) * ow + ox;
                    if bias {
                        s += b[o];
                    }
                    if resid {
                        s += z[at];
                    }
                    let want = act.map_or(s, |a| a.eval(s));
                    assert_eq!(got[at].to_bits(), want.to_bits(), "{shape:?} at {at}");
                }
            }
        }
    }

    /// 3×3 layers on 7×7 planes at strides 1 and 2 (the second from
    /// 14×14), a 5×5 one, several images and groups, and a sum over
    /// 5400 rows of the column matrix (three passes of the kernel), each
    /// with its epilogue; every output is the naive chain's bits.
    #[test]
    fn outputs_are_the_naive_chains_bits() {
        check(
            (1, 24, 40, (7, 7), 3, 1, 1, 1),
            true,
            true,
            Some(Activation::Relu),
        );
        check((2, 16, 32, (14, 14), 3, 2, 1, 1), true, false, None);
        check(
            (1, 8, 48, (9, 9), 5, 1, 2, 2),
            false,
            true,
            Some(Activation::Sigmoid),
        );
        check(
            (1, 600, 20, (5, 5), 3, 1, 1, 1),
            true,
            true,
            Some(Activation::Clip(-0.3, 0.3)),
        );
    }

    /// Planes above 256 positions, column matrices past `CHUNK_FLOATS`
    /// and layers of fewer than 64 output channels per group are left to
    /// the other kernels.
    #[test]
    fn leaves_large_planes_and_matrices_and_few_outputs() {
        let attrs = WindowAttrs {
            kernel: None,
            strides: None,
            dilations: None,
            pads: Some(vec![1; 4]),
            auto_pad: AutoPad::NotSet,
        };
        let takes_m = |c: usize, m: usize, hw: usize| {
            let p = plan(&attrs, 1, &[1, c, hw, hw], &[m, c, 3, 3], None).unwrap();
            suits(&p)
        };
        let takes = |c: usize, hw: usize| takes_m(c, 64, hw);
        let avx512 = crate::ops::gemm::simd::has_avx512();
        assert_eq!(takes(512, 7), avx512);
        assert_eq!(takes(64, 16), avx512);
        assert!(!takes(64, 17));
        assert!(!takes(4096, 7));
        assert!(!takes(2400, 16));
        assert!(!takes_m(128, 32, 14));
        assert!(!takes_m(128, 48, 7));
    }
}
