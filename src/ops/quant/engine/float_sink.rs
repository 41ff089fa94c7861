//! The int8 engine's float output: [`FloatSink`] stores
//! `f32(v) · scale[r] + bias[r]` (MatMulIntegerToFloat's epilogue), written
//! like the other sinks (see [`super::sink`]) through a raw pointer by
//! disjoint tiles.

use super::sink::{Shared, Sink};
use super::{Tile, MR, NR};

/// Scales to float32: C[r][c] becomes `f32(v) · scale[r]`, then `+ bias[r]`
/// when there is a bias (two roundings, in that order: the bits of a
/// separate Cast, Mul and Add).
pub(crate) struct FloatSink<'a> {
    out: Shared<f32>,
    len: usize,
    strides: (usize, usize),
    /// Per row of C (or one for all).
    scale: &'a [f32],
    /// Per row of C.
    bias: Option<&'a [f32]>,
    _buf: std::marker::PhantomData<&'a mut [f32]>,
}

impl<'a> FloatSink<'a> {
    /// A sink writing C[r][c] to `out[r·strides.0 + c·strides.1]`; `scale`
    /// holds one value or one per row of C, `bias` one per row.
    pub(crate) fn new(
        out: &'a mut [f32],
        strides: (usize, usize),
        scale: &'a [f32],
        bias: Option<&'a [f32]>,
    ) -> Self {
        FloatSink {
            out: Shared(out.as_mut_ptr()),
            len: out.len(),
            strides,
            scale,
            bias,
            _buf: std::marker::PhantomData,
        }
    }
}

impl Sink for FloatSink<'_> {
    fn store(&self, r0: usize, c0: usize, nr: usize, nc: usize, tile: &Tile) {
        let (rs, cs) = self.strides;
        let first = r0 * rs + c0 * cs;
        let last = first + (nr - 1) * rs + (nc - 1) * cs;
        assert!(last < self.len, "int8 engine stored outside its output");
        let scale: [f32; MR] = std::array::from_fn(|r| {
            self.scale[if self.scale.len() == 1 {
                0
            } else {
                (r0 + r).min(r0 + nr - 1)
            }]
        });
        let bias: Option<[f32; MR]> = self
            .bias
            .map(|b| std::array::from_fn(|r| b[(r0 + r).min(r0 + nr - 1)]));
        // SAFETY: every element written below is in bounds (checked above:
        // the last one is) and written by this task alone.
        let out = unsafe { self.out.0.add(first) };
        // A matrix product's tile lands transposed (`rs == 1`): eight rows
        // of C are one contiguous run of each output row, stored eight
        // columns at a time with AVX2; the columns left go one by one.
        #[cfg(target_arch = "x86_64")]
        let done = if rs == 1 && nr == MR && nc >= 8 && crate::ops::gemm::simd::has_avx2() {
            let cols = nc / 8 * 8;
            // SAFETY: AVX2 is present (checked); columns `0 .. cols` of the
            // tile's eight rows are in bounds (as above).
            unsafe { store_transposed_avx2(tile, cols, out, cs, &scale, bias.as_ref()) };
            cols
        } else {
            0
        };
        #[cfg(not(target_arch = "x86_64"))]
        let done = 0;
        for r in 0..nr {
            let row = &tile[r * NR..][..nc];
            let (s, b) = (scale[r], bias.map(|b| b[r]));
            for (c, &v) in row.iter().enumerate().skip(done) {
                let y = v as f32 * s;
                // SAFETY: as above.
                unsafe { *out.add(r * rs + c * cs) = b.map_or(y, |b| y + b) };
            }
        }
    }
}

/// Columns `0 .. cols` (a multiple of 8) of an eight-row tile stored
/// transposed: column `c` as the eight contiguous values `out[c·cs ..]`,
/// each `f32(v) · scale[r]` then `+ bias[r]` (the same operations as the
/// scalar loop, so the same bits).
///
/// # Safety
/// The CPU must have AVX2; `out + c·cs .. + 8` must be writable for every
/// stored column `c`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn store_transposed_avx2(
    tile: &Tile,
    cols: usize,
    out: *mut f32,
    cs: usize,
    scale: &[f32; MR],
    bias: Option<&[f32; MR]>,
) {
    use std::arch::x86_64::*;
    // SAFETY: both arrays hold eight floats.
    let (s, b) = unsafe {
        (
            _mm256_loadu_ps(scale.as_ptr()),
            bias.map(|b| _mm256_loadu_ps(b.as_ptr())),
        )
    };
    for c in (0..cols).step_by(8) {
        // SAFETY: row r's columns c .. c + 8 lie inside the tile (c + 8 ≤
        // cols ≤ NR).
        let a: [__m256; MR] = std::array::from_fn(|r| unsafe {
            _mm256_cvtepi32_ps(_mm256_loadu_si256(tile[r * NR + c..].as_ptr().cast()))
        });
        let columns = crate::ops::conv::regs::transpose8(a);
        for (j, v) in columns.into_iter().enumerate() {
            let y = _mm256_mul_ps(v, s);
            let y = match b {
                Some(b) => _mm256_add_ps(y, b),
                None => y,
            };
            // SAFETY: the caller's contract.
            unsafe { _mm256_storeu_ps(out.add((c + j) * cs), y) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tile shape, stride and bias choice stores the scalar
    /// definition's bits (the AVX2 transposing store included).
    #[test]
    fn stores_equal_the_scalar_definition() {
        let tile: Tile =
            std::array::from_fn(|i| (i as i32 * 7919 % 20011) - 10000 + (i as i32 % 3) * (1 << 24));
        let (rows, cols) = (11, 45);
        let scale: Vec<f32> = (0..rows).map(|r| 0.37 + r as f32 * 0.013).collect();
        let bias: Vec<f32> = (0..rows).map(|r| r as f32 * 0.7 - 3.1).collect();
        for (r0, c0, nr, nc) in [
            (0, 0, 8, 32),
            (0, 13, 8, 32),
            (8, 0, 3, 32),
            (0, 32, 8, 13),
            (8, 40, 3, 5),
        ] {
            for transposed in [true, false] {
                for with_bias in [false, true] {
                    for one_scale in [false, true] {
                        let strides = if transposed { (1, rows) } else { (cols, 1) };
                        let mut got = vec![f32::NAN; rows * cols];
                        let s = if one_scale { &scale[..1] } else { &scale[..] };
                        let b = with_bias.then_some(&bias[..]);
                        FloatSink::new(&mut got, strides, s, b).store(r0, c0, nr, nc, &tile);
                        for r in 0..nr {
                            for c in 0..nc {
                                let y =
                                    tile[r * NR + c] as f32 * s[if one_scale { 0 } else { r0 + r }];
                                let want = b.map_or(y, |b| y + b[r0 + r]);
                                let at = (r0 + r) * strides.0 + (c0 + c) * strides.1;
                                assert_eq!(
                                    got[at].to_bits(),
                                    want.to_bits(),
                                    "{r0} {c0} {nr} {nc} {transposed} {with_bias}"
                                );
                                got[at] = f32::NAN;
                            }
                        }
                        assert!(got.iter().all(|v| v.is_nan()), "stored outside the tile");
                    }
                }
            }
        }
    }
}
