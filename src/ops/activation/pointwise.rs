//! Pointwise activations: one generic scalar function per kind, evaluated in
//! f32 (also for f16 and bf16) or f64 over the current rayon pool. Relu also
//! takes signed integers (opset 14). The erf GELU on f32 data runs the
//! vectorised kernel of `gelu`.

use crate::error::{Error, Result};
use crate::ir::{Fact, InferInput, OpClass, Operator};
use crate::ops::gemm::fused::{Activation, ActivationFloat};
use crate::ops::unary::kernel::{array_from, contiguous, exp_f32, map_float, par_map};
use crate::ops::util::{fact, infer_same, input, out_len};
use crate::ops::Registrar;
use crate::tensor::{DType, Tensor};

/// The math an activation needs beyond [`ActivationFloat`].
pub(super) trait Math: ActivationFloat {
    fn exp_(self) -> Self;
    fn erf_(self) -> Self;
    fn ln_1p_(self) -> Self;
}

impl Math for f32 {
    #[inline(always)]
    fn exp_(self) -> f32 {
        exp_f32(self)
    }
    #[inline(always)]
    fn erf_(self) -> f32 {
        libm::erff(self)
    }
    #[inline(always)]
    fn ln_1p_(self) -> f32 {
        self.ln_1p()
    }
}

impl Math for f64 {
    #[inline(always)]
    fn exp_(self) -> f64 {
        self.exp()
    }
    #[inline(always)]
    fn erf_(self) -> f64 {
        libm::erf(self)
    }
    #[inline(always)]
    fn ln_1p_(self) -> f64 {
        self.ln_1p()
    }
}

/// An f32 attribute value in the computation's type.
#[inline(always)]
fn c<T: Math>(v: f32) -> T {
    T::cast_f32(v)
}

/// Which activation a [`Pointwise`] operator computes, with its attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Relu,
    LeakyRelu(f32),
    Sigmoid,
    HardSwish,
    Tanh,
    Elu(f32),
    Selu { alpha: f32, gamma: f32 },
    Celu(f32),
    HardSigmoid { alpha: f32, beta: f32 },
    Gelu { tanh: bool },
    Softplus,
    Softsign,
    ThresholdedRelu(f32),
    Mish,
    Swish(f32),
    Shrink { lambd: f32, bias: f32 },
}

impl Kind {
    /// Operations per element, roughly (transcendentals count about 10).
    fn cost(self) -> u64 {
        match self {
            Kind::Relu | Kind::ThresholdedRelu(_) => 1,
            Kind::LeakyRelu(_) | Kind::Shrink { .. } => 2,
            Kind::Softsign => 3,
            Kind::HardSigmoid { .. } => 4,
            Kind::HardSwish => 5,
            Kind::Sigmoid | Kind::Tanh | Kind::Elu(_) => 12,
            Kind::Selu { .. } | Kind::Celu(_) | Kind::Swish(_) => 14,
            Kind::Gelu { .. } | Kind::Softplus => 20,
            Kind::Mish => 32,
        }
    }
}

fn elu<T: Math>(x: T, alpha: T) -> T {
    if x < T::zero() {
        alpha * (x.exp_() - T::one())
    } else {
        x
    }
}

fn selu<T: Math>(x: T, alpha: T, gamma: T) -> T {
    if x > T::zero() {
        gamma * x
    } else {
        gamma * (alpha * x.exp_() - alpha)
    }
}

fn celu<T: Math>(x: T, alpha: T) -> T {
    let pos = if x > T::zero() { x } else { T::zero() };
    let neg = alpha * ((x / alpha).exp_() - T::one());
    pos + if neg < T::zero() { neg } else { T::zero() }
}

fn hard_sigmoid<T: Math>(x: T, alpha: T, beta: T) -> T {
    let v = alpha * x + beta;
    if v < T::zero() {
        T::zero()
    } else if v > T::one() {
        T::one()
    } else {
        v
    }
}

fn gelu_erf<T: Math>(x: T) -> T {
    let r = T::from(std::f64::consts::FRAC_1_SQRT_2).unwrap_or_else(T::nan);
    c::<T>(0.5) * x * (T::one() + (x * r).erf_())
}

/// `ln(1 + e^x)` without overflow for large x.
fn softplus<T: Math>(x: T) -> T {
    if x > T::zero() {
        x + (-x).exp_().ln_1p_()
    } else {
        x.exp_().ln_1p_()
    }
}

fn softsign<T: Math>(x: T) -> T {
    x / (T::one() + x.abs())
}

fn thresholded_relu<T: Math>(x: T, alpha: T) -> T {
    if x > alpha {
        x
    } else {
        T::zero()
    }
}

fn shrink<T: Math>(x: T, lambd: T, bias: T) -> T {
    if x < -lambd {
        x + bias
    } else if x > lambd {
        x - bias
    } else {
        T::zero()
    }
}

fn swish<T: Math>(x: T, alpha: T) -> T {
    x * (alpha * x).sigmoid()
}

/// A pointwise activation operator.
#[derive(Debug)]
struct Pointwise {
    name: &'static str,
    kind: Kind,
}

/// Maps a float tensor with one generic expression in `$x`, specialised for
/// f32 (also used for f16/bf16) and f64.
macro_rules! both {
    ($op:expr, $t:expr, |$x:ident| $e:expr) => {
        map_float($op, $t, move |$x: f32| $e, move |$x: f64| $e)
    };
}

impl Pointwise {
    fn compute(&self, t: &Tensor) -> Result<Tensor> {
        let op = self.name;
        if self.kind == Kind::Relu {
            match t {
                Tensor::I8(a) => return Ok(Tensor::I8(par_map(op, a, |&x| x.max(0))?)),
                Tensor::I16(a) => return Ok(Tensor::I16(par_map(op, a, |&x| x.max(0))?)),
                Tensor::I32(a) => return Ok(Tensor::I32(par_map(op, a, |&x| x.max(0))?)),
                Tensor::I64(a) => return Ok(Tensor::I64(par_map(op, a, |&x| x.max(0))?)),
                _ => {}
            }
        }
        if let (Kind::Gelu { tanh }, Tensor::F32(a)) = (self.kind, t) {
            let src = contiguous(a);
            let mut out = crate::tensor::recycle::take_or_default::<f32>(src.len());
            let act = if tanh {
                Activation::GeluTanh
            } else {
                Activation::Gelu
            };
            super::gelu::gelu_into(act, &src, &mut out);
            return Ok(Tensor::F32(array_from(op, a.shape(), out)?));
        }
        match self.kind {
            Kind::Relu => both!(op, t, |x| Activation::Relu.eval(x)),
            Kind::LeakyRelu(a) => both!(op, t, |x| Activation::LeakyRelu(a).eval(x)),
            Kind::Sigmoid => both!(op, t, |x| Activation::Sigmoid.eval(x)),
            Kind::HardSwish => both!(op, t, |x| Activation::HardSwish.eval(x)),
            Kind::Tanh => both!(op, t, |x| Activation::Tanh.eval(x)),
            Kind::Elu(a) => both!(op, t, |x| elu(x, c(a))),
            Kind::Selu { alpha, gamma } => both!(op, t, |x| selu(x, c(alpha), c(gamma))),
            Kind::Celu(a) => both!(op, t, |x| celu(x, c(a))),
            Kind::HardSigmoid { alpha, beta } => {
                both!(op, t, |x| hard_sigmoid(x, c(alpha), c(beta)))
            }
            Kind::Gelu { tanh: false } => both!(op, t, |x| gelu_erf(x)),
            Kind::Gelu { tanh: true } => both!(op, t, |x| Activation::GeluTanh.eval(x)),
            Kind::Softplus => both!(op, t, |x| softplus(x)),
            Kind::Softsign => both!(op, t, |x| softsign(x)),
            Kind::ThresholdedRelu(a) => both!(op, t, |x| thresholded_relu(x, c(a))),
            Kind::Mish => both!(op, t, |x| x * softplus(x).tanh_fast()),
            Kind::Swish(a) => both!(op, t, |x| swish(x, c(a))),
            Kind::Shrink { lambd, bias } => both!(op, t, |x| shrink(x, c(lambd), c(bias))),
        }
    }

    fn check(&self, f: &Fact) -> Result<()> {
        let int_ok = self.kind == Kind::Relu
            && matches!(f.dtype, DType::I8 | DType::I16 | DType::I32 | DType::I64);
        if f.dtype.is_float() || int_ok {
            Ok(())
        } else {
            Err(Error::op(
                self.name,
                format!("input of type {} is not supported", f.dtype),
            ))
        }
    }
}

impl Operator for Pointwise {
    /// The kinds a producer's kernels apply in place (the erf GELU only).
    fn as_activation(&self, _inputs: &[InferInput]) -> Option<Activation> {
        Some(match self.kind {
            Kind::Relu => Activation::Relu,
            Kind::LeakyRelu(alpha) => Activation::LeakyRelu(alpha),
            Kind::Sigmoid => Activation::Sigmoid,
            Kind::HardSwish => Activation::HardSwish,
            Kind::Tanh => Activation::Tanh,
            Kind::Gelu { tanh: false } => Activation::Gelu,
            Kind::Gelu { tanh: true } => Activation::GeluTanh,
            _ => return None,
        })
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        self.check(fact(self.name, inputs, 0)?)?;
        infer_same(self.name, inputs)
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0) * self.kind.cost()
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.name, inputs, 0)?;
        self.check(&Fact::of(x))?;
        Ok(vec![self.compute(x)?])
    }
}

fn pointwise(name: &'static str, kind: Kind) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Pointwise { name, kind }))
}

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Relu", 1, |_| pointwise("Relu", Kind::Relu));
    r.add("LeakyRelu", 1, |ctx| {
        let a = ctx.attrs.float("alpha", 0.01)?;
        pointwise("LeakyRelu", Kind::LeakyRelu(a))
    });
    r.add("Sigmoid", 1, |_| pointwise("Sigmoid", Kind::Sigmoid));
    r.add("HardSwish", 14, |_| pointwise("HardSwish", Kind::HardSwish));
    r.add("Tanh", 1, |_| pointwise("Tanh", Kind::Tanh));
    r.add("Elu", 1, |ctx| {
        pointwise("Elu", Kind::Elu(ctx.attrs.float("alpha", 1.0)?))
    });
    r.add("Selu", 1, |ctx| {
        let alpha = ctx.attrs.float("alpha", 1.673_263_2)?;
        let gamma = ctx.attrs.float("gamma", 1.050_701)?;
        pointwise("Selu", Kind::Selu { alpha, gamma })
    });
    r.add("Celu", 12, |ctx| {
        let a = ctx.attrs.float("alpha", 1.0)?;
        if a == 0.0 {
            return Err(ctx.attrs.error("alpha", "must not be 0"));
        }
        pointwise("Celu", Kind::Celu(a))
    });
    r.add("HardSigmoid", 1, |ctx| {
        let alpha = ctx.attrs.float("alpha", 0.2)?;
        let beta = ctx.attrs.float("beta", 0.5)?;
        pointwise("HardSigmoid", Kind::HardSigmoid { alpha, beta })
    });
    r.add("Gelu", 20, |ctx| {
        let tanh = match ctx.attrs.string("approximate", "none")?.as_str() {
            "none" => false,
            "tanh" => true,
            other => {
                return Err(ctx.attrs.error(
                    "approximate",
                    format!("expected \"none\" or \"tanh\", found {other:?}"),
                ))
            }
        };
        pointwise("Gelu", Kind::Gelu { tanh })
    });
    r.add("Softplus", 1, |_| pointwise("Softplus", Kind::Softplus));
    r.add("Softsign", 1, |_| pointwise("Softsign", Kind::Softsign));
    r.add("ThresholdedRelu", 10, |ctx| {
        let a = ctx.attrs.float("alpha", 1.0)?;
        pointwise("ThresholdedRelu", Kind::ThresholdedRelu(a))
    });
    r.add("Mish", 18, |_| pointwise("Mish", Kind::Mish));
    r.add("Swish", 24, |ctx| {
        pointwise("Swish", Kind::Swish(ctx.attrs.float("alpha", 1.0)?))
    });
    r.add("Shrink", 9, |ctx| {
        let lambd = ctx.attrs.float("lambd", 0.5)?;
        let bias = ctx.attrs.float("bias", 0.0)?;
        pointwise("Shrink", Kind::Shrink { lambd, bias })
    });
}
