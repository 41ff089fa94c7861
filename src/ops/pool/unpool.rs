//! `MaxUnpool`: scatters X into zeros at the flat positions of MaxPool's
//! `Indices`. As in ONNX's reference, the indices address the default
//! output shape `(in − 1)·stride − pads + kernel`; with an `output_shape`
//! input that result is placed at the start of the (larger) requested shape.

use super::wrap;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::conv::geom::WindowAttrs;
use crate::ops::gemm::contiguous;
use crate::ops::util::{const_value, fact, input, opt_fact, opt_input};
use crate::tensor::{DType, Element, Tensor};

const OP: &str = "MaxUnpool";

/// A built MaxUnpool node.
#[derive(Debug)]
struct MaxUnpool {
    window: WindowAttrs,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let window = WindowAttrs::parse(ctx.attrs, false)?;
    if window.kernel.is_none() {
        return Err(ctx.attrs.error("kernel_shape", "required but missing"));
    }
    Ok(Box::new(MaxUnpool { window }))
}

impl MaxUnpool {
    /// The default output shape for X's shape.
    fn inferred(&self, x: &[usize]) -> Result<Vec<usize>> {
        if x.len() < 3 {
            return Err(Error::op(
                OP,
                format!("X must have rank ≥ 3 (N, C, spatial...), found shape {x:?}"),
            ));
        }
        let r = x.len() - 2;
        let k = self.window.kernel.as_deref().unwrap_or(&[]);
        let s = self.window.strides.clone().unwrap_or_else(|| vec![1; r]);
        let p = self.window.pads.clone().unwrap_or_else(|| vec![0; 2 * r]);
        if k.len() != r || s.len() != r || p.len() != 2 * r {
            return Err(Error::op(
                OP,
                format!("kernel_shape {k:?}, strides {s:?} and pads {p:?} do not fit X {x:?}"),
            ));
        }
        let mut out = x[..2].to_vec();
        for d in 0..r {
            let full = x[d + 2]
                .saturating_sub(1)
                .checked_mul(s[d])
                .and_then(|v| v.checked_add(k[d]))
                .ok_or_else(|| Error::op(OP, "output size overflows"))?;
            let v = full.checked_sub(p[d] + p[d + r]).ok_or_else(|| {
                Error::op(
                    OP,
                    format!("pads {p:?} exceed the unpooled size along axis {d}"),
                )
            })?;
            out.push(v);
        }
        Ok(out)
    }

    /// The final output shape given the optional `output_shape` values.
    fn output(&self, x: &[usize], requested: Option<&Tensor>) -> Result<(Vec<usize>, Vec<usize>)> {
        let inf = self.inferred(x)?;
        let Some(t) = requested else {
            return Ok((inf.clone(), inf));
        };
        let req = t.to_i64_vec()?;
        let ok = req.len() == inf.len()
            && req[..2].iter().zip(&inf[..2]).all(|(&a, &b)| a == b as i64)
            && req.iter().zip(&inf).all(|(&a, &b)| a >= b as i64);
        if !ok {
            return Err(Error::op(
                OP,
                format!("output_shape {req:?} must keep N, C and be at least the unpooled shape {inf:?}"),
            ));
        }
        Ok((inf, req.iter().map(|&v| v as usize).collect()))
    }
}

/// Scatters `x` at `idx` into a buffer of `inf` then places it in `out`.
fn scatter<T: Copy + Default + Element>(
    x: &[T],
    idx: &[i64],
    inf: &[usize],
    out: &[usize],
) -> Result<Tensor> {
    let n: usize = inf.iter().product();
    let mut y = vec![T::default(); n];
    for (&v, &i) in x.iter().zip(idx) {
        let i = usize::try_from(i).ok().filter(|&i| i < n).ok_or_else(|| {
            Error::op(
                OP,
                format!("index {i} is outside the output of {n} elements"),
            )
        })?;
        y[i] = v;
    }
    if inf == out {
        return wrap(OP, out, y);
    }
    let total: usize = out.iter().product();
    let mut z = vec![T::default(); total];
    let w_in = *inf.last().unwrap_or(&1);
    let w_out = *out.last().unwrap_or(&1);
    let rows = n / w_in.max(1);
    let outer = &inf[..inf.len() - 1];
    let mut coord = vec![0usize; outer.len()];
    for r in 0..rows {
        let mut off = 0;
        for (d, &c) in coord.iter().enumerate() {
            off = off * out[d] + c;
        }
        let dst = off * w_out;
        z[dst..dst + w_in].copy_from_slice(&y[r * w_in..(r + 1) * w_in]);
        for d in (0..coord.len()).rev() {
            coord[d] += 1;
            if coord[d] < outer[d] {
                break;
            }
            coord[d] = 0;
        }
    }
    wrap(OP, out, z)
}

impl Operator for MaxUnpool {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let i = fact(OP, inputs, 1)?;
        if !x.dtype.is_float() || i.dtype != DType::I64 {
            return Err(Error::op(
                OP,
                format!(
                    "expected float X and int64 I, found {} and {}",
                    x.dtype, i.dtype
                ),
            ));
        }
        if let (Some(xs), Some(is)) = (&x.shape, &i.shape) {
            if xs != is {
                return Err(Error::op(
                    OP,
                    format!("X {xs:?} and I {is:?} differ in shape"),
                ));
            }
        }
        let requested = opt_fact(inputs, 2).is_some();
        let shape = match (&x.shape, requested, const_value(inputs, 2)) {
            (Some(xs), false, _) => Some(self.output(xs, None)?.1),
            (Some(xs), true, Some(v)) => Some(self.output(xs, Some(v))?.1),
            _ => None,
        };
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: x.dtype,
            shape,
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0)
            .max(1) as u64
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let i = input(OP, inputs, 1)?;
        if x.shape() != i.shape() {
            return Err(Error::op(
                OP,
                format!("X {:?} and I {:?} differ in shape", x.shape(), i.shape()),
            ));
        }
        let Tensor::I64(ia) = i else {
            return Err(Error::op(
                OP,
                format!("I must be int64, found {}", i.dtype()),
            ));
        };
        let idx = contiguous(ia);
        let (inf, out) = self.output(x.shape(), opt_input(inputs, 2))?;
        let y = match x {
            Tensor::F32(a) => scatter(&contiguous(a), &idx, &inf, &out)?,
            Tensor::F64(a) => scatter(&contiguous(a), &idx, &inf, &out)?,
            Tensor::F16(a) => scatter(&contiguous(a), &idx, &inf, &out)?,
            Tensor::BF16(a) => scatter(&contiguous(a), &idx, &inf, &out)?,
            other => {
                return Err(Error::op(
                    OP,
                    format!("expected a floating-point X, found {}", other.dtype()),
                ))
            }
        };
        Ok(vec![y])
    }
}
