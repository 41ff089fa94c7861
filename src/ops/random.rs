//! Random generators: RandomUniform and RandomNormal (shape from an
//! attribute) and their `Like` forms (shape from an input), Bernoulli and
//! Multinomial, and the random mask of Dropout in training mode. A node with
//! a `seed` attribute draws the same values on every run; without one it
//! draws from a fresh seed each run ([`rng::Seed`]). Every node here is
//! [`crate::ir::Operator::is_random`], so constant folding leaves it alone.

use super::Registrar;
use crate::error::Result;
use crate::ir::attributes::Attributes;
use crate::tensor::{budget, DType, Element, Tensor};

mod bernoulli;
mod dropout;
mod generate;
mod multinomial;
pub(crate) mod rng;
#[cfg(test)]
mod tests;

pub(crate) use dropout::train as dropout_train;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Bernoulli", 15, bernoulli::build);
    r.add("Multinomial", 7, multinomial::build);
    r.add("RandomNormal", 1, generate::build_normal);
    r.add("RandomNormalLike", 1, generate::build_normal_like);
    r.add("RandomUniform", 1, generate::build_uniform);
    r.add("RandomUniformLike", 1, generate::build_uniform_like);
}

/// The real element type named by type code `code` (attribute `name`):
/// float, double or float16, and bfloat16 from opset 22 on.
fn real_dtype(attrs: &Attributes, name: &str, code: i64, opset: i64) -> Result<DType> {
    let t = i32::try_from(code)
        .ok()
        .and_then(|c| DType::from_onnx_code(c).ok());
    match t {
        Some(d @ (DType::F32 | DType::F64 | DType::F16)) => Ok(d),
        Some(DType::BF16) if opset >= 22 => Ok(DType::BF16),
        Some(DType::BF16) => Err(attrs.error(name, "bfloat16 output needs opset 22")),
        _ => Err(attrs.error(
            name,
            format!("type code {code} is not a floating-point type (float, double, float16)"),
        )),
    }
}

/// A tensor of real type `dtype` and `shape` filled by `draw`, after the
/// memory budget allows it. With `below`, a value that rounds to `below` or
/// above in `dtype` is drawn again (a uniform draw in [low, high) must stay
/// under high after rounding), and after 16 tries becomes `fallback`.
fn real_tensor(
    op: &str,
    dtype: DType,
    shape: &[usize],
    below: Option<(f64, f64)>,
    draw: &mut dyn FnMut() -> f64,
) -> Result<Tensor> {
    budget::check(&format!("{op} output"), dtype, shape)?;
    fn fill<T: Element>(
        op: &str,
        shape: &[usize],
        below: Option<(f64, f64)>,
        draw: &mut dyn FnMut() -> f64,
        conv: fn(f64) -> T,
        back: fn(&T) -> f64,
    ) -> Result<Tensor> {
        let n = shape.iter().product::<usize>();
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let mut t = conv(draw());
            if let Some((high, fallback)) = below {
                let mut tries = 0;
                while back(&t) >= high {
                    tries += 1;
                    t = conv(if tries < 16 { draw() } else { fallback });
                    if tries >= 16 {
                        break;
                    }
                }
            }
            v.push(t);
        }
        super::shape::make(op, shape, v)
    }
    match dtype {
        DType::F32 => fill(op, shape, below, draw, |x| x as f32, |t| *t as f64),
        DType::F64 => fill(op, shape, below, draw, |x| x, |t| *t),
        DType::F16 => fill(op, shape, below, draw, half::f16::from_f64, |t| t.to_f64()),
        _ => fill(op, shape, below, draw, half::bf16::from_f64, |t| t.to_f64()),
    }
}
