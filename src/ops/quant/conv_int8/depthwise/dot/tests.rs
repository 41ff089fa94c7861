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
    let mut s = 12345u32;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s
    };
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
                &mut got,
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
