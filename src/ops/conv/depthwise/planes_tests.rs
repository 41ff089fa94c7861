//! The phase path's 16-lane tap sums (AVX-512: any window, and the dense
//! 3×3 window's row-reusing chunks) against a direct sum with the same
//! rounding, bit for bit, on planes whose rows and row counts are not
//! multiples of the chunks, and the same bits on 1 and 2 threads.

use super::blocked::tests::values;
use super::rows_tests::{direct, l, Layer};
use crate::ops::gemm::fused::Activation;
use crate::ops::testutil::with_threads;

/// Runs `layer` on the phase path (1 and 2 threads) against [`direct`].
fn check(layer: Layer, act: Option<Activation>) {
    let p = layer.plan();
    let (n, c) = (p.n, p.c);
    let len = p.n * p.m * p.win.out_len();
    let x = values(n * c * p.win.input[0] * p.win.input[1], 5);
    let w = values(p.m * p.win.kernel_len(), 9);
    let b = values(p.m, 3);
    let want = direct(&p, &x, &w, &b, None, act);
    let run = |threads| {
        with_threads(threads, || {
            let mut got = vec![f32::NAN; len];
            super::depthwise_2d(&p, &x, &w, Some(&b), act, &mut got);
            got
        })
    };
    let (one, two) = (run(1), run(2));
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let what = format!("{layer:?} {act:?}");
    assert_eq!(bits(&one), bits(&want), "direct: {what}");
    assert_eq!(bits(&one), bits(&two), "threads: {what}");
}

/// 3×3 at stride 1, padded and not: rows of 16 to 70 outputs (one or two
/// vectors a chunk, the last chunk pulled back), 1 to 13 rows (chunks of
/// 1, 3 and 6 rows, the last pulled back), Relu in registers and other
/// activations after.
#[test]
fn dense_3x3_on_ragged_planes() {
    let acts = [None, Some(Activation::Relu), Some(Activation::HardSwish)];
    let planes = [
        (1, 16),
        (2, 17),
        (3, 33),
        (6, 31),
        (7, 40),
        (8, 56),
        (13, 70),
    ];
    for (i, &(h, w)) in planes.iter().enumerate() {
        let act = acts[i % acts.len()];
        check(l(1, 3, h, w, 3, 1, [1, 1, 1, 1]), act);
        check(l(2, 2, h + 2, w + 2, 3, 1, [0; 4]), act);
    }
}

/// Other windows on the 16-lane chunks: 5×5 and 2×2 at stride 1 on rows
/// of 16 outputs and more, and 3×3 with uneven pads.
#[test]
fn other_windows_on_wide_rows() {
    check(l(1, 2, 9, 70, 5, 1, [2, 2, 2, 2]), Some(Activation::Relu));
    check(l(1, 3, 5, 21, 2, 1, [0, 0, 1, 1]), None);
    check(l(1, 2, 4, 18, 3, 1, [0, 1, 2, 1]), Some(Activation::Relu));
}
