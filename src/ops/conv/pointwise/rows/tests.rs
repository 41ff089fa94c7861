//! The rows kernel against naive sums and the panel GEMM, bit for bit,
//! and serial against parallel.

use super::super::super::conv_op::{plan, ConvArgs, Weights};
use super::super::super::geom::WindowAttrs;
use super::super::super::panels;
use super::*;
use crate::ops::gemm::fused::Activation;
use crate::ops::testutil::rand_vec;

/// A layer's outputs: by the pointwise entry (the rows kernel where the
/// layer suits it), by the panel GEMM on the same packed W, and the naive
/// in-order sums; `None` where the CPU lacks the kernel.
struct Outputs {
    got: Vec<f32>,
    panel: Vec<f32>,
    want: Vec<f32>,
}

/// Runs a layer of `n_img` images of `c` channels on an `hw` plane, `m`
/// output channels in `group` groups, with a bias, a residual and the
/// activation of `with`.
fn layer(
    n_img: usize,
    c: usize,
    m: usize,
    hw: (usize, usize),
    group: usize,
    with: (bool, bool, Option<Activation>),
) -> Option<Outputs> {
    let window = WindowAttrs::parse(&crate::ir::attributes::Attributes::default(), true).unwrap();
    let (xs, ws) = ([n_img, c, hw.0, hw.1], [m, c / group, 1, 1]);
    let (bias, resid, act) = with;
    let p = plan(&window, group, &xs, &ws, bias.then_some(&[m][..])).unwrap();
    if !suits(&p) {
        return None;
    }
    let x = rand_vec(xs.iter().product(), 1);
    let w = rand_vec(ws.iter().product(), 2);
    let b = rand_vec(m, 3);
    let len: usize = p.out_shape.iter().product();
    let z = rand_vec(len, 4);
    let (b, z) = (bias.then_some(&b[..]), resid.then_some(&z[..]));
    let weights = Weights::new(true);
    let a = ConvArgs {
        p: &p,
        x: &x,
        w: &w,
        b,
        z,
        act,
        weights: &weights,
    };
    let mut got = vec![f32::NAN; len];
    super::super::run(&a, &mut got);
    let (mg, cg, n) = (m / group, c / group, hw.0 * hw.1);
    let packed = panels::pack(group, mg, cg, &w);
    let mut panel = vec![f32::NAN; len];
    super::super::pointwise(&p, &x, &packed, b, z, act, &mut panel);
    let mut want = vec![0f32; len];
    for i in 0..n_img {
        for o in 0..m {
            let g = o / mg;
            for j in 0..n {
                let mut s = 0f32;
                for kk in 0..cg {
                    s = w[o * cg + kk].mul_add(x[(i * c + g * cg + kk) * n + j], s);
                }
                let at = (i * m + o) * n + j;
                s += b.map_or(0.0, |b| b[o]);
                s += z.map_or(0.0, |z| z[at]);
                want[at] = act.map_or(s, |a| a.eval(s));
            }
        }
    }
    Some(Outputs { got, panel, want })
}

/// Whether two outputs hold the same bits everywhere.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
}

/// Every output is the naive in-order sum plus bias plus residual, then
/// the activation, and the panel GEMM's bits: K of 1 to 130, output
/// channels that leave a short last panel, planes whose last tile is short
/// of 64 positions and of a whole vector (or not), several images and
/// groups, each activation in registers or after the tiles.
#[test]
fn matches_naive_sums_and_the_panel_gemm_bit_for_bit() {
    let acts = [
        None,
        Some(Activation::Relu),
        Some(Activation::Clip(-0.5, 0.5)),
        Some(Activation::HardSwish),
        Some(Activation::Sigmoid),
        Some(Activation::LeakyRelu(0.1)),
    ];
    let cases = [
        (1, 1, 7, (17, 19), 1),
        (2, 3, 13, (20, 15), 1),
        (1, 16, 64, (16, 20), 1),
        (1, 48, 22, (17, 17), 2),
        (2, 64, 24, (19, 19), 1),
        (1, 72, 25, (16, 17), 1),
        (1, 24, 16, (1, 257), 1),
        (1, 130, 14, (17, 16), 1),
        // 157 tiles: on one or two threads (4 or 8 tasks), each task
        // runs two or three blocks of tiles, the last one short.
        (1, 3, 13, (100, 100), 1),
    ];
    for (ci, &(n_img, c, m, hw, group)) in cases.iter().enumerate() {
        for (ai, &act) in acts.iter().enumerate() {
            let with = (ai % 2 == 0, (ci + ai) % 2 == 1, act);
            let Some(out) = layer(n_img, c, m, hw, group, with) else {
                eprintln!("skipped: the rows kernel needs AVX-512F");
                return;
            };
            let what = format!("case {ci} with {with:?}");
            for (i, (g, w)) in out.got.iter().zip(&out.want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{what} at {i}: {g} vs {w}");
            }
            assert!(
                same_bits(&out.got, &out.panel),
                "{what}: not the panel GEMM's"
            );
            assert!(out.got.iter().any(|v| *v != 0.0), "{what}: all zero");
        }
    }
}

/// Only planes above 256 positions with at most 256 input channels per
/// group run here (on a CPU with AVX-512F).
#[test]
fn takes_large_planes_with_few_channels() {
    let window = WindowAttrs::parse(&crate::ir::attributes::Attributes::default(), true).unwrap();
    let takes = |c: usize, hw: usize, group: usize| {
        let p = plan(&window, group, &[1, c, hw, 1], &[32, c / group, 1, 1], None).unwrap();
        suits(&p)
    };
    let avx512 = cpu_has_kernel();
    assert_eq!(takes(256, 257, 1), avx512);
    assert_eq!(takes(512, 300, 2), avx512);
    assert!(!takes(257, 257, 1));
    assert!(!takes(16, 256, 1));
}

/// One thread and two give the same bits.
#[test]
fn serial_and_parallel_agree() {
    let with = (true, true, Some(Activation::HardSwish));
    let one = crate::ops::parallel::with_thread_cap(1, || layer(2, 16, 40, (30, 31), 1, with));
    let two = layer(2, 16, 40, (30, 31), 1, with);
    if let (Some(one), Some(two)) = (one, two) {
        assert!(same_bits(&one.got, &two.got));
        assert!(same_bits(&one.got, &one.want));
    }
}
