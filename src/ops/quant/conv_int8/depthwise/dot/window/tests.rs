//! The window kernel's tables against a naive depthwise sum (on every
//! architecture, by emulating the permutation), the geometries they
//! refuse, and the AVX-512 kernel against the padded-plane kernel's bytes.

use super::*;
use crate::ops::testutil::xorshift32;

/// A key for a `k`×`k` kernel over `h`×`w` with stride, dilation and pad
/// on every side.
fn key(h: usize, w: usize, k: usize, stride: usize, dil: usize, pad: usize, fill: u8) -> Key {
    let out = |d: usize| (d + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    Key {
        input: [h, w],
        output: [out(h), out(w)],
        kernel: [k, k],
        strides: [stride; 2],
        dilations: [dil; 2],
        pad_begin: [pad; 2],
        fill,
    }
}

/// The sums output by output and tap, padding reading `fill`.
fn naive(key: &Key, plane: &[u8], quads: &[i32], per_row: usize, start: i32) -> Vec<i32> {
    let ([ih, iw], [oh, ow], [kh, kw]) = (key.input, key.output, key.kernel);
    let mut sums = vec![start; oh * ow];
    for oy in 0..oh {
        for ox in 0..ow {
            for ky in 0..kh {
                for kx in 0..kw {
                    let iy = (oy * key.strides[0] + ky * key.dilations[0]) as isize
                        - key.pad_begin[0] as isize;
                    let ix = (ox * key.strides[1] + kx * key.dilations[1]) as isize
                        - key.pad_begin[1] as isize;
                    let x = if (0..ih as isize).contains(&iy) && (0..iw as isize).contains(&ix) {
                        plane[iy as usize * iw + ix as usize]
                    } else {
                        key.fill
                    };
                    let w = quads[ky * per_row + kx / 4].to_le_bytes()[kx % 4] as i8;
                    sums[oy * ow + ox] += x as i32 * w as i32;
                }
            }
        }
    }
    sums
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
        let key = key(h, w, k, s, d, p, next() as u8);
        let per_row = k.div_ceil(4);
        let t = Tables::new(key, per_row).unwrap_or_else(|| panic!("{key:?} fits"));
        let plane: Vec<u8> = (0..h * w).map(|_| next() as u8).collect();
        let quads: Vec<i32> = (0..k * per_row)
            .map(|i| {
                // Taps past a row's end have zero weights, as in `Quads`.
                let mut b = (next() as i32).to_le_bytes();
                for (x, byte) in b.iter_mut().enumerate() {
                    if (i % per_row) * 4 + x >= k {
                        *byte = 0;
                    }
                }
                i32::from_le_bytes(b)
            })
            .collect();
        assert_eq!(
            emulated(&t, &plane, &quads, -55),
            naive(&key, &plane, &quads, per_row, -55),
            "{key:?}"
        );
    }
}

#[test]
fn wide_windows_and_large_planes_are_refused() {
    // Three rows of 56 bytes exceed one window of 128.
    assert!(Tables::new(key(56, 56, 3, 1, 1, 1, 0), 1).is_none());
    // 28×28 at stride 2 reads three rows of 28: fits.
    assert!(Tables::new(key(28, 28, 3, 2, 1, 1, 0), 1).is_some());
    // 40×40 fits a window per vector but needs 40·3·3 permutations.
    assert!(Tables::new(key(40, 40, 3, 1, 1, 1, 0), 1).is_none());
    // Short rows share a vector only while their bytes fit: 7-wide rows
    // of a 7×7 kernel need 13 input rows for two output rows.
    let t = Tables::new(key(4, 7, 7, 1, 1, 3, 0), 2).unwrap();
    assert_eq!(t.vectors.len(), 2, "two output rows per vector");
    let t = Tables::new(key(20, 60, 7, 1, 1, 3, 0), 2);
    assert!(t.is_none(), "seven rows of 60 bytes do not fit");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_vnni_kernel_gives_the_padded_plane_kernels_bytes() {
    use crate::ops::conv::geom::Window;
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
            let out = |x: usize| (x + 2 * p - d * (k - 1) - 1) / s + 1;
            let win = Window {
                input: vec![h, w],
                kernel: vec![k, k],
                strides: vec![s; 2],
                dilations: vec![d; 2],
                pad_begin: vec![p; 2],
                pad_end: vec![p; 2],
                output: vec![out(h), out(w)],
            };
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
