//! The AVX2 1×1 kernel (on CPUs that have it; the `gemm` crate elsewhere)
//! against the naive reference: row lengths that end in a whole strip, an
//! 8-wide tail or a pulled-back strip, panels pulled back over a partial
//! block of 6 channels, groups, images, long sums packed in several chunks,
//! and each fused activation.

use super::{check_conv, geo, rand64, ref_conv, t32, Geo};
use crate::ir::Activation;
use crate::ops::testutil::{activation, assert_tensor_close, int, run_fused};

#[test]
fn pointwise_blocks_cover_every_output() {
    // (input shape, weight shape, group)
    let cases: [(&[usize], &[usize], usize); 7] = [
        (&[1, 5, 4, 4], &[13, 5, 1, 1], 1), // 16 positions, 13 channels
        (&[2, 6, 7, 7], &[6, 6, 1, 1], 1),  // 49: an 8-wide tail
        (&[1, 4, 5, 8], &[7, 4, 1, 1], 1),  // 40: a tail of exactly 8
        (&[1, 3, 3, 19], &[8, 3, 1, 1], 1), // 57: a strip pulled back
        (&[1, 6, 5, 5], &[14, 3, 1, 1], 2), // groups of 7 channels
        (&[1, 600, 9, 10], &[6, 600, 1, 1], 1), // strips packed in 2 chunks
        (&[1, 2, 2, 2], &[6, 2, 1, 1], 1),  // 4 positions: the GEMM path
    ];
    for (xs, ws, group) in cases {
        let g = Geo { group, ..geo(2) };
        let out = [xs[2], xs[3]];
        check_conv(xs, ws, true, &[("group", int(group as i64))], &g, &out);
        check_conv(xs, ws, false, &[("group", int(group as i64))], &g, &out);
    }
}

#[test]
fn pointwise_applies_each_fused_activation() {
    let (xs, ws) = ([1, 8, 6, 7], [9, 8, 1, 1]);
    let x = rand64(xs.iter().product(), 41);
    let w = rand64(ws.iter().product(), 42);
    let b = rand64(ws[0], 43);
    let plain = ref_conv(&x, &xs, &w, &ws, Some(&b), &geo(2), &[6, 7]);
    let inputs = (t32(&xs, &x), t32(&ws, &w), t32(&[ws[0]], &b));
    type Case = (&'static str, Activation, fn(f64) -> f64);
    let cases: [Case; 3] = [
        ("Relu", Activation::Relu, |v| v.max(0.0)),
        ("Clip", Activation::Clip(-0.5, 0.25), |v| {
            v.clamp(-0.5, 0.25)
        }),
        ("Sigmoid", Activation::Sigmoid, |v| 1.0 / (1.0 + (-v).exp())),
    ];
    for (name, act, f) in cases {
        let y = run_fused(
            "Conv",
            13,
            &[],
            &activation(act),
            &[Some(&inputs.0), Some(&inputs.1), Some(&inputs.2)],
        )
        .unwrap();
        let want: Vec<f64> = plain.iter().map(|&v| f(v)).collect();
        assert!(
            want.iter().any(|&v| v != f(-1e9)),
            "{name}: not all clipped"
        );
        assert_tensor_close(&y[0], &want, 1e-4, 1e-4);
    }
}
