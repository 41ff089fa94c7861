//! The columns kernel against naive sums and against the panel GEMM, and
//! its packing against its inverse.

use super::super::super::conv_op::{plan, ConvArgs, Weights};
use super::super::super::geom::WindowAttrs;
use super::super::super::random_layer::RandomLayer;
use super::*;
use crate::ops::gemm::fused::Activation;

/// Unpacking gives back every weight bit for bit, and packing lays each
/// weight at its panel's slot with zeros past the last row, for row counts
/// that fill their last panel, leave it short of 16, or between 16 and 32.
#[test]
fn pack_lays_out_panels_and_unpack_inverts_it() {
    for (matrices, rows, k) in [(1, 32, 3), (2, 40, 5), (3, 16, 2), (1, 57, 4), (2, 1, 3)] {
        let w: Vec<f32> = (0..matrices * rows * k).map(|i| i as f32 + 1.0).collect();
        let packed = pack(matrices, rows, k, &w);
        assert_eq!(packed.len(), matrices * matrix_len(rows, k));
        let len = matrix_len(rows, k);
        for g in 0..matrices {
            for q in 0..rows.div_ceil(CW) {
                let wide = width(q, rows);
                for kk in 0..k {
                    for r in 0..wide {
                        let row = q * CW + r;
                        let want = if row < rows {
                            w[(g * rows + row) * k + kk]
                        } else {
                            0.0
                        };
                        let got = packed[g * len + q * CW * k + kk * wide + r];
                        assert_eq!(got, want, "{matrices}×{rows}×{k}: g {g} row {row} kk {kk}");
                    }
                }
            }
        }
        let back = unpack(matrices, rows, k, &packed);
        assert!(back.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(back.len(), w.len());
    }
}

/// One layer's output by the columns kernel, or `None` where the CPU lacks
/// it; and the naive sums.
fn layer(
    n_img: usize,
    c: usize,
    m: usize,
    hw: (usize, usize),
    group: usize,
    with: (bool, bool, Option<Activation>),
) -> Option<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let window = WindowAttrs::parse(&crate::ir::attributes::Attributes::default(), true).unwrap();
    let (xs, ws) = ([n_img, c, hw.0, hw.1], [m, c / group, 1, 1]);
    let (bias, resid, act) = with;
    let p = plan(&window, group, &xs, &ws, bias.then_some(&[m][..])).unwrap();
    let data = RandomLayer::new(&p, &xs, &ws);
    let (x, w, b, z) = (&data.x, &data.w, &data.b, &data.z);
    let len = z.len();
    let a = data.args(&p, bias, resid, act);
    // The naive sums, in the kernel's order.
    let (n, mg, cg) = (hw.0 * hw.1, m / group, c / group);
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
                if bias {
                    s += b[o];
                }
                if resid {
                    s += z[at];
                }
                want[at] = act.map_or(s, |a| a.eval(s));
            }
        }
    }
    if !suits(&p) {
        return None;
    }
    let mut got = vec![f32::NAN; len];
    run(&a, &mut got);
    // The panel GEMM needs a strip of 16 positions.
    let mut panel = vec![f32::NAN; len];
    if n >= 16 {
        let other = Weights::new(true);
        let b2 = ConvArgs {
            weights: &other,
            ..a
        };
        super::super::run(&b2, &mut panel);
    }
    Some((got, want, panel))
}

/// Every output is the naive in-order sum plus bias plus residual, then the
/// activation, bit for bit, and the same bits as the panel GEMM's; for
/// planes of 1 to 196 positions (tiles of 1 to 8, leftovers), 16 to 72
/// channels (panels of 16 and 32, short last panels), several images and
/// groups, each activation kind in registers or after the tiles, and sums
/// over k long enough to be taken in two or three passes.
#[test]
fn matches_naive_sums_and_the_panel_gemm_bit_for_bit() {
    let acts = [
        None,
        Some(Activation::Relu),
        Some(Activation::Clip(-0.5, 0.5)),
        Some(Activation::HardSwish),
        Some(Activation::Sigmoid),
    ];
    let cases = [
        (1, 16, 16, (7, 7), 1),
        (2, 24, 40, (1, 1), 1),
        (1, 7, 72, (14, 14), 1),
        (1, 40, 24, (3, 5), 1),
        (2, 16, 64, (4, 4), 2),
        (1, 33, 57, (2, 3), 1),
        (1, 80, 200, (14, 14), 1),
        // Sums over k in two and three passes (first, middle, last).
        (1, 2 * K_PASS - 5, 40, (5, 5), 1),
        (2, 6 * K_PASS + 8, 48, (3, 3), 2),
    ];
    for (ci, &(n_img, c, m, hw, group)) in cases.iter().enumerate() {
        for (ai, &act) in acts.iter().enumerate() {
            let with = (ai % 2 == 0, (ci + ai) % 2 == 0, act);
            let Some((got, want, panel)) = layer(n_img, c, m, hw, group, with) else {
                return;
            };
            let what = format!("case {ci} with {with:?}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{what} at {i}: {g} vs {w}");
            }
            if hw.0 * hw.1 >= 16 {
                assert!(
                    got.iter()
                        .zip(&panel)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}"
                );
            }
        }
    }
}

/// One thread and two give the same bits.
#[test]
fn serial_and_parallel_agree() {
    let with = (true, true, Some(Activation::Relu));
    let one = crate::ops::parallel::with_thread_cap(1, || layer(1, 48, 96, (7, 7), 1, with));
    let two = layer(1, 48, 96, (7, 7), 1, with);
    if let (Some(one), Some(two)) = (one, two) {
        assert!(one
            .0
            .iter()
            .zip(&two.0)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

/// Planes of up to 256 positions run here whatever their channels; larger
/// ones never do (the rows kernel takes those with few channels), so a
/// 28×28 plane of 40 channels is not taken.
#[test]
fn takes_planes_of_at_most_256_positions() {
    let window = WindowAttrs::parse(&crate::ir::attributes::Attributes::default(), true).unwrap();
    let takes = |c: usize, h: usize, w: usize| {
        let p = plan(&window, 1, &[1, c, h, w], &[64, c, 1, 1], None).unwrap();
        suits(&p)
    };
    let avx512 = cpu_has_kernel();
    assert_eq!(takes(1000, 14, 14), avx512);
    assert_eq!(takes(40, 16, 16), avx512);
    assert_eq!(takes(960, 7, 7), avx512);
    assert!(!takes(40, 28, 28));
    assert!(!takes(8, 257, 1));
}
