//! The kernels of the activation a load-time fusion may give Conv, Gemm,
//! MatMul and the others ([`Activation`], carried in the node's typed
//! `Fusion`), applied in place to each output block right after it is
//! computed, while it is still in cache.

pub(crate) use crate::ir::Activation;
use crate::ops::activation::gelu::{gelu_erf_f32, gelu_in_place};
use crate::ops::gemm::simd::multiversion;
use crate::ops::unary::kernel::{sigmoid_f32, tanh_f32};
use num_traits::Float;

/// Expands `$each!(kind)` for the kind of activation `$act`, rebuilt as a
/// constant of that kind, so that each kind's loop is compiled on its own.
macro_rules! by_kind {
    ($act:expr, $each:ident) => {
        match $act {
            Activation::Relu => $each!(Activation::Relu),
            Activation::LeakyRelu(a) => $each!(Activation::LeakyRelu(a)),
            Activation::Clip(lo, hi) => $each!(Activation::Clip(lo, hi)),
            Activation::Sigmoid => $each!(Activation::Sigmoid),
            Activation::HardSwish => $each!(Activation::HardSwish),
            Activation::Tanh => $each!(Activation::Tanh),
            Activation::Gelu => $each!(Activation::Gelu),
            Activation::GeluTanh => $each!(Activation::GeluTanh),
        }
    };
}

impl Activation {
    /// The activation of one element. The standalone activation operators
    /// call this too, so a fused and an unfused graph agree bit for bit.
    #[inline(always)]
    pub(crate) fn eval<T: ActivationFloat>(self, x: T) -> T {
        let zero = T::zero();
        match self {
            Activation::Relu => {
                if x < zero {
                    zero
                } else {
                    x
                }
            }
            Activation::LeakyRelu(alpha) => {
                if x < zero {
                    x * T::cast_f32(alpha)
                } else {
                    x
                }
            }
            Activation::Clip(lo, hi) => {
                let (lo, hi) = (T::cast_f32(lo), T::cast_f32(hi));
                let v = if x < lo { lo } else { x };
                if v > hi {
                    hi
                } else {
                    v
                }
            }
            Activation::Sigmoid => x.sigmoid(),
            Activation::HardSwish => {
                let g = x * T::cast_f32(1.0 / 6.0) + T::cast_f32(0.5);
                let g = if g < zero {
                    zero
                } else if g > T::one() {
                    T::one()
                } else {
                    g
                };
                x * g
            }
            Activation::Tanh => x.tanh_fast(),
            Activation::Gelu => x.gelu_erf(),
            Activation::GeluTanh => {
                let inner = T::cast_f32(0.044_715) * (x * x * x) + x;
                T::cast_f32(0.5) * x * (T::one() + (T::sqrt_2_over_pi() * inner).tanh_fast())
            }
        }
    }

    /// Applies the activation to every element of `xs`, one loop per kind
    /// (inlined, for kernels that hold their sums in registers).
    #[inline(always)]
    pub(crate) fn eval_all<T: ActivationFloat>(self, xs: &mut [T]) {
        macro_rules! each {
            ($act:expr) => {{
                let act = $act;
                for x in xs.iter_mut() {
                    *x = act.eval(*x);
                }
            }};
        }
        by_kind!(self, each)
    }

    /// Applies the activation to every element of `xs`.
    pub(crate) fn apply<T: ActivationFloat>(self, xs: &mut [T]) {
        activate(self, xs, None)
    }

    /// Adds `bias` to every element of `xs`, then applies the activation, in
    /// one pass (the same bits as the two steps apart).
    pub(crate) fn apply_biased<T: ActivationFloat>(self, xs: &mut [T], bias: T) {
        activate(self, xs, Some(bias))
    }
}

/// Elements [`activate`] computes into a stack block before storing.
const ACTIVATE_BLOCK: usize = 32;

multiversion! {
    wide
    /// `xs[i] = act(xs[i] + bias)`, or `act(xs[i])` without a bias.
    fn activate<T: ActivationFloat>(act: Activation, xs: &mut [T], bias: Option<T>) {
        if act == Activation::Gelu {
            // The GELU's blocked kernel (the same bits as `eval`).
            if let Some(b) = bias {
                for x in xs.iter_mut() {
                    *x = *x + b;
                }
            }
            T::gelu_erf_all(xs);
            return;
        }
        // One loop per kind and bias, so each is specialised and can vectorise.
        macro_rules! each {
            ($act:expr) => {{
                let act = $act;
                match bias {
                    Some(b) => {
                        for x in xs.iter_mut() {
                            *x = act.eval(*x + b);
                        }
                    }
                    None => {
                        // Through a stack block: written in place, the
                        // compiler turns the "unchanged" lanes of Relu or
                        // Clip into a masked store, which is microcoded
                        // and many times slower on AMD cores. The block
                        // must really be stored (`black_box`): as a plain
                        // array the compiler saw through it and made the
                        // masked store anyway (Zen 4: a 7×7 stem's Relu
                        // took 12 % of the layer).
                        let mut blocks = xs.chunks_exact_mut(ACTIVATE_BLOCK);
                        for block in &mut blocks {
                            let mut out = [T::zero(); ACTIVATE_BLOCK];
                            for (o, &x) in out.iter_mut().zip(block.iter()) {
                                *o = act.eval(x);
                            }
                            block.copy_from_slice(std::hint::black_box(&out));
                        }
                        for x in blocks.into_remainder() {
                            *x = act.eval(*x);
                        }
                    }
                }
            }};
        }
        by_kind!(act, each)
    }
}

/// The float types activations run on: f32 through the branch-free kernels
/// of the unary family, f64 through the exact library functions.
pub(crate) trait ActivationFloat: Float {
    /// Converts an f32 attribute value.
    fn cast_f32(v: f32) -> Self;
    /// `√(2/π)`, the tanh GELU's factor, rounded to the type.
    fn sqrt_2_over_pi() -> Self;
    /// `1 / (1 + e^-x)`.
    fn sigmoid(self) -> Self;
    /// `tanh(x)`.
    fn tanh_fast(self) -> Self;
    /// The erf GELU (for f32 the standalone Gelu operator's kernel, so a
    /// fused and an unfused GELU give the same bits).
    fn gelu_erf(self) -> Self;
    /// [`gelu_erf`](Self::gelu_erf) of every element, in place (for f32
    /// the blocked kernel, with the same bits).
    fn gelu_erf_all(xs: &mut [Self]);
}

impl ActivationFloat for f32 {
    #[inline(always)]
    fn cast_f32(v: f32) -> f32 {
        v
    }
    #[inline(always)]
    fn sqrt_2_over_pi() -> f32 {
        0.797_884_6
    }
    #[inline(always)]
    fn sigmoid(self) -> f32 {
        sigmoid_f32(self)
    }
    #[inline(always)]
    fn tanh_fast(self) -> f32 {
        tanh_f32(self)
    }
    #[inline(always)]
    fn gelu_erf(self) -> f32 {
        gelu_erf_f32(self)
    }
    #[inline(always)]
    fn gelu_erf_all(xs: &mut [f32]) {
        gelu_in_place(xs)
    }
}

impl ActivationFloat for f64 {
    #[inline(always)]
    fn cast_f32(v: f32) -> f64 {
        v as f64
    }
    #[inline(always)]
    fn sqrt_2_over_pi() -> f64 {
        0.797_884_560_802_865_4
    }
    #[inline(always)]
    fn sigmoid(self) -> f64 {
        1.0 / (1.0 + (-self).exp())
    }
    #[inline(always)]
    fn tanh_fast(self) -> f64 {
        self.tanh()
    }
    #[inline(always)]
    fn gelu_erf(self) -> f64 {
        0.5 * self * (1.0 + libm::erf(self * std::f64::consts::FRAC_1_SQRT_2))
    }
    #[inline(always)]
    fn gelu_erf_all(xs: &mut [f64]) {
        for x in xs.iter_mut() {
            *x = x.gelu_erf();
        }
    }
}
