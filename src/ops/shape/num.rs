//! Arithmetic on the numeric element types, as the reduction, scatter and
//! cumulative-sum kernels need it: a wide accumulator per type (f64 for the
//! floats, i64 / u64 for the integers, with wrapping integer arithmetic so
//! that overflow never panics), NaN-propagating max / min, and conversions.

use crate::tensor::Element;
use half::{bf16, f16};

/// A numeric element type with its accumulator.
pub(crate) trait Num: Element + crate::tensor::bits::AsBits + Copy + PartialOrd {
    /// The accumulator type.
    type Acc: Copy + Send + Sync + PartialOrd + std::fmt::Debug;
    /// True for the floating-point types.
    const FLOAT: bool;
    /// Widens to the accumulator.
    fn acc(self) -> Self::Acc;
    /// Narrows from the accumulator (wrapping for integers, rounding for floats).
    fn from_acc(a: Self::Acc) -> Self;
    /// Accumulator sum (wrapping for integers).
    fn add(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Accumulator product (wrapping for integers).
    fn mul(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Accumulator zero.
    fn zero() -> Self::Acc;
    /// Accumulator one.
    fn one() -> Self::Acc;
    /// Absolute value in the accumulator.
    fn abs(a: Self::Acc) -> Self::Acc;
    /// The accumulator as f64.
    fn acc_f64(a: Self::Acc) -> f64;
    /// An f64 into the accumulator (saturating for integers, NaN becomes 0).
    fn f64_acc(v: f64) -> Self::Acc;
    /// The accumulator divided by a count (integer division for integers).
    fn div_count(a: Self::Acc, n: usize) -> Self::Acc;
    /// Negative infinity, or the type's minimum.
    fn lowest() -> Self;
    /// Positive infinity, or the type's maximum.
    fn highest() -> Self;
    /// True for a NaN.
    fn is_nan(self) -> bool;
    /// A key whose unsigned order is this type's order: -0 and +0 share a
    /// key, and every NaN gets the largest. Sorting keys instead of values
    /// compiles the sort once for every element type.
    fn order_key(self) -> u64;

    /// The value as f64.
    fn to_f64(self) -> f64 {
        Self::acc_f64(self.acc())
    }
    /// An f64 converted to this type (saturating for integers).
    fn from_f64(v: f64) -> Self {
        Self::from_acc(Self::f64_acc(v))
    }
    /// The larger of two values; NaN wins.
    fn max_nan(a: Self, b: Self) -> Self {
        if a.is_nan() || b.is_nan() {
            if a.is_nan() {
                a
            } else {
                b
            }
        } else if b > a {
            b
        } else {
            a
        }
    }
    /// The smaller of two values; NaN wins.
    fn min_nan(a: Self, b: Self) -> Self {
        if a.is_nan() || b.is_nan() {
            if a.is_nan() {
                a
            } else {
                b
            }
        } else if b < a {
            b
        } else {
            a
        }
    }
    /// `a + b` in this type.
    fn plus(a: Self, b: Self) -> Self {
        Self::from_acc(Self::add(a.acc(), b.acc()))
    }
    /// `a * b` in this type.
    fn times(a: Self, b: Self) -> Self {
        Self::from_acc(Self::mul(a.acc(), b.acc()))
    }
}

macro_rules! num_float {
    ($t:ty, $to:expr, $from:expr) => {
        impl Num for $t {
            type Acc = f64;
            const FLOAT: bool = true;
            fn acc(self) -> f64 {
                #[allow(clippy::redundant_closure_call)]
                ($to)(self)
            }
            fn from_acc(a: f64) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($from)(a)
            }
            fn add(a: f64, b: f64) -> f64 {
                a + b
            }
            fn mul(a: f64, b: f64) -> f64 {
                a * b
            }
            fn zero() -> f64 {
                0.0
            }
            fn one() -> f64 {
                1.0
            }
            fn abs(a: f64) -> f64 {
                a.abs()
            }
            fn acc_f64(a: f64) -> f64 {
                a
            }
            fn f64_acc(v: f64) -> f64 {
                v
            }
            fn div_count(a: f64, n: usize) -> f64 {
                a / n as f64
            }
            fn lowest() -> Self {
                Self::from_acc(f64::NEG_INFINITY)
            }
            fn highest() -> Self {
                Self::from_acc(f64::INFINITY)
            }
            fn is_nan(self) -> bool {
                self.acc().is_nan()
            }
            fn order_key(self) -> u64 {
                float_key(self.acc())
            }
        }
    };
}
/// The order key of a float (see [`Num::order_key`]): the sign bit
/// flipped for positives, every bit for negatives.
fn float_key(v: f64) -> u64 {
    if v.is_nan() {
        return u64::MAX;
    }
    // -0 == +0: one key for both.
    let bits = (v + 0.0).to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// The order key of an integer accumulator (see [`Num::order_key`]).
trait IntKey {
    fn key(self) -> u64;
}
impl IntKey for i64 {
    fn key(self) -> u64 {
        (self as u64) ^ 1 << 63
    }
}
impl IntKey for u64 {
    fn key(self) -> u64 {
        self
    }
}
fn int_key(a: impl IntKey) -> u64 {
    a.key()
}

num_float!(f32, |v: f32| v as f64, |a: f64| a as f32);
num_float!(f64, |v: f64| v, |a: f64| a);
num_float!(f16, |v: f16| v.to_f64(), f16::from_f64);
num_float!(bf16, |v: bf16| v.to_f64(), bf16::from_f64);

macro_rules! num_int {
    ($t:ty, $acc:ty) => {
        impl Num for $t {
            type Acc = $acc;
            const FLOAT: bool = false;
            fn acc(self) -> $acc {
                self as $acc
            }
            fn from_acc(a: $acc) -> Self {
                a as $t
            }
            fn add(a: $acc, b: $acc) -> $acc {
                a.wrapping_add(b)
            }
            fn mul(a: $acc, b: $acc) -> $acc {
                a.wrapping_mul(b)
            }
            fn zero() -> $acc {
                0
            }
            fn one() -> $acc {
                1
            }
            #[allow(unused_comparisons)]
            fn abs(a: $acc) -> $acc {
                #[allow(clippy::absurd_extreme_comparisons)]
                if a < 0 {
                    (0 as $acc).wrapping_sub(a)
                } else {
                    a
                }
            }
            fn acc_f64(a: $acc) -> f64 {
                a as f64
            }
            fn f64_acc(v: f64) -> $acc {
                // Saturates at the type's range; NaN becomes 0.
                (v as $t) as $acc
            }
            fn div_count(a: $acc, n: usize) -> $acc {
                if n == 0 {
                    0
                } else {
                    a.wrapping_div(n as $acc)
                }
            }
            fn lowest() -> Self {
                <$t>::MIN
            }
            fn highest() -> Self {
                <$t>::MAX
            }
            fn is_nan(self) -> bool {
                false
            }
            fn order_key(self) -> u64 {
                int_key(self.acc())
            }
        }
    };
}
num_int!(i8, i64);
num_int!(i16, i64);
num_int!(i32, i64);
num_int!(i64, i64);
num_int!(u8, u64);
num_int!(u16, u64);
num_int!(u32, u64);
num_int!(u64, u64);

/// `v` converted to `T` when `T` is numeric (saturating for integers);
/// `None` for bool, strings and the narrow (float8, 4- and 2-bit) types.
pub(crate) fn num_value<T: Element>(v: f64) -> Option<T> {
    use crate::tensor::{DType, Tensor};
    fn conv<N: Num>(v: f64) -> Tensor {
        Tensor::scalar(N::from_f64(v))
    }
    let t = match T::DTYPE {
        DType::F32 => conv::<f32>(v),
        DType::F64 => conv::<f64>(v),
        DType::F16 => conv::<f16>(v),
        DType::BF16 => conv::<bf16>(v),
        DType::I8 => conv::<i8>(v),
        DType::I16 => conv::<i16>(v),
        DType::I32 => conv::<i32>(v),
        DType::I64 => conv::<i64>(v),
        DType::U8 => conv::<u8>(v),
        DType::U16 => conv::<u16>(v),
        DType::U32 => conv::<u32>(v),
        DType::U64 => conv::<u64>(v),
        DType::Bool | DType::String => return None,
        // The narrow types have no arithmetic.
        DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F4E2M1
        | DType::F8E8M0
        | DType::U4
        | DType::I4
        | DType::U2
        | DType::I2 => return None,
    };
    T::take(t).ok().and_then(|a| a.into_iter().next())
}

/// Runs `$body` with `$a` bound to the array of a numeric tensor, generic
/// over [`Num`]; other types are an error naming `$op`. The body must
/// evaluate to a `Result`.
macro_rules! num_dispatch {
    ($op:expr, $t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::Tensor::F32($a) => $body,
            $crate::Tensor::F64($a) => $body,
            $crate::Tensor::F16($a) => $body,
            $crate::Tensor::BF16($a) => $body,
            $crate::Tensor::I8($a) => $body,
            $crate::Tensor::I16($a) => $body,
            $crate::Tensor::I32($a) => $body,
            $crate::Tensor::I64($a) => $body,
            $crate::Tensor::U8($a) => $body,
            $crate::Tensor::U16($a) => $body,
            $crate::Tensor::U32($a) => $body,
            $crate::Tensor::U64($a) => $body,
            other => Err($crate::Error::op(
                $op,
                format!("expected a numeric input, found {}", other.dtype()),
            )),
        }
    };
}
pub(crate) use num_dispatch;

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::*;

    #[test]
    fn integer_arithmetic_wraps() {
        assert_eq!(i8::plus(127, 1), -128);
        assert_eq!(u8::times(16, 16), 0);
        assert_eq!(i32::from_f64(1e20), i32::MAX);
        assert_eq!(u8::from_f64(-3.0), 0);
        assert_eq!(i64::abs(-5), 5);
        assert_eq!(i32::div_count(-7, 2), -3);
    }

    #[test]
    fn order_keys_sort_like_the_values() {
        let f = [
            f32::NEG_INFINITY,
            -3.5,
            -1e-30,
            0.0,
            1e-30,
            2.0,
            f32::INFINITY,
            f32::NAN,
        ];
        assert!(f.windows(2).all(|w| w[0].order_key() < w[1].order_key()));
        assert_eq!((-0.0f32).order_key(), 0.0f32.order_key());
        assert_eq!(f64::NAN.order_key(), (-f64::NAN).order_key());
        let i = [i64::MIN, -1, 0, 1, i64::MAX];
        assert!(i.windows(2).all(|w| w[0].order_key() < w[1].order_key()));
        let s = [i8::MIN, -1, 0, i8::MAX];
        assert!(s.windows(2).all(|w| w[0].order_key() < w[1].order_key()));
        let u = [0u64, 1, u64::MAX - 1, u64::MAX];
        assert!(u.windows(2).all(|w| w[0].order_key() < w[1].order_key()));
        let h = [f16::from_f32(-2.0), f16::from_f32(0.5), f16::INFINITY];
        assert!(h.windows(2).all(|w| w[0].order_key() < w[1].order_key()));
    }

    #[test]
    fn nan_wins_max_and_min() {
        assert!(f32::max_nan(1.0, f32::NAN).is_nan());
        assert!(f32::min_nan(f32::NAN, 1.0).is_nan());
        assert_eq!(f32::max_nan(1.0, 2.0), 2.0);
        assert_eq!(f16::lowest(), f16::NEG_INFINITY);
        assert_eq!(u16::highest(), u16::MAX);
    }
}
