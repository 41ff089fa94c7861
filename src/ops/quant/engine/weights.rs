//! The s8 operand of the int8 engine (the weights), packed once: blocks of
//! [`MR`] rows, each `[k4][MR][4]` bytes (four consecutive k of one row
//! side by side, zero-padded past K and past the last row), with each row's
//! sum and zero point in the s8 domain.

use super::MR;

/// A packed s8 matrix of `rows × k`.
#[derive(Debug, Clone)]
pub(crate) struct PackedS8 {
    /// Rows (output channels).
    pub rows: usize,
    /// The reduction length K.
    pub k: usize,
    /// K in groups of four, rounded up.
    pub k4: usize,
    data: Vec<i8>,
    /// Σ_k w[r][k] per row (s8 domain).
    pub row_sums: Vec<i32>,
    /// The zero point per row (s8 domain).
    pub zero: Vec<i32>,
}

impl PackedS8 {
    /// Packs `w[r][k] = src[r·row_stride + k·k_stride]` (raw bytes of an s8
    /// matrix, or of a u8 one when `from_u8`, which shifts values and zero
    /// points by −128). `zero` holds one zero point or one per row, in the
    /// source's own domain.
    pub(crate) fn pack(
        src: &[u8],
        rows: usize,
        k: usize,
        (row_stride, k_stride): (usize, usize),
        from_u8: bool,
        zero: &[i32],
    ) -> PackedS8 {
        let k4 = k.div_ceil(4);
        let blocks = rows.div_ceil(MR);
        let flip = if from_u8 { 0x80 } else { 0 };
        let mut data = vec![0i8; blocks * k4 * MR * 4];
        let mut row_sums = vec![0i32; rows];
        let block_len = k4 * MR * 4;
        for (r, row_sum) in row_sums.iter_mut().enumerate() {
            let (b, rr) = (r / MR, r % MR);
            let block = &mut data[b * block_len..][..block_len];
            let mut sum = 0i32;
            let mut put = |kk: usize, byte: u8| {
                let v = (byte ^ flip) as i8;
                block[(kk / 4) * MR * 4 + rr * 4 + kk % 4] = v;
                sum += v as i32;
            };
            if k_stride == 1 && k > 0 {
                // Rows of consecutive bytes (a convolution's weights): one
                // bounds check per row, four bytes per slot.
                let row = &src[r * row_stride..][..k];
                for (g, quad) in row.chunks(4).enumerate() {
                    for (j, &byte) in quad.iter().enumerate() {
                        put(4 * g + j, byte);
                    }
                }
            } else {
                for kk in 0..k {
                    put(kk, src[r * row_stride + kk * k_stride]);
                }
            }
            *row_sum = sum;
        }
        let shift = if from_u8 { 128 } else { 0 };
        let zero = (0..rows)
            .map(|r| zero[if zero.len() == 1 { 0 } else { r }] - shift)
            .collect();
        PackedS8 {
            rows,
            k,
            k4,
            data,
            row_sums,
            zero,
        }
    }

    /// Blocks of [`MR`] rows.
    pub(crate) fn blocks(&self) -> usize {
        self.rows.div_ceil(MR)
    }

    /// Block `b`: `k4 · MR · 4` bytes.
    pub(crate) fn block(&self, b: usize) -> &[i8] {
        let len = self.k4 * MR * 4;
        &self.data[b * len..][..len]
    }
}
