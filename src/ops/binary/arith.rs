//! Broadcasting arithmetic: Add, Sub, Mul, Div, Mod, Pow and the variadic
//! Sum, Mean, Max, Min. Integers wrap on overflow and divide truncating
//! toward zero (C semantics); integer division or modulo by zero is an error.
//! f16/bf16 compute each operation in f32 and round once, which gives the
//! correctly rounded result. Max/Min propagate NaN like numpy.

use super::broadcast::zip2;
use crate::error::{Error, Result};
use crate::ir::{Fact, FusionKind, InferInput, OpClass, Operator};
use crate::ops::unary::kernel::{array_from, par_map, Float};
use crate::ops::util::{fact, input, out_len, par_rows};
use crate::tensor::{DType, Tensor};
use half::{bf16, f16};
use ndarray::ArrayD;

/// Scalar arithmetic for every numeric element type.
pub(crate) trait Arith: Copy + Send + Sync + Default + PartialOrd + 'static {
    /// True for the integer types.
    const INT: bool;
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    fn mul(self, b: Self) -> Self;
    /// Division; integers truncate toward zero (callers rule out zero divisors).
    fn div(self, b: Self) -> Self;
    fn is_zero(self) -> bool;
    /// Remainder with the sign of the dividend (C `fmod` / `%`).
    fn fmod(self, b: Self) -> Self;
    /// Remainder with the sign of the divisor (Python `%`, `numpy.mod`).
    fn floor_mod(self, b: Self) -> Self;
    /// True for NaN.
    fn is_nan(self) -> bool;
    /// The larger value, NaN if either is NaN.
    #[inline(always)]
    fn max_nan(self, b: Self) -> Self {
        if self > b || self.is_nan() {
            self
        } else {
            b
        }
    }
    /// The smaller value, NaN if either is NaN.
    #[inline(always)]
    fn min_nan(self, b: Self) -> Self {
        if self < b || self.is_nan() {
            self
        } else {
            b
        }
    }
}

macro_rules! int_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            const INT: bool = true;
            #[inline(always)] fn add(self, b: Self) -> Self { self.wrapping_add(b) }
            #[inline(always)] fn sub(self, b: Self) -> Self { self.wrapping_sub(b) }
            #[inline(always)] fn mul(self, b: Self) -> Self { self.wrapping_mul(b) }
            #[inline(always)] fn div(self, b: Self) -> Self {
                if b == 0 { 0 } else { self.wrapping_div(b) }
            }
            #[inline(always)] fn is_zero(self) -> bool { self == 0 }
            #[inline(always)] fn fmod(self, b: Self) -> Self {
                if b == 0 { 0 } else { self.wrapping_rem(b) }
            }
            #[inline(always)] fn floor_mod(self, b: Self) -> Self {
                let r = self.fmod(b);
                #[allow(unused_comparisons)]
                let differ = (r < 0) != (b < 0);
                if r != 0 && differ { r.wrapping_add(b) } else { r }
            }
            #[inline(always)] fn is_nan(self) -> bool { false }
        }
    )*};
}
int_arith!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            const INT: bool = false;
            #[inline(always)] fn add(self, b: Self) -> Self { self + b }
            #[inline(always)] fn sub(self, b: Self) -> Self { self - b }
            #[inline(always)] fn mul(self, b: Self) -> Self { self * b }
            #[inline(always)] fn div(self, b: Self) -> Self { self / b }
            #[inline(always)] fn is_zero(self) -> bool { self == 0.0 }
            #[inline(always)] fn fmod(self, b: Self) -> Self { self % b }
            #[inline(always)] fn floor_mod(self, b: Self) -> Self {
                let r = self % b;
                if r == 0.0 {
                    r.copysign(b)
                } else if (r < 0.0) != (b < 0.0) {
                    r + b
                } else {
                    r
                }
            }
            #[inline(always)] fn is_nan(self) -> bool { self.is_nan() }
        }
    )*};
}
float_arith!(f32, f64);

macro_rules! half_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            const INT: bool = false;
            #[inline(always)] fn add(self, b: Self) -> Self { <$t>::from_f32(self.to_f32() + b.to_f32()) }
            #[inline(always)] fn sub(self, b: Self) -> Self { <$t>::from_f32(self.to_f32() - b.to_f32()) }
            #[inline(always)] fn mul(self, b: Self) -> Self { <$t>::from_f32(self.to_f32() * b.to_f32()) }
            #[inline(always)] fn div(self, b: Self) -> Self { <$t>::from_f32(self.to_f32() / b.to_f32()) }
            #[inline(always)] fn is_zero(self) -> bool { self.to_f32() == 0.0 }
            #[inline(always)] fn fmod(self, b: Self) -> Self { <$t>::from_f32(self.to_f32() % b.to_f32()) }
            #[inline(always)] fn floor_mod(self, b: Self) -> Self {
                <$t>::from_f32(self.to_f32().floor_mod(b.to_f32()))
            }
            #[inline(always)] fn is_nan(self) -> bool { self.is_nan() }
        }
    )*};
}
half_arith!(f16, bf16);

/// Matches two tensors of the same numeric type, binding their arrays to
/// `$x`, `$y`, and wraps the array `$body` returns in a tensor of that type.
macro_rules! same_numeric {
    ($op:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {
        match ($a, $b) {
            (Tensor::F32($x), Tensor::F32($y)) => Tensor::F32($body),
            (Tensor::F64($x), Tensor::F64($y)) => Tensor::F64($body),
            (Tensor::F16($x), Tensor::F16($y)) => Tensor::F16($body),
            (Tensor::BF16($x), Tensor::BF16($y)) => Tensor::BF16($body),
            (Tensor::I8($x), Tensor::I8($y)) => Tensor::I8($body),
            (Tensor::I16($x), Tensor::I16($y)) => Tensor::I16($body),
            (Tensor::I32($x), Tensor::I32($y)) => Tensor::I32($body),
            (Tensor::I64($x), Tensor::I64($y)) => Tensor::I64($body),
            (Tensor::U8($x), Tensor::U8($y)) => Tensor::U8($body),
            (Tensor::U16($x), Tensor::U16($y)) => Tensor::U16($body),
            (Tensor::U32($x), Tensor::U32($y)) => Tensor::U32($body),
            (Tensor::U64($x), Tensor::U64($y)) => Tensor::U64($body),
            (a, b) => return Err(super::type_error($op, a.dtype(), b.dtype())),
        }
    };
}

/// Which binary arithmetic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithKind {
    Add,
    Sub,
    Mul,
    Div,
    /// `fmod`: remainder takes the dividend's sign; otherwise the divisor's.
    Mod {
        fmod: bool,
    },
}

/// True for the element types whose arithmetic is a hot path (f32, and
/// f16 models): they keep one vectorized kernel per operation. The others
/// (integers, mostly small shape arithmetic, f64 and bf16) share one
/// kernel per type that calls the operation through a function pointer,
/// which keeps the library small.
fn per_op_kernels<T: 'static>() -> bool {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    t == TypeId::of::<f32>() || t == TypeId::of::<f16>()
}

impl ArithKind {
    /// The scalar operation.
    fn scalar<T: Arith>(self) -> fn(T, T) -> T {
        match self {
            ArithKind::Add => T::add,
            ArithKind::Sub => T::sub,
            ArithKind::Mul => T::mul,
            ArithKind::Div => T::div,
            ArithKind::Mod { fmod: true } => T::fmod,
            ArithKind::Mod { fmod: false } => T::floor_mod,
        }
    }
}

fn arith<T: Arith>(op: &str, kind: ArithKind, a: &ArrayD<T>, b: &ArrayD<T>) -> Result<ArrayD<T>> {
    if T::INT
        && matches!(kind, ArithKind::Div | ArithKind::Mod { .. })
        && b.iter().any(|v| v.is_zero())
    {
        let what = if kind == ArithKind::Div {
            "division"
        } else {
            "modulo"
        };
        return Err(Error::op(op, format!("integer {what} by zero")));
    }
    if !per_op_kernels::<T>() {
        let f = kind.scalar::<T>();
        return zip2(op, a, b, move |&x, &y| f(x, y));
    }
    match kind {
        ArithKind::Add => zip2(op, a, b, |&x, &y| x.add(y)),
        ArithKind::Sub => zip2(op, a, b, |&x, &y| x.sub(y)),
        ArithKind::Mul => zip2(op, a, b, |&x, &y| x.mul(y)),
        ArithKind::Div => zip2(op, a, b, |&x, &y| x.div(y)),
        ArithKind::Mod { fmod: true } => zip2(op, a, b, |&x, &y| x.fmod(y)),
        ArithKind::Mod { fmod: false } => zip2(op, a, b, |&x, &y| x.floor_mod(y)),
    }
}

/// Add, Sub, Mul, Div, Mod.
#[derive(Debug)]
pub(crate) struct Arithmetic {
    pub name: &'static str,
    pub kind: ArithKind,
}

impl Operator for Arithmetic {
    /// Add takes an activation (see `activated`).
    fn accepts_fusion(&self, kind: FusionKind, inputs: &[InferInput]) -> bool {
        matches!(self.kind, ArithKind::Add) && super::activated::accepts(kind, inputs)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        super::infer_types(self.name, inputs, 2, is_numeric, None)
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let a = input(self.name, inputs, 0)?;
        let b = input(self.name, inputs, 1)?;
        let op = self.name;
        Ok(vec![same_numeric!(op, a, b, |x, y| arith(
            op, self.kind, x, y
        )?)])
    }
}

/// True for float and integer types.
pub(crate) fn is_numeric(d: DType) -> bool {
    !matches!(d, DType::Bool | DType::String)
}

/// Which variadic reduction over inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VarKind {
    Sum,
    Mean,
    Max,
    Min,
}

/// Sum, Mean, Max, Min over any number of broadcast inputs.
#[derive(Debug)]
pub(crate) struct Variadic {
    pub name: &'static str,
    pub kind: VarKind,
}

fn combine<T: Arith>(op: &str, kind: VarKind, a: &ArrayD<T>, b: &ArrayD<T>) -> Result<ArrayD<T>> {
    if !per_op_kernels::<T>() {
        // One kernel per type (see `per_op_kernels`).
        let f: fn(T, T) -> T = match kind {
            VarKind::Sum | VarKind::Mean => T::add,
            VarKind::Max => T::max_nan,
            VarKind::Min => T::min_nan,
        };
        return zip2(op, a, b, move |&x, &y| f(x, y));
    }
    match kind {
        VarKind::Sum | VarKind::Mean => zip2(op, a, b, |&x, &y| x.add(y)),
        VarKind::Max => zip2(op, a, b, |&x, &y| x.max_nan(y)),
        VarKind::Min => zip2(op, a, b, |&x, &y| x.min_nan(y)),
    }
}

fn divide_by<T: Float>(a: &mut ArrayD<T>, n: usize) {
    if let Some(s) = a.as_slice_mut() {
        let n = n as f64;
        par_rows(s, 1, |_, chunk| {
            for v in chunk {
                *v = T::from_f64(v.to_f64() / n);
            }
        });
    }
}

impl Variadic {
    fn accepts(&self, d: DType) -> bool {
        match self.kind {
            VarKind::Sum | VarKind::Mean => d.is_float(),
            VarKind::Max | VarKind::Min => is_numeric(d),
        }
    }
}

impl Operator for Variadic {
    /// A two-input Sum takes an activation (see `activated`).
    fn accepts_fusion(&self, kind: FusionKind, inputs: &[InferInput]) -> bool {
        matches!(self.kind, VarKind::Sum) && super::activated::accepts(kind, inputs)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let accepts = |d| self.accepts(d);
        super::infer_types(self.name, inputs, 1, accepts, None)
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let n = inputs.iter().flatten().count().max(2) as u64;
        let per = if self.kind == VarKind::Mean { n } else { n - 1 };
        out_len(outputs, 0) * per
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name;
        let all: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
        let first = *all
            .first()
            .ok_or_else(|| Error::op(op, "needs at least one input"))?;
        if !self.accepts(first.dtype()) {
            return Err(Error::op(
                op,
                format!("input type {} is not supported", first.dtype()),
            ));
        }
        let mut acc: Option<Tensor> = None;
        for t in &all[1..] {
            let prev = acc.as_ref().unwrap_or(first);
            acc = Some(same_numeric!(op, prev, *t, |x, y| combine(
                op, self.kind, x, y
            )?));
        }
        let mut out = acc.unwrap_or_else(|| first.clone());
        if self.kind == VarKind::Mean && all.len() > 1 {
            match &mut out {
                Tensor::F32(a) => divide_by(a, all.len()),
                Tensor::F64(a) => divide_by(a, all.len()),
                Tensor::F16(a) => divide_by(a, all.len()),
                Tensor::BF16(a) => divide_by(a, all.len()),
                other => {
                    return Err(Error::op(
                        op,
                        format!("input type {} is not supported", other.dtype()),
                    ))
                }
            }
        }
        Ok(vec![out])
    }
}

/// Integer or float power of one base element.
trait PowBase: Copy + Clone + Default + Send + Sync + 'static {
    fn pow_f(self, e: f64) -> Self;
    fn pow_i(self, e: i64) -> Self;
    fn square(self) -> Self;
    /// `x³` as `pow_f(3.0)` computes it: for the narrow floats their
    /// square is exact in f64, so `x · x · x` in f64 rounds once, to the
    /// correctly rounded f64 cube (what a correctly rounded `pow` returns),
    /// then once more to the type, without a call to `pow`.
    fn cube(self) -> Self;
}

macro_rules! float_pow {
    ($($t:ty => $cube:expr),*) => {$(
        impl PowBase for $t {
            #[inline(always)] fn pow_f(self, e: f64) -> Self { <$t as Float>::from_f64(Float::to_f64(self).powf(e)) }
            #[inline(always)] fn pow_i(self, e: i64) -> Self { self.pow_f(e as f64) }
            #[inline(always)] fn square(self) -> Self { self.mul(self) }
            #[inline(always)] fn cube(self) -> Self { $cube(self) }
        }
    )*};
}
float_pow!(
    f32 => |x: f32| narrow_cube(x as f64) as f32,
    f16 => |x: f16| f16::from_f64(narrow_cube(x.to_f64())),
    bf16 => |x: bf16| bf16::from_f64(narrow_cube(x.to_f64())),
    f64 => |x: f64| x.pow_f(3.0)
);

/// `v³` for a `v` of at most 26 significant bits (a widened f32, f16 or
/// bf16): the square is exact, so this rounds once.
#[inline(always)]
fn narrow_cube(v: f64) -> f64 {
    v * v * v
}

macro_rules! int_pow {
    ($($t:ty),*) => {$(
        impl PowBase for $t {
            #[inline(always)] fn pow_f(self, e: f64) -> Self { (self as f64).powf(e) as $t }
            fn pow_i(self, e: i64) -> Self {
                if e < 0 {
                    return self.pow_f(e as f64);
                }
                // Exponentiation by squaring, wrapping like the other integer ops.
                let (mut base, mut e, mut acc) = (self, e as u64, 1 as $t);
                while e > 0 {
                    if e & 1 == 1 { acc = acc.wrapping_mul(base); }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            #[inline(always)] fn square(self) -> Self { self.wrapping_mul(self) }
            #[inline(always)] fn cube(self) -> Self { self.wrapping_mul(self).wrapping_mul(self) }
        }
    )*};
}
int_pow!(i8, i16, i32, i64, u8, u16, u32, u64);

/// The exponent converted once: integers stay exact, floats widen to f64.
enum Exponent {
    Int(ArrayD<i64>),
    Float(ArrayD<f64>),
}

fn exponent(op: &str, t: &Tensor) -> Result<Exponent> {
    Ok(match t {
        Tensor::F32(a) => Exponent::Float(par_map(op, a, |&x| x as f64)?),
        Tensor::F64(a) => Exponent::Float(a.clone()),
        Tensor::F16(a) => Exponent::Float(par_map(op, a, |x| x.to_f64())?),
        Tensor::BF16(a) => Exponent::Float(par_map(op, a, |x| x.to_f64())?),
        Tensor::U64(a) => Exponent::Int(par_map(op, a, |&x| x.min(i64::MAX as u64) as i64)?),
        Tensor::Bool(_) | Tensor::String(_) => {
            return Err(Error::op(
                op,
                format!("exponent type {} is not supported", t.dtype()),
            ))
        }
        other => Exponent::Int(array_from(op, other.shape(), other.to_i64_vec()?)?),
    })
}

/// A scalar exponent with a path of its own (multiplies, no `pow` call).
#[derive(Clone, Copy, PartialEq)]
enum Small {
    Square,
    Cube,
}

impl Small {
    /// The path for exponent `e` when it is one element (of any rank up to
    /// the base's, so the result keeps the base's shape) equal to 2 or 3.
    fn of(e: &Exponent, base_rank: usize) -> Option<Small> {
        let v = match e {
            Exponent::Int(a) if a.len() == 1 && a.ndim() <= base_rank => *a.iter().next()? as f64,
            Exponent::Float(a) if a.len() == 1 && a.ndim() <= base_rank => *a.iter().next()?,
            _ => return None,
        };
        if v == 2.0 {
            Some(Small::Square)
        } else if v == 3.0 {
            Some(Small::Cube)
        } else {
            None
        }
    }
}

fn pow_typed<T: PowBase>(
    op: &str,
    base: &ArrayD<T>,
    e: &Exponent,
    small: Option<Small>,
) -> Result<ArrayD<T>> {
    match small {
        Some(Small::Square) => return par_map(op, base, |&x| x.square()),
        Some(Small::Cube) => return par_map(op, base, |&x| x.cube()),
        None => {}
    }
    match e {
        Exponent::Int(e) => zip2(op, base, e, |&x, &e| x.pow_i(e)),
        Exponent::Float(e) => zip2(op, base, e, |&x, &e| x.pow_f(e)),
    }
}

/// Pow: base of any numeric type, exponent of any numeric type (opset 12+),
/// result of the base's type.
#[derive(Debug)]
pub(crate) struct Pow;

impl Operator for Pow {
    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let b = fact("Pow", inputs, 0)?;
        let e = fact("Pow", inputs, 1)?;
        if !is_numeric(b.dtype) || !is_numeric(e.dtype) {
            return Err(super::type_error("Pow", b.dtype, e.dtype));
        }
        crate::ops::util::infer_broadcast("Pow", inputs).map(|f| vec![f])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0) * 20
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = "Pow";
        let b = input(op, inputs, 0)?;
        let e = exponent(op, input(op, inputs, 1)?)?;
        // x^2 is a plain multiply (exact, and the common case in
        // normalisations); x^3 (the tanh GELU's) two.
        let small = Small::of(&e, b.shape().len());
        let out = match b {
            Tensor::F32(a) => Tensor::F32(pow_typed(op, a, &e, small)?),
            Tensor::F64(a) => Tensor::F64(pow_typed(op, a, &e, small)?),
            Tensor::F16(a) => Tensor::F16(pow_typed(op, a, &e, small)?),
            Tensor::BF16(a) => Tensor::BF16(pow_typed(op, a, &e, small)?),
            Tensor::I8(a) => Tensor::I8(pow_typed(op, a, &e, small)?),
            Tensor::I16(a) => Tensor::I16(pow_typed(op, a, &e, small)?),
            Tensor::I32(a) => Tensor::I32(pow_typed(op, a, &e, small)?),
            Tensor::I64(a) => Tensor::I64(pow_typed(op, a, &e, small)?),
            Tensor::U8(a) => Tensor::U8(pow_typed(op, a, &e, small)?),
            Tensor::U16(a) => Tensor::U16(pow_typed(op, a, &e, small)?),
            Tensor::U32(a) => Tensor::U32(pow_typed(op, a, &e, small)?),
            Tensor::U64(a) => Tensor::U64(pow_typed(op, a, &e, small)?),
            other => {
                return Err(Error::op(
                    op,
                    format!("base type {} is not supported", other.dtype()),
                ))
            }
        };
        Ok(vec![out])
    }
}
