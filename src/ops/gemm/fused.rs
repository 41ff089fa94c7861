//! The activation a load-time fusion may attach to Conv or Gemm through the
//! internal string attribute `activation` (with `activation_alpha`,
//! `activation_min`, `activation_max`), applied in place to each output block
//! right after it is computed, while it is still in cache.

use crate::attributes::Attributes;
use crate::error::Result;
use num_traits::Float;

/// A fused activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// `x` for `x >= 0`, else `alpha * x`.
    LeakyRelu(f32),
    /// `min(max(x, lo), hi)`.
    Clip(f32, f32),
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `x * clamp(x / 6 + 1/2, 0, 1)`.
    HardSwish,
    /// `tanh(x)`.
    Tanh,
}

impl Activation {
    /// The fused activation named by the node's attributes, if any.
    pub(crate) fn from_attrs(attrs: &Attributes) -> Result<Option<Activation>> {
        let Some(name) = attrs.string_opt("activation")? else {
            return Ok(None);
        };
        Ok(Some(match name.as_str() {
            "Relu" => Activation::Relu,
            "LeakyRelu" => Activation::LeakyRelu(attrs.float("activation_alpha", 0.01)?),
            "Clip" => {
                let lo = attrs.float("activation_min", f32::NEG_INFINITY)?;
                let hi = attrs.float("activation_max", f32::INFINITY)?;
                Activation::Clip(lo, hi)
            }
            "Sigmoid" => Activation::Sigmoid,
            "HardSwish" => Activation::HardSwish,
            "Tanh" => Activation::Tanh,
            other => {
                return Err(attrs.error(
                    "activation",
                    format!(
                        "unsupported fused activation {other:?} \
                         (expected Relu, LeakyRelu, Clip, Sigmoid, HardSwish or Tanh)"
                    ),
                ))
            }
        }))
    }

    /// Applies the activation to every element of `xs`.
    pub(crate) fn apply<T: Float>(self, xs: &mut [T]) {
        let zero = T::zero();
        let cast = |v: f32| T::from(v).unwrap_or_else(T::nan);
        match self {
            Activation::Relu => {
                for x in xs {
                    *x = if *x < zero { zero } else { *x };
                }
            }
            Activation::LeakyRelu(alpha) => {
                let a = cast(alpha);
                for x in xs {
                    *x = if *x < zero { *x * a } else { *x };
                }
            }
            Activation::Clip(lo, hi) => {
                let (lo, hi) = (cast(lo), cast(hi));
                for x in xs {
                    let v = if *x < lo { lo } else { *x };
                    *x = if v > hi { hi } else { v };
                }
            }
            Activation::Sigmoid => {
                let one = T::one();
                for x in xs {
                    *x = one / (one + (-*x).exp());
                }
            }
            Activation::HardSwish => {
                let (one, sixth, half) = (T::one(), cast(1.0 / 6.0), cast(0.5));
                for x in xs {
                    let g = *x * sixth + half;
                    let g = if g < zero {
                        zero
                    } else if g > one {
                        one
                    } else {
                        g
                    };
                    *x = *x * g;
                }
            }
            Activation::Tanh => {
                for x in xs {
                    *x = x.tanh();
                }
            }
        }
    }
}
