//! Clip: bounds from the `min`/`max` attributes (before opset 11) or from the
//! optional scalar inputs 1 and 2 (opset 11 on), for every numeric type. The
//! comparison is the one the fused Clip uses: `x < lo → lo`, then `> hi → hi`,
//! so `min > max` gives `max` as ONNX specifies, and NaN passes through.

use crate::error::{Error, Result};
use crate::ir::{Activation, BuildContext, Fact, InferInput, OpClass, Operator};
use crate::numeric_map;
use crate::ops::unary::kernel::par_map;
use crate::ops::util::{fact, infer_same, input, opt_input, out_len};
use crate::ops::Registrar;
use crate::tensor::{DType, Element, Tensor};
use ndarray::ArrayD;
use num_traits::NumCast;

/// Clip with its bounds' source.
#[derive(Debug)]
struct Clip {
    /// Bounds from attributes (opset < 11); `None` when they come as inputs.
    attr_bounds: Option<(f32, f32)>,
}

/// The clamp shared with the fused activation (see `gemm::fused`).
#[inline(always)]
fn clamp<T: PartialOrd + Copy>(x: T, lo: Option<T>, hi: Option<T>) -> T {
    let v = match lo {
        Some(lo) if x < lo => lo,
        _ => x,
    };
    match hi {
        Some(hi) if v > hi => hi,
        _ => v,
    }
}

/// Where a bound comes from, found without knowing the element type.
enum Bound<'a> {
    /// None: that side is open.
    Open,
    /// An attribute's finite value (opset < 11).
    Attr(f32),
    /// A one-element input of the input's type.
    Input(&'a Tensor),
}

impl Clip {
    /// Bound `i` (1 = min, 2 = max), checked against the input's type
    /// `dtype`. Not generic, so its checks and messages are compiled once.
    fn bound_source<'a>(
        &self,
        inputs: &[Option<&'a Tensor>],
        i: usize,
        dtype: DType,
    ) -> Result<Bound<'a>> {
        if let Some((lo, hi)) = self.attr_bounds {
            let v = if i == 1 { lo } else { hi };
            return Ok(if v.is_infinite() {
                Bound::Open
            } else {
                Bound::Attr(v)
            });
        }
        let Some(t) = opt_input(inputs, i) else {
            return Ok(Bound::Open);
        };
        let what = if i == 1 { "min" } else { "max" };
        if t.dtype() != dtype {
            return Err(Error::op(
                "Clip",
                format!("{what} has type {}, expected {dtype}", t.dtype()),
            ));
        }
        if t.len() != 1 {
            return Err(Error::op(
                "Clip",
                format!("{what} must be a scalar, found shape {:?}", t.shape()),
            ));
        }
        Ok(Bound::Input(t))
    }

    /// Bound `i` (1 = min, 2 = max) as a value of the input's type.
    fn bound<T: Element + NumCast + Copy>(
        &self,
        inputs: &[Option<&Tensor>],
        i: usize,
    ) -> Result<Option<T>> {
        Ok(match self.bound_source(inputs, i, T::DTYPE)? {
            Bound::Open => None,
            Bound::Attr(v) => <T as NumCast>::from(v),
            Bound::Input(t) => T::view(t).and_then(|a| a.iter().next().copied()),
        })
    }

    fn clip<T: Element + NumCast + PartialOrd + Copy>(
        &self,
        a: &ArrayD<T>,
        inputs: &[Option<&Tensor>],
    ) -> Result<ArrayD<T>> {
        let lo = self.bound::<T>(inputs, 1)?;
        let hi = self.bound::<T>(inputs, 2)?;
        par_map("Clip", a, |&x| clamp(x, lo, hi))
    }
}

impl Operator for Clip {
    /// With bounds from attributes, absent, or one-element float32 constants.
    fn as_activation(&self, inputs: &[InferInput]) -> Option<Activation> {
        if let Some((lo, hi)) = self.attr_bounds {
            return Some(Activation::Clip(lo, hi));
        }
        let bound = |i: usize, default: f32| -> Option<f32> {
            match inputs.get(i) {
                None | Some(InferInput { fact: None, .. }) => Some(default),
                Some(InferInput {
                    value: Some(Tensor::F32(a)),
                    ..
                }) if a.len() == 1 => a.iter().next().copied(),
                Some(_) => None,
            }
        };
        Some(Activation::Clip(
            bound(1, f32::NEG_INFINITY)?,
            bound(2, f32::INFINITY)?,
        ))
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact("Clip", inputs, 0)?;
        if matches!(f.dtype, DType::Bool | DType::String) {
            return Err(Error::op(
                "Clip",
                format!("input of type {} is not supported", f.dtype),
            ));
        }
        infer_same("Clip", inputs)
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        2 * out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input("Clip", inputs, 0)?;
        let out: Result<Tensor> = numeric_map!("Clip", x, a => self.clip(a, inputs)?);
        Ok(vec![out?])
    }
}

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Clip", 1, |ctx: &BuildContext| {
        let attr_bounds = if ctx.opset < 11 {
            Some((
                ctx.attrs.float("min", f32::NEG_INFINITY)?,
                ctx.attrs.float("max", f32::INFINITY)?,
            ))
        } else {
            None
        };
        Ok(Box::new(Clip { attr_bounds }))
    });
}
