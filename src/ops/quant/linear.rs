//! QuantizeLinear and DequantizeLinear: `y = saturate(round(x / scale) + zp)`
//! (round half to even) and `y = (x - zp) * scale`, with a scale and zero
//! point per tensor, per slice along `axis`, or per block of `block_size`
//! along `axis` (opset 21). Arithmetic follows the ONNX reference (numpy):
//! the quotient is rounded to the compute type before rounding to integer.
//! The 4/2-bit integer and float8 / float4 types are handled by [`super::narrow`].

use super::narrow::{check_float8_zero, ints, is_quant_output, narrow_tensor, range};
use super::{float_tensor, float_values, int_tensor};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, opt_fact, opt_input, out_len, par_rows};
use crate::tensor::{DType, Tensor};

const QUANT: &str = "QuantizeLinear";
const DEQUANT: &str = "DequantizeLinear";

/// Which scale element each input element uses.
#[derive(Debug, Clone, Copy)]
struct ParamMap {
    /// 0: per tensor, 1: per axis, 2: blocked.
    kind: u8,
    dim: usize,
    inner: usize,
    pdim: usize,
    block: usize,
}

impl ParamMap {
    fn new(op: &str, x: &[usize], p: &[usize], axis: i64, block: i64) -> Result<ParamMap> {
        let mut m = ParamMap {
            kind: 0,
            dim: 1,
            inner: 1,
            pdim: 1,
            block: 1,
        };
        let numel: usize = p.iter().product();
        if p.is_empty() || (numel == 1 && block == 0) {
            if numel != 1 {
                return Err(Error::op(op, "scale / zero point has no elements"));
            }
            return Ok(m);
        }
        let a = crate::ops::util::axis(op, axis, x.len())?;
        m.dim = x[a];
        m.inner = x[a + 1..].iter().product();
        if block < 0 {
            return Err(Error::op(
                op,
                format!("block_size must be ≥ 0, found {block}"),
            ));
        }
        if block == 0 {
            if p.len() != 1 || p[0] != x[a] {
                return Err(Error::op(
                    op,
                    format!(
                        "per-axis scale / zero point must have shape [{}] (input {x:?}, axis {axis}), found {p:?}",
                        x[a]
                    ),
                ));
            }
            m.kind = 1;
            return Ok(m);
        }
        let block = block as usize;
        let ok = p.len() == x.len()
            && (0..x.len()).all(|d| d == a || p[d] == x[d])
            && p[a] == x[a].div_ceil(block);
        if !ok {
            return Err(Error::op(
                op,
                format!(
                    "blocked scale / zero point of shape {p:?} does not match input {x:?} with axis {axis} and block_size {block}"
                ),
            ));
        }
        m.kind = 2;
        m.pdim = p[a];
        m.block = block;
        Ok(m)
    }

    #[inline]
    fn index(&self, i: usize) -> usize {
        match self.kind {
            0 => 0,
            1 => (i / self.inner) % self.dim,
            _ => {
                let outer = i / (self.inner * self.dim);
                let a = (i / self.inner) % self.dim;
                (outer * self.pdim + a / self.block) * self.inner + i % self.inner
            }
        }
    }
}

/// A built QuantizeLinear or DequantizeLinear node.
#[derive(Debug)]
struct Linear {
    quantize: bool,
    axis: i64,
    block: i64,
    /// `output_dtype` (opset 21+), if set.
    out_type: Option<DType>,
    /// `precision` (QuantizeLinear opset 23+), if set.
    precision: Option<DType>,
    /// `saturate` (QuantizeLinear opset 19+): float8 overflow handling.
    saturate: bool,
}

fn dtype_attr(ctx: &BuildContext, op: &str, name: &str) -> Result<Option<DType>> {
    match ctx.attrs.int(name, 0)? {
        0 => Ok(None),
        code => DType::from_onnx_code(code as i32).map(Some).map_err(|_| {
            Error::op(
                op,
                format!(
                    "{name} {} is not supported",
                    crate::tensor::onnx_type_name(code as i32)
                ),
            )
        }),
    }
}

fn build(ctx: &BuildContext, quantize: bool) -> Result<Box<dyn Operator>> {
    let op = if quantize { QUANT } else { DEQUANT };
    let out_type = dtype_attr(ctx, op, "output_dtype")?;
    if let Some(t) = out_type {
        let ok = if quantize {
            is_quant_output(t)
        } else {
            t.is_float()
        };
        if !ok {
            return Err(Error::op(op, format!("output_dtype {t} is not supported")));
        }
    }
    let precision = if quantize {
        dtype_attr(ctx, op, "precision")?
    } else {
        None
    };
    if let Some(p) = precision {
        if !p.is_float() {
            return Err(Error::op(op, format!("precision {p} is not a float type")));
        }
    }
    let saturate = ctx.attrs.int("saturate", 1)? != 0;
    Ok(Box::new(Linear {
        saturate,
        quantize,
        axis: ctx.attrs.int("axis", 1)?,
        block: ctx.attrs.int("block_size", 0)?,
        out_type,
        precision,
    }))
}

pub(super) fn build_quantize(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, true)
}

pub(super) fn build_dequantize(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, false)
}

impl Linear {
    fn name(&self) -> &'static str {
        if self.quantize {
            QUANT
        } else {
            DEQUANT
        }
    }

    /// The output type from the input types.
    fn out_dtype(&self, x: DType, scale: DType, zp: Option<DType>) -> Result<DType> {
        let op = self.name();
        if !scale.is_float() {
            return Err(Error::op(op, format!("scale must be float, found {scale}")));
        }
        if self.quantize {
            if !(x.is_float() || x == DType::I32) {
                return Err(Error::op(
                    op,
                    format!("x must be float or int32, found {x}"),
                ));
            }
            let t = match (zp, self.out_type) {
                (Some(z), Some(o)) if z != o => {
                    return Err(Error::op(
                        op,
                        format!("zero point type {z} differs from output_dtype {o}"),
                    ))
                }
                (Some(z), _) => z,
                (None, Some(o)) => o,
                (None, None) => DType::U8,
            };
            if !is_quant_output(t) {
                return Err(Error::op(
                    op,
                    format!(
                        "{t} is not a supported quantized output type (8/16/4/2-bit integers, float8, float4)"
                    ),
                ));
            }
            Ok(t)
        } else {
            if !x.is_minifloat() {
                range(op, x)?;
            }
            if let Some(z) = zp {
                if z != x {
                    return Err(Error::op(
                        op,
                        format!("zero point type {z} differs from input type {x}"),
                    ));
                }
            }
            Ok(self.out_type.unwrap_or(scale))
        }
    }

    fn quantize(&self, x: &Tensor, s: &Tensor, z: Option<&Tensor>, t: DType) -> Result<Tensor> {
        let shape = x.shape();
        let sm = ParamMap::new(QUANT, shape, s.shape(), self.axis, self.block)?;
        let zm = match z {
            Some(z) => Some(ParamMap::new(
                QUANT,
                shape,
                z.shape(),
                self.axis,
                self.block,
            )?),
            None => None,
        };
        let xv = if x.dtype() == DType::I32 {
            x.to_f64_vec()?
        } else {
            float_values(QUANT, x)?
        };
        let sv = float_values(QUANT, s)?;
        // Float zero points are used by float4 only (float8 ones must be zero).
        let float_out = t.is_minifloat();
        if float_out && t != DType::F4E2M1 {
            check_float8_zero(QUANT, z)?;
        }
        let zv = match z {
            Some(z) if float_out => z.to_f64_vec()?.iter().map(|&v| v as i32).collect(),
            Some(z) => ints(QUANT, z)?,
            None => vec![],
        };
        let zf = match z {
            Some(z) if t == DType::F4E2M1 => z.to_f64_vec()?,
            _ => vec![],
        };
        // numpy's type for x / scale, or the `precision` attribute.
        let ct = self.precision.unwrap_or(match (x.dtype(), s.dtype()) {
            (DType::F64, _) | (_, DType::F64) | (DType::I32, _) => DType::F64,
            (a, b) if a == b => a,
            _ => DType::F32,
        });
        if float_out {
            let mut out = vec![0f64; xv.len()];
            par_rows(&mut out, 1, |first, chunk| {
                for (j, o) in chunk.iter_mut().enumerate() {
                    let i = first + j;
                    let q = if ct == DType::F64 {
                        xv[i] / sv[sm.index(i)]
                    } else {
                        super::round_to(ct, (xv[i] as f32 / sv[sm.index(i)] as f32) as f64)
                    };
                    // float4 adds its zero point in f32, as numpy does.
                    *o = match zm {
                        Some(m) if !zf.is_empty() => (q as f32 + zf[m.index(i)] as f32) as f64,
                        _ => q,
                    };
                }
            });
            return narrow_tensor(QUANT, t, shape, out, self.saturate);
        }
        let (lo, hi) = range(QUANT, t)?;
        let mut out = vec![0i64; xv.len()];
        par_rows(&mut out, 1, |first, chunk| {
            for (j, o) in chunk.iter_mut().enumerate() {
                let i = first + j;
                let q = if ct == DType::F64 {
                    xv[i] / sv[sm.index(i)]
                } else {
                    super::round_to(ct, (xv[i] as f32 / sv[sm.index(i)] as f32) as f64)
                };
                let r = q.round_ties_even();
                // numpy's float → int32 cast, then the zero point in int32.
                let r = if r.is_nan() {
                    i32::MIN as i64
                } else {
                    r.clamp(i32::MIN as f64, i32::MAX as f64) as i64
                };
                let zp = zm.map_or(0, |m| zv[m.index(i)] as i64);
                *o = (r + zp).clamp(lo, hi);
            }
        });
        if t.is_narrow() {
            let v = out.into_iter().map(|v| v as f64).collect();
            return narrow_tensor(QUANT, t, shape, v, true);
        }
        int_tensor(QUANT, t, shape, out)
    }

    fn dequantize(&self, x: &Tensor, s: &Tensor, z: Option<&Tensor>, t: DType) -> Result<Tensor> {
        let shape = x.shape();
        let sm = ParamMap::new(DEQUANT, shape, s.shape(), self.axis, self.block)?;
        let zm = match z {
            Some(z) => Some(ParamMap::new(
                DEQUANT,
                shape,
                z.shape(),
                self.axis,
                self.block,
            )?),
            None => None,
        };
        let sv = float_values(DEQUANT, s)?;
        // float8 / float4 inputs are their values; their zero point is not
        // subtracted (float8 ones must be zero; float4's is ignored, as in ONNX).
        let float_in = x.dtype().is_minifloat();
        if float_in && x.dtype() != DType::F4E2M1 {
            check_float8_zero(DEQUANT, z)?;
        }
        let (xv, zv) = if float_in {
            (x.to_f64_vec()?, vec![])
        } else {
            let xv = ints(DEQUANT, x)?.into_iter().map(|v| v as f64).collect();
            let zv = match z {
                Some(z) => ints(DEQUANT, z)?,
                None => vec![],
            };
            (xv, zv)
        };
        let zm = if float_in { None } else { zm };
        // numpy computes (x - zp) * scale in f64 for int32 or f64 operands, else f32.
        let wide = x.dtype() == DType::I32 || s.dtype() == DType::F64;
        let mut out = vec![0f64; xv.len()];
        par_rows(&mut out, 1, |first, chunk| {
            for (j, o) in chunk.iter_mut().enumerate() {
                let i = first + j;
                let zp = zm.map_or(0.0, |m| zv[m.index(i)] as f64);
                // Exact: integer values and minifloats are exact in f64.
                let dx = xv[i] - zp;
                let sc = sv[sm.index(i)];
                *o = if wide {
                    dx * sc
                } else {
                    (dx as f32 * sc as f32) as f64
                };
            }
        });
        if !wide {
            // Round f32 results to the output type from f32, as numpy does.
            for v in out.iter_mut() {
                *v = super::round_to(t, *v);
            }
        }
        float_tensor(DEQUANT, t, shape, out)
    }
}

impl Operator for Linear {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let op = self.name();
        let x = fact(op, inputs, 0)?;
        let s = fact(op, inputs, 1)?;
        let z = opt_fact(inputs, 2);
        let t = self.out_dtype(x.dtype, s.dtype, z.map(|f| f.dtype))?;
        if let (Some(xs), Some(ss)) = (&x.shape, &s.shape) {
            ParamMap::new(op, xs, ss, self.axis, self.block)?;
        }
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: t,
            shape: x.shape.clone(),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        3 * out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name();
        let x = input(op, inputs, 0)?;
        let s = input(op, inputs, 1)?;
        let z = opt_input(inputs, 2);
        let t = self.out_dtype(x.dtype(), s.dtype(), z.map(|z| z.dtype()))?;
        let fast = if self.quantize {
            self.precision
                .is_none_or(|p| p == DType::F32)
                .then(|| super::per_tensor::quantize(x, s, z, t))
                .flatten()
        } else {
            super::per_tensor::dequantize(x, s, z, t)
        };
        if let Some(y) = fast {
            return Ok(vec![y?]);
        }
        Ok(vec![if self.quantize {
            self.quantize(x, s, z, t)?
        } else {
            self.dequantize(x, s, z, t)?
        }])
    }
}
