//! Activation functions: the pointwise ones (Relu, LeakyRelu, Elu, Selu,
//! Celu, Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu, Softplus, Softsign,
//! ThresholdedRelu, Mish, Swish, Shrink) in `pointwise`, Clip in `clip`,
//! PRelu and its broadcast slope in `prelu`, and the normalising Softmax,
//! LogSoftmax and Hardmax in `softmax`.
//!
//! Relu, LeakyRelu, Clip, Sigmoid, HardSwish and Tanh compute through the
//! same scalar code as the activation fused into Conv and Gemm at load
//! (`gemm::fused`), so fusing them changes no bit of the result. The erf
//! GELU on f32 runs a vectorised kernel (`gelu`); the graph's GELU fusion
//! turns the exporters' Div/Erf/Add/Mul/Mul chains into it.

mod clip;
pub(crate) mod gelu;
mod pointwise;
mod prelu;
mod softmax;
mod softmax_row;
#[cfg(test)]
mod tests;

use super::Registrar;

pub(crate) fn register(r: &mut impl Registrar) {
    pointwise::register(r);
    clip::register(r);
    prelu::register(r);
    softmax::register(r);
}
