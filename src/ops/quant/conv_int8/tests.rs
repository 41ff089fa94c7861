//! The fast int8 convolution against the naive one: 1×1, 3×3 padded,
//! strided, dilated, grouped and depthwise (with a channel multiplier),
//! u8 and s8 data, scalar and per-channel weight zero points. The i32 sums
//! must be equal; requantized values within one step of the f64 reference.

use super::*;
use crate::ops::quant::conv::tests_support::{naive_i32, shifted};

fn window(
    input: [usize; 2],
    kernel: [usize; 2],
    stride: usize,
    dil: usize,
    pad: [usize; 4],
) -> Window {
    let out = |d: usize| (input[d] + pad[d] + pad[d + 2] - dil * (kernel[d] - 1) - 1) / stride + 1;
    Window {
        input: input.to_vec(),
        kernel: kernel.to_vec(),
        strides: vec![stride; 2],
        dilations: vec![dil; 2],
        pad_begin: vec![pad[0], pad[1]],
        pad_end: vec![pad[2], pad[3]],
        output: vec![out(0), out(1)],
    }
}

fn bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as u8
        })
        .collect()
}

fn tensor(shape: &[usize], b: Vec<u8>, signed: bool) -> Tensor {
    if signed {
        Tensor::from_vec(shape, b.into_iter().map(|v| v as i8).collect::<Vec<_>>()).unwrap()
    } else {
        Tensor::from_vec(shape, b).unwrap()
    }
}

#[allow(clippy::too_many_arguments)]
fn case(
    n: usize,
    c: usize,
    m: usize,
    group: usize,
    win: Window,
    signed: (bool, bool),
    per_channel: bool,
    seed: u32,
) {
    let (x_signed, w_signed) = signed;
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let xs = [n, c, win.input[0], win.input[1]];
    let ws = [m, c / group, kh, kw];
    let x = tensor(&xs, bytes(xs.iter().product(), seed), x_signed);
    let w = tensor(&ws, bytes(ws.iter().product(), seed + 1), w_signed);
    let zx = if x_signed { -3 } else { 131 };
    let zw: Vec<i32> = if per_channel {
        (0..m)
            .map(|i| {
                if w_signed {
                    i as i32 % 5 - 2
                } else {
                    120 + i as i32 % 9
                }
            })
            .collect()
    } else {
        vec![if w_signed { 0 } else { 128 }]
    };
    let zw_t = if per_channel {
        tensor(&[m], zw.iter().map(|&v| v as u8).collect(), w_signed)
    } else {
        tensor(&[], zw.iter().map(|&v| v as u8).collect(), w_signed)
    };
    let want = naive_i32(
        &win,
        group,
        &shifted(&x, zx),
        &xs,
        &shifted_w(&w, &zw, m),
        m,
    );
    let prep = prepare(&w, Some(&zw_t), group)
        .unwrap()
        .expect("fast path applies");
    let out_shape = [n, m, win.output[0], win.output[1]];
    let bias: Vec<i32> = (0..m as i32).map(|i| i * 37 - 500).collect();
    let conv = Conv {
        win: &win,
        group,
        zero_x: zx,
        bias: Some(&bias),
        output: Output::Wide,
    };
    let got = conv.run(&prep, &x, &out_shape).unwrap();
    let plane = win.out_len();
    let want_b: Vec<i32> = want
        .iter()
        .enumerate()
        .map(|(i, v)| v + bias[(i / plane) % m])
        .collect();
    assert_eq!(
        got.view::<i32>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        want_b,
        "{xs:?} {ws:?} group {group}"
    );
    // Requantized: within one step of round(v · s) + zp in f64.
    let scale: Vec<f32> = (0..m).map(|i| 0.001 + i as f32 * 1e-4).collect();
    let conv = Conv {
        win: &win,
        group,
        zero_x: zx,
        bias: Some(&bias),
        output: Output::Quant {
            scale: &scale,
            zero: 7,
            signed: true,
        },
    };
    let got = conv.run(&prep, &x, &out_shape).unwrap();
    for (i, (&g, &v)) in got.view::<i8>().unwrap().iter().zip(&want_b).enumerate() {
        let r = ((v as f64 * scale[(i / plane) % m] as f64).round() + 7.0).clamp(-128.0, 127.0);
        assert!((g as f64 - r).abs() <= 1.0, "element {i}: {g} vs {r}");
    }
}

fn shifted_w(w: &Tensor, zw: &[i32], m: usize) -> Vec<i32> {
    let per = w.len() / m;
    shifted(w, 0)
        .iter()
        .enumerate()
        .map(|(i, v)| v - zw[if zw.len() == 1 { 0 } else { i / per }])
        .collect()
}

#[test]
fn gemm_convolutions_match_the_naive_kernel() {
    let mut seed = 10;
    for (x_signed, w_signed, per) in [
        (false, true, false),
        (false, true, true),
        (true, false, true),
        (true, true, false),
    ] {
        seed += 10;
        case(
            1,
            16,
            24,
            1,
            window([9, 9], [1, 1], 1, 1, [0; 4]),
            (x_signed, w_signed),
            per,
            seed,
        );
        case(
            2,
            5,
            9,
            1,
            window([11, 7], [3, 3], 1, 1, [1; 4]),
            (x_signed, w_signed),
            per,
            seed + 1,
        );
        case(
            1,
            6,
            8,
            1,
            window([13, 10], [3, 3], 2, 1, [1, 0, 1, 2]),
            (x_signed, w_signed),
            per,
            seed + 2,
        );
        // Stride-2 output rows of 20: runs longer than one 16-word vector
        // of the even-word copy, panels that span rows.
        case(
            1,
            8,
            8,
            1,
            window([40, 39], [3, 3], 2, 1, [1; 4]),
            (x_signed, w_signed),
            per,
            seed + 5,
        );
        case(
            1,
            3,
            16,
            1,
            window([12, 12], [7, 7], 2, 1, [3; 4]),
            (x_signed, w_signed),
            per,
            seed + 3,
        );
        case(
            1,
            8,
            12,
            4,
            window([6, 9], [3, 3], 1, 2, [2; 4]),
            (x_signed, w_signed),
            per,
            seed + 4,
        );
        case(
            1,
            4,
            4,
            1,
            window([40, 40], [1, 1], 2, 1, [0; 4]),
            (x_signed, w_signed),
            per,
            seed + 5,
        );
        // Strided 1×1 (the subsampled direct path): odd widths, rows of
        // more than 64 input bytes, stride 3, two images, groups of 4.
        for (n, c, group, input, stride) in [
            (1, 8, 1, [57, 57], 2),
            (2, 4, 1, [9, 131], 2),
            (1, 12, 1, [20, 17], 3),
            (1, 8, 2, [14, 14], 2),
        ] {
            case(
                n,
                c,
                8,
                group,
                window(input, [1, 1], stride, 1, [0; 4]),
                (x_signed, w_signed),
                per,
                seed + 8,
            );
        }
        // Staged rows wider than one register run, a last channel group
        // of two.
        case(
            1,
            6,
            8,
            1,
            window([5, 45], [3, 3], 1, 1, [1; 4]),
            (x_signed, w_signed),
            per,
            seed + 9,
        );
        // Windows wider than the image: runs that are all padding.
        case(
            1,
            2,
            8,
            1,
            window([2, 3], [5, 5], 1, 1, [3; 4]),
            (x_signed, w_signed),
            per,
            seed + 6,
        );
        case(
            1,
            2,
            8,
            1,
            window([1, 1], [3, 3], 2, 1, [2; 4]),
            (x_signed, w_signed),
            per,
            seed + 7,
        );
    }
}

#[test]
fn depthwise_convolutions_match_the_naive_kernel() {
    let mut seed = 100;
    for (x_signed, w_signed, per) in [
        (false, true, true),
        (true, false, false),
        (false, false, true),
    ] {
        seed += 10;
        case(
            2,
            16,
            16,
            16,
            window([14, 14], [3, 3], 1, 1, [1; 4]),
            (x_signed, w_signed),
            per,
            seed,
        );
        case(
            1,
            8,
            8,
            8,
            window([15, 13], [3, 3], 2, 1, [1; 4]),
            (x_signed, w_signed),
            per,
            seed + 1,
        );
        case(
            1,
            4,
            8,
            4,
            window([9, 9], [5, 5], 2, 1, [2, 1, 2, 1]),
            (x_signed, w_signed),
            per,
            seed + 2,
        );
        case(
            1,
            3,
            3,
            3,
            window([10, 10], [3, 3], 1, 2, [0; 4]),
            (x_signed, w_signed),
            per,
            seed + 3,
        );
    }
}

#[test]
fn depthwise_dot_products_match_the_naive_kernel() {
    // Scalar weight zero points (0 for s8, 128 for u8) keep every w − zw in
    // i8, so the dot-product kernel takes these where the CPU has it.
    let mut seed = 300;
    for (x_signed, w_signed) in [(false, true), (true, false), (true, true)] {
        for (input, kernel, stride, dil, pad) in [
            ([7, 7], [3, 3], 1, 1, [1; 4]),
            ([16, 17], [3, 3], 1, 1, [1; 4]),
            ([33, 31], [3, 3], 2, 1, [1, 0, 1, 1]),
            ([20, 20], [5, 5], 2, 1, [2; 4]),
            ([13, 13], [7, 7], 1, 1, [3; 4]),
            ([12, 15], [3, 3], 3, 2, [2, 1, 0, 3]),
            ([1, 1], [3, 3], 1, 1, [1; 4]),
            ([9, 40], [1, 4], 1, 1, [0; 4]),
        ] {
            seed += 1;
            let win = window(input, kernel, stride, dil, pad);
            let w = tensor(
                &[6, 1, kernel[0], kernel[1]],
                vec![0; 6 * kernel[0] * kernel[1]],
                w_signed,
            );
            let zw = tensor(&[], vec![if w_signed { 0 } else { 128 }], w_signed);
            match prepare(&w, Some(&zw), 6).unwrap() {
                Some(Prepared::Depthwise(d)) => assert!(d.has_dot_weights()),
                other => panic!("expected depthwise weights, got {other:?}"),
            }
            case(1, 6, 6, 6, win, (x_signed, w_signed), false, seed);
        }
    }
}

/// Stride-1 convolutions on planes wide enough for the in-place product:
/// the requantized bytes equal the engine's scalar requantization of the
/// naive kernel's sums, element for element; the unstored columns (past
/// each output row, and past the last one in the last panel) are never
/// written over a neighbour.
#[test]
fn in_place_convolutions_give_the_naive_sums_requantized() {
    use crate::ops::quant::engine::sink::requantize;
    let mut seed = 500;
    // (images, channels, output channels, group, window)
    let cases = [
        (1, 8, 16, 1, window([56, 56], [3, 3], 1, 1, [1; 4])),
        (2, 6, 9, 1, window([45, 61], [3, 3], 1, 1, [1; 4])),
        (1, 8, 12, 2, window([50, 128], [3, 3], 1, 2, [2; 4])),
        (1, 4, 8, 1, window([40, 90], [5, 5], 1, 1, [2, 1, 2, 3])),
        (1, 3, 8, 1, window([33, 97], [3, 3], 1, 1, [0, 1, 0, 1])),
    ];
    for (x_signed, w_signed, out_signed) in [(false, true, false), (true, false, true)] {
        for (n, c, m, group, win) in cases.clone() {
            seed += 1;
            assert!(
                im2col::InPlacePlan::new(&win, c / group).is_some(),
                "{win:?} should read its input in place"
            );
            let (kh, kw) = (win.kernel[0], win.kernel[1]);
            let xs = [n, c, win.input[0], win.input[1]];
            let ws = [m, c / group, kh, kw];
            let x = tensor(&xs, bytes(xs.iter().product(), seed), x_signed);
            let w = tensor(&ws, bytes(ws.iter().product(), seed + 1), w_signed);
            let zx = if x_signed { 5 } else { 120 };
            // No weight zero point (in the s8 domain): the in-place path.
            let zw = vec![if w_signed { 0 } else { 128 }];
            let zw_t = tensor(&[], zw.iter().map(|&v| v as u8).collect(), w_signed);
            let sums = naive_i32(
                &win,
                group,
                &shifted(&x, zx),
                &xs,
                &shifted_w(&w, &zw, m),
                m,
            );
            let prep = prepare(&w, Some(&zw_t), group).unwrap().unwrap();
            let bias: Vec<i32> = (0..m as i32).map(|i| i * 53 - 300).collect();
            let scale: Vec<f32> = (0..m).map(|i| 0.002 + i as f32 * 3e-4).collect();
            let (zy, range) = if out_signed {
                (-4, (-128, 127))
            } else {
                (9, (0, 255))
            };
            let conv = Conv {
                win: &win,
                group,
                zero_x: zx,
                bias: Some(&bias),
                output: Output::Quant {
                    scale: &scale,
                    zero: zy,
                    signed: out_signed,
                },
            };
            let out_shape = [n, m, win.output[0], win.output[1]];
            let got = conv.run(&prep, &x, &out_shape).unwrap();
            let got = got.as_bytes().unwrap();
            let plane = win.out_len();
            let (lo, hi) = ((range.0 - zy) as f32, (range.1 - zy) as f32);
            for (i, (&g, &v)) in got.iter().zip(&sums).enumerate() {
                let ch = (i / plane) % m;
                let want = requantize(v + bias[ch], scale[ch], zy, lo, hi) as u8;
                assert_eq!(g, want, "{xs:?} {ws:?} element {i}");
            }
        }
    }
}
