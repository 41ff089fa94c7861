//! What a load-time fusion hands to the node that absorbs its neighbours: a
//! typed [`Fusion`] kept on the node and passed to its operator's builder
//! (never a string attribute, so a model file cannot ask for a fusion), and
//! the [`FusionKind`]s an operator says it accepts through
//! [`Operator::accepts_fusion`](super::Operator::accepts_fusion).

/// An activation applied to an operator's output as it is computed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
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
    /// The exact (erf) GELU, `x · ½ · (1 + erf(x / √2))`.
    Gelu,
    /// The tanh GELU, `x · ½ · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`.
    GeluTanh,
}

/// A constant factor a Softmax applies to its input first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// The constant.
    pub factor: f32,
    /// Whether the input is divided by `factor` (else multiplied).
    pub divide: bool,
}

/// The kinds of neighbour an operator may absorb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusionKind {
    /// An activation on the output ([`Fusion::activation`]).
    Activation,
    /// A residual addend of the output's shape ([`Fusion::residual`]).
    Residual,
    /// A bias along the output's last axis ([`Fusion::bias`]).
    Bias,
    /// A constant scale of the input ([`Fusion::scale`]).
    Scale,
    /// An additive mask of the input ([`Fusion::mask`]).
    Mask,
    /// The output written channels last ([`Fusion::channels_last`]).
    ChannelsLast,
    /// 8-bit inputs dequantized as they are read ([`Fusion::dequantize`]).
    Dequantize,
}

/// The neighbours a node has absorbed, in the order its operator applies
/// them: scale and mask on the input; then bias, residual and activation on
/// the output.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Fusion {
    /// The activation applied last.
    pub activation: Option<Activation>,
    /// Whether the node's input 3 is added to the output (after the bias,
    /// before the activation).
    pub residual: bool,
    /// Whether the node's input 2 is a bias added along the output's last
    /// axis.
    pub bias: bool,
    /// A constant the input is scaled by.
    pub scale: Option<Scale>,
    /// Whether the node's input 1 is added to the (scaled) input.
    pub mask: bool,
    /// Whether the output `[N, C, spatial...]` is written as
    /// `[N, spatial..., C]`: a Transpose that moved the channels last,
    /// absorbed (applied after everything else).
    pub channels_last: bool,
    /// Whether the node's two operands come as triples, inputs `3k, 3k + 1,
    /// 3k + 2` for operand `k`: 8-bit data with the per-tensor scale and
    /// zero point of the DequantizeLinear it absorbed, or float data with
    /// both absent.
    pub dequantize: bool,
}

impl Fusion {
    /// Nothing fused.
    pub const NONE: Fusion = Fusion {
        activation: None,
        residual: false,
        bias: false,
        scale: None,
        mask: false,
        channels_last: false,
        dequantize: false,
    };

    /// Whether the node has absorbed a neighbour of this kind.
    pub fn has(&self, kind: FusionKind) -> bool {
        match kind {
            FusionKind::Activation => self.activation.is_some(),
            FusionKind::Residual => self.residual,
            FusionKind::Bias => self.bias,
            FusionKind::Scale => self.scale.is_some(),
            FusionKind::Mask => self.mask,
            FusionKind::ChannelsLast => self.channels_last,
            FusionKind::Dequantize => self.dequantize,
        }
    }

    /// The kinds absorbed, for error messages.
    pub fn kinds(&self) -> Vec<FusionKind> {
        [
            FusionKind::Activation,
            FusionKind::Residual,
            FusionKind::Bias,
            FusionKind::Scale,
            FusionKind::Mask,
            FusionKind::ChannelsLast,
            FusionKind::Dequantize,
        ]
        .into_iter()
        .filter(|&k| self.has(k))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_reports_each_kind_alone() {
        assert!(Fusion::NONE.kinds().is_empty());
        let all = [
            (
                Fusion {
                    activation: Some(Activation::Relu),
                    ..Fusion::NONE
                },
                FusionKind::Activation,
            ),
            (
                Fusion {
                    residual: true,
                    ..Fusion::NONE
                },
                FusionKind::Residual,
            ),
            (
                Fusion {
                    bias: true,
                    ..Fusion::NONE
                },
                FusionKind::Bias,
            ),
            (
                Fusion {
                    scale: Some(Scale {
                        factor: 0.5,
                        divide: false,
                    }),
                    ..Fusion::NONE
                },
                FusionKind::Scale,
            ),
            (
                Fusion {
                    mask: true,
                    ..Fusion::NONE
                },
                FusionKind::Mask,
            ),
            (
                Fusion {
                    channels_last: true,
                    ..Fusion::NONE
                },
                FusionKind::ChannelsLast,
            ),
            (
                Fusion {
                    dequantize: true,
                    ..Fusion::NONE
                },
                FusionKind::Dequantize,
            ),
        ];
        for (f, kind) in all {
            assert_eq!(f.kinds(), vec![kind]);
        }
    }
}
