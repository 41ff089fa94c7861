//! Packing ahead (`Operator::prepare`): a Conv that adopted its W and was
//! prepared for X's shape lets the original go exactly when the kernel
//! chosen for that shape reads only a packed form (the 1×1 and im2col
//! panels, the implicit-GEMM blocks, Winograd's transforms with fixed
//! shapes), keeps it otherwise (the direct stem kernel), and its run gives
//! the bits of a Conv given W as an input.

use super::super::adopted::Form;
use super::super::choice::choose;
use super::super::conv_op::plan;
use super::super::geom::WindowAttrs;
use super::{rand64, t32};
use crate::ir::attributes::{Attribute, Attributes};
use crate::ir::Fact;
use crate::ops::testutil::{bits, build_op, int, ints};
use crate::tensor::Tensor;
use std::sync::Arc;

/// (X shape, W shape, stride, pad) of layers that take each kernel.
const LAYERS: [(&[usize], &[usize], i64, i64); 5] = [
    (&[1, 16, 9, 9], &[24, 16, 1, 1], 1, 0),      // 1×1: panels
    (&[1, 16, 15, 15], &[32, 16, 3, 3], 2, 1),    // stride 2: im2col
    (&[1, 64, 20, 20], &[64, 64, 3, 3], 1, 1),    // Winograd
    (&[1, 128, 12, 12], &[128, 128, 3, 3], 1, 1), // Winograd or implicit
    (&[1, 3, 32, 32], &[16, 3, 7, 7], 2, 3),      // few channels: direct
];

fn attrs(ws: &[usize], stride: i64, pad: i64) -> Vec<(&'static str, Attribute)> {
    vec![
        ("kernel_shape", ints(&[ws[2] as i64, ws[3] as i64])),
        ("strides", ints(&[stride, stride])),
        ("pads", ints(&[pad; 4])),
        ("group", int(1)),
    ]
}

/// Whether the kernel chosen for this layer reads W only packed.
fn lets_go(xs: &[usize], ws: &[usize], stride: i64, pad: i64) -> bool {
    let mut window = WindowAttrs::parse(&Attributes::default(), true).unwrap();
    window.strides = Some(vec![stride as usize; 2]);
    window.pads = Some(vec![pad as usize; 4]);
    let p = plan(&window, 1, xs, ws, Some(&[ws[0]])).unwrap();
    Form::left_by(choose(&p, true), &p).is_some()
}

#[test]
fn prepared_convs_let_packed_weights_go_and_match_plain_runs() {
    let mut released = 0;
    for (i, &(xs, ws, stride, pad)) in LAYERS.iter().enumerate() {
        let seed = 10 * i as u64;
        let x = t32(xs, &rand64(xs.iter().product(), seed));
        let w = Arc::new(t32(ws, &rand64(ws.iter().product(), seed + 1)));
        let b = t32(&[ws[0]], &rand64(ws[0], seed + 2));
        let attrs = attrs(ws, stride, pad);
        let consts = [None, Some(&*w), Some(&b)];
        let plain = build_op("Conv", 11, &attrs, &consts, 3, 1).unwrap();
        let want = plain.run(&[Some(&x), Some(&w), Some(&b)]).unwrap();

        let op = build_op("Conv", 11, &attrs, &consts, 3, 1).unwrap();
        assert!(op.adopt_constant(1, &w, true), "layer {i}: W adopted");
        assert_eq!(Arc::strong_count(&w), 2);
        let facts = [Fact::of(&x), Fact::of(&w), Fact::of(&b)];
        op.prepare(&[Some(&facts[0]), Some(&facts[1]), Some(&facts[2])]);
        let expect_go = lets_go(xs, ws, stride, pad);
        let held = Arc::strong_count(&w) - 1;
        assert_eq!(
            held,
            usize::from(!expect_go),
            "layer {i}: the operator's copy of W"
        );
        released += usize::from(expect_go);

        let got = op.run(&[Some(&x), None, Some(&b)]).unwrap();
        assert_eq!(bits(&got[0]), bits(&want[0]), "layer {i}");
        // The run after packing ahead needs nothing more of W.
        assert_eq!(Arc::strong_count(&w) - 1, held, "layer {i}");
    }
    // Winograd layers pack on every CPU, so the test sees at least those.
    assert!(released >= 2, "only {released} layers let W go");
}

#[test]
fn unknown_or_non_float_shapes_leave_the_weights_alone() {
    let (xs, ws) = ([1, 16, 9, 9], [24, 16, 1, 1]);
    let w = Arc::new(t32(&ws, &rand64(16 * 24, 5)));
    let attrs = attrs(&ws, 1, 0);
    let op = build_op("Conv", 11, &attrs, &[None, Some(&*w)], 2, 1).unwrap();
    assert!(op.adopt_constant(1, &w, true));
    let wf = Fact::of(&w);
    op.prepare(&[None, Some(&wf)]);
    let mut unknown = Fact::of(&Tensor::from_vec(&xs, vec![0f32; 16 * 81]).unwrap());
    unknown.shape = None;
    op.prepare(&[Some(&unknown), Some(&wf)]);
    let f64_x = Fact::of(&Tensor::from_vec(&xs, vec![0f64; 16 * 81]).unwrap());
    op.prepare(&[Some(&f64_x), Some(&wf)]);
    assert_eq!(Arc::strong_count(&w), 2, "W kept without a float32 X shape");
}
