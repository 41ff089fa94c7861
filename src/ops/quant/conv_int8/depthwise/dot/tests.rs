//! The dot-product depthwise kernel: weight quads and their sums, which
//! weights it refuses, and the AVX-512 kernel against the portable one.

use super::*;

#[test]
fn quads_hold_four_taps_per_row_with_zeros_past_the_end() {
    // Two channels of a 2 × 5 kernel: rows of 5 taps make two quads each.
    let taps: Vec<i16> = (0..20).map(|i| i as i16 - 10).collect();
    let q = Quads::new(&taps, 2, [2, 5]).unwrap();
    assert_eq!(q.per_row, 2);
    assert_eq!(q.quads.len(), 2 * 2 * 2);
    assert_eq!(q.quads[0].to_le_bytes().map(|b| b as i8), [-10, -9, -8, -7]);
    assert_eq!(q.quads[1].to_le_bytes().map(|b| b as i8), [-6, 0, 0, 0]);
    assert_eq!(q.quads[2].to_le_bytes().map(|b| b as i8), [-5, -4, -3, -2]);
    assert_eq!(q.sums, vec![(-10..0).sum::<i32>(), (0..10).sum::<i32>()]);
}

#[test]
fn weights_outside_i8_are_refused() {
    assert!(Quads::new(&[127, -128, 0, 1], 1, [2, 2]).is_some());
    assert!(Quads::new(&[128, 0, 0, 0], 1, [2, 2]).is_none());
    assert!(Quads::new(&[0, 0, -129, 0], 1, [2, 2]).is_none());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_vnni_kernel_gives_the_portable_sums() {
    if !has_dot() {
        return;
    }
    let mut next = crate::ops::testutil::xorshift32(12345);
    for (oh, ow, sh, sw, dh, dw, kh, per_row) in [
        (5, 7, 1, 1, 1, 1, 3, 1),
        (4, 16, 2, 2, 1, 1, 3, 1),
        (3, 33, 1, 3, 2, 2, 5, 2),
        (2, 1, 1, 1, 1, 1, 1, 1),
        // Short rows, several per vector; a last vector with fewer rows.
        (9, 3, 2, 2, 1, 1, 3, 1),
        (7, 5, 1, 1, 1, 1, 3, 1),
        (11, 8, 1, 1, 1, 1, 3, 1),
    ] {
        let pw = (ow - 1) * sw + (4 * per_row - 1) * dw + 1;
        let ph = (oh - 1) * sh + (kh - 1) * dh + 1;
        let g = Geometry {
            pw,
            oh,
            ow,
            sh,
            sw,
            dh,
            dw,
            kh,
            per_row,
        };
        let pad: Vec<u8> = (0..ph * pw + SPAN).map(|_| next() as u8).collect();
        let quads: Vec<i32> = (0..kh * per_row).map(|_| next() as i32).collect();
        let mut want = vec![0; oh * ow + LANES];
        let mut got = vec![0; oh * ow + LANES];
        plane_portable(&g, &pad, &quads, -77, &mut want);
        let cover = g.cover();
        // SAFETY: checked features; buffers sized as `plane` sizes them.
        unsafe {
            plane_vnni(
                &g,
                cover,
                &g.gather_index(cover),
                &pad,
                &quads,
                -77,
                &mut VecSink::Wide(&mut got),
            )
        };
        assert_eq!(got[..oh * ow], want[..oh * ow], "{oh}x{ow} stride {sw}");
        assert!(g.cover().count * LANES >= oh * ow);
    }
}

#[test]
fn short_rows_share_vectors_only_while_their_bytes_fit_one_load() {
    let g = |ow: usize, sh: usize, pw: usize| Geometry {
        pw,
        oh: 7,
        ow,
        sh,
        sw: 1,
        dh: 1,
        dw: 1,
        kh: 3,
        per_row: 1,
    };
    // 7 × 7 outputs, 9-byte padded rows: two rows per vector, four vectors.
    let c = g(7, 1, 9).cover();
    assert_eq!((c.rows, c.per_row, c.count), (2, 1, 4));
    // Rows 30 bytes apart: the second row's bytes would pass 64.
    let c = g(7, 2, 30).cover();
    assert_eq!((c.rows, c.per_row, c.count), (1, 1, 7));
    // Long rows: two vectors per row.
    let c = g(20, 1, 22).cover();
    assert_eq!((c.rows, c.per_row, c.count), (1, 2, 14));
    let idx = g(7, 1, 9).gather_index(g(7, 1, 9).cover());
    // Lane 8 is row 1, column 1: byte 9 + 1, its tap 2 at 9 + 1 + 2.
    assert_eq!(idx[4 * 8 + 2], 12);
}

/// The naive sums of one depthwise plane: taps past the input read `zx`.
#[allow(clippy::too_many_arguments)]
pub(super) fn naive_plane(
    win: &Window,
    taps: &[i16],
    src: &[u8],
    signed: bool,
    zx: i32,
    bias: i32,
) -> Vec<i32> {
    let (ih, iw) = (win.input[0] as isize, win.input[1] as isize);
    let [kh, kw] = [win.kernel[0], win.kernel[1]];
    let mut out = Vec::new();
    for oy in 0..win.output[0] {
        for ox in 0..win.output[1] {
            let mut sum = bias;
            for ky in 0..kh {
                for kx in 0..kw {
                    let y = (oy * win.strides[0] + ky * win.dilations[0]) as isize
                        - win.pad_begin[0] as isize;
                    let x = (ox * win.strides[1] + kx * win.dilations[1]) as isize
                        - win.pad_begin[1] as isize;
                    let v = if (0..ih).contains(&y) && (0..iw).contains(&x) {
                        let b = src[(y * iw + x) as usize];
                        if signed {
                            b as i8 as i32
                        } else {
                            b as i32
                        }
                    } else {
                        zx
                    };
                    sum += (v - zx) * taps[ky * kw + kx] as i32;
                }
            }
            out.push(sum);
        }
    }
    out
}

#[test]
fn one_scratch_serves_planes_of_other_layouts_and_zero_points() {
    if !has_dot() {
        return;
    }
    let mut next = crate::ops::testutil::xorshift32(777);
    let window = |ih: usize, iw: usize, stride: usize, pad: usize| Window {
        input: vec![ih, iw],
        kernel: vec![3, 3],
        strides: vec![stride, stride],
        dilations: vec![1, 1],
        pad_begin: vec![pad, pad],
        pad_end: vec![pad, pad],
        output: vec![
            (ih + 2 * pad - 3) / stride + 1,
            (iw + 2 * pad - 3) / stride + 1,
        ],
    };
    let taps: Vec<i16> = (0..18).map(|_| (next() % 200) as i16 - 100).collect();
    let q = Quads::new(&taps, 2, [3, 3]).unwrap();
    let mut scratch = Scratch::EMPTY;
    // The same layout with another zero point or signedness must refill
    // the border; another layout must too; a repeat may reuse it.
    for (win, signed, zx) in [
        (window(7, 7, 1, 1), false, 3),
        (window(7, 7, 1, 1), false, 3),
        (window(7, 7, 1, 1), false, 200),
        (window(7, 7, 1, 1), true, -5),
        (window(9, 70, 1, 1), false, 200),
        (window(7, 7, 1, 1), false, 3),
        (window(14, 14, 2, 1), true, 17),
        (window(5, 5, 1, 0), false, 9),
    ] {
        let plan = q.plan(&win).unwrap();
        let src: Vec<u8> = (0..win.in_len()).map(|_| next() as u8).collect();
        for oc in 0..2 {
            plan.plane(&q, oc, &src, signed, zx, 11, &mut scratch, Out::Sums);
            let want = naive_plane(&win, &taps[oc * 9..][..9], &src, signed, zx, 11);
            assert_eq!(scratch.acc[..want.len()], want[..], "{win:?} zx {zx}");
        }
    }
}

#[test]
fn requantized_planes_are_the_sink_requantization_of_the_sums() {
    use crate::ops::quant::engine::sink::requantize_row;
    if !has_dot() {
        return;
    }
    let mut next = crate::ops::testutil::xorshift32(4242);
    let taps: Vec<i16> = (0..9).map(|_| (next() % 200) as i16 - 100).collect();
    let q = Quads::new(&taps, 1, [3, 3]).unwrap();
    let mut scratch = Scratch::EMPTY;
    // Planes of 7×7 (short rows sharing vectors, a last vector past the
    // plane's end), 14×14 stride 2 and 19×37 (a partial vector per row).
    for (ih, iw, stride) in [(7, 7, 1), (14, 14, 2), (19, 37, 1)] {
        let win = Window {
            input: vec![ih, iw],
            kernel: vec![3, 3],
            strides: vec![stride, stride],
            dilations: vec![1, 1],
            pad_begin: vec![1, 1],
            pad_end: vec![1, 1],
            output: vec![(ih - 1) / stride + 1, (iw - 1) / stride + 1],
        };
        let plan = q.plan(&win).unwrap();
        let src: Vec<u8> = (0..ih * iw).map(|_| next() as u8).collect();
        let n = win.out_len();
        plan.plane(&q, 0, &src, false, 7, -300, &mut scratch, Out::Sums);
        let mut want = vec![0u8; n];
        // A scale that sends some sums past both ends of the range.
        requantize_row(&scratch.acc[..n], &mut want, 0.02, 120, -120.0, 135.0);
        // The byte past the plane stays as it was: no lane spills there.
        let mut got = vec![0xA5u8; n + 1];
        let out = Out::Bytes {
            out: &mut got[..n],
            scale: 0.02,
            zero: 120,
            lo: -120.0,
            hi: 135.0,
        };
        plan.plane(&q, 0, &src, false, 7, -300, &mut scratch, out);
        assert_eq!(got[..n], want[..], "{ih}x{iw} stride {stride}");
        assert_eq!(got[n], 0xA5);
        assert!(
            want.contains(&0) && want.contains(&255),
            "both ends reached"
        );
    }
}
