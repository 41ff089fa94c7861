//! Elementwise machinery shared by the unary, binary and activation families:
//! parallel maps over a tensor's elements, the float abstraction that computes
//! f16/bf16 through f32, and branch-free (vectorisable) f32 `exp`, `sigmoid`
//! and `tanh` accurate to a few ulp.

use crate::error::{Error, Result};
use crate::ops::util::par_rows;
use crate::tensor::Tensor;
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use std::borrow::Cow;

/// The elements of `a` in row-major order, borrowed when already contiguous.
pub(crate) fn contiguous<T: Clone>(a: &ArrayD<T>) -> Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(a.iter().cloned().collect()),
    }
}

/// Wraps row-major `data` into an array of `shape`.
pub(crate) fn array_from<T>(op: &str, shape: &[usize], data: Vec<T>) -> Result<ArrayD<T>> {
    ArrayD::from_shape_vec(IxDyn(shape), data)
        .map_err(|e| Error::op(op, format!("internal shape error: {e}")))
}

/// Fills `out[i] = f(&src[i])`, split over the current rayon pool.
pub(crate) fn par_map_slice<S: Sync, D: Send>(
    src: &[S],
    out: &mut [D],
    f: impl Fn(&S) -> D + Sync,
) {
    par_rows(out, 1, |first, chunk| {
        let s = &src[first..first + chunk.len()];
        for (o, x) in chunk.iter_mut().zip(s) {
            *o = f(x);
        }
    });
}

/// A new array of `a`'s shape with `f` applied to every element, in parallel.
pub(crate) fn par_map<S: Clone + Sync, D: Clone + Default + Send + 'static>(
    op: &str,
    a: &ArrayD<S>,
    f: impl Fn(&S) -> D + Sync,
) -> Result<ArrayD<D>> {
    let src = contiguous(a);
    // Every element is written below.
    let mut out = crate::tensor::recycle::take_or_default::<D>(src.len());
    par_map_slice(&src, &mut out, f);
    array_from(op, a.shape(), out)
}

/// The floating-point element types; f16 and bf16 are computed through f32.
pub(crate) trait Float: Copy + Send + Sync + Default + PartialOrd + 'static {
    /// Converts to f32 (exact for f16/bf16).
    fn to_f32(self) -> f32;
    /// Converts from f32, rounding to nearest.
    fn from_f32(v: f32) -> Self;
    /// Converts to f64 (exact).
    fn to_f64(self) -> f64;
    /// Converts from f64, rounding to nearest.
    fn from_f64(v: f64) -> Self;
}

impl Float for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Float for f64 {
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn from_f32(v: f32) -> Self {
        v as f64
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

macro_rules! half_float {
    ($t:ty) => {
        impl Float for $t {
            fn to_f32(self) -> f32 {
                <$t>::to_f32(self)
            }
            fn from_f32(v: f32) -> Self {
                <$t>::from_f32(v)
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
        }
    };
}
half_float!(f16);
half_float!(bf16);

/// The error for a non-float input to a float-only operator.
pub(crate) fn not_float(op: &str, t: &Tensor) -> Error {
    Error::op(
        op,
        format!("expected a floating-point input, found {}", t.dtype()),
    )
}

/// Applies `f` (f32, also used for f16/bf16) or `g` (f64) to every element
/// of a floating-point tensor. Only f32, the type models compute in, gets a
/// kernel with `f` inlined; the other float types share one kernel each
/// that calls the function through a `dyn` reference (see
/// [`map_float_dyn`]), which keeps the library small.
pub(crate) fn map_float(
    op: &str,
    t: &Tensor,
    f: impl Fn(f32) -> f32 + Sync,
    g: impl Fn(f64) -> f64 + Sync,
) -> Result<Tensor> {
    match t {
        Tensor::F32(a) => Ok(Tensor::F32(par_map(op, a, |&x| f(x))?)),
        other => map_float_dyn(op, other, &f, &g),
    }
}

/// [`map_float`] for f64, f16 and bf16: compiled once, not once per
/// operator.
#[inline(never)]
fn map_float_dyn(
    op: &str,
    t: &Tensor,
    f: &(dyn Fn(f32) -> f32 + Sync),
    g: &(dyn Fn(f64) -> f64 + Sync),
) -> Result<Tensor> {
    Ok(match t {
        Tensor::F64(a) => Tensor::F64(par_map(op, a, |&x| g(x))?),
        Tensor::F16(a) => Tensor::F16(par_map(op, a, |&x| f16::from_f32(f(x.to_f32())))?),
        Tensor::BF16(a) => Tensor::BF16(par_map(op, a, |&x| bf16::from_f32(f(x.to_f32())))?),
        other => return Err(not_float(op, other)),
    })
}

/// Like [`map_float`] with a boolean result (IsNaN, IsInf); the f64, f16
/// and bf16 kernels are shared the same way.
pub(crate) fn test_float(
    op: &str,
    t: &Tensor,
    f: impl Fn(f32) -> bool + Sync,
    g: impl Fn(f64) -> bool + Sync,
) -> Result<Tensor> {
    match t {
        Tensor::F32(a) => Ok(Tensor::Bool(par_map(op, a, |&x| f(x))?)),
        other => test_float_dyn(op, other, &f, &g),
    }
}

/// [`test_float`] for f64, f16 and bf16.
#[inline(never)]
fn test_float_dyn(
    op: &str,
    t: &Tensor,
    f: &(dyn Fn(f32) -> bool + Sync),
    g: &(dyn Fn(f64) -> bool + Sync),
) -> Result<Tensor> {
    Ok(match t {
        Tensor::F64(a) => Tensor::Bool(par_map(op, a, |&x| g(x))?),
        Tensor::F16(a) => Tensor::Bool(par_map(op, a, |&x| f(x.to_f32()))?),
        Tensor::BF16(a) => Tensor::Bool(par_map(op, a, |&x| f(x.to_f32()))?),
        other => return Err(not_float(op, other)),
    })
}

/// `e^x` for f32 without branches or calls, so loops over it vectorise.
/// Cephes-style: `x = n·ln2 + r`, a degree-6 polynomial for `e^r`, and the
/// scale `2^n` applied in two halves so that subnormal results round once.
/// Relative error below 2e-7 over the whole range; NaN propagates.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    let (p, n) = exp_parts(x.clamp(-104.0, 88.8));
    let n1 = n >> 1;
    let n2 = n.wrapping_sub(n1);
    let s1 = f32::from_bits((n1.wrapping_add(127) as u32) << 23);
    let s2 = f32::from_bits((n2.wrapping_add(127) as u32) << 23);
    p * s1 * s2
}

/// The core of [`exp_f32`], shared with the exponentials that scale
/// differently: `x = n·ln2 + r`, returned as `(e^r, n)` (no clamp).
#[inline(always)]
pub(crate) fn exp_parts(x: f32) -> (f32, i32) {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    const C1: f32 = 0.693_359_4; // ln 2, high part (exact in few bits)
    const C2: f32 = -2.121_944_4e-4; // ln 2 - C1
    let t = x * std::f32::consts::LOG2_E + MAGIC;
    let nf = t - MAGIC;
    let n = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = x - nf * C1 - nf * C2;
    let z = r * r;
    let p = ((((1.987_569_2e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 5e-1;
    (p * z + r + 1.0, n)
}

/// `a · b + c` with one rounding. A function, not a closure: a closure is
/// compiled apart from its caller's target features unless inlined.
#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// `e^x` for `x` in [−87, 0] (a normal result; NaN propagates), in fused
/// multiply-adds: the reduction and polynomial of [`exp_parts`], and
/// `2^n` as one power of two built in the exponent bits. About 14
/// operations where [`exp_f32`] takes 24; `mul_add` is exact on every
/// build, so the bits do not depend on the CPU path. For kernels whose
/// argument is known to be in range (an erfc tail, a Softmax row less its
/// maximum).
#[inline(always)]
pub(crate) fn exp_normal(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    const C1: f32 = 0.693_359_4; // ln 2, high part (exact in few bits)
    const C2: f32 = -2.121_944_4e-4; // ln 2 - C1
    let t = fma(x, std::f32::consts::LOG2_E, MAGIC);
    let nf = t - MAGIC;
    let n = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = fma(nf, -C2, fma(nf, -C1, x));
    let q = fma(fma(1.987_569_2e-4, r, 1.398_199_9e-3), r, 8.333_452e-3);
    let q = fma(fma(q, r, 4.166_579_6e-2), r, 1.666_666_5e-1);
    let p = fma(q, r, 0.5);
    fma(p, r * r, r + 1.0) * f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

/// The logistic function `1 / (1 + e^-x)` for f32, branch-free and stable
/// for large |x| (the negative side is computed as `e^x / (1 + e^x)`).
#[inline(always)]
pub fn sigmoid_f32(x: f32) -> f32 {
    let e = exp_f32(-x.abs());
    let r = 1.0 / (1.0 + e);
    if x >= 0.0 {
        r
    } else {
        e * r
    }
}

/// Hyperbolic tangent for f32, branch-free: an odd polynomial below 0.625
/// (Cephes `tanhf`), `1 - 2 / (e^2|x| + 1)` above.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let s = x * x;
    let small =
        ((((-5.704_988_7e-3 * s + 2.063_909e-2) * s - 5.373_971_6e-2) * s + 1.333_144_2e-1) * s
            - 3.333_328e-1)
            * s
            * x
            + x;
    let e = exp_f32(a + a);
    let big = (1.0 - 2.0 / (e + 1.0)).copysign(x);
    if a < 0.625 {
        small
    } else {
        big
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ir::attributes::Attribute;
    use crate::ir::{Fact, InferInput, Operator};

    /// Builds `op` (default domain) with attributes, opset and constant inputs.
    pub(crate) fn build_op(
        op: &str,
        attrs: &[(&str, Attribute)],
        opset: i64,
        consts: &[Option<&Tensor>],
    ) -> Result<Box<dyn Operator>> {
        crate::ops::testutil::build_op(op, opset, attrs, consts, consts.len(), 1)
    }

    /// Runs `o` and checks that `infer` (without constant values) predicted
    /// the output's exact fact.
    pub(crate) fn run_op(o: &dyn Operator, inputs: &[Option<&Tensor>]) -> Result<Tensor> {
        let facts: Vec<Option<Fact>> = inputs.iter().map(|t| t.map(Fact::of)).collect();
        let inf: Vec<InferInput> = facts
            .iter()
            .map(|f| InferInput {
                fact: f.as_ref(),
                value: None,
            })
            .collect();
        let predicted = o.infer(&inf)?;
        let out = o.run(inputs)?.remove(0);
        assert_eq!(
            predicted[0],
            Fact::of(&out),
            "inferred fact differs from output"
        );
        assert!(
            o.flops(
                &facts.iter().map(|f| f.as_ref()).collect::<Vec<_>>(),
                &predicted
            ) > 0
                || out.is_empty()
        );
        Ok(out)
    }

    /// Builds `op` at `opset` without attributes and runs it on `inputs`.
    pub(crate) fn run_simple(op: &str, opset: i64, inputs: &[&Tensor]) -> Result<Tensor> {
        let o = build_op(op, &[], opset, &[])?;
        let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        run_op(o.as_ref(), &ins)
    }

    /// A rank-1 tensor.
    pub(crate) fn t1<T: crate::Element>(v: Vec<T>) -> Tensor {
        Tensor::from_vec(&[v.len()], v).unwrap()
    }

    /// Relative error of `got` against `want`, with an absolute floor for
    /// results that underflow f32.
    pub(crate) fn rel_err(got: f32, want: f64) -> f64 {
        if want.is_nan() {
            return if got.is_nan() { 0.0 } else { f64::INFINITY };
        }
        if want.is_infinite() || got.is_infinite() {
            return if got as f64 == want {
                0.0
            } else {
                f64::INFINITY
            };
        }
        let err = (got as f64 - want).abs();
        if err <= 1e-44 {
            return 0.0;
        }
        err / want.abs().max(f32::MIN_POSITIVE as f64)
    }

    fn sweep(lo: f32, hi: f32, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).map(move |i| lo + (hi - lo) * (i as f32 / n as f32))
    }

    #[test]
    fn exp_matches_f64_everywhere() {
        let mut worst = 0.0f64;
        for x in sweep(-103.0, 88.7, 400_000) {
            let want = (x as f64).exp();
            // Results in the subnormal range carry absolute, not relative, precision.
            if want < f32::MIN_POSITIVE as f64 {
                assert!((exp_f32(x) as f64 - want).abs() <= 1.5e-45, "exp({x})");
                continue;
            }
            worst = worst.max(rel_err(exp_f32(x), want));
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-200.0), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn sigmoid_and_tanh_match_f64() {
        let mut worst = (0.0f64, 0.0f64);
        for x in sweep(-80.0, 80.0, 200_000).chain(sweep(-1e-3, 1e-3, 10_000)) {
            let xd = x as f64;
            worst.0 = worst
                .0
                .max(rel_err(sigmoid_f32(x), 1.0 / (1.0 + (-xd).exp())));
            worst.1 = worst.1.max(rel_err(tanh_f32(x), xd.tanh()));
        }
        assert!(worst.0 < 1e-6, "sigmoid worst {}", worst.0);
        assert!(worst.1 < 1e-6, "tanh worst {}", worst.1);
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(sigmoid_f32(f32::NEG_INFINITY), 0.0);
        assert!(tanh_f32(f32::NAN).is_nan() && sigmoid_f32(f32::NAN).is_nan());
    }

    #[test]
    fn map_float_covers_half_types_and_rejects_ints() {
        let t = Tensor::from_vec(&[2], vec![f16::from_f32(1.5), f16::from_f32(-2.0)]).unwrap();
        let r = map_float("T", &t, |x| x * 2.0, |x| x * 2.0).unwrap();
        assert_eq!(
            r,
            Tensor::from_vec(&[2], vec![f16::from_f32(3.0), f16::from_f32(-4.0)]).unwrap()
        );
        let i = Tensor::from_vec(&[1], vec![1i32]).unwrap();
        assert!(map_float("T", &i, |x| x, |x| x).is_err());
    }

    #[test]
    fn par_map_is_thread_count_independent() {
        let a = ArrayD::from_shape_fn(IxDyn(&[70_000]), |i| i[0] as f32 * 0.001);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let four = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        let r1 = one.install(|| par_map("T", &a, |&x| exp_f32(x)).unwrap());
        let r4 = four.install(|| par_map("T", &a, |&x| exp_f32(x)).unwrap());
        assert_eq!(r1, r4);
    }
}
