//! The int8 products of onnxruntime's DynamicQuantizeLSTM, as onnxruntime
//! computes them: W and R stay 8-bit, packed once at build as the int8
//! engine's s8 operand; X is quantized to uint8 once per run and the hidden
//! state once per time step (scale and zero point from the values' range,
//! as DynamicQuantizeLinear); each product accumulates exactly in i32 and is
//! scaled to f32 by `activation scale · weight scale` of its gate column.
//! The gates then run in f32 as on the float path. Both products go
//! through [`PackedGemv`]: the projection's rows split over threads, each
//! time step's few rows of h on its direction's thread. Integer sums are
//! exact, so every split gives the same bits.
//!
//! Taken only where the products have a vector kernel (AVX-512 VNNI,
//! aarch64 dotprod); elsewhere the weights are dequantized and the float
//! path runs.

use super::pack_int8::{Kernel, PackedGemv};
use crate::ops::parallel::par_rows;
use crate::ops::quant::quantize_u8;
use crate::tensor::recycle::{give_back, take_or_default};

/// A quantized W or R as DynamicQuantizeLSTM takes it: `dirs × k × cols`
/// bytes (the LSTM's matrix transposed) with one scale and zero point per
/// direction or per direction and column.
#[derive(Debug, Clone, Copy)]
pub(super) struct QuantizedMatrix<'a> {
    /// The raw bytes (s8 or u8 values).
    pub bytes: &'a [u8],
    /// The values are s8.
    pub signed: bool,
    /// `[dirs, k, cols]`.
    pub shape: [usize; 3],
    /// `dirs` or `dirs · cols` scales.
    pub scale: &'a [f32],
    /// As many zero points as scales, in the values' own domain.
    pub zero: &'a [i32],
}

/// A [`QuantizedMatrix`]'s parts, owned (taken from a node's constants).
#[derive(Debug, Clone)]
pub(super) struct QuantizedParts {
    pub bytes: Vec<u8>,
    pub signed: bool,
    pub shape: [usize; 3],
    pub scale: Vec<f32>,
    pub zero: Vec<i32>,
}

impl QuantizedParts {
    /// The parts as a [`QuantizedMatrix`].
    pub(super) fn view(&self) -> QuantizedMatrix<'_> {
        QuantizedMatrix {
            bytes: &self.bytes,
            signed: self.signed,
            shape: self.shape,
            scale: &self.scale,
            zero: &self.zero,
        }
    }
}

impl QuantizedMatrix<'_> {
    /// Whether the parts agree with each other.
    fn consistent(&self) -> bool {
        let [dirs, k, cols] = self.shape;
        let per = self.scale.len();
        self.bytes.len() == dirs * k * cols
            && (per == dirs || per == dirs * cols)
            && self.zero.len() == per
    }

    /// Direction `di`'s zero point and scale of each column.
    fn column_params(&self, di: usize) -> (Vec<i32>, Vec<f32>) {
        let cols = self.shape[2];
        let per_column = self.scale.len() != self.shape[0];
        (0..cols)
            .map(|j| {
                let p = if per_column { di * cols + j } else { di };
                (self.zero[p], self.scale[p])
            })
            .unzip()
    }

    /// All directions side by side (`k × dirs·cols`) packed for the
    /// product, with each column's scale.
    fn pack_all(&self) -> (PackedGemv, Vec<f32>) {
        let [dirs, k, cols] = self.shape;
        let n = dirs * cols;
        let mut bytes = vec![0u8; k * n];
        let (mut zero, mut scale) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for di in 0..dirs {
            let src = &self.bytes[di * k * cols..(di + 1) * k * cols];
            for (kk, row) in src.chunks_exact(cols.max(1)).enumerate() {
                bytes[kk * n + di * cols..kk * n + (di + 1) * cols].copy_from_slice(row);
            }
            let (z, s) = self.column_params(di);
            zero.extend(z);
            scale.extend(s);
        }
        (PackedGemv::pack(&bytes, k, n, !self.signed, &zero), scale)
    }

    /// Direction `di` packed for the matrix-vector product, with each
    /// column's scale.
    fn pack_gemv(&self, di: usize) -> (PackedGemv, Vec<f32>) {
        let [_, k, cols] = self.shape;
        let src = &self.bytes[di * k * cols..(di + 1) * k * cols];
        let (zero, scale) = self.column_params(di);
        (PackedGemv::pack(src, k, cols, !self.signed, &zero), scale)
    }
}

/// W and R of every direction as the int8 engine's operands.
#[derive(Debug, Clone)]
pub(super) struct Int8Weights {
    /// All directions' W: `input × dirs·gh`.
    w: PackedGemv,
    w_scale: Vec<f32>,
    /// Per direction, R (`hidden × gh`) with its columns' scales.
    r: Vec<(PackedGemv, Vec<f32>)>,
}

/// The buffers of one direction's time loop.
#[derive(Debug, Default)]
pub(super) struct StepScratch {
    h: Vec<u8>,
    acc: Vec<i32>,
    quads: Vec<u32>,
}

impl Int8Weights {
    /// Packs W (`dirs × input × gh`) and R (`dirs × hidden × gh`), or None
    /// when their shapes or parameters do not fit together.
    pub(super) fn new(w: QuantizedMatrix, r: QuantizedMatrix) -> Option<Int8Weights> {
        let ([wd, _, wc], [rd, _, rc]) = (w.shape, r.shape);
        if !w.consistent() || !r.consistent() || wd != rd || wc != rc {
            return None;
        }
        let (wp, w_scale) = w.pack_all();
        let r = (0..rd).map(|di| r.pack_gemv(di)).collect();
        Some(Int8Weights { w: wp, w_scale, r })
    }

    /// Whether the weights are those of `dirs` directions of `gh` gate
    /// columns over `input` inputs and `hidden` hidden values.
    pub(super) fn fits(&self, dirs: usize, gh: usize, input: usize, hidden: usize) -> bool {
        self.w.n == dirs * gh
            && self.w.k == input
            && self.r.len() == dirs
            && self.r.iter().all(|(p, _)| p.n == gh && p.k == hidden)
    }

    /// `xw[row] = dequant(quant(X)[row] · W) + bias` for the `rows` rows of
    /// `x` (`rows × input`) and all directions' gate columns (`xw` and
    /// `bias` have `dirs · gh` a row).
    pub(super) fn project(&self, x: &[f32], rows: usize, bias: &[f32], xw: &mut [f32]) {
        let (n, k) = (self.w.n, self.w.k);
        if rows == 0 || n == 0 || x.len() < rows * k || xw.len() < rows * n || bias.len() < n {
            return;
        }
        let mut xq = take_or_default::<u8>(rows * k);
        let (scale, zero) = quantize_u8(&x[..rows * k], &mut xq);
        let mult: Vec<f32> = self.w_scale.iter().map(|&s| scale * s).collect();
        par_rows(&mut xw[..rows * n], n, |first, chunk| {
            let m = chunk.len() / n;
            let mut acc = take_or_default::<i32>(m * n);
            let xs = &xq[first * k..(first + m) * k];
            self.w.mul(xs, m, zero as i32, &mut acc, &mut Vec::new());
            for (out, sums) in chunk.chunks_exact_mut(n).zip(acc.chunks_exact(n)) {
                for (((o, &v), &m), &b) in out.iter_mut().zip(sums).zip(&mult).zip(bias) {
                    *o = v as f32 * m + b;
                }
            }
            give_back(acc);
        });
        give_back(xq);
    }

    /// `out[bi·ld + j] = dequant(quant(h)[bi] · R)[j]` for the `batch` rows
    /// of `h` (`batch × hidden`) and direction `di`'s gate columns.
    pub(super) fn step(
        &self,
        di: usize,
        h: &[f32],
        batch: usize,
        out: &mut [f32],
        ld: usize,
        scratch: &mut StepScratch,
    ) {
        let Some((r, scales)) = self.r.get(di) else {
            return;
        };
        let (n, k) = (r.n, r.k);
        if batch == 0 || h.len() < batch * k || ld < n || out.len() < (batch - 1) * ld + n {
            return;
        }
        scratch.h.resize(batch * k, 0);
        scratch.acc.resize(batch * n, 0);
        let (scale, zero) = quantize_u8(&h[..batch * k], &mut scratch.h);
        r.mul(
            &scratch.h,
            batch,
            zero as i32,
            &mut scratch.acc,
            &mut scratch.quads,
        );
        for (bi, sums) in scratch.acc.chunks_exact(n).enumerate() {
            let row = &mut out[bi * ld..bi * ld + n];
            for ((o, &v), &s) in row.iter_mut().zip(sums).zip(scales) {
                *o = v as f32 * (scale * s);
            }
        }
    }
}

/// Whether the int8 path is the fast one on this CPU (it has a vector
/// kernel for the products).
pub(super) fn fast_on_this_cpu() -> bool {
    Kernel::best() != Kernel::Portable
}

#[cfg(test)]
#[path = "int8_tests.rs"]
mod tests;
