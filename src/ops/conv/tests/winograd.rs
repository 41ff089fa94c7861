//! The Winograd F(4×4, 3×3) path against the direct references: its
//! transforms on single tiles, whole convolutions of awkward sizes, groups,
//! bands and fused activations, and the cache of transformed weights.

use super::super::conv_op::plan;
use super::super::geom::AutoPad;
use super::super::geom::WindowAttrs;
use super::super::winograd::{self, transform, WeightCache};
use super::{check_conv, geo, rand64, ref_conv, t32, Geo};
use crate::ops::gemm::testutil::{assert_close, bits, build_op, int, ints, string};

/// The three transforms of one tile equal the 4×4 direct correlation.
#[test]
fn transforms_of_one_tile_equal_direct_correlation() {
    let d = rand64(36, 41);
    let g = rand64(9, 42);
    let mut u = vec![0.0; 36];
    transform::weight(&g, &mut u, 1);
    let blk = transform::InputBlock {
        plane: &d,
        width: 6,
        height: 6,
        y0: 0,
        x0: 0,
        tiles: 1,
    };
    // One tile in lane 0 of a block; the other lanes read zero padding.
    let lanes = transform::LANES;
    let mut v = vec![f64::NAN; 36 * lanes];
    transform::input(&blk, &mut v, lanes);
    let m: Vec<f64> = (0..36 * lanes).map(|i| u[i / lanes] * v[i]).collect();
    let mut out = [[f64::NAN; 4 * transform::LANES]; 4];
    transform::output(&m, lanes, &mut out);
    let y: Vec<f64> = (0..16).map(|o| out[o / 4][o % 4]).collect();
    let mut want = vec![0.0; 16];
    for (o, w) in want.iter_mut().enumerate() {
        let (oy, ox) = (o / 4, o % 4);
        for k in 0..9 {
            *w += d[(oy + k / 3) * 6 + ox + k % 3] * g[k];
        }
    }
    assert_close(&y, &want, 1e-12, 1e-12);
}

/// Plans a 3×3 convolution of `xs` with `ws` and the given pads.
fn plan_of(
    xs: &[usize],
    ws: &[usize],
    pads: [usize; 4],
    group: usize,
) -> super::super::conv_op::ConvPlan {
    let attrs = WindowAttrs {
        kernel: None,
        strides: None,
        dilations: None,
        pads: Some(pads.to_vec()),
        auto_pad: AutoPad::NotSet,
    };
    plan(&attrs, group, xs, ws, Some(&[ws[0]])).unwrap()
}

#[test]
fn winograd_takes_only_the_shapes_it_pays_for() {
    let p = |xs: &[usize], ws: &[usize], group| plan_of(xs, ws, [1, 1, 1, 1], group);
    assert!(winograd::applies(&p(&[1, 8, 20, 20], &[8, 8, 3, 3], 1)));
    // Too few output or input channels per group, or too few tiles.
    assert!(!winograd::applies(&p(&[1, 8, 20, 20], &[4, 8, 3, 3], 1)));
    assert!(!winograd::applies(&p(&[1, 3, 20, 20], &[8, 3, 3, 3], 1)));
    assert!(!winograd::applies(&p(&[1, 16, 20, 20], &[16, 4, 3, 3], 4)));
    assert!(!winograd::applies(&p(&[1, 8, 16, 20], &[8, 8, 3, 3], 1)));
    // Not 3×3.
    assert!(!winograd::applies(&p(&[1, 8, 20, 20], &[8, 8, 5, 5], 1)));
}

#[test]
fn winograd_matches_reference_on_awkward_shapes() {
    // Sizes that are not multiples of the tile, no padding, asymmetric
    // padding, two images and two groups.
    type Case<'a> = (&'a [usize], &'a [usize], [usize; 4], usize, &'a [usize]);
    let cases: [Case; 5] = [
        (&[2, 8, 17, 19], &[8, 8, 3, 3], [1, 1, 1, 1], 1, &[17, 19]),
        (
            &[1, 16, 22, 22],
            &[12, 16, 3, 3],
            [0, 0, 0, 0],
            1,
            &[20, 20],
        ),
        (&[1, 9, 18, 18], &[10, 9, 3, 3], [0, 2, 1, 0], 1, &[17, 18]),
        (&[1, 16, 20, 21], &[16, 8, 3, 3], [1, 1, 1, 1], 2, &[20, 21]),
        (&[1, 8, 15, 30], &[8, 8, 3, 3], [2, 2, 2, 2], 1, &[17, 32]),
    ];
    for (xs, ws, pads, group, out) in cases {
        assert!(winograd::applies(&plan_of(xs, ws, pads, group)), "{xs:?}");
        let g = Geo {
            pad_begin: pads[..2].to_vec(),
            group,
            ..geo(2)
        };
        let attrs = [
            ("pads", ints(&pads.map(|v| v as i64))),
            ("group", int(group as i64)),
        ];
        check_conv(xs, ws, true, &attrs, &g, out);
    }
}

#[test]
fn winograd_bands_and_activation_match_reference() {
    let (xs, ws) = ([2usize, 8, 30, 26], [8usize, 8, 3, 3]);
    let p = plan_of(&xs, &ws, [1, 1, 1, 1], 1);
    let x = rand64(xs.iter().product(), 51);
    let w = rand64(ws.iter().product(), 52);
    let b = rand64(8, 53);
    let g = Geo {
        pad_begin: vec![1, 1],
        ..geo(2)
    };
    let want: Vec<f64> = ref_conv(&x, &xs, &w, &ws, Some(&b), &g, &[30, 26])
        .into_iter()
        .map(|v| v.max(0.0))
        .collect();
    let u = {
        let mut fresh = None;
        WeightCache::default()
            .get(false, &p, &w, &mut fresh)
            .to_vec()
    };
    // 8 tile rows: one band, bands of 3 (the last one short) and of 1.
    let per_row = 36 * (8 + 8) * 7;
    for rows in [8, 3, 1] {
        let mut y = vec![f64::NAN; want.len()];
        let relu = Some(crate::ops::gemm::fused::Activation::Relu);
        winograd::banded(&p, &u, &x, Some(&b), relu, &mut y, rows * per_row);
        assert_close(&y, &want, 1e-10, 1e-10);
    }
}

#[test]
fn transformed_weights_are_kept_for_a_constant_w() {
    let (xs, ws) = ([1usize, 16, 20, 20], [16usize, 16, 3, 3]);
    let x = t32(&xs, &rand64(xs.iter().product(), 61));
    let w = t32(&ws, &rand64(ws.iter().product(), 62));
    let w2 = t32(&ws, &rand64(ws.iter().product(), 63));
    let attrs = [
        ("pads", ints(&[1, 1, 1, 1])),
        ("activation", string("Relu")),
    ];
    let fixed = build_op("Conv", 13, &attrs, &[None, Some(&w)], 2, 1).unwrap();
    let free = build_op("Conv", 13, &attrs, &[], 2, 1).unwrap();
    let first = fixed.run(&[Some(&x), Some(&w)]).unwrap();
    let again = fixed.run(&[Some(&x), Some(&w)]).unwrap();
    assert_eq!(bits(&first[0]), bits(&again[0]));
    assert_eq!(
        bits(&first[0]),
        bits(&free.run(&[Some(&x), Some(&w)]).unwrap()[0])
    );
    // Without a constant W, each run transforms the W it is given.
    let other = free.run(&[Some(&x), Some(&w2)]).unwrap();
    assert_ne!(bits(&first[0]), bits(&other[0]));
}
