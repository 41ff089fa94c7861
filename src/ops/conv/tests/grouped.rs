//! The direct grouped kernel (x86-64, f32) against the naive reference:
//! groups of 2 to 32 channels, output channels per group that end in a
//! partial block, odd planes, planes narrower than a vector, pads, stride
//! 2, dilation, bias or none; both instruction sets where the CPU has
//! them; fused activations and a residual through the operator; bit
//! identity across thread counts.

use super::{fused_cases, geo, rand64, ref_conv, t32, Geo};
use crate::ir::attributes::Attribute;
use crate::ir::Fusion;
use crate::ops::conv::choice::{choose, Algorithm};
use crate::ops::conv::conv_op::{plan, ConvArgs, ConvPlan, Weights};
use crate::ops::conv::geom::WindowAttrs;
use crate::ops::conv::{grouped, tap_kernel::Isa};
use crate::ops::testutil::{
    assert_close, assert_tensor_close, bits, build_fused, int, ints, with_threads,
};

/// One layer: X's shape, W's shape, groups, stride, dilations (rows,
/// columns), pads (top, left, bottom, right).
type Layer = ([usize; 4], [usize; 4], usize, usize, [usize; 2], [usize; 4]);

const LAYERS: [Layer; 11] = [
    // ResNeXt-like: 32 groups of 4 to 32 channels.
    ([1, 128, 9, 9], [128, 4, 3, 3], 32, 1, [1, 1], [1, 1, 1, 1]),
    ([1, 256, 7, 7], [256, 8, 3, 3], 32, 1, [1, 1], [1, 1, 1, 1]),
    ([1, 64, 5, 5], [64, 32, 3, 3], 2, 1, [1, 1], [1, 1, 1, 1]),
    // 6 and 5 output channels per group: a partial block of 2 and of 1.
    ([2, 12, 11, 13], [18, 4, 3, 3], 3, 1, [1, 1], [1, 1, 1, 1]),
    ([1, 6, 8, 17], [10, 3, 3, 3], 2, 1, [1, 1], [0, 2, 1, 0]),
    // Planes narrower than a vector, and one of one column.
    ([1, 8, 3, 4], [8, 4, 3, 3], 2, 1, [1, 1], [1, 1, 1, 1]),
    ([1, 8, 6, 1], [12, 4, 3, 3], 2, 1, [1, 1], [1, 1, 1, 1]),
    // Stride 2 (even and odd sides), dilation, asymmetric pads.
    ([1, 32, 14, 14], [32, 8, 3, 3], 4, 2, [1, 1], [1, 1, 1, 1]),
    ([2, 16, 9, 11], [24, 8, 3, 3], 2, 2, [1, 1], [1, 0, 1, 2]),
    ([1, 16, 11, 6], [16, 8, 3, 3], 2, 1, [2, 1], [2, 1, 2, 1]),
    // Unpadded 5×3 kernel, two channels per group.
    ([1, 10, 12, 9], [15, 2, 5, 3], 5, 1, [1, 1], [0, 0, 0, 0]),
];

/// The layer's attributes, reference geometry and output plane.
fn layer(l: &Layer) -> (Vec<(&'static str, Attribute)>, Geo, Vec<usize>) {
    let (xs, ws, group, stride, dil, pads) = *l;
    let attrs = vec![
        ("group", int(group as i64)),
        ("strides", ints(&[stride as i64; 2])),
        ("dilations", ints(&dil.map(|d| d as i64))),
        ("pads", ints(&pads.map(|p| p as i64))),
    ];
    let g = Geo {
        strides: vec![stride; 2],
        dil: dil.to_vec(),
        pad_begin: vec![pads[0], pads[1]],
        group,
    };
    let out = (0..2)
        .map(|a| (xs[2 + a] + pads[a] + pads[a + 2] - dil[a] * (ws[2 + a] - 1) - 1) / stride + 1)
        .collect();
    (attrs, g, out)
}

/// The instruction sets this CPU runs the kernel with.
fn isas() -> Vec<Isa> {
    use crate::ops::gemm::simd::{has_avx2_fma, has_avx512};
    let mut v = Vec::new();
    if has_avx512() {
        v.push(Isa::Avx512);
    }
    if has_avx2_fma() {
        v.push(Isa::Avx2);
    }
    v
}

/// The layer's plan.
fn layer_plan(l: &Layer) -> ConvPlan {
    let (xs, ws, group, stride, dil, pads) = *l;
    let window = WindowAttrs {
        kernel: None,
        strides: Some(vec![stride; 2]),
        dilations: Some(dil.to_vec()),
        pads: Some(pads.to_vec()),
        auto_pad: crate::ops::conv::geom::AutoPad::NotSet,
    };
    plan(&window, group, &xs, &ws, None).unwrap()
}

/// Runs the kernel itself on `isa` (no operator around it).
fn kernel(l: &Layer, x: &[f32], w: &[f32], b: Option<&[f32]>, isa: Isa) -> Vec<f32> {
    let p = layer_plan(l);
    assert!(grouped::suits(&p), "{l:?}");
    let weights = Weights::new(false);
    let a = ConvArgs {
        p: &p,
        x,
        w,
        b,
        z: None,
        act: None,
        weights: &weights,
    };
    let mut y = vec![f32::NAN; p.out_shape.iter().product()];
    grouped::run(&a, isa, &mut y);
    y
}

#[test]
fn grouped_kernel_matches_the_reference_on_each_isa() {
    let isas = isas();
    if isas.is_empty() {
        eprintln!("skipped: the kernel needs AVX2 with FMA or AVX-512");
        return;
    }
    for (i, l) in LAYERS.iter().enumerate() {
        let (xs, ws, ..) = *l;
        let (_, g, out) = layer(l);
        let x = rand64(xs.iter().product(), 31 + i as u64);
        let w = rand64(ws.iter().product(), 41 + i as u64);
        let bias = rand64(ws[0], 51 + i as u64);
        let f = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
        let (x32, w32, b32) = (f(&x), f(&w), f(&bias));
        for b in [None, Some(bias.as_slice())] {
            let want = ref_conv(&x, &xs, &w, &ws, b, &g, &out);
            for &isa in &isas {
                let b32 = b.map(|_| b32.as_slice());
                let got = kernel(l, &x32, &w32, b32, isa);
                let got: Vec<f64> = got.iter().map(|&v| f64::from(v)).collect();
                assert_close(&got, &want, 1e-4, 1e-4);
            }
        }
    }
}

/// The operator takes the kernel for these layers (where the CPU has it)
/// and gives the reference's values, fused activations and a residual
/// included, with the same bits on 1, 2 and 3 threads.
#[test]
fn grouped_conv_fuses_and_keeps_its_bits_across_threads() {
    for (i, l) in LAYERS.iter().enumerate() {
        let (xs, ws, ..) = *l;
        let (attrs, g, out) = layer(l);
        if !isas().is_empty() {
            let p = layer_plan(l);
            assert!(
                matches!(choose(&p, true), Algorithm::Grouped(_)),
                "{l:?} takes {:?}",
                choose(&p, true)
            );
        }
        let x = rand64(xs.iter().product(), 61 + i as u64);
        let w = rand64(ws.iter().product(), 71 + i as u64);
        let b = rand64(ws[0], 81 + i as u64);
        let plain = ref_conv(&x, &xs, &w, &ws, Some(&b), &g, &out);
        let (xt, wt, bt) = (t32(&xs, &x), t32(&ws, &w), t32(&[ws[0]], &b));
        let mut yshape = vec![xs[0], ws[0]];
        yshape.extend_from_slice(&out);
        let zv = rand64(plain.len(), 91 + i as u64);
        let zt = t32(&yshape, &zv);
        let cases = fused_cases(&plain, &zv);
        for (what, fusion, want) in cases {
            let mut ins = vec![Some(&xt), Some(&wt), Some(&bt)];
            if fusion.residual {
                ins.push(Some(&zt));
            }
            let op = build_fused("Conv", 13, &attrs, &fusion, &[], ins.len(), 1).unwrap();
            let one = with_threads(1, || op.run(&ins)).unwrap();
            assert_tensor_close(&one[0], &want, 1e-4, 1e-4);
            for threads in [2, 3] {
                let again = with_threads(threads, || op.run(&ins)).unwrap();
                assert_eq!(bits(&one[0]), bits(&again[0]), "{l:?} {what} {threads}");
            }
        }
    }
}

/// Enough output channels and positions for every thread count to split
/// the blocks differently: the same bits on 1, 2, 3 and 5 threads.
#[test]
fn grouped_conv_bits_identical_on_a_large_layer() {
    let (xs, ws) = ([2, 128, 20, 20], [128, 4, 3, 3]);
    let attrs = vec![("group", int(32)), ("pads", ints(&[1, 1, 1, 1]))];
    let (xv, wv, bv) = (
        rand64(xs.iter().product(), 101),
        rand64(ws.iter().product(), 102),
        rand64(ws[0], 103),
    );
    let (x, w, b) = (t32(&xs, &xv), t32(&ws, &wv), t32(&[ws[0]], &bv));
    let op = build_fused("Conv", 13, &attrs, &Fusion::NONE, &[], 3, 1).unwrap();
    let ins = [Some(&x), Some(&w), Some(&b)];
    let one = with_threads(1, || op.run(&ins)).unwrap();
    let (g, out) = (
        Geo {
            pad_begin: vec![1, 1],
            group: 32,
            ..geo(2)
        },
        [20, 20],
    );
    let want = ref_conv(&xv, &xs, &wv, &ws, Some(&bv), &g, &out);
    assert_tensor_close(&one[0], &want, 1e-4, 1e-4);
    for threads in [2, 3, 5] {
        let again = with_threads(threads, || op.run(&ins)).unwrap();
        assert_eq!(bits(&one[0]), bits(&again[0]), "{threads} threads");
    }
}
