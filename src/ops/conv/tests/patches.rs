//! The non-overlapping (patch) convolution (kernel = stride, no padding:
//! the packed-weights GEMM on x86-64, im2col elsewhere) against the naive
//! reference: odd channel counts, non-square images whose sides are not
//! multiples of the stride (the leftover rows and columns are read by no
//! output), non-square patches, output channels that end in a partial
//! panel, several images, W as a constant (packed once and kept) or not,
//! bias, fused activations and a fused residual, and bit identity across
//! thread counts.

use super::{check_conv, fused_cases, geo, rand64, ref_conv, t32, Geo};
use crate::ir::attributes::Attribute;
use crate::ops::testutil::{assert_tensor_close, bits, build_fused, ints, with_threads};
use crate::tensor::Tensor;

/// The attributes and reference geometry of a `kh×kw` patch convolution.
fn patch(kh: usize, kw: usize) -> (Vec<(&'static str, Attribute)>, Geo) {
    let s = [kh as i64, kw as i64];
    let attrs = vec![
        ("kernel_shape", ints(&s)),
        ("strides", ints(&s)),
        ("pads", ints(&[0, 0, 0, 0])),
    ];
    let g = Geo {
        strides: vec![kh, kw],
        ..geo(2)
    };
    (attrs, g)
}

#[test]
fn patch_conv_matches_the_reference() {
    // (input shape, weight shape)
    let cases: [(&[usize], &[usize]); 8] = [
        (&[1, 3, 32, 48], &[19, 3, 16, 16]), // ViT-like: 2×3 patches, 19 channels
        (&[1, 3, 37, 29], &[7, 3, 4, 4]),    // leftover rows and columns
        (&[2, 5, 12, 20], &[33, 5, 2, 2]),   // two images, 33 = 32 + 1 channels
        (&[1, 7, 9, 10], &[13, 7, 3, 2]),    // non-square patches, odd widths
        (&[1, 1, 8, 8], &[1, 1, 8, 8]),      // one position, one channel
        (&[1, 96, 14, 14], &[40, 96, 2, 2]), // downsampling: many channels
        (&[1, 2, 5, 64], &[12, 2, 5, 1]),    // runs of one column
        (&[3, 4, 6, 6], &[25, 4, 3, 3]),     // 12-row blocks across images
    ];
    for (xs, ws) in cases {
        let (attrs, g) = patch(ws[2], ws[3]);
        let out = [xs[2] / ws[2], xs[3] / ws[3]];
        check_conv(xs, ws, true, &attrs, &g, &out);
        check_conv(xs, ws, false, &attrs, &g, &out);
    }
}

/// Runs a built Conv on X, W and B (and Z when given).
fn run_built(op: &dyn crate::ir::Operator, ins: &[&Tensor]) -> Vec<u64> {
    let inputs: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
    bits(&op.run(&inputs).unwrap()[0])
}

#[test]
fn patch_conv_fuses_activation_and_residual_and_keeps_its_bits() {
    let (xs, ws) = ([2, 6, 20, 26], [37, 6, 4, 4]);
    let out = [5, 6];
    let (attrs, g) = patch(4, 4);
    let x = rand64(xs.iter().product(), 51);
    let w = rand64(ws.iter().product(), 52);
    let b = rand64(ws[0], 53);
    let plain = ref_conv(&x, &xs, &w, &ws, Some(&b), &g, &out);
    let (xt, wt, bt) = (t32(&xs, &x), t32(&ws, &w), t32(&[ws[0]], &b));
    let yshape = [2, 37, 5, 6];
    let zv = rand64(plain.len(), 54);
    let zt = t32(&yshape, &zv);
    let cases = fused_cases(&plain, &zv);
    for (what, fusion, want) in cases {
        let mut ins = vec![&xt, &wt, &bt];
        if fusion.residual {
            ins.push(&zt);
        }
        // W as a graph constant (packed once, kept) and as a plain input.
        for consts in [vec![None, Some(&wt)], vec![]] {
            let op = build_fused("Conv", 13, &attrs, &fusion, &consts, ins.len(), 1).unwrap();
            let one = with_threads(1, || {
                op.run(&ins.iter().map(|&t| Some(t)).collect::<Vec<_>>())
            })
            .unwrap();
            assert_tensor_close(&one[0], &want, 1e-4, 1e-4);
            let one = bits(&one[0]);
            for threads in [1, 2, 3, 5] {
                let again = with_threads(threads, || run_built(op.as_ref(), &ins));
                assert_eq!(one, again, "{what}, {threads} threads");
            }
        }
    }
}
