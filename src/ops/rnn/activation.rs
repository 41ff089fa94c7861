//! The activation functions RNN, GRU and LSTM accept in their `activations`
//! attribute, with the `activation_alpha`/`activation_beta` parameters
//! consumed in order by the functions that take them (the defaults are those
//! of the matching ONNX operators).

use crate::error::Result;
use crate::ir::attributes::Attributes;
use num_traits::Float;

/// One activation function with its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Softsign,
    Softplus,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
}

/// Whether a function takes alpha and beta, and their defaults.
fn params(name: &str) -> Option<(bool, bool, f64, f64)> {
    Some(match name {
        "relu" | "tanh" | "sigmoid" | "softsign" | "softplus" => (false, false, 0.0, 0.0),
        "affine" => (true, true, 1.0, 0.0),
        "leakyrelu" => (true, false, 0.01, 0.0),
        "thresholdedrelu" => (true, false, 1.0, 0.0),
        "scaledtanh" => (true, true, 1.0, 1.0),
        "hardsigmoid" => (true, true, 0.2, 0.5),
        "elu" => (true, false, 1.0, 0.0),
        _ => return None,
    })
}

impl Act {
    /// The function named `name` (case-insensitive) with parameters `a`, `b`.
    fn new(name: &str, a: f64, b: f64) -> Option<Act> {
        Some(match name {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            "affine" => Act::Affine(a, b),
            "leakyrelu" => Act::LeakyRelu(a),
            "thresholdedrelu" => Act::ThresholdedRelu(a),
            "scaledtanh" => Act::ScaledTanh(a, b),
            "hardsigmoid" => Act::HardSigmoid(a, b),
            "elu" => Act::Elu(a),
            _ => return None,
        })
    }

    /// Applies the function.
    #[inline]
    pub(super) fn eval<C: Float>(self, x: C) -> C {
        let c = |v: f64| C::from(v).unwrap_or_else(C::zero);
        let zero = C::zero();
        let one = C::one();
        match self {
            Act::Relu => x.max(zero),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => one / (one + (-x).exp()),
            Act::Softsign => x / (one + x.abs()),
            Act::Softplus => {
                // ln(1 + e^x) without overflow for large x.
                if x > zero {
                    x + (-x).exp().ln_1p()
                } else {
                    x.exp().ln_1p()
                }
            }
            Act::Affine(a, b) => c(a) * x + c(b),
            Act::LeakyRelu(a) => {
                if x >= zero {
                    x
                } else {
                    c(a) * x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x > c(a) {
                    x
                } else {
                    zero
                }
            }
            Act::ScaledTanh(a, b) => c(a) * (c(b) * x).tanh(),
            Act::HardSigmoid(a, b) => (c(a) * x + c(b)).max(zero).min(one),
            Act::Elu(a) => {
                if x >= zero {
                    x
                } else {
                    c(a) * (x.exp() - one)
                }
            }
        }
    }
}

/// The activations of a node: `per_dir` functions for each of `dirs`
/// directions, from the attributes or the operator's `defaults`. A list of
/// `per_dir` names is used for every direction.
pub(super) fn parse(attrs: &Attributes, defaults: &[&str], dirs: usize) -> Result<Vec<Act>> {
    let per_dir = defaults.len();
    let names: Vec<String> = match attrs.strings_opt("activations")? {
        Some(v) => v,
        None => defaults.iter().map(|s| s.to_string()).collect(),
    };
    let names: Vec<String> = if names.len() == per_dir * dirs {
        names
    } else if names.len() == per_dir {
        (0..dirs).flat_map(|_| names.iter().cloned()).collect()
    } else {
        return Err(attrs.error(
            "activations",
            format!(
                "has {} functions; expected {per_dir} per direction ({} in all)",
                names.len(),
                per_dir * dirs
            ),
        ));
    };
    let alphas = attrs.floats_opt("activation_alpha")?.unwrap_or_default();
    let betas = attrs.floats_opt("activation_beta")?.unwrap_or_default();
    let (mut ai, mut bi) = (alphas.iter(), betas.iter());
    names
        .iter()
        .map(|name| {
            let key = name.to_ascii_lowercase();
            let unknown = || attrs.error("activations", format!("unsupported function {name:?}"));
            let (uses_a, uses_b, mut a, mut b) = params(&key).ok_or_else(unknown)?;
            if uses_a {
                if let Some(&v) = ai.next() {
                    a = v as f64;
                }
            }
            if uses_b {
                if let Some(&v) = bi.next() {
                    b = v as f64;
                }
            }
            Act::new(&key, a, b).ok_or_else(unknown)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::attributes::Attribute;
    use crate::ops::testutil::strings;
    use std::collections::BTreeMap;

    fn attrs(pairs: Vec<(&str, Attribute)>) -> Attributes {
        let map: BTreeMap<String, Attribute> =
            pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        Attributes::new("n", "LSTM", map)
    }

    #[test]
    fn defaults_repeat_per_direction() {
        let a = parse(&attrs(vec![]), &["Sigmoid", "Tanh"], 2).unwrap();
        assert_eq!(a, vec![Act::Sigmoid, Act::Tanh, Act::Sigmoid, Act::Tanh]);
    }

    #[test]
    fn alpha_beta_are_consumed_in_order() {
        let a = parse(
            &attrs(vec![
                (
                    "activations",
                    strings(&["LeakyRelu", "tanh", "HardSigmoid"]),
                ),
                ("activation_alpha", Attribute::Floats(vec![0.5, 0.3])),
                ("activation_beta", Attribute::Floats(vec![0.4])),
            ]),
            &["Sigmoid", "Tanh", "Tanh"],
            1,
        )
        .unwrap();
        assert_eq!(
            a,
            vec![
                Act::LeakyRelu(0.5),
                Act::Tanh,
                Act::HardSigmoid(0.30000001192092896, 0.4000000059604645)
            ]
        );
    }

    #[test]
    fn bad_lists_are_errors() {
        let e = parse(
            &attrs(vec![("activations", strings(&["Foo"]))]),
            &["Tanh"],
            1,
        );
        assert!(e.unwrap_err().to_string().contains("Foo"));
        let e = parse(
            &attrs(vec![("activations", strings(&["Tanh", "Tanh", "Tanh"]))]),
            &["Tanh"],
            2,
        );
        assert!(e.is_err());
    }

    #[test]
    fn functions_match_their_formulas() {
        let x = -0.7f64;
        assert_eq!(Act::Relu.eval(x), 0.0);
        assert!((Act::Sigmoid.eval(x) - 1.0 / (1.0 + 0.7f64.exp())).abs() < 1e-15);
        assert!((Act::Softplus.eval(x) - (1.0 + x.exp()).ln()).abs() < 1e-15);
        assert!((Act::Softplus.eval(50.0f64) - 50.0).abs() < 1e-12);
        assert_eq!(Act::LeakyRelu(0.1).eval(x), 0.1 * x);
        assert_eq!(Act::ThresholdedRelu(1.0).eval(0.9f64), 0.0);
        assert_eq!(Act::HardSigmoid(0.2, 0.5).eval(10.0f64), 1.0);
        assert!((Act::Elu(2.0).eval(x) - 2.0 * (x.exp() - 1.0)).abs() < 1e-15);
        assert_eq!(Act::Affine(2.0, 1.0).eval(x), 2.0 * x + 1.0);
        assert!((Act::ScaledTanh(2.0, 0.5).eval(x) - 2.0 * (0.5 * x).tanh()).abs() < 1e-15);
        assert!((Act::Softsign.eval(x) - x / 1.7).abs() < 1e-15);
    }
}
