//! The window kernel's tables against the naive depthwise sum (on every
//! architecture, by emulating the permutation), the geometries they
//! refuse, and the AVX-512 kernel against the padded-plane kernel's bytes.

use super::super::tests::naive_plane;
use super::*;
use crate::ops::conv::geom::Window;
use crate::ops::testutil::xorshift32;

/// The window of a `k`×`k` kernel over `h`×`w` with stride, dilation
/// and pad on every side.
fn window(h: usize, w: usize, k: usize, stride: usize, dil: usize, pad: usize) -> Window {
    let out = |d: usize| (d + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    Window {
        input: vec![h, w],
        kernel: vec![k, k],
        strides: vec![stride; 2],
        dilations: vec![dil; 2],
        pad_begin: vec![pad; 2],
        pad_end: vec![pad; 2],
        output: vec![out(h), out(w)],
    }
}

/// Its key with a zero fill byte.
fn key(h: usize, w: usize, k: usize, stride: usize, dil: usize, pad: usize) -> Key {
    Key::new(&window(h, w, k, stride, dil, pad), [k, k], 0).unwrap()
}

/// The sums as the kernel forms them, with the permutation emulated.
fn emulated(t: &Tables, plane: &[u8], quads: &[i32], start: i32) -> Vec<i32> {
    let mut sums = vec![0; t.plane_out];
    for (v, vec) in t.vectors.iter().enumerate() {
        let window: Vec<u8> = (0..WINDOW)
            .map(|i| plane.get(vec.start + i).copied().unwrap_or(0))
            .collect();
        let mut lanes = [start; LANES];
        for (q, &quad) in quads.iter().enumerate() {
            let (index, keep) = (&t.index[v * t.taps + q].0, t.keep[v * t.taps + q]);
            for (j, lane) in lanes.iter_mut().enumerate() {
                for b in 0..4 {
                    let i = 4 * j + b;
                    let x = if keep >> i & 1 == 1 {
                        window[index[i] as usize]
                    } else {
                        index[i]
                    };
                    *lane += x as i32 * quad.to_le_bytes()[b] as i8 as i32;
                }
            }
        }
        // Stored in order, lanes past the plane dropped.
        for (j, &s) in lanes.iter().enumerate() {
            if let Some(o) = sums.get_mut(vec.first + j) {
                *o = s;
            }
        }
    }
    sums
}

/// Geometries of MobileNet-like small planes and odd ones.
const KEYS: &[(usize, usize, usize, usize, usize, usize)] = &[
    (7, 7, 3, 1, 1, 1),
    (14, 14, 3, 2, 1, 1),
    (14, 14, 3, 1, 1, 1),
    (28, 28, 3, 1, 1, 1),
    (9, 5, 5, 1, 1, 2),
    (12, 13, 3, 1, 2, 2),
    (1, 1, 3, 1, 1, 1),
    (6, 20, 7, 1, 1, 3),
    (3, 40, 3, 2, 1, 0),
];

#[test]
fn the_tables_gather_every_tap_and_the_padding() {
    let mut next = xorshift32(99);
    for &(h, w, k, s, d, p) in KEYS {
        let win = window(h, w, k, s, d, p);
        let fill = next() as u8;
        let key = Key::new(&win, [k, k], fill).unwrap();
        let taps: Vec<i16> = (0..k * k).map(|_| (next() % 255) as i16 - 127).collect();
        let quads = Quads::new(&taps, 1, [k, k]).unwrap();
        let t = Tables::new(key, quads.per_row).unwrap_or_else(|| panic!("{key:?} fits"));
        let plane: Vec<u8> = (0..h * w).map(|_| next() as u8).collect();
        // Σ x·w with padding reading `fill` is the naive Σ (x − fill)·w
        // plus fill · Σ w.
        let sum_w: i32 = taps.iter().map(|&t| t as i32).sum();
        let want = naive_plane(
            &win,
            &taps,
            &plane,
            false,
            fill as i32,
            -55 + fill as i32 * sum_w,
        );
        assert_eq!(emulated(&t, &plane, &quads.quads, -55), want, "{key:?}");
    }
}

#[test]
fn wide_windows_and_large_planes_are_refused() {
    // Three rows of 56 bytes exceed one window of 128.
    assert!(Tables::new(key(56, 56, 3, 1, 1, 1), 1).is_none());
    // 28×28 at stride 2 reads three rows of 28: fits.
    assert!(Tables::new(key(28, 28, 3, 2, 1, 1), 1).is_some());
    // 40×40 fits a window per vector but needs 40·3·3 permutations.
    assert!(Tables::new(key(40, 40, 3, 1, 1, 1), 1).is_none());
    // Short rows share a vector only while their bytes fit: 7-wide rows
    // of a 7×7 kernel need 13 input rows for two output rows.
    let t = Tables::new(key(4, 7, 7, 1, 1, 3), 2).unwrap();
    assert_eq!(t.vectors.len(), 2, "two output rows per vector");
    let t = Tables::new(key(20, 60, 7, 1, 1, 3), 2);
    assert!(t.is_none(), "seven rows of 60 bytes do not fit");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_vnni_kernel_gives_the_padded_plane_kernels_bytes() {
    if !super::super::has_dot() {
        return;
    }
    let mut next = xorshift32(7);
    for &(h, w, k, s, d, p) in KEYS {
        for signed in [false, true] {
            let (m, channels, n) = (6, 3, 2);
            let taps: Vec<i16> = (0..m * k * k)
                .map(|_| (next() % 255) as i16 - 127)
                .collect();
            let quads = Quads::new(&taps, m, [k, k]).unwrap();
            let win = window(h, w, k, s, d, p);
            let zx = if signed { -7 } else { 131 };
            let t = quads.window_tables(&win, zx, signed).expect("applies");
            let x: Vec<u8> = (0..n * channels * h * w).map(|_| next() as u8).collect();
            let bias: Vec<i32> = (0..m as i32).map(|i| i * 911 - 2000).collect();
            let scale: Vec<f32> = (0..m).map(|i| 0.002 + i as f32 * 3e-4).collect();
            let (zero, lo, hi) = (5, -5.0, 250.0);
            let plane_out = win.out_len();
            let mut got = vec![0u8; n * m * plane_out];
            let planes = Planes {
                x: &x,
                channels,
                signed,
                bias: Some(&bias),
                scale: &scale,
                zero,
                lo,
                hi,
            };
            // Two chunks, the second starting mid-batch.
            let (a, b) = got.split_at_mut(5 * plane_out);
            planes.run(&quads, &t, 0, a);
            planes.run(&quads, &t, 5, b);
            let plan = quads.plan(&win).expect("the padded-plane kernel applies");
            let mut scratch = super::super::Scratch::EMPTY;
            let mut want = vec![0u8; n * m * plane_out];
            for (pl, o) in want.chunks_exact_mut(plane_out).enumerate() {
                let (img, oc) = (pl / m, pl % m);
                let src = &x[(img * channels + oc / (m / channels)) * h * w..][..h * w];
                let out = super::super::Out::Bytes {
                    out: o,
                    scale: scale[oc],
                    zero,
                    lo,
                    hi,
                };
                plan.plane(&quads, oc, src, signed, zx, bias[oc], &mut scratch, out);
            }
            assert_eq!(got, want, "{h}x{w} k{k} s{s} d{d} p{p} signed {signed}");
        }
    }
}
