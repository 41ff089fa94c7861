//! The int8 engine against a naive i32 product: every kernel, both operand
//! signednesses, zero points per tensor and per row, ragged edges, and
//! serial against parallel splits.

use super::panel::{flip_mask, pack_columns, pack_k_rows};
use super::*;

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn byte(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 24) as u8
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}

/// Packs k-major rows `[k][cols]`.
struct Rows<'a> {
    x: &'a [u8],
    k: usize,
    cols: usize,
    flip: u8,
}
impl PanelSource for Rows<'_> {
    fn pack(&self, panel: &mut [u8], c0: usize, n: usize) {
        pack_k_rows(panel, self.x, self.k, self.cols, (c0, n), self.flip);
    }
}

/// Packs columns `[cols][k]`.
struct Cols<'a> {
    x: &'a [u8],
    k: usize,
    flip: u8,
}
impl PanelSource for Cols<'_> {
    fn pack(&self, panel: &mut [u8], c0: usize, n: usize) {
        pack_columns(panel, self.x, self.k, self.k, (c0, n), self.flip);
    }
}

/// The value of a raw byte as u8 or s8.
fn val(b: u8, signed: bool) -> i32 {
    if signed {
        b as i8 as i32
    } else {
        b as i32
    }
}

#[allow(clippy::too_many_arguments)]
fn naive(
    w: &[u8],
    w_signed: bool,
    zw: &[i32],
    x: &[u8],
    x_signed: bool,
    zx: i32,
    (rows, k, cols): (usize, usize, usize),
    bias: &[i32],
) -> Vec<i32> {
    let mut out = vec![0i32; rows * cols];
    for r in 0..rows {
        let z = zw[if zw.len() == 1 { 0 } else { r }];
        for c in 0..cols {
            let mut acc = bias[r];
            for kk in 0..k {
                acc += (val(w[r * k + kk], w_signed) - z) * (val(x[kk * cols + c], x_signed) - zx);
            }
            out[r * cols + c] = acc;
        }
    }
    out
}

fn check(
    rows: usize,
    k: usize,
    cols: usize,
    w_signed: bool,
    x_signed: bool,
    per_row: bool,
    seed: u64,
) {
    let mut rng = Rng(seed);
    let w = rng.bytes(rows * k);
    let x = rng.bytes(k * cols);
    let zw: Vec<i32> = if per_row {
        (0..rows).map(|_| val(rng.byte(), w_signed)).collect()
    } else if w_signed {
        vec![0]
    } else {
        vec![val(rng.byte(), false)]
    };
    let zx = val(rng.byte(), x_signed);
    let bias: Vec<i32> = (0..rows).map(|i| i as i32 * 1000 - 7000).collect();
    let want = naive(&w, w_signed, &zw, &x, x_signed, zx, (rows, k, cols), &bias);
    let packed = PackedS8::pack(&w, rows, k, (k, 1), !w_signed, &zw);
    let zx_u8 = zx + if x_signed { 128 } else { 0 };
    let product = Product {
        w: &packed,
        cols,
        zero_x: zx_u8,
        bias: Some(&bias),
    };
    let flip = flip_mask(x_signed);
    // k-major source, split over 1 and 3 threads: the same bits.
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut got = vec![0i32; rows * cols];
        pool.install(|| {
            product.run(
                &Rows {
                    x: &x,
                    k,
                    cols,
                    flip,
                },
                &WideSink::new(&mut got, (cols, 1)),
            )
        });
        assert_eq!(got, want, "rows {rows} k {k} cols {cols} threads {threads}");
    }
    // The same product from a column-major copy of X, stored transposed.
    let xt: Vec<u8> = (0..cols * k).map(|i| x[(i % k) * cols + i / k]).collect();
    let mut got_t = vec![0i32; rows * cols];
    product.run(
        &Cols { x: &xt, k, flip },
        &WideSink::new(&mut got_t, (1, rows)),
    );
    let want_t: Vec<i32> = (0..rows * cols)
        .map(|i| want[(i % rows) * cols + i / rows])
        .collect();
    assert_eq!(got_t, want_t, "transposed rows {rows} k {k} cols {cols}");
}

#[test]
fn products_match_naive_sums() {
    let mut seed = 1;
    for (rows, k, cols) in [
        (8, 4, 32),
        (1, 1, 1),
        (13, 27, 70),
        (64, 147, 33),
        (24, 9, 100),
        (3, 301, 5),
    ] {
        for (ws, xs, per_row) in [
            (true, false, false),
            (true, false, true),
            (false, true, true),
            (false, false, false),
            (true, true, true),
        ] {
            seed += 1;
            check(rows, k, cols, ws, xs, per_row, seed);
        }
    }
}

#[test]
fn vnni_and_portable_kernels_agree_at_the_extremes() {
    // 255 × −128 in every lane: the products a saturating 16-bit pair sum
    // would clip.
    let k4 = 40;
    let w = vec![-128i8; k4 * MR * 4];
    let x = vec![255u8; k4 * NR * 4];
    let mut a: Tile = [0; MR * NR];
    let mut b: Tile = [0; MR * NR];
    kernel::tile(
        crate::ops::overflow::Int8Kernel::Auto.resolve(),
        &w,
        &x,
        k4,
        &mut a,
    );
    kernel::tile_portable(&w, &x, k4, &mut b);
    assert_eq!(a, b);
    assert!(a.iter().all(|&v| v == -255 * 128 * 4 * k4 as i32));
}

#[test]
fn requantization_rounds_ties_to_even_and_saturates() {
    use super::sink::requantize;
    // 2.5 → 2, 3.5 → 4, −2.5 → −2; then + zp and the clamp.
    assert_eq!(requantize(5, 0.5, 0, -1000.0, 1000.0), 2);
    assert_eq!(requantize(7, 0.5, 0, -1000.0, 1000.0), 4);
    assert_eq!(requantize(-5, 0.5, 0, -1000.0, 1000.0), -2);
    assert_eq!(requantize(1_000_000, 1.0, 10, -10.0, 245.0), 255);
    assert_eq!(requantize(-1_000_000, 1.0, 10, -10.0, 245.0), 0);
}

#[test]
fn whole_tiles_requantize_as_rows_do() {
    // The tile path (AVX-512 where present) against requantize_row, which
    // is the reference: every row length, per-row and shared scales, NaN
    // and infinite scales, values at the i32 extremes.
    let mut tile: Tile = [0; MR * NR];
    for (i, v) in tile.iter_mut().enumerate() {
        *v = (i as i32 * 7919 - 100_000) * if i % 5 == 0 { 1 } else { 3 };
    }
    tile[3] = i32::MAX;
    tile[4] = i32::MIN;
    tile[NR + 1] = 0;
    let scales = [0.013, 1e-4, f32::NAN, f32::INFINITY, 0.5, -0.02, 1.0, 3e-3];
    for nc in [1, 5, 16, 17, 31, 32] {
        for nr in [1, 3, MR] {
            for (shared, zp, lo, hi) in [(false, 7, -135.0, 120.0), (true, 128, -128.0, 127.0)] {
                let sc: &[f32] = if shared { &scales[..1] } else { &scales[..nr] };
                let mut got = vec![0xAAu8; MR * NR];
                {
                    let mut rows: Vec<&mut [u8]> =
                        got.chunks_mut(NR).take(nr).map(|r| &mut r[..nc]).collect();
                    sink::requantize_tile(&tile, &mut rows, sc, zp, lo, hi);
                }
                let mut want = vec![0xAAu8; MR * NR];
                for (r, row) in want.chunks_mut(NR).take(nr).enumerate() {
                    let s = sc[if shared { 0 } else { r }];
                    sink::requantize_row(&tile[r * NR..][..nc], &mut row[..nc], s, zp, lo, hi);
                }
                assert_eq!(got, want, "nc {nc} nr {nr} shared {shared}");
            }
        }
    }
}

/// A [`QuantSink`] that takes every tile through `store`: the unfused
/// path, against which the fused kernel is checked.
struct Unfused<'a>(QuantSink<'a>);

impl Sink for Unfused<'_> {
    fn store(&self, r0: usize, c0: usize, nr: usize, nc: usize, tile: &Tile) {
        self.0.store(r0, c0, nr, nc, tile);
    }
}

#[test]
fn fused_requantization_gives_the_bytes_of_the_sink() {
    // Ragged rows and columns, per-row and shared scales, u8 and s8 ranges,
    // a row stride wider than the columns, 1 and 3 threads.
    let mut rng = Rng(99);
    for (rows, k, cols, per_row, range) in [
        (8, 16, 32, true, (0, 255)),
        (13, 40, 45, false, (-128, 127)),
        (5, 7, 3, true, (-128, 127)),
        (24, 300, 70, true, (0, 255)),
    ] {
        let w = rng.bytes(rows * k);
        let x = rng.bytes(k * cols);
        let packed = PackedS8::pack(&w, rows, k, (k, 1), false, &[0]);
        let bias: Vec<i32> = (0..rows).map(|i| i as i32 * 311 - 2000).collect();
        let product = Product {
            w: &packed,
            cols,
            zero_x: 77,
            bias: Some(&bias),
        };
        let scales: Vec<f32> = (0..if per_row { rows } else { 1 })
            .map(|i| 2e-4 + i as f32 * 3e-5)
            .collect();
        let stride = cols + 5;
        let src = Rows {
            x: &x,
            k,
            cols,
            flip: 0,
        };
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut fused = vec![0xEEu8; rows * stride];
            let mut plain = vec![0xEEu8; rows * stride];
            pool.install(|| {
                let sink = QuantSink::new(&mut fused, (stride, 1), &scales, 3, range);
                assert!(sink.requant().is_some());
                product.run(&src, &sink);
                let sink = Unfused(QuantSink::new(&mut plain, (stride, 1), &scales, 3, range));
                product.run(&src, &sink);
            });
            assert_eq!(
                fused, plain,
                "rows {rows} k {k} cols {cols} threads {threads}"
            );
            // The gap between rows is never written.
            assert!(fused
                .chunks(stride)
                .all(|r| r[cols..].iter().all(|&b| b == 0xEE)));
            assert!(plain.iter().any(|&b| b != 0xEE && b != 3));
        }
    }
}

#[test]
fn the_narrow_kernel_is_exact_below_the_limits_and_reports_reaching_them() {
    use crate::ops::overflow::{Int8Kernel, Resolved};
    if Int8Kernel::Narrow.resolve() != Resolved::Narrow {
        return;
    }
    let k4 = 9;
    let mut rng = Rng(5);
    // Small activations: every pair sum fits i16, so the tile is exact.
    let x: Vec<u8> = (0..k4 * NR * 4).map(|_| rng.byte() % 100).collect();
    let w: Vec<i8> = (0..k4 * MR * 4).map(|_| rng.byte() as i8).collect();
    let (mut a, mut b): (Tile, Tile) = ([0; MR * NR], [0; MR * NR]);
    assert!(kernel::tile(Resolved::Narrow, &w, &x, k4, &mut a));
    kernel::tile_portable(&w, &x, k4, &mut b);
    assert_eq!(a, b);
    // 255 · 127 twice overflows one pair: flagged, and the narrow sums are
    // indeed wrong there.
    let x = vec![255u8; k4 * NR * 4];
    let w = vec![127i8; k4 * MR * 4];
    assert!(!kernel::tile(Resolved::Narrow, &w, &x, k4, &mut a));
    kernel::tile_portable(&w, &x, k4, &mut b);
    assert_ne!(a, b);
    assert!(b.iter().all(|&v| v == 255 * 127 * 4 * k4 as i32));
}

#[test]
fn the_guard_recomputes_saturated_tiles_and_counts_them() {
    use crate::ops::overflow::{scope, Int8Kernel, Int8Settings, Resolved};
    if Int8Kernel::Narrow.resolve() != Resolved::Narrow {
        return;
    }
    // Row 0 of W saturates with X's large columns; other rows do not.
    let (rows, k, cols) = (16, 64, 70);
    let w: Vec<u8> = (0..rows * k)
        .map(|i| if i < k { 127 } else { (i % 7) as u8 })
        .collect();
    let x: Vec<u8> = (0..k * cols)
        .map(|i| if i % cols < 40 { 255 } else { (i % 13) as u8 })
        .collect();
    let packed = PackedS8::pack(&w, rows, k, (k, 1), false, &[0]);
    let want = naive(&w, true, &[0], &x, false, 0, (rows, k, cols), &[0; 16]);
    let product = Product {
        w: &packed,
        cols,
        zero_x: 0,
        bias: None,
    };
    let src = Rows {
        x: &x,
        k,
        cols,
        flip: 0,
    };
    let run = |guard: bool| {
        let mut got = vec![0i32; rows * cols];
        let settings = Int8Settings {
            kernel: Int8Kernel::Narrow,
            guard,
        };
        let ((), recomputed) = scope(settings, || {
            product.run(&src, &WideSink::new(&mut got, (cols, 1)))
        });
        (got, recomputed)
    };
    let (guarded, recomputed) = run(true);
    assert_eq!(guarded, want);
    // Columns 0..40 span two panels of 32; row 0 lies in the first block
    // of 8 rows: two tiles.
    assert_eq!(recomputed, 2);
    let (unguarded, none) = run(false);
    assert_eq!(none, 0);
    assert_ne!(unguarded, want);
    assert_eq!(unguarded[cols..], want[cols..], "only row 0 saturates");
}

/// Each aarch64 kernel this CPU runs gives the portable kernel's tile, bit
/// for bit, on random bytes and at the extremes (u8 0 and 255 against s8
/// −128 and 127), for several depths.
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_kernels_match_the_portable_kernel() {
    let mut kernels = vec![(
        "widening",
        super::neon::tile_widening as unsafe fn(&[i8], &[u8], usize, &mut Tile),
    )];
    if super::neon::has_dotprod() {
        kernels.push(("dot", super::neon::tile_dot));
    }
    let mut rng = Rng(99);
    for k4 in [1, 3, 17, 64] {
        let random = (rng.bytes(k4 * MR * 4), rng.bytes(k4 * NR * 4));
        let cases = [
            random,
            (vec![0x80; k4 * MR * 4], vec![255; k4 * NR * 4]),
            (vec![0x80; k4 * MR * 4], vec![0; k4 * NR * 4]),
            (vec![0x7f; k4 * MR * 4], vec![255; k4 * NR * 4]),
        ];
        for (w, x) in &cases {
            let w: Vec<i8> = w.iter().map(|&b| b as i8).collect();
            let mut want: Tile = [0; MR * NR];
            kernel::tile_portable(&w, x, k4, &mut want);
            for (name, f) in &kernels {
                let mut got: Tile = [7; MR * NR];
                // SAFETY: the CPU has the kernel (dot only when detected);
                // both operands hold k4 groups.
                unsafe { f(&w, x, k4, &mut got) };
                assert_eq!(got, want, "{name} kernel, k4 {k4}");
            }
        }
    }
    // Auto runs one of them here.
    let auto = crate::ops::overflow::Int8Kernel::Auto.resolve();
    assert!(matches!(
        auto,
        crate::ops::overflow::Resolved::NeonDot | crate::ops::overflow::Resolved::NeonWide
    ));
}

/// The channels-in-lanes kernel ([`super::lanes`]) against the tile kernels
/// alone: the same i32 sums (wide sink, zero points ≠ 0 per tensor and per
/// row, so with column corrections) and the same requantized bytes (fused,
/// per-row and shared scales), over column counts 1..=50 (every partial
/// panel width), rows not multiples of 16 or 8, k not a multiple of 4, and
/// 1 against 2 threads.
#[test]
fn channels_in_lanes_match_the_tile_kernels() {
    let mut rng = Rng(1234);
    for (rows, k) in [(16, 12), (37, 9), (64, 23), (24, 40), (100, 5)] {
        let w = rng.bytes(rows * k);
        let bias: Vec<i32> = (0..rows).map(|i| i as i32 * 97 - 3000).collect();
        let zw_row: Vec<i32> = (0..rows).map(|_| val(rng.byte(), true)).collect();
        for cols in 1..=50 {
            let x = rng.bytes(k * cols);
            let src = Rows {
                x: &x,
                k,
                cols,
                flip: 0,
            };
            for (zw, w_signed) in [(vec![0], true), (vec![131], false), (zw_row.clone(), true)] {
                let packed = PackedS8::pack(&w, rows, k, (k, 1), !w_signed, &zw);
                let product = Product {
                    w: &packed,
                    cols,
                    zero_x: 61,
                    bias: Some(&bias),
                };
                let mut want = vec![0i32; rows * cols];
                product.run_with(&src, &WideSink::new(&mut want, (cols, 1)), false);
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    let mut got = vec![7i32; rows * cols];
                    pool.install(|| product.run(&src, &WideSink::new(&mut got, (cols, 1))));
                    assert_eq!(got, want, "rows {rows} k {k} cols {cols} threads {threads}");
                }
            }
            let packed = PackedS8::pack(&w, rows, k, (k, 1), false, &[0]);
            let product = Product {
                w: &packed,
                cols,
                zero_x: 61,
                bias: Some(&bias),
            };
            for per_row in [false, true] {
                let scales: Vec<f32> = (0..if per_row { rows } else { 1 })
                    .map(|i| 1e-4 + i as f32 * 2e-5)
                    .collect();
                let stride = cols + 3;
                let mut want = vec![0xEEu8; rows * stride];
                let sink = Unfused(QuantSink::new(&mut want, (stride, 1), &scales, 5, (0, 255)));
                product.run_with(&src, &sink, false);
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    let mut got = vec![0xEEu8; rows * stride];
                    pool.install(|| {
                        let sink = QuantSink::new(&mut got, (stride, 1), &scales, 5, (0, 255));
                        product.run(&src, &sink)
                    });
                    assert_eq!(got, want, "rows {rows} k {k} cols {cols} threads {threads}");
                }
            }
        }
    }
}
