//! Cast and CastLike: conversion between every supported element type.
//!
//! Numeric conversions follow C/numpy: float to integer truncates toward zero
//! (saturating, NaN to 0), integer to narrower integer wraps, anything to bool
//! is `!= 0` (NaN is true), bool to number is 0/1, and float narrowing rounds
//! to nearest even. Strings parse as numbers (plain or scientific, with
//! case-insensitive `INF`, `+INF`, `-INF`, `NaN`); numbers print in plain
//! shortest round-trip form (`INF`, `-INF`, `NaN` for the special values) and
//! booleans as `1`/`0`. The narrow types (float8, float4, 4- and 2-bit
//! integers) are in [`narrow`]; the `saturate` attribute (opset 19) only
//! concerns float8 destinations.

use super::kernel::par_map;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, out_len};
use crate::ops::Registrar;
use crate::tensor::{DType, Tensor};
use half::{bf16, f16};
use ndarray::ArrayD;

mod narrow;

/// A destination element type built from one of the four source kinds.
trait CastDst: Clone + Default + Send + Sync + 'static {
    fn from_f64(v: f64) -> Self;
    fn from_i64(v: i64) -> Self;
    fn from_u64(v: u64) -> Self;
    fn from_bool(v: bool) -> Self;
    fn wrap(a: ArrayD<Self>) -> Tensor;
}

/// A source element type: converts itself through the widest value of its kind.
trait CastSrc: Copy + Sync {
    fn cast<D: CastDst>(self) -> D;
    /// The value as f64 (rounded for 64-bit integers beyond 2^53).
    fn as_f64(self) -> f64;
}

macro_rules! int_dst {
    ($($t:ty => $v:ident),*) => {$(
        impl CastDst for $t {
            fn from_f64(v: f64) -> Self { v as $t }
            fn from_i64(v: i64) -> Self { v as $t }
            fn from_u64(v: u64) -> Self { v as $t }
            fn from_bool(v: bool) -> Self { v as $t }
            fn wrap(a: ArrayD<Self>) -> Tensor { Tensor::$v(a) }
        }
    )*};
}
int_dst!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64);

macro_rules! float_dst {
    ($($t:ty => $v:ident, $from:expr),*) => {$(
        impl CastDst for $t {
            fn from_f64(v: f64) -> Self { $from(v) }
            fn from_i64(v: i64) -> Self { $from(v as f64) }
            fn from_u64(v: u64) -> Self { $from(v as f64) }
            fn from_bool(v: bool) -> Self { $from(v as u8 as f64) }
            fn wrap(a: ArrayD<Self>) -> Tensor { Tensor::$v(a) }
        }
    )*};
}
float_dst!(f64 => F64, |v: f64| v, f16 => F16, f16::from_f64, bf16 => BF16, bf16::from_f64);

// f32 gets exact integer rounding (i64 -> f32 directly, not through f64).
impl CastDst for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn from_i64(v: i64) -> Self {
        v as f32
    }
    fn from_u64(v: u64) -> Self {
        v as f32
    }
    fn from_bool(v: bool) -> Self {
        v as u8 as f32
    }
    fn wrap(a: ArrayD<Self>) -> Tensor {
        Tensor::F32(a)
    }
}

impl CastDst for bool {
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    fn from_u64(v: u64) -> Self {
        v != 0
    }
    fn from_bool(v: bool) -> Self {
        v
    }
    fn wrap(a: ArrayD<Self>) -> Tensor {
        Tensor::Bool(a)
    }
}

macro_rules! src {
    ($via:ident: $($t:ty),*) => {$(
        impl CastSrc for $t {
            #[inline(always)]
            fn cast<D: CastDst>(self) -> D { src!(@conv $via, self) }
            #[inline(always)]
            fn as_f64(self) -> f64 { self as f64 }
        }
    )*};
    (@conv float, $x:expr) => { D::from_f64($x as f64) };
    (@conv signed, $x:expr) => { D::from_i64($x as i64) };
    (@conv unsigned, $x:expr) => { D::from_u64($x as u64) };
}
src!(float: f32, f64);
src!(signed: i8, i16, i32, i64);
src!(unsigned: u8, u16, u32, u64);

impl CastSrc for f16 {
    fn cast<D: CastDst>(self) -> D {
        D::from_f64(self.to_f64())
    }
    fn as_f64(self) -> f64 {
        self.to_f64()
    }
}
impl CastSrc for bf16 {
    fn cast<D: CastDst>(self) -> D {
        D::from_f64(self.to_f64())
    }
    fn as_f64(self) -> f64 {
        self.to_f64()
    }
}
impl CastSrc for bool {
    fn cast<D: CastDst>(self) -> D {
        D::from_bool(self)
    }
    fn as_f64(self) -> f64 {
        self as u8 as f64
    }
}

fn num_to<S: CastSrc + Clone, D: CastDst>(a: &ArrayD<S>) -> Result<Tensor> {
    Ok(D::wrap(par_map("Cast", a, |&x| x.cast::<D>())?))
}

fn num_to_dtype<S: CastSrc + Clone>(a: &ArrayD<S>, to: DType, saturate: bool) -> Result<Tensor> {
    if to.is_minifloat() {
        return narrow::to_minifloat(a, to, saturate);
    }
    match to {
        DType::F32 => num_to::<S, f32>(a),
        DType::F64 => num_to::<S, f64>(a),
        DType::F16 => num_to::<S, f16>(a),
        DType::BF16 => num_to::<S, bf16>(a),
        DType::I8 => num_to::<S, i8>(a),
        DType::I16 => num_to::<S, i16>(a),
        DType::I32 => num_to::<S, i32>(a),
        DType::I64 => num_to::<S, i64>(a),
        DType::U8 => num_to::<S, u8>(a),
        DType::U16 => num_to::<S, u16>(a),
        DType::U32 => num_to::<S, u32>(a),
        DType::U64 => num_to::<S, u64>(a),
        DType::Bool => num_to::<S, bool>(a),
        DType::U4 => num_to::<S, crate::tensor::U4>(a),
        DType::I4 => num_to::<S, crate::tensor::I4>(a),
        DType::U2 => num_to::<S, crate::tensor::U2>(a),
        DType::I2 => num_to::<S, crate::tensor::I2>(a),
        DType::String
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F4E2M1 => unreachable_string(),
    }
}

fn unreachable_string() -> Result<Tensor> {
    Err(Error::op("Cast", "internal: string handled separately"))
}

/// A float in the plain form the spec asks for, with ONNX's special spellings.
fn float_string(v: f64, as_f32: Option<f32>) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "INF".to_string()
    } else if v == f64::NEG_INFINITY {
        "-INF".to_string()
    } else if let Some(f) = as_f32 {
        format!("{f}")
    } else {
        format!("{v}")
    }
}

fn to_strings(t: &Tensor) -> Result<Tensor> {
    let op = "Cast";
    let s = match t {
        Tensor::String(a) => a.clone(),
        Tensor::F32(a) => par_map(op, a, |&x| float_string(x as f64, Some(x)))?,
        Tensor::F64(a) => par_map(op, a, |&x| float_string(x, None))?,
        // f16 and bf16 print through f32, whose shortest form round-trips them.
        Tensor::F16(a) => par_map(op, a, |x| float_string(x.to_f64(), Some(x.to_f32())))?,
        Tensor::BF16(a) => par_map(op, a, |x| float_string(x.to_f64(), Some(x.to_f32())))?,
        Tensor::Bool(a) => par_map(op, a, |&x| if x { "1" } else { "0" }.to_string())?,
        Tensor::I8(a) => par_map(op, a, |x| x.to_string())?,
        Tensor::I16(a) => par_map(op, a, |x| x.to_string())?,
        Tensor::I32(a) => par_map(op, a, |x| x.to_string())?,
        Tensor::I64(a) => par_map(op, a, |x| x.to_string())?,
        Tensor::U8(a) => par_map(op, a, |x| x.to_string())?,
        Tensor::U16(a) => par_map(op, a, |x| x.to_string())?,
        Tensor::U32(a) => par_map(op, a, |x| x.to_string())?,
        Tensor::U64(a) => par_map(op, a, |x| x.to_string())?,
        other => narrow::to_strings(other)?,
    };
    Ok(Tensor::String(s))
}

/// A string parsed as a number: an exact integer when it is one, else a float.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Parsed {
    Int(i64),
    Uint(u64),
    Float(f64),
    Bool(bool),
}

fn parse_number(s: &str) -> Option<Parsed> {
    let t = s.trim();
    if let Ok(v) = t.parse::<i64>() {
        return Some(Parsed::Int(v));
    }
    if let Ok(v) = t.parse::<u64>() {
        return Some(Parsed::Uint(v));
    }
    let lower = t.to_ascii_lowercase();
    match lower.as_str() {
        "inf" | "+inf" => return Some(Parsed::Float(f64::INFINITY)),
        "-inf" => return Some(Parsed::Float(f64::NEG_INFINITY)),
        "nan" | "+nan" | "-nan" => return Some(Parsed::Float(f64::NAN)),
        "true" => return Some(Parsed::Bool(true)),
        "false" => return Some(Parsed::Bool(false)),
        _ => {}
    }
    // Rust's float parser also accepts "infinity"; the spec's literals are handled above.
    if lower.contains("inf") || lower.contains("nan") {
        return None;
    }
    t.parse::<f64>().ok().map(Parsed::Float)
}

fn parse_to<D: CastDst>(a: &ArrayD<String>) -> Result<Tensor> {
    // Parse once up front so a bad string is an error, not a silent zero.
    let bad = a.iter().find(|s| parse_number(s).is_none());
    if let Some(s) = bad {
        return Err(Error::op(
            "Cast",
            format!("cannot convert string {s:?} to a number"),
        ));
    }
    let out = par_map("Cast", a, |s| match parse_number(s) {
        Some(Parsed::Int(v)) => D::from_i64(v),
        Some(Parsed::Uint(v)) => D::from_u64(v),
        Some(Parsed::Float(v)) => D::from_f64(v),
        Some(Parsed::Bool(v)) => D::from_bool(v),
        None => D::default(),
    })?;
    Ok(D::wrap(out))
}

fn from_strings(a: &ArrayD<String>, to: DType, saturate: bool) -> Result<Tensor> {
    match to {
        DType::String => Ok(Tensor::String(a.clone())),
        DType::F32 => parse_to::<f32>(a),
        DType::F64 => parse_to::<f64>(a),
        DType::F16 => parse_to::<f16>(a),
        DType::BF16 => parse_to::<bf16>(a),
        DType::I8 => parse_to::<i8>(a),
        DType::I16 => parse_to::<i16>(a),
        DType::I32 => parse_to::<i32>(a),
        DType::I64 => parse_to::<i64>(a),
        DType::U8 => parse_to::<u8>(a),
        DType::U16 => parse_to::<u16>(a),
        DType::U32 => parse_to::<u32>(a),
        DType::U64 => parse_to::<u64>(a),
        DType::Bool => parse_to::<bool>(a),
        DType::U4 => parse_to::<crate::tensor::U4>(a),
        DType::I4 => parse_to::<crate::tensor::I4>(a),
        DType::U2 => parse_to::<crate::tensor::U2>(a),
        DType::I2 => parse_to::<crate::tensor::I2>(a),
        // Minifloats parse through f64 (one more rounding, as ONNX's reference).
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F4E2M1 => {
            cast_sat(&parse_to::<f64>(a)?, to, saturate)
        }
    }
}

/// Converts `t` to element type `to` following the Cast rules; `saturate`
/// picks float8 overflow handling.
pub(crate) fn cast_sat(t: &Tensor, to: DType, saturate: bool) -> Result<Tensor> {
    if t.dtype() == to {
        return Ok(t.clone());
    }
    if to == DType::String {
        return to_strings(t);
    }
    let s = saturate;
    match t {
        Tensor::String(a) => from_strings(a, to, s),
        Tensor::F32(a) => num_to_dtype(a, to, s),
        Tensor::F64(a) => num_to_dtype(a, to, s),
        Tensor::F16(a) => num_to_dtype(a, to, s),
        Tensor::BF16(a) => num_to_dtype(a, to, s),
        Tensor::I8(a) => num_to_dtype(a, to, s),
        Tensor::I16(a) => num_to_dtype(a, to, s),
        Tensor::I32(a) => num_to_dtype(a, to, s),
        Tensor::I64(a) => num_to_dtype(a, to, s),
        Tensor::U8(a) => num_to_dtype(a, to, s),
        Tensor::U16(a) => num_to_dtype(a, to, s),
        Tensor::U32(a) => num_to_dtype(a, to, s),
        Tensor::U64(a) => num_to_dtype(a, to, s),
        Tensor::Bool(a) => num_to_dtype(a, to, s),
        Tensor::F8E4M3FN(a) => num_to_dtype(a, to, s),
        Tensor::F8E4M3FNUZ(a) => num_to_dtype(a, to, s),
        Tensor::F8E5M2(a) => num_to_dtype(a, to, s),
        Tensor::F8E5M2FNUZ(a) => num_to_dtype(a, to, s),
        Tensor::F4E2M1(a) => num_to_dtype(a, to, s),
        Tensor::U4(a) => num_to_dtype(a, to, s),
        Tensor::I4(a) => num_to_dtype(a, to, s),
        Tensor::U2(a) => num_to_dtype(a, to, s),
        Tensor::I2(a) => num_to_dtype(a, to, s),
    }
}

/// Cast (`to` fixed by attribute) or CastLike (`to` taken from input 1).
#[derive(Debug)]
struct Cast {
    name: &'static str,
    to: Option<DType>,
    /// The `saturate` attribute (float8 destinations only).
    saturate: bool,
}

impl Cast {
    fn target(&self, second: Option<DType>) -> Result<DType> {
        self.to
            .or(second)
            .ok_or_else(|| Error::op(self.name, "required input 1 (target_type) is missing"))
    }
}

impl Operator for Cast {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name, inputs, 0)?;
        let second = if self.to.is_none() {
            Some(fact(self.name, inputs, 1)?.dtype)
        } else {
            None
        };
        Ok(vec![Fact {
            dtype: self.target(second)?,
            shape: f.shape.clone(),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.name, inputs, 0)?;
        let second = if self.to.is_none() {
            Some(input(self.name, inputs, 1)?.dtype())
        } else {
            None
        };
        Ok(vec![cast_sat(x, self.target(second)?, self.saturate)?])
    }
}

fn build_cast(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let code = ctx.attrs.int_req("to")?;
    let code = i32::try_from(code).map_err(|_| ctx.attrs.error("to", "not a data type"))?;
    let to = DType::from_onnx_code(code).map_err(|e| ctx.attrs.error("to", e.to_string()))?;
    Ok(Box::new(Cast {
        name: "Cast",
        to: Some(to),
        saturate: ctx.attrs.int("saturate", 1)? != 0,
    }))
}

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Cast", 6, build_cast);
    r.add("CastLike", 15, |ctx| {
        Ok(Box::new(Cast {
            name: "CastLike",
            to: None,
            saturate: ctx.attrs.int("saturate", 1)? != 0,
        }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::attributes::{Attribute, Attributes};
    use std::collections::BTreeMap;

    fn cast_op(to: DType) -> Box<dyn Operator> {
        let mut m = BTreeMap::new();
        m.insert("to".to_string(), Attribute::Int(to.onnx_code() as i64));
        m.insert("saturate".to_string(), Attribute::Int(0));
        let attrs = Attributes::new("c", "Cast", m);
        let ctx = BuildContext {
            attrs: &attrs,
            opset: 19,
            consts: &[],
            num_inputs: 1,
            num_outputs: 1,
        };
        crate::ops::build("", "Cast", &ctx).unwrap()
    }

    fn run(to: DType, t: &Tensor) -> Result<Tensor> {
        let o = cast_op(to);
        let f = Fact::of(t);
        let inf = o.infer(&[InferInput {
            fact: Some(&f),
            value: None,
        }])?;
        let r = o.run(&[Some(t)])?.remove(0);
        assert_eq!(inf[0], Fact::of(&r));
        Ok(r)
    }

    fn v<T: crate::Element>(d: Vec<T>) -> Tensor {
        Tensor::from_vec(&[d.len()], d).unwrap()
    }

    fn s(d: &[&str]) -> Tensor {
        v(d.iter().map(|x| x.to_string()).collect())
    }

    #[test]
    fn float_to_int_truncates_and_saturates() {
        let t = v(vec![1.9f32, -1.9, 300.0, -300.0, f32::NAN, 0.0]);
        assert_eq!(
            run(DType::I32, &t).unwrap(),
            v(vec![1i32, -1, 300, -300, 0, 0])
        );
        assert_eq!(run(DType::U8, &t).unwrap(), v(vec![1u8, 0, 255, 0, 0, 0]));
        assert_eq!(
            run(DType::Bool, &t).unwrap(),
            v(vec![true, true, true, true, true, false])
        );
    }

    #[test]
    fn int_conversions_wrap_and_widen() {
        let t = v(vec![300i32, -1, 65535]);
        assert_eq!(run(DType::U8, &t).unwrap(), v(vec![44u8, 255, 255]));
        assert_eq!(run(DType::I64, &t).unwrap(), v(vec![300i64, -1, 65535]));
        assert_eq!(
            run(DType::F64, &t).unwrap(),
            v(vec![300.0f64, -1.0, 65535.0])
        );
        let big = v(vec![u64::MAX, 1 << 40]);
        assert_eq!(run(DType::I64, &big).unwrap(), v(vec![-1i64, 1 << 40]));
        assert_eq!(
            run(DType::F32, &big).unwrap(),
            v(vec![u64::MAX as f32, (1u64 << 40) as f32])
        );
        let i = v(vec![16_777_217i64]);
        assert_eq!(run(DType::F32, &i).unwrap(), v(vec![16_777_216.0f32]));
    }

    #[test]
    fn bool_and_half_conversions() {
        let b = v(vec![true, false]);
        assert_eq!(run(DType::F32, &b).unwrap(), v(vec![1.0f32, 0.0]));
        assert_eq!(run(DType::I8, &b).unwrap(), v(vec![1i8, 0]));
        let f = v(vec![0.1f32, 65504.0, 1e6]);
        let h = run(DType::F16, &f).unwrap();
        assert_eq!(
            h,
            v(vec![
                f16::from_f32(0.1),
                f16::from_f32(65504.0),
                f16::INFINITY
            ])
        );
        let back = run(DType::F32, &h).unwrap();
        assert_eq!(
            back,
            v(vec![f16::from_f32(0.1).to_f32(), 65504.0, f32::INFINITY])
        );
        let bf = run(DType::BF16, &v(vec![1.0f64 / 3.0])).unwrap();
        assert_eq!(bf, v(vec![bf16::from_f64(1.0 / 3.0)]));
        assert_eq!(run(DType::I32, &bf).unwrap(), v(vec![0i32]));
    }

    #[test]
    fn strings_to_numbers() {
        let t = s(&["2.75", "1e-5", "1E8", "-INF", "+inf", "NaN", " 42 "]);
        let r = run(DType::F32, &t).unwrap();
        let a = r.array::<f32>().unwrap();
        assert_eq!(a[0], 2.75);
        assert_eq!(a[1], 1e-5);
        assert_eq!(a[2], 1e8);
        assert_eq!(a[3], f32::NEG_INFINITY);
        assert_eq!(a[4], f32::INFINITY);
        assert!(a[5].is_nan());
        assert_eq!(a[6], 42.0);
        assert_eq!(
            run(DType::I64, &s(&["100.5", "-7", "9223372036854775807"])).unwrap(),
            v(vec![100i64, -7, i64::MAX])
        );
        assert_eq!(
            run(DType::U64, &s(&["18446744073709551615"])).unwrap(),
            v(vec![u64::MAX])
        );
        assert_eq!(
            run(DType::Bool, &s(&["0", "2", "true", "False"])).unwrap(),
            v(vec![false, true, true, false])
        );
        assert!(run(DType::F32, &s(&["Hello World!"])).is_err());
        assert!(run(DType::F32, &s(&["infinity"])).is_err());
    }

    #[test]
    fn numbers_to_strings() {
        let t = v(vec![
            0.1f32,
            -2.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-7,
        ]);
        assert_eq!(
            run(DType::String, &t).unwrap(),
            s(&["0.1", "-2.5", "INF", "-INF", "NaN", "0.0000001"])
        );
        assert_eq!(
            run(DType::String, &v(vec![-5i8, 7])).unwrap(),
            s(&["-5", "7"])
        );
        assert_eq!(
            run(DType::String, &v(vec![true, false])).unwrap(),
            s(&["1", "0"])
        );
        assert_eq!(
            run(DType::String, &v(vec![f16::from_f32(0.5)])).unwrap(),
            s(&["0.5"])
        );
        // Round trip through string keeps every f32 exactly.
        let x = v(vec![std::f32::consts::PI, 1.0e-30, 3.4e38]);
        let back = run(DType::F32, &run(DType::String, &x).unwrap()).unwrap();
        assert_eq!(back, x);
    }

    #[test]
    fn cast_like_takes_type_of_second_input() {
        let attrs = Attributes::default();
        let ctx = BuildContext {
            attrs: &attrs,
            opset: 21,
            consts: &[],
            num_inputs: 2,
            num_outputs: 1,
        };
        let o = crate::ops::build("", "CastLike", &ctx).unwrap();
        let x = v(vec![1.5f64, -2.5]);
        let like = Tensor::scalar(0i16);
        let fx = Fact::of(&x);
        let fl = Fact::of(&like);
        let inf = o
            .infer(&[
                InferInput {
                    fact: Some(&fx),
                    value: None,
                },
                InferInput {
                    fact: Some(&fl),
                    value: None,
                },
            ])
            .unwrap();
        assert_eq!(inf[0], Fact::new(DType::I16, vec![2]));
        let r = o.run(&[Some(&x), Some(&like)]).unwrap().remove(0);
        assert_eq!(r, v(vec![1i16, -2]));
        assert!(o.run(&[Some(&x), None]).is_err());
        let ctx14 = BuildContext { opset: 14, ..ctx };
        assert!(crate::ops::build("", "CastLike", &ctx14).is_err());
    }

    #[test]
    fn bad_target_type_is_an_error() {
        for to in [
            Attribute::Int(24),
            Attribute::Int(1 << 40),
            Attribute::Float(1.0),
        ] {
            let mut m = BTreeMap::new();
            m.insert("to".to_string(), to);
            let attrs = Attributes::new("c", "Cast", m);
            let ctx = BuildContext {
                attrs: &attrs,
                opset: 19,
                consts: &[],
                num_inputs: 1,
                num_outputs: 1,
            };
            assert!(crate::ops::build("", "Cast", &ctx).is_err());
        }
        let attrs = Attributes::default();
        let ctx = BuildContext {
            attrs: &attrs,
            opset: 19,
            consts: &[],
            num_inputs: 1,
            num_outputs: 1,
        };
        assert!(crate::ops::build("", "Cast", &ctx).is_err(), "missing `to`");
        let o = cast_op(DType::F32);
        assert_eq!(o.flops(&[], &[Fact::new(DType::F32, vec![3, 4])]), 12);
    }
}
