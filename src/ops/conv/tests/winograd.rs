//! The Winograd F(4×4, 3×3) and F(2×2, 3×3) paths against the direct
//! references: their transforms on single tiles, which shapes take which
//! algorithm, whole convolutions of awkward sizes, groups, bands and fused
//! activations, and the cache of transformed weights.

use super::super::conv_op::{plan, ConvPlan};
use super::super::geom::{AutoPad, WindowAttrs};
use super::super::panels;
use super::super::winograd::transform::{self, Variant};
use super::super::winograd::{self, transform_into, Algo, WeightCache, F2, F4};
use super::{check_conv, geo, rand64, ref_conv, t32, Geo};
use crate::ops::gemm::fused::Activation;
use crate::ops::testutil::{activation, assert_close, bits, build_fused, ints};

/// The three transforms of one tile equal the m×m direct correlation, in
/// a block of `tiles` (the others reading zero padding): a full block of
/// lanes, or half of one.
fn one_tile<V: Variant>(tiles: usize) {
    let (m, n) = (V::OUT, V::OUT + 2);
    let lanes = transform::LANES;
    let d = rand64(n * n, 41);
    let g = rand64(9, 42);
    let mut u = vec![0.0; V::POSITIONS];
    V::weight(&g, &mut u, 1);
    let blk = transform::InputBlock {
        plane: &d,
        width: n,
        height: n,
        y0: 0,
        x0: 0,
        tiles,
    };
    // One tile in lane 0 of a block; the other lanes read zero padding (or
    // past a half block, are not written).
    let mut v = vec![f64::NAN; V::POSITIONS * lanes];
    V::input(&blk, &mut v, lanes);
    let prod: Vec<f64> = (0..v.len()).map(|i| u[i / lanes] * v[i]).collect();
    let mut out = [[f64::NAN; transform::MAX_OUT * transform::LANES]; transform::MAX_OUT];
    V::output(&prod, lanes, tiles, &mut out);
    let y: Vec<f64> = (0..m * m).map(|o| out[o / m][o % m]).collect();
    let mut want = vec![0.0; m * m];
    for (o, w) in want.iter_mut().enumerate() {
        let (oy, ox) = (o / m, o % m);
        for k in 0..9 {
            *w += d[(oy + k / 3) * n + ox + k % 3] * g[k];
        }
    }
    assert_close(&y, &want, 1e-12, 1e-12);
}

#[test]
fn transforms_of_one_tile_equal_direct_correlation() {
    for tiles in [1, transform::LANES] {
        one_tile::<F4>(tiles);
        one_tile::<F2>(tiles);
    }
}

/// Plans a 3×3 convolution of `xs` with `ws` and the given pads.
fn plan_of(xs: &[usize], ws: &[usize], pads: [usize; 4], group: usize) -> ConvPlan {
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
fn each_algorithm_takes_the_shapes_it_pays_for() {
    let p = |xs: &[usize], ws: &[usize], group| plan_of(xs, ws, [1, 1, 1, 1], group);
    let f4 = Some(Algo::F4x4);
    let f2 = Some(Algo::F2x2);
    // 25 tiles of 4×4 at 20×20; 16 at 14×14 and 13×13, where the 49 tiles
    // of 2×2 go to F(2×2) with 64 channels or more on each side; 36 of
    // them at 11×11, 25 at 10×10.
    let wide = [256, 256, 3, 3];
    assert_eq!(winograd::choose(&p(&[1, 8, 20, 20], &[8, 8, 3, 3], 1)), f4);
    assert_eq!(winograd::choose(&p(&[1, 256, 14, 14], &wide, 1)), f2);
    assert_eq!(winograd::choose(&p(&[1, 256, 13, 13], &wide, 1)), f2);
    assert_eq!(winograd::choose(&p(&[1, 256, 11, 11], &wide, 1)), f2);
    assert_eq!(winograd::choose(&p(&[1, 256, 10, 10], &wide, 1)), None);
    // The example model's 128 and 64 channels on 12×12 (36 tiles of 2×2).
    let mid = [128, 128, 3, 3];
    assert_eq!(winograd::choose(&p(&[1, 128, 12, 12], &mid, 1)), f2);
    assert_eq!(
        winograd::choose(&p(&[1, 64, 12, 12], &[128, 64, 3, 3], 1)),
        f2
    );
    let narrow_in = [64, 48, 3, 3];
    let narrow_out = [48, 64, 3, 3];
    assert_eq!(winograd::choose(&p(&[1, 48, 14, 14], &narrow_in, 1)), None);
    assert_eq!(winograd::choose(&p(&[1, 64, 14, 14], &narrow_out, 1)), None);
    // Too few output or input channels per group.
    assert_eq!(
        winograd::choose(&p(&[1, 8, 20, 20], &[4, 8, 3, 3], 1)),
        None
    );
    assert_eq!(
        winograd::choose(&p(&[1, 3, 20, 20], &[8, 3, 3, 3], 1)),
        None
    );
    assert_eq!(
        winograd::choose(&p(&[1, 16, 20, 20], &[16, 4, 3, 3], 4)),
        None
    );
    // Not 3×3.
    assert_eq!(
        winograd::choose(&p(&[1, 8, 20, 20], &[8, 8, 5, 5], 1)),
        None
    );
}

/// Both algorithms on sizes that are not multiples of their tiles, no
/// padding, asymmetric padding, two images and two groups, in f64 and f32.
fn awkward_shapes<V: Variant>(algo: Algo) {
    type Case<'a> = (&'a [usize], &'a [usize], [usize; 4], usize, &'a [usize]);
    // Rows of up to 8 tiles take half blocks of lanes; 70 columns make full
    // blocks and a half one after them.
    let cases: [Case; 9] = [
        (&[1, 8, 10, 70], &[8, 8, 3, 3], [1, 1, 1, 1], 1, &[10, 70]),
        (&[2, 8, 17, 19], &[8, 8, 3, 3], [1, 1, 1, 1], 1, &[17, 19]),
        (&[1, 16, 22, 22], &[12, 16, 3, 3], [0; 4], 1, &[20, 20]),
        (&[1, 9, 18, 18], &[10, 9, 3, 3], [0, 2, 1, 0], 1, &[17, 18]),
        (&[1, 16, 20, 21], &[16, 8, 3, 3], [1, 1, 1, 1], 2, &[20, 21]),
        (&[1, 8, 15, 30], &[8, 8, 3, 3], [2, 2, 2, 2], 1, &[17, 32]),
        (&[2, 8, 13, 13], &[8, 8, 3, 3], [1, 1, 1, 1], 1, &[13, 13]),
        (&[1, 12, 15, 13], &[9, 12, 3, 3], [0, 1, 2, 0], 1, &[15, 12]),
        (&[1, 16, 14, 14], &[16, 8, 3, 3], [1, 1, 1, 1], 2, &[14, 14]),
    ];
    for (xs, ws, pads, group, out) in cases {
        let p = plan_of(xs, ws, pads, group);
        let x = rand64(xs.iter().product(), 71);
        let w = rand64(ws.iter().product(), 72);
        let b = rand64(ws[0], 73);
        let g = Geo {
            pad_begin: pads[..2].to_vec(),
            group,
            ..geo(2)
        };
        let want = ref_conv(&x, xs, &w, ws, Some(&b), &g, out);
        let (y64, y32) = both_types::<V>(algo, &p, (&x, &w, &b), None, 1 << 21);
        assert_close(&y64, &want, 1e-10, 1e-10);
        assert_close(&y32, &want, 1e-4, 1e-4);
    }
}

/// The banded convolution of X, W and B (given in f64) in f64 and in f32
/// (on the panel GEMM where the CPU has it), both as f64.
fn both_types<V: Variant>(
    algo: Algo,
    p: &ConvPlan,
    (x, w, b): (&[f64], &[f64], &[f64]),
    act: Option<Activation>,
    band_elems: usize,
) -> (Vec<f64>, Vec<f64>) {
    let len = p.out_shape.iter().product();
    let (cache, mut fresh) = (WeightCache::default(), None);
    let u = cache.get(algo, false, p, w, &mut fresh);
    let mut y64 = vec![f64::NAN; len];
    winograd::banded::<V, f64>(p, u, x, Some(b), None, act, &mut y64, band_elems);
    let narrow = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
    let (x, w, b) = (narrow(x), narrow(w), narrow(b));
    let (cache, mut fresh) = (WeightCache::default(), None);
    let u = cache.get(algo, false, p, &w, &mut fresh);
    let mut y32 = vec![f32::NAN; len];
    winograd::banded::<V, f32>(p, u, &x, Some(&b), None, act, &mut y32, band_elems);
    (y64, y32.into_iter().map(f64::from).collect())
}

#[test]
fn winograd_matches_reference_on_awkward_shapes() {
    awkward_shapes::<F4>(Algo::F4x4);
    awkward_shapes::<F2>(Algo::F2x2);
}

#[test]
fn conv_takes_each_algorithm_and_matches_reference() {
    // Through the operator, in f32: F(4×4) at 17×19, F(2×2) at 11×11 with
    // 256 channels.
    type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], Algo);
    let cases: [Case; 2] = [
        (&[2, 8, 17, 19], &[8, 8, 3, 3], &[17, 19], Algo::F4x4),
        (&[1, 256, 11, 11], &[256, 256, 3, 3], &[11, 11], Algo::F2x2),
    ];
    for (xs, ws, out, algo) in cases {
        let p = plan_of(xs, ws, [1; 4], 1);
        assert_eq!(winograd::choose(&p), Some(algo), "{xs:?}");
        let g = Geo {
            pad_begin: vec![1, 1],
            ..geo(2)
        };
        check_conv(xs, ws, true, &[("pads", ints(&[1; 4]))], &g, out);
    }
}

/// One band, bands of 3 tile rows (the last one short) and of 1 give the
/// reference output, with bias and Relu, in f64 and f32.
fn bands<V: Variant>(algo: Algo) {
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
    let (across, down) = (26usize.div_ceil(V::OUT), 30usize.div_ceil(V::OUT));
    let per_row = V::POSITIONS * (8 + 8) * across;
    // One tile row is narrower than a strip of the panel GEMM (7 or 13
    // tiles), three are wider but not a multiple of it.
    for rows in [down, 3, 1] {
        let relu = Some(Activation::Relu);
        let (y64, y32) = both_types::<V>(algo, &p, (&x, &w, &b), relu, rows * per_row);
        assert_close(&y64, &want, 1e-10, 1e-10);
        assert_close(&y32, &want, 1e-4, 1e-4);
    }
}

#[test]
fn winograd_bands_and_activation_match_reference() {
    bands::<F4>(Algo::F4x4);
    bands::<F2>(Algo::F2x2);
}

#[test]
fn transformed_weights_are_kept_for_a_constant_w() {
    // 20×20 takes F(4×4), 14×14 with 128 channels F(2×2).
    for (side, ch) in [(20, 16), (14, 128)] {
        let (xs, ws) = ([1usize, ch, side, side], [ch, ch, 3, 3]);
        let x = t32(&xs, &rand64(xs.iter().product(), 61));
        let w = t32(&ws, &rand64(ws.iter().product(), 62));
        let w2 = t32(&ws, &rand64(ws.iter().product(), 63));
        let attrs = [("pads", ints(&[1, 1, 1, 1]))];
        let relu = activation(Activation::Relu);
        let fixed = build_fused("Conv", 13, &attrs, &relu, &[None, Some(&w)], 2, 1).unwrap();
        let free = build_fused("Conv", 13, &attrs, &relu, &[], 2, 1).unwrap();
        let first = fixed.run(&[Some(&x), Some(&w)]).unwrap();
        let again = fixed.run(&[Some(&x), Some(&w)]).unwrap();
        assert_eq!(bits(&first[0]), bits(&again[0]));
        let unfixed = free.run(&[Some(&x), Some(&w)]).unwrap();
        assert_eq!(bits(&first[0]), bits(&unfixed[0]));
        // Without a constant W, each run transforms the W it is given.
        let other = free.run(&[Some(&x), Some(&w2)]).unwrap();
        assert_ne!(bits(&first[0]), bits(&other[0]));
    }
}

/// The weights transformed straight into the panel layout equal the plain
/// transform packed afterwards, bit for bit: groups, output channels that
/// leave a part panel (10 = 6 + 4) and both algorithms.
fn packed_transform<V: Variant>() {
    for (m, c, group) in [(10, 8, 1), (16, 24, 2), (12, 9, 3)] {
        let ws = [m, c / group, 3, 3];
        let p = plan_of(&[1, c, 16, 16], &ws, [1, 1, 1, 1], group);
        let w: Vec<f32> = rand64(ws.iter().product(), 71)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let plain = transform_into::<V, f32>(&p, &w, false);
        let want = panels::pack(V::POSITIONS * group, m / group, c / group, &plain);
        let got = transform_into::<V, f32>(&p, &w, true);
        assert_eq!(got.len(), want.len(), "{m}×{c} group {group}");
        let to_bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(to_bits(&got), to_bits(&want), "{m}×{c} group {group}");
    }
}

#[test]
fn weights_transform_straight_into_panels() {
    packed_transform::<F4>();
    packed_transform::<F2>();
}
