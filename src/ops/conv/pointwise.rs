//! 1×1 convolution (stride 1, unpadded) on AVX2 machines, f32: per image
//! and group `Y = W·X`, with X read where it lies (channel rows of the
//! plane's positions) and W packed once into panels, on the panel GEMM
//! (see [`super::panels`]). On AVX-512 machines, planes above 256
//! positions with few input channels run on [`rows`]' tiles instead, from
//! the same packed W.

#[cfg(target_arch = "x86_64")]
pub(super) mod clamp;
pub(super) mod columns;
#[cfg(target_arch = "x86_64")]
mod rows;

use super::conv_op::{ConvArgs, ConvPlan};
use super::panels::{self, NR};
use crate::ops::gemm::fused::Activation;

/// Whether `p` (already known to be a pointwise layer) suits this kernel on
/// this CPU: enough positions for a whole block.
pub(super) fn suits(p: &ConvPlan) -> bool {
    p.win.out_len() >= NR && p.mg() >= 1 && p.cg() >= 1 && panels::available()
}

/// Runs a layer that [`suits`] this kernel, with W packed once into the
/// node's panel cache when W is constant.
pub(super) fn run(a: &ConvArgs<f32>, y: &mut [f32]) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let p = a.p;
        a.weights.panels.with(
            a.weights.constant,
            || panels::pack(p.group, p.mg(), p.cg(), a.w),
            |packed| product(p, a.x, packed, a.b, a.z, a.act, y),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (a, y);
        unreachable!("the pointwise kernel is chosen on x86-64 and aarch64 only");
    }
}

/// The whole layer on the rows kernel where it [suits](rows::suits) the
/// layer, else on the panel GEMM: the same bits either way.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn product(
    p: &ConvPlan,
    x: &[f32],
    packed: &[f32],
    b: Option<&[f32]>,
    z: Option<&[f32]>,
    act: Option<Activation>,
    y: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if rows::suits(p) {
        return rows::rows(p, x, packed, b, z, act, y);
    }
    pointwise(p, x, packed, b, z, act, y)
}

/// The whole layer: one product per image and group, on the panel GEMM.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn pointwise(
    p: &ConvPlan,
    x: &[f32],
    packed: &[f32],
    b: Option<&[f32]>,
    z: Option<&[f32]>,
    act: Option<Activation>,
    y: &mut [f32],
) {
    let (mg, cg, n) = (p.mg(), p.cg(), p.win.out_len());
    let at = |i: usize| {
        let (ni, g) = (i / p.group, i % p.group);
        panels::At {
            x: (ni * p.c + g * cg) * n,
            w: g,
            y: (ni * p.m + g * mg) * n,
            bias: g * mg,
        }
    };
    let job = panels::Products {
        count: p.n * p.group,
        rows: mg,
        k: cg,
        n,
        x_pitch: n,
        y_pitch: n,
        at: &at,
        x,
        packed,
        bias: b,
        z,
        act,
    };
    // SAFETY: `suits` checked the CPU; each (image, group) writes its own
    // output channels of its own image.
    unsafe { job.run(y) };
}

#[cfg(test)]
mod tests {
    use super::super::conv_op::{plan, Weights};
    use super::super::geom::WindowAttrs;
    use super::*;
    use crate::ops::testutil::rand_vec;

    /// On a CPU with the kernel it takes the layer (with residual and Relu)
    /// and matches the `gemm` crate's path to rounding, whatever the rows
    /// of the last panel.
    #[test]
    fn takes_suitable_layers_and_matches_the_gemm_path() {
        let window =
            WindowAttrs::parse(&crate::ir::attributes::Attributes::default(), true).unwrap();
        for m in [1, 4, 6, 16, 20, 23] {
            let (xs, ws) = ([2, 12, 5, 11], [m, 12, 1, 1]);
            let p = plan(&window, 1, &xs, &ws, Some(&[m])).unwrap();
            let x = rand_vec(xs.iter().product(), 1);
            let w = rand_vec(ws.iter().product(), 2);
            let b = rand_vec(m, 3);
            let len = p.out_shape.iter().product();
            let z = rand_vec(len, 4);
            let weights = Weights::new(true);
            let a = ConvArgs {
                p: &p,
                x: &x,
                w: &w,
                b: Some(&b),
                z: Some(&z),
                act: Some(Activation::Relu),
                weights: &weights,
            };
            let mut want = vec![0f32; len];
            super::super::conv_op::pointwise_gemm(&a, &mut want);
            let takes = suits(&p);
            assert_eq!(takes, panels::available());
            if takes {
                let mut got = vec![f32::NAN; len];
                run(&a, &mut got);
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "m {m}: {g} vs {w}");
                }
                let mut again = vec![f32::NAN; len];
                run(&a, &mut again);
                assert_eq!(got, again, "the kept packed weights give the same sums");
                assert!(weights.panels.packed().is_some(), "packed weights kept");
            }
        }
    }
}
