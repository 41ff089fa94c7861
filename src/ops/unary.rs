//! Elementwise unary operators: math functions (Abs, Exp, Erf, trigonometry,
//! rounding...), logical/bitwise Not, the IsNaN/IsInf tests, and (in
//! `cast`) Cast and CastLike. Floats of every width are supported; f16 and
//! bf16 compute through f32, and f32 functions that the platform computes
//! poorly near special points (inverse hyperbolics, trigonometry) go through f64.

mod bitcast;
pub(crate) mod cast;
pub(crate) mod kernel;

use self::kernel::{exp_f32, map_float, not_float, par_map, test_float};
use super::util::{fact, input, out_len};
use super::Registrar;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::tensor::{DType, Tensor};

/// Which function a [`Unary`] operator computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Abs,
    Neg,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Erf,
    Floor,
    Ceil,
    Round,
    Sign,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Not,
    IsNaN,
    IsInf { positive: bool, negative: bool },
    BitwiseNot,
}

/// Which element types an operator accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accepts {
    Float,
    Numeric,
    SignedOrFloat,
    Bool,
    Integer,
}

impl Kind {
    fn accepts(self) -> Accepts {
        match self {
            Kind::Abs | Kind::Sign => Accepts::Numeric,
            Kind::Neg => Accepts::SignedOrFloat,
            Kind::Not => Accepts::Bool,
            Kind::BitwiseNot => Accepts::Integer,
            _ => Accepts::Float,
        }
    }

    /// Operations per element, roughly: 1 for arithmetic and tests, more for
    /// functions evaluated by polynomial approximation.
    fn cost(self) -> u64 {
        match self {
            Kind::Exp | Kind::Log | Kind::Erf => 10,
            Kind::Sin | Kind::Cos | Kind::Tan | Kind::Asin | Kind::Acos | Kind::Atan => 15,
            Kind::Sinh | Kind::Cosh | Kind::Asinh | Kind::Acosh | Kind::Atanh => 15,
            Kind::Sqrt | Kind::Reciprocal => 2,
            _ => 1,
        }
    }
}

fn is_int(d: DType) -> bool {
    matches!(
        d,
        DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
    )
}

fn is_signed_int(d: DType) -> bool {
    matches!(d, DType::I8 | DType::I16 | DType::I32 | DType::I64)
}

/// An elementwise unary operator.
#[derive(Debug)]
struct Unary {
    name: &'static str,
    kind: Kind,
}

impl Unary {
    fn check(&self, d: DType) -> Result<()> {
        let ok = match self.kind.accepts() {
            Accepts::Float => d.is_float(),
            Accepts::Numeric => d.is_float() || is_int(d),
            Accepts::SignedOrFloat => d.is_float() || is_signed_int(d),
            Accepts::Bool => d == DType::Bool,
            Accepts::Integer => is_int(d),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::op(
                self.name,
                format!("input of type {d} is not supported"),
            ))
        }
    }

    fn out_dtype(&self, d: DType) -> DType {
        match self.kind {
            Kind::IsNaN | Kind::IsInf { .. } => DType::Bool,
            _ => d,
        }
    }
}

/// Maps every element of a signed-integer tensor; `None` for other types.
macro_rules! signed_map {
    ($op:expr, $t:expr, $x:ident => $e:expr) => {
        match $t {
            Tensor::I8(a) => Some(Tensor::I8(par_map($op, a, |&$x| $e)?)),
            Tensor::I16(a) => Some(Tensor::I16(par_map($op, a, |&$x| $e)?)),
            Tensor::I32(a) => Some(Tensor::I32(par_map($op, a, |&$x| $e)?)),
            Tensor::I64(a) => Some(Tensor::I64(par_map($op, a, |&$x| $e)?)),
            _ => None,
        }
    };
}

/// Maps every element of an unsigned-integer tensor; `None` for other types.
macro_rules! unsigned_map {
    ($op:expr, $t:expr, $x:ident => $e:expr) => {
        match $t {
            Tensor::U8(a) => Some(Tensor::U8(par_map($op, a, |&$x| $e)?)),
            Tensor::U16(a) => Some(Tensor::U16(par_map($op, a, |&$x| $e)?)),
            Tensor::U32(a) => Some(Tensor::U32(par_map($op, a, |&$x| $e)?)),
            Tensor::U64(a) => Some(Tensor::U64(par_map($op, a, |&$x| $e)?)),
            _ => None,
        }
    };
}

/// An f32 function evaluated in f64 and rounded once.
fn via_f64(f: fn(f64) -> f64) -> impl Fn(f32) -> f32 + Sync {
    move |x| f(x as f64) as f32
}

fn sign_f32(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

fn sign_f64(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

impl Unary {
    fn compute(&self, t: &Tensor) -> Result<Tensor> {
        let op = self.name;
        self.check(t.dtype())?;
        let ints = |t: &Tensor| -> Result<Option<Tensor>> {
            Ok(match self.kind {
                Kind::Abs => match signed_map!(op, t, x => x.wrapping_abs()) {
                    Some(r) => Some(r),
                    None => Some(t.clone()), // unsigned: identity
                },
                Kind::Neg => signed_map!(op, t, x => x.wrapping_neg()),
                Kind::Sign => match signed_map!(op, t, x => x.signum()) {
                    Some(r) => Some(r),
                    None => unsigned_map!(op, t, x => (x != 0) as _),
                },
                Kind::BitwiseNot => match signed_map!(op, t, x => !x) {
                    Some(r) => Some(r),
                    None => unsigned_map!(op, t, x => !x),
                },
                _ => None,
            })
        };
        if is_int(t.dtype()) {
            return ints(t)?.ok_or_else(|| not_float(op, t));
        }
        match self.kind {
            Kind::Not => match t {
                Tensor::Bool(a) => Ok(Tensor::Bool(par_map(op, a, |&x| !x)?)),
                other => Err(Error::op(
                    op,
                    format!("expected bool, found {}", other.dtype()),
                )),
            },
            Kind::IsNaN => test_float(op, t, |x| x.is_nan(), |x| x.is_nan()),
            Kind::IsInf { positive, negative } => {
                let f = move |x: f64| {
                    (positive && x == f64::INFINITY) || (negative && x == f64::NEG_INFINITY)
                };
                test_float(op, t, move |x| f(x as f64), f)
            }
            Kind::Abs => map_float(op, t, f32::abs, f64::abs),
            Kind::Neg => map_float(op, t, |x| -x, |x| -x),
            Kind::Exp => map_float(op, t, exp_f32, f64::exp),
            Kind::Log => map_float(op, t, f32::ln, f64::ln),
            Kind::Sqrt => map_float(op, t, f32::sqrt, f64::sqrt),
            Kind::Reciprocal => map_float(op, t, |x| 1.0 / x, |x| 1.0 / x),
            Kind::Erf => map_float(op, t, libm::erff, libm::erf),
            Kind::Floor => map_float(op, t, f32::floor, f64::floor),
            Kind::Ceil => map_float(op, t, f32::ceil, f64::ceil),
            Kind::Round => map_float(op, t, f32::round_ties_even, f64::round_ties_even),
            Kind::Sign => map_float(op, t, sign_f32, sign_f64),
            Kind::Sin => map_float(op, t, via_f64(f64::sin), f64::sin),
            Kind::Cos => map_float(op, t, via_f64(f64::cos), f64::cos),
            Kind::Tan => map_float(op, t, via_f64(f64::tan), f64::tan),
            Kind::Asin => map_float(op, t, via_f64(f64::asin), f64::asin),
            Kind::Acos => map_float(op, t, via_f64(f64::acos), f64::acos),
            Kind::Atan => map_float(op, t, via_f64(f64::atan), f64::atan),
            Kind::Sinh => map_float(op, t, via_f64(f64::sinh), f64::sinh),
            Kind::Cosh => map_float(op, t, via_f64(f64::cosh), f64::cosh),
            Kind::Asinh => map_float(op, t, via_f64(libm::asinh), libm::asinh),
            Kind::Acosh => map_float(op, t, via_f64(libm::acosh), libm::acosh),
            Kind::Atanh => map_float(op, t, via_f64(libm::atanh), libm::atanh),
            Kind::BitwiseNot => Err(Error::op(
                op,
                format!("expected an integer, found {}", t.dtype()),
            )),
        }
    }
}

impl Operator for Unary {
    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name, inputs, 0)?;
        self.check(f.dtype)?;
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: self.out_dtype(f.dtype),
            shape: f.shape.clone(),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0) * self.kind.cost()
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![self.compute(input(self.name, inputs, 0)?)?])
    }
}

fn unary(name: &'static str, kind: Kind) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Unary { name, kind }))
}

fn build_is_inf(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let positive = ctx.attrs.int("detect_positive", 1)? != 0;
    let negative = ctx.attrs.int("detect_negative", 1)? != 0;
    unary("IsInf", Kind::IsInf { positive, negative })
}

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Abs", 1, |_| unary("Abs", Kind::Abs));
    r.add("Neg", 1, |_| unary("Neg", Kind::Neg));
    r.add("Exp", 1, |_| unary("Exp", Kind::Exp));
    r.add("Log", 1, |_| unary("Log", Kind::Log));
    r.add("Sqrt", 1, |_| unary("Sqrt", Kind::Sqrt));
    r.add("Reciprocal", 1, |_| unary("Reciprocal", Kind::Reciprocal));
    r.add("Erf", 9, |_| unary("Erf", Kind::Erf));
    r.add("Floor", 1, |_| unary("Floor", Kind::Floor));
    r.add("Ceil", 1, |_| unary("Ceil", Kind::Ceil));
    r.add("Round", 11, |_| unary("Round", Kind::Round));
    r.add("Sign", 9, |_| unary("Sign", Kind::Sign));
    r.add("Sin", 7, |_| unary("Sin", Kind::Sin));
    r.add("Cos", 7, |_| unary("Cos", Kind::Cos));
    r.add("Tan", 7, |_| unary("Tan", Kind::Tan));
    r.add("Asin", 7, |_| unary("Asin", Kind::Asin));
    r.add("Acos", 7, |_| unary("Acos", Kind::Acos));
    r.add("Atan", 7, |_| unary("Atan", Kind::Atan));
    r.add("Sinh", 9, |_| unary("Sinh", Kind::Sinh));
    r.add("Cosh", 9, |_| unary("Cosh", Kind::Cosh));
    r.add("Asinh", 9, |_| unary("Asinh", Kind::Asinh));
    r.add("Acosh", 9, |_| unary("Acosh", Kind::Acosh));
    r.add("Atanh", 9, |_| unary("Atanh", Kind::Atanh));
    r.add("Not", 1, |_| unary("Not", Kind::Not));
    r.add("IsNaN", 9, |_| unary("IsNaN", Kind::IsNaN));
    r.add("IsInf", 10, build_is_inf);
    r.add("BitwiseNot", 18, |_| unary("BitwiseNot", Kind::BitwiseNot));
    r.add("BitCast", 26, bitcast::build);
    cast::register(r);
}

#[cfg(test)]
mod tests {
    use super::kernel::tests::rel_err;
    use super::*;
    use crate::ir::attributes::Attribute;
    use crate::ops::testutil::build_op;
    use half::{bf16, f16};

    fn build(op: &str, attrs: &[(&str, Attribute)], opset: i64) -> Result<Box<dyn Operator>> {
        build_op(op, opset, attrs, &[], 1, 1)
    }

    fn run1(op: &str, t: Tensor) -> Result<Tensor> {
        let o = build(op, &[], 21)?;
        let f = Fact::of(&t);
        let inferred = o.infer(&[InferInput {
            fact: Some(&f),
            value: None,
        }])?;
        let mut out = o.run(&[Some(&t)])?;
        let r = out.remove(0);
        assert_eq!(inferred[0], Fact::of(&r), "{op}: inferred fact");
        Ok(r)
    }

    fn f32s(v: &[f32]) -> Tensor {
        Tensor::from_vec(&[v.len()], v.to_vec()).unwrap()
    }

    /// Checks an f32 operator against an f64 reference over `xs`.
    fn check_f32(op: &str, xs: &[f32], reference: fn(f64) -> f64) {
        let r = run1(op, f32s(xs)).unwrap();
        let got = r.array::<f32>().unwrap();
        for (x, g) in xs.iter().zip(got.iter()) {
            let want = reference(*x as f64);
            assert!(rel_err(*g, want) <= 1e-6, "{op}({x}) = {g}, want {want}");
        }
    }

    fn grid(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..=n)
            .map(|i| lo + (hi - lo) * i as f32 / n as f32)
            .collect()
    }

    #[test]
    fn float_functions_match_f64_reference() {
        let wide = grid(-20.0, 20.0, 4001);
        let unit = grid(-0.999, 0.999, 2001);
        let pos = grid(1e-6, 50.0, 3001);
        check_f32("Exp", &grid(-87.0, 88.0, 5000), f64::exp);
        check_f32("Log", &pos, f64::ln);
        check_f32("Sqrt", &pos, f64::sqrt);
        check_f32("Reciprocal", &wide, |x| 1.0 / x);
        check_f32("Erf", &grid(-6.0, 6.0, 4001), libm::erf);
        check_f32("Erf", &grid(-1e-3, 1e-3, 101), libm::erf);
        check_f32("Sin", &wide, f64::sin);
        check_f32("Cos", &wide, f64::cos);
        check_f32("Tan", &grid(-1.5, 1.5, 3001), f64::tan);
        check_f32("Asin", &unit, f64::asin);
        check_f32("Acos", &unit, f64::acos);
        check_f32("Atan", &wide, f64::atan);
        check_f32("Sinh", &wide, f64::sinh);
        check_f32("Cosh", &wide, f64::cosh);
        check_f32("Asinh", &wide, f64::asinh);
        check_f32("Acosh", &grid(1.0, 1.001, 1001), f64::acosh);
        check_f32("Acosh", &grid(1.0, 1e4, 1001), f64::acosh);
        check_f32("Atanh", &unit, f64::atanh);
        check_f32("Abs", &wide, f64::abs);
        check_f32("Neg", &wide, |x| -x);
        check_f32("Floor", &wide, f64::floor);
        check_f32("Ceil", &wide, f64::ceil);
        check_f32("Sign", &wide, sign_f64);
    }

    #[test]
    fn round_is_half_to_even() {
        let r = run1("Round", f32s(&[0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6])).unwrap();
        assert_eq!(r, f32s(&[0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0]));
    }

    #[test]
    fn special_values() {
        let r = run1("Sqrt", f32s(&[-1.0, 0.0, f32::INFINITY])).unwrap();
        let v = r.array::<f32>().unwrap();
        assert!(v[0].is_nan() && v[1] == 0.0 && v[2] == f32::INFINITY);
        let r = run1("Log", f32s(&[0.0])).unwrap();
        assert_eq!(r, f32s(&[f32::NEG_INFINITY]));
        let r = run1("Sign", f32s(&[f32::NAN])).unwrap();
        assert!(r.array::<f32>().unwrap()[0].is_nan());
    }

    #[test]
    fn f64_and_half_types() {
        let t = Tensor::from_vec(&[3], vec![0.5f64, -1.0, 2.0]).unwrap();
        let r = run1("Exp", t).unwrap();
        let want = [0.5f64.exp(), (-1.0f64).exp(), 2.0f64.exp()];
        assert_eq!(r.array::<f64>().unwrap().as_slice().unwrap(), &want);
        let t = Tensor::from_vec(&[2], vec![f16::from_f32(0.25), f16::from_f32(-4.0)]).unwrap();
        let r = run1("Abs", t).unwrap();
        let want = vec![f16::from_f32(0.25), f16::from_f32(4.0)];
        assert_eq!(r, Tensor::from_vec(&[2], want).unwrap());
        let t = Tensor::from_vec(&[1], vec![bf16::from_f32(1.0)]).unwrap();
        let r = run1("Erf", t).unwrap();
        assert_eq!(
            r,
            Tensor::from_vec(&[1], vec![bf16::from_f32(libm::erff(1.0))]).unwrap()
        );
    }

    #[test]
    fn integer_abs_neg_sign() {
        let t = Tensor::from_vec(&[4], vec![-3i32, 0, 7, i32::MIN]).unwrap();
        assert_eq!(
            run1("Abs", t.clone()).unwrap(),
            Tensor::from_vec(&[4], vec![3i32, 0, 7, i32::MIN]).unwrap()
        );
        assert_eq!(
            run1("Neg", t.clone()).unwrap(),
            Tensor::from_vec(&[4], vec![3i32, 0, -7, i32::MIN]).unwrap()
        );
        assert_eq!(
            run1("Sign", t).unwrap(),
            Tensor::from_vec(&[4], vec![-1i32, 0, 1, -1]).unwrap()
        );
        let u = Tensor::from_vec(&[3], vec![0u8, 5, 255]).unwrap();
        assert_eq!(run1("Abs", u.clone()).unwrap(), u);
        assert_eq!(
            run1("Sign", u.clone()).unwrap(),
            Tensor::from_vec(&[3], vec![0u8, 1, 1]).unwrap()
        );
        assert!(run1("Neg", u).is_err(), "Neg of unsigned is not defined");
    }

    #[test]
    fn logical_and_bitwise_not() {
        let b = Tensor::from_vec(&[2], vec![true, false]).unwrap();
        assert_eq!(
            run1("Not", b).unwrap(),
            Tensor::from_vec(&[2], vec![false, true]).unwrap()
        );
        let i = Tensor::from_vec(&[2], vec![0i8, 5]).unwrap();
        assert_eq!(
            run1("BitwiseNot", i).unwrap(),
            Tensor::from_vec(&[2], vec![-1i8, -6]).unwrap()
        );
        let u = Tensor::from_vec(&[1], vec![0x0fu16]).unwrap();
        assert_eq!(
            run1("BitwiseNot", u).unwrap(),
            Tensor::from_vec(&[1], vec![0xfff0u16]).unwrap()
        );
        assert!(run1("Not", f32s(&[1.0])).is_err());
        assert!(run1("BitwiseNot", f32s(&[1.0])).is_err());
    }

    #[test]
    fn isnan_isinf_with_attributes() {
        let t = f32s(&[1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        assert_eq!(
            run1("IsNaN", t.clone()).unwrap(),
            Tensor::from_vec(&[4], vec![false, true, false, false]).unwrap()
        );
        assert_eq!(
            run1("IsInf", t.clone()).unwrap(),
            Tensor::from_vec(&[4], vec![false, false, true, true]).unwrap()
        );
        let o = build("IsInf", &[("detect_negative", Attribute::Int(0))], 20).unwrap();
        let r = o.run(&[Some(&t)]).unwrap().remove(0);
        assert_eq!(
            r,
            Tensor::from_vec(&[4], vec![false, false, true, false]).unwrap()
        );
        let o = build("IsInf", &[("detect_positive", Attribute::Int(0))], 20).unwrap();
        let r = o.run(&[Some(&t)]).unwrap().remove(0);
        assert_eq!(
            r,
            Tensor::from_vec(&[4], vec![false, false, false, true]).unwrap()
        );
        let h = Tensor::from_vec(&[1], vec![f16::INFINITY]).unwrap();
        assert_eq!(
            run1("IsInf", h).unwrap(),
            Tensor::from_vec(&[1], vec![true]).unwrap()
        );
    }

    #[test]
    fn errors_and_opsets() {
        let i = Tensor::from_vec(&[1], vec![1i64]).unwrap();
        assert!(run1("Exp", i.clone()).is_err());
        assert!(run1("Erf", i.clone()).is_err());
        let o = build("Exp", &[], 13).unwrap();
        assert!(o.run(&[None]).is_err());
        let f = Fact::new(DType::I64, vec![2]);
        assert!(o
            .infer(&[InferInput {
                fact: Some(&f),
                value: None
            }])
            .is_err());
        assert!(build("Round", &[], 10).is_err(), "Round starts at opset 11");
        assert!(build("IsInf", &[("detect_positive", Attribute::Float(1.0))], 20).is_err());
    }

    #[test]
    fn flops_and_empty() {
        let o = build("Exp", &[], 13).unwrap();
        let out = [Fact::new(DType::F32, vec![4, 5])];
        assert!(o.flops(&[Some(&out[0])], &out) >= 20);
        let o = build("Abs", &[], 13).unwrap();
        assert_eq!(o.flops(&[Some(&out[0])], &out), 20);
        let e = Tensor::zeros(DType::F32, &[0, 3]);
        assert_eq!(run1("Abs", e.clone()).unwrap(), e);
    }
}
