//! The fast path of ConvInteger and QLinearConv for 2-D convolutions of
//! 8-bit data: weights packed once ([`Prepared`], at build when they are
//! constant), then per image and group either the int8 engine over im2col
//! panels ([`im2col`]; 1×1 unpadded convolutions read the input directly,
//! subsampled first at a larger stride)
//! or, for depthwise convolutions, a direct kernel ([`depthwise`]). Results
//! are the exact i32 sums the naive kernel computes, requantized in f32 as
//! onnxruntime does.

mod depthwise;
mod im2col;
#[cfg(test)]
mod tests;

use super::engine::panel::flip_mask;
use super::engine::{PackedS8, Product, QuantSink, Sink, WideSink};
use crate::error::{Error, Result};
use crate::ops::conv::geom::Window;
use crate::tensor::recycle::take_or_default;
use crate::tensor::{DType, Tensor};

/// Weights ready for the fast path.
#[derive(Debug)]
pub(super) enum Prepared {
    /// One packed matrix per group: rows = output channels of the group,
    /// K = input channels of the group × kernel height × width.
    Gemm(Vec<PackedS8>),
    /// One input channel per group: `w − zw` per output channel and tap.
    Depthwise(Box<depthwise::Weights>),
}

/// Packs 4-D 8-bit weights `[m, c/g, kh, kw]` with their zero point (scalar
/// or one per output channel); `None` for other ranks or types.
pub(super) fn prepare(w: &Tensor, zw: Option<&Tensor>, group: usize) -> Result<Option<Prepared>> {
    let s = w.shape();
    let signed = match w.dtype() {
        DType::I8 => true,
        DType::U8 => false,
        _ => return Ok(None),
    };
    let Some(bytes) = w.as_bytes() else {
        return Ok(None);
    };
    if s.len() != 4 || !s[0].is_multiple_of(group) || s[0] == 0 {
        return Ok(None);
    }
    let zero = match zw {
        None => vec![0],
        Some(z) => super::to_i32("QLinearConv", z)?,
    };
    if zero.len() != 1 && zero.len() != s[0] {
        return Err(Error::op(
            "QLinearConv",
            format!("w zero point must be a scalar or have {} values", s[0]),
        ));
    }
    let (m, cg, taps) = (s[0], s[1], s[2] * s[3]);
    if cg == 1 && group > 1 {
        return Ok(Some(Prepared::Depthwise(Box::new(
            depthwise::Weights::new(bytes, signed, &zero, m, [s[2], s[3]]),
        ))));
    }
    let (mg, k) = (m / group, cg * taps);
    // K in the staged order (see `im2col`): taps, then channels padded to
    // a multiple of four; padding weights are zero bytes, and the staged
    // input is the zero point there, so they add nothing.
    let order: Vec<Option<(usize, usize)>> = im2col::k_order(cg, taps).collect();
    let groups = (0..group)
        .map(|g| {
            let z: Vec<i32> = if zero.len() == 1 {
                zero.clone()
            } else {
                zero[g * mg..][..mg].to_vec()
            };
            let mut reordered = Vec::with_capacity(mg * order.len());
            for r in 0..mg {
                let row = &bytes[(g * mg + r) * k..][..k];
                reordered.extend(
                    order
                        .iter()
                        .map(|at| at.map_or(0, |(c, t)| row[c * taps + t])),
                );
            }
            PackedS8::pack(&reordered, mg, order.len(), (order.len(), 1), !signed, &z)
        })
        .collect();
    Ok(Some(Prepared::Gemm(groups)))
}

/// What the convolution produces.
pub(super) enum Output<'a> {
    /// i32 sums (ConvInteger).
    Wide,
    /// 8-bit values: per-output-channel (or single) f32 scale, zero point,
    /// and whether the type is int8.
    Quant {
        scale: &'a [f32],
        zero: i32,
        signed: bool,
    },
}

thread_local! {
    /// Per-thread staged input of the im2col path, kept across runs so that
    /// a run does not grow a fresh buffer for every layer.
    static STAGED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One convolution's run-time facts.
pub(super) struct Conv<'a> {
    pub win: &'a Window,
    pub group: usize,
    /// The input's zero point, in its own domain.
    pub zero_x: i32,
    /// Per output channel, added to the sums.
    pub bias: Option<&'a [i32]>,
    pub output: Output<'a>,
}

impl Conv<'_> {
    /// Runs over `x` [n, c, h, w]; `out_shape` is [n, m, oh, ow].
    pub(super) fn run(&self, prep: &Prepared, x: &Tensor, out_shape: &[usize]) -> Result<Tensor> {
        let x_signed = x.dtype() == DType::I8;
        let bytes = x
            .as_bytes()
            .ok_or_else(|| Error::op("QLinearConv", "input must be contiguous"))?;
        let (n, c, m) = (out_shape[0], x.shape()[1], out_shape[1]);
        let plane_in = self.win.in_len();
        let plane_out = self.win.out_len();
        // The kernels below write every output element (sums or bytes): a
        // recycled buffer needs no zero-fill.
        let mut wide = take_or_default::<i32>(if matches!(self.output, Output::Wide) {
            n * m * plane_out
        } else {
            0
        });
        let mut narrow = take_or_default::<u8>(if matches!(self.output, Output::Wide) {
            0
        } else {
            n * m * plane_out
        });
        let range = match &self.output {
            Output::Quant { signed: true, .. } => (-128, 127),
            _ => (0, 255),
        };
        match prep {
            Prepared::Depthwise(w) => {
                let job = depthwise::Job {
                    win: self.win,
                    zero_x: self.zero_x,
                    x_signed,
                    bias: self.bias,
                    channels: c,
                };
                match &self.output {
                    Output::Wide => job.run(w, bytes, depthwise::Dest::Wide(&mut wide)),
                    Output::Quant { scale, zero, .. } => job.run(
                        w,
                        bytes,
                        depthwise::Dest::Quant {
                            out: &mut narrow,
                            scale,
                            zero: *zero,
                            range,
                        },
                    ),
                }
            }
            Prepared::Gemm(groups) => {
                let cg = c / self.group;
                let direct = im2col::is_direct(self.win, cg);
                let strided = !direct && im2col::is_strided_pointwise(self.win, cg);
                // The staged input, in this thread's buffer kept across runs.
                let mut staged = STAGED.with(|s| std::mem::take(&mut *s.borrow_mut()));
                // Stride 1 with a requantized output: the engine reads the
                // staged input in place (no panels), where it can.
                let in_place = match self.output {
                    Output::Quant { .. } if !direct => im2col::InPlacePlan::new(self.win, cg),
                    _ => None,
                };
                let zero_x = self.zero_x + if x_signed { 128 } else { 0 };
                for img in 0..n {
                    for (g, packed) in groups.iter().enumerate() {
                        let mg = packed.rows;
                        let x_at = (img * c + g * cg) * plane_in;
                        let x = &bytes[x_at..][..cg * plane_in];
                        let out_at = (img * m + g * mg) * plane_out;
                        let bias = self.bias.map(|b| &b[g * mg..][..mg]);
                        let sink: Box<dyn Sink + '_> = match &self.output {
                            Output::Wide => Box::new(WideSink::new(
                                &mut wide[out_at..][..mg * plane_out],
                                (plane_out, 1),
                            )),
                            Output::Quant { scale, zero, .. } => {
                                let s = if scale.len() == 1 {
                                    scale
                                } else {
                                    &scale[g * mg..][..mg]
                                };
                                Box::new(QuantSink::new(
                                    &mut narrow[out_at..][..mg * plane_out],
                                    (plane_out, 1),
                                    s,
                                    *zero,
                                    range,
                                ))
                            }
                        };
                        let src = if direct {
                            im2col::Source::Direct {
                                x,
                                channels: cg,
                                pixels: plane_in,
                                flip: flip_mask(x_signed),
                            }
                        } else if strided {
                            im2col::subsample(x, cg, self.win, &mut staged);
                            im2col::Source::Direct {
                                x: &staged,
                                channels: cg,
                                pixels: plane_out,
                                flip: flip_mask(x_signed),
                            }
                        } else {
                            im2col::stage(x, cg, self.win, self.zero_x, x_signed, &mut staged);
                            if let Some(plan) = &in_place {
                                let product = Product {
                                    w: packed,
                                    cols: plan.cols(),
                                    zero_x,
                                    bias,
                                };
                                if product.run_in_place(&plan.operand(&mut staged), sink.as_ref()) {
                                    continue;
                                }
                            }
                            im2col::Source::Staged {
                                words: &staged,
                                channels: cg,
                                win: self.win,
                            }
                        };
                        let product = Product {
                            w: packed,
                            cols: plane_out,
                            zero_x,
                            bias,
                        };
                        product.run(&src, sink.as_ref());
                    }
                }
                STAGED.with(|s| *s.borrow_mut() = staged);
            }
        }
        Ok(match self.output {
            Output::Wide => Tensor::from_vec(out_shape, wide)?,
            Output::Quant { signed, .. } => Tensor::from_bytes(out_shape, narrow, signed)?,
        })
    }
}
