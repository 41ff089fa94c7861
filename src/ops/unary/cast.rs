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
//! concerns float8 destinations, and `round_mode` (opset 24: `up`, the
//! default, `down` or `nearest`) only FLOAT8E8M0 destinations.

use super::kernel::{array_from, contiguous, par_map};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, out_len};
use crate::ops::Registrar;
use crate::tensor::{DType, RoundMode, Tensor};
use half::{bf16, f16};
use ndarray::ArrayD;

mod narrow;

/// A value built from the widest value of one of the four source kinds.
trait FromWide {
    fn from_f64(v: f64) -> Self;
    fn from_i64(v: i64) -> Self;
    fn from_u64(v: u64) -> Self;
    fn from_bool(v: bool) -> Self;
}

/// A destination element type: built from the wide values, wrapped as a tensor.
trait CastDst: FromWide + Clone + Default + Send + Sync + 'static {
    fn wrap(a: ArrayD<Self>) -> Tensor;
}

/// A source element type: converts itself through the widest value of its kind.
trait CastSrc: Copy + Sync {
    fn cast<D: FromWide>(self) -> D;
    /// The value as f64 (rounded for 64-bit integers beyond 2^53).
    fn as_f64(self) -> f64;
}

macro_rules! int_dst {
    ($($t:ty => $v:ident),*) => {$(
        impl FromWide for $t {
            fn from_f64(v: f64) -> Self { v as $t }
            fn from_i64(v: i64) -> Self { v as $t }
            fn from_u64(v: u64) -> Self { v as $t }
            fn from_bool(v: bool) -> Self { v as $t }
        }
        impl CastDst for $t {
            fn wrap(a: ArrayD<Self>) -> Tensor { Tensor::$v(a) }
        }
    )*};
}
int_dst!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64);

macro_rules! float_dst {
    ($($t:ty => $v:ident, $from:expr),*) => {$(
        impl FromWide for $t {
            fn from_f64(v: f64) -> Self { $from(v) }
            fn from_i64(v: i64) -> Self { $from(v as f64) }
            fn from_u64(v: u64) -> Self { $from(v as f64) }
            fn from_bool(v: bool) -> Self { $from(v as u8 as f64) }
        }
        impl CastDst for $t {
            fn wrap(a: ArrayD<Self>) -> Tensor { Tensor::$v(a) }
        }
    )*};
}
float_dst!(f64 => F64, |v: f64| v, f16 => F16, f16::from_f64, bf16 => BF16, bf16::from_f64);

// f32 gets exact integer rounding (i64 -> f32 directly, not through f64).
impl FromWide for f32 {
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
}

impl CastDst for f32 {
    fn wrap(a: ArrayD<Self>) -> Tensor {
        Tensor::F32(a)
    }
}

impl FromWide for bool {
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
}

impl CastDst for bool {
    fn wrap(a: ArrayD<Self>) -> Tensor {
        Tensor::Bool(a)
    }
}

macro_rules! src {
    ($via:ident: $($t:ty),*) => {$(
        impl CastSrc for $t {
            #[inline(always)]
            fn cast<D: FromWide>(self) -> D { src!(@conv $via, self) }
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
    fn cast<D: FromWide>(self) -> D {
        D::from_f64(self.to_f64())
    }
    fn as_f64(self) -> f64 {
        self.to_f64()
    }
}
impl CastSrc for bf16 {
    fn cast<D: FromWide>(self) -> D {
        D::from_f64(self.to_f64())
    }
    fn as_f64(self) -> f64 {
        self.to_f64()
    }
}
impl CastSrc for bool {
    fn cast<D: FromWide>(self) -> D {
        D::from_bool(self)
    }
    fn as_f64(self) -> f64 {
        self as u8 as f64
    }
}

fn num_to<S: CastSrc + Clone, D: CastDst>(a: &ArrayD<S>) -> Result<Tensor> {
    Ok(D::wrap(par_map("Cast", a, |&x| x.cast::<D>())?))
}

// Which casts get a loop of their own: every cast to f32, the casts from
// f32 to the types models use (f64, f16, bf16, int8, int32, int64, uint8,
// bool), and the casts among the index types (int64, int32, bool). The other pairs, rare
// in models, convert through `Parsed` values: the same conversions, with one
// loop per source type and one per destination type instead of one per
// pair (17 × 17 loops made Cast the largest operator in the library).

/// How a cast narrows to the float8 types: `saturate` for every one of
/// them, `round` for FLOAT8E8M0.
#[derive(Debug, Clone, Copy)]
struct Narrowing {
    saturate: bool,
    round: RoundMode,
}

/// Casts to a float8 / float4 type (encoded from the exact value), if `to` is one.
fn to_encoded<S: CastSrc + Clone>(
    a: &ArrayD<S>,
    to: DType,
    n: Narrowing,
) -> Option<Result<Tensor>> {
    if to.is_minifloat() {
        return Some(narrow::to_minifloat(a, to, n.saturate));
    }
    if to == DType::F8E8M0 {
        return Some(narrow::to_e8m0(a, n.saturate, n.round));
    }
    None
}

/// Casts from f32: the common destinations have loops of their own.
fn from_f32(a: &ArrayD<f32>, to: DType, n: Narrowing) -> Result<Tensor> {
    if let Some(r) = to_encoded(a, to, n) {
        return r;
    }
    match to {
        DType::F32 => num_to::<f32, f32>(a),
        DType::F64 => num_to::<f32, f64>(a),
        DType::F16 => num_to::<f32, f16>(a),
        DType::BF16 => num_to::<f32, bf16>(a),
        DType::I8 => num_to::<f32, i8>(a),
        DType::I32 => num_to::<f32, i32>(a),
        DType::I64 => num_to::<f32, i64>(a),
        DType::U8 => num_to::<f32, u8>(a),
        DType::Bool => num_to::<f32, bool>(a),
        // The destinations rare in models: through wide values.
        _ => via_parsed(a, to),
    }
}

/// Casts from an index type (int64, int32, bool): to f32 and to the other
/// index types with loops of their own, the rest through wide values.
fn from_index<S: CastSrc + Clone>(a: &ArrayD<S>, to: DType, n: Narrowing) -> Result<Tensor> {
    match to {
        DType::I64 => num_to::<S, i64>(a),
        DType::I32 => num_to::<S, i32>(a),
        DType::Bool => num_to::<S, bool>(a),
        _ => num_to_dtype(a, to, n),
    }
}

/// Casts from any other source: to f32 with a loop of its own, the rest
/// through wide values.
fn num_to_dtype<S: CastSrc + Clone>(a: &ArrayD<S>, to: DType, n: Narrowing) -> Result<Tensor> {
    if let Some(r) = to_encoded(a, to, n) {
        return r;
    }
    if to == DType::F32 {
        return num_to::<S, f32>(a);
    }
    via_parsed(a, to)
}

/// Casts through wide values: one loop per source type here, one per
/// destination type in [`from_parsed`]. `to` is not a minifloat.
fn via_parsed<S: CastSrc + Clone>(a: &ArrayD<S>, to: DType) -> Result<Tensor> {
    let wide: Vec<Parsed> = contiguous(a).iter().map(|x| x.cast::<Parsed>()).collect();
    from_parsed(&wide, a.shape(), to)
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

// A source value in the widest type of its kind, as a destination builds from it.
impl FromWide for Parsed {
    fn from_f64(v: f64) -> Self {
        Parsed::Float(v)
    }
    fn from_i64(v: i64) -> Self {
        Parsed::Int(v)
    }
    fn from_u64(v: u64) -> Self {
        Parsed::Uint(v)
    }
    fn from_bool(v: bool) -> Self {
        Parsed::Bool(v)
    }
}

impl Parsed {
    /// This value as `D`, exactly as a direct cast of the source would give it.
    fn to<D: FromWide>(self) -> D {
        match self {
            Parsed::Int(v) => D::from_i64(v),
            Parsed::Uint(v) => D::from_u64(v),
            Parsed::Float(v) => D::from_f64(v),
            Parsed::Bool(v) => D::from_bool(v),
        }
    }
}

/// A tensor of `shape` and element type `to` (not a minifloat or string)
/// from wide values.
fn from_parsed(v: &[Parsed], shape: &[usize], to: DType) -> Result<Tensor> {
    fn conv<D: CastDst>(v: &[Parsed], shape: &[usize]) -> Result<Tensor> {
        let mut out = crate::tensor::recycle::take_or_default::<D>(v.len());
        crate::ops::parallel::par_rows(&mut out, 1, |first, chunk| {
            for (o, p) in chunk.iter_mut().zip(&v[first..]) {
                *o = p.to::<D>();
            }
        });
        Ok(D::wrap(array_from("Cast", shape, out)?))
    }
    match to {
        DType::F32 => conv::<f32>(v, shape),
        DType::F64 => conv::<f64>(v, shape),
        DType::F16 => conv::<f16>(v, shape),
        DType::BF16 => conv::<bf16>(v, shape),
        DType::I8 => conv::<i8>(v, shape),
        DType::I16 => conv::<i16>(v, shape),
        DType::I32 => conv::<i32>(v, shape),
        DType::I64 => conv::<i64>(v, shape),
        DType::U8 => conv::<u8>(v, shape),
        DType::U16 => conv::<u16>(v, shape),
        DType::U32 => conv::<u32>(v, shape),
        DType::U64 => conv::<u64>(v, shape),
        DType::Bool => conv::<bool>(v, shape),
        DType::U4 => conv::<crate::tensor::U4>(v, shape),
        DType::I4 => conv::<crate::tensor::I4>(v, shape),
        DType::U2 => conv::<crate::tensor::U2>(v, shape),
        DType::I2 => conv::<crate::tensor::I2>(v, shape),
        DType::String
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F4E2M1
        | DType::F8E8M0 => Err(Error::op(
            "Cast",
            format!("internal: {to} is converted elsewhere"),
        )),
    }
}

fn from_strings(a: &ArrayD<String>, to: DType, n: Narrowing) -> Result<Tensor> {
    if to == DType::String {
        return Ok(Tensor::String(a.clone()));
    }
    // Parse once up front so a bad string is an error, not a silent zero.
    let parsed = contiguous(a)
        .iter()
        .map(|s| {
            parse_number(s).ok_or_else(|| {
                Error::op("Cast", format!("cannot convert string {s:?} to a number"))
            })
        })
        .collect::<Result<Vec<Parsed>>>()?;
    if to.is_minifloat() || to == DType::F8E8M0 {
        // Minifloats parse through f64 (one more rounding, as ONNX's reference).
        return cast_with(&from_parsed(&parsed, a.shape(), DType::F64)?, to, n);
    }
    from_parsed(&parsed, a.shape(), to)
}

/// Converts `t` to element type `to` following the Cast rules; `saturate`
/// picks float8 overflow handling (FLOAT8E8M0 rounds up).
pub(crate) fn cast_sat(t: &Tensor, to: DType, saturate: bool) -> Result<Tensor> {
    let round = RoundMode::Up;
    cast_with(t, to, Narrowing { saturate, round })
}

fn cast_with(t: &Tensor, to: DType, s: Narrowing) -> Result<Tensor> {
    if t.dtype() == to {
        return Ok(t.clone());
    }
    if to == DType::String {
        return to_strings(t);
    }
    match t {
        Tensor::String(a) => from_strings(a, to, s),
        Tensor::F32(a) => from_f32(a, to, s),
        Tensor::F64(a) => num_to_dtype(a, to, s),
        Tensor::F16(a) => num_to_dtype(a, to, s),
        Tensor::BF16(a) => num_to_dtype(a, to, s),
        Tensor::I8(a) => num_to_dtype(a, to, s),
        Tensor::I16(a) => num_to_dtype(a, to, s),
        Tensor::I32(a) => from_index(a, to, s),
        Tensor::I64(a) => from_index(a, to, s),
        Tensor::U8(a) => num_to_dtype(a, to, s),
        Tensor::U16(a) => num_to_dtype(a, to, s),
        Tensor::U32(a) => num_to_dtype(a, to, s),
        Tensor::U64(a) => num_to_dtype(a, to, s),
        Tensor::Bool(a) => from_index(a, to, s),
        Tensor::F8E4M3FN(a) => num_to_dtype(a, to, s),
        Tensor::F8E4M3FNUZ(a) => num_to_dtype(a, to, s),
        Tensor::F8E5M2(a) => num_to_dtype(a, to, s),
        Tensor::F8E5M2FNUZ(a) => num_to_dtype(a, to, s),
        Tensor::F4E2M1(a) => num_to_dtype(a, to, s),
        Tensor::F8E8M0(a) => num_to_dtype(a, to, s),
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
    /// The `round_mode` attribute (FLOAT8E8M0 destinations only).
    round: RoundMode,
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
            kind: crate::ir::Kind::Tensor,
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
        let n = Narrowing {
            saturate: self.saturate,
            round: self.round,
        };
        Ok(vec![cast_with(x, self.target(second)?, n)?])
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
        round: round_mode(ctx)?,
    }))
}

/// The `round_mode` attribute (default `up`); another name is an error.
fn round_mode(ctx: &BuildContext) -> Result<RoundMode> {
    let name = ctx.attrs.string("round_mode", "up")?;
    RoundMode::from_name(&name).ok_or_else(|| {
        ctx.attrs.error(
            "round_mode",
            format!("{name:?} is not one of \"up\", \"down\", \"nearest\""),
        )
    })
}

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Cast", 6, build_cast);
    r.add("CastLike", 15, |ctx| {
        Ok(Box::new(Cast {
            name: "CastLike",
            to: None,
            saturate: ctx.attrs.int("saturate", 1)? != 0,
            round: round_mode(ctx)?,
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
            fusion: &crate::ir::Fusion::NONE,
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

    /// Every pair of the 17 numeric types, whether it has a loop of its own
    /// or goes through wide values, gives what the per-pair loop (`num_to`,
    /// the reference) gives, on values that round, wrap, saturate and
    /// include NaN and the 64-bit extremes.
    #[test]
    fn every_numeric_pair_matches_the_per_pair_loop() {
        let f = [
            1.9f64,
            -1.5,
            2.5,
            300.7,
            -40000.0,
            1e20,
            -1e20,
            f64::NAN,
            0.0,
            65504.0,
        ];
        let i = [
            i64::MIN,
            i64::MAX,
            -1,
            0,
            255,
            256,
            -129,
            70000,
            1 << 53,
            (1 << 53) + 1,
        ];
        let u = [u64::MAX, 0, 1, 255, 65536, 1 << 63, 3, 4, 15, 16];
        let sources = vec![
            v(f.iter().map(|&x| x as f32).collect()),
            v(f.to_vec()),
            v(f.iter().map(|&x| f16::from_f64(x)).collect()),
            v(f.iter().map(|&x| bf16::from_f64(x)).collect()),
            v(i.iter().map(|&x| x as i8).collect()),
            v(i.iter().map(|&x| x as i16).collect()),
            v(i.iter().map(|&x| x as i32).collect()),
            v(i.to_vec()),
            v(u.iter().map(|&x| x as u8).collect()),
            v(u.iter().map(|&x| x as u16).collect()),
            v(u.iter().map(|&x| x as u32).collect()),
            v(u.to_vec()),
            v(i.iter().map(|&x| x % 2 != 0).collect()),
            v(i.iter().map(|&x| crate::tensor::U4::wrapping(x)).collect()),
            v(i.iter().map(|&x| crate::tensor::I4::wrapping(x)).collect()),
            v(i.iter().map(|&x| crate::tensor::U2::wrapping(x)).collect()),
            v(i.iter().map(|&x| crate::tensor::I2::wrapping(x)).collect()),
        ];
        fn reference(t: &Tensor, to: DType) -> Tensor {
            fn each<S: CastSrc + Clone>(a: &ArrayD<S>, to: DType) -> Tensor {
                use crate::tensor::{I2, I4, U2, U4};
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
                    DType::U4 => num_to::<S, U4>(a),
                    DType::I4 => num_to::<S, I4>(a),
                    DType::U2 => num_to::<S, U2>(a),
                    DType::I2 => num_to::<S, I2>(a),
                    other => panic!("not a test destination: {other}"),
                }
                .unwrap()
            }
            match t {
                Tensor::F32(a) => each(a, to),
                Tensor::F64(a) => each(a, to),
                Tensor::F16(a) => each(a, to),
                Tensor::BF16(a) => each(a, to),
                Tensor::I8(a) => each(a, to),
                Tensor::I16(a) => each(a, to),
                Tensor::I32(a) => each(a, to),
                Tensor::I64(a) => each(a, to),
                Tensor::U8(a) => each(a, to),
                Tensor::U16(a) => each(a, to),
                Tensor::U32(a) => each(a, to),
                Tensor::U64(a) => each(a, to),
                Tensor::Bool(a) => each(a, to),
                Tensor::U4(a) => each(a, to),
                Tensor::I4(a) => each(a, to),
                Tensor::U2(a) => each(a, to),
                Tensor::I2(a) => each(a, to),
                other => panic!("not a test source: {}", other.dtype()),
            }
        }
        let mut pairs = 0;
        for src in &sources {
            for to in sources.iter().map(Tensor::dtype) {
                if src.dtype() == to {
                    continue;
                }
                let got = cast_sat(src, to, false).unwrap();
                let want = reference(src, to);
                // Compare bit patterns: NaN must stay NaN in the same place.
                assert_eq!(
                    format!("{got:?}"),
                    format!("{want:?}"),
                    "{} -> {to}",
                    src.dtype()
                );
                pairs += 1;
            }
        }
        assert_eq!(pairs, 17 * 16);
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
            fusion: &crate::ir::Fusion::NONE,
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

    fn e8m0_op(op: &str, round: Option<&str>, saturate: i64) -> Result<Box<dyn Operator>> {
        let mut m = BTreeMap::new();
        if op == "Cast" {
            m.insert("to".to_string(), Attribute::Int(24));
        }
        m.insert("saturate".to_string(), Attribute::Int(saturate));
        if let Some(r) = round {
            m.insert(
                "round_mode".to_string(),
                Attribute::String(r.as_bytes().to_vec()),
            );
        }
        let attrs = Attributes::new("c", op, m);
        let ctx = BuildContext {
            attrs: &attrs,
            opset: 25,
            consts: &[],
            num_inputs: if op == "Cast" { 1 } else { 2 },
            num_outputs: 1,
            fusion: &crate::ir::Fusion::NONE,
        };
        crate::ops::build("", op, &ctx)
    }

    /// `round_mode` and `saturate` reach FLOAT8E8M0 destinations, of Cast
    /// and of CastLike; an unknown mode is refused when building.
    #[test]
    fn round_mode_and_saturate_pick_the_e8m0_encoding() {
        let x = v(vec![1.5f32, 0.7, 3.0 * 2f32.powi(126), 0.0]);
        let like = v(vec![crate::tensor::F8E8M0::MIN]);
        let bits = |op: &str, round: Option<&str>, sat: i64| -> Vec<u8> {
            let o = e8m0_op(op, round, sat).unwrap();
            let r = o.run(&[Some(&x), Some(&like)]).unwrap().remove(0);
            let a = r.array::<crate::tensor::F8E8M0>().unwrap();
            a.iter().map(|b| b.to_bits()).collect()
        };
        for op in ["Cast", "CastLike"] {
            assert_eq!(
                bits(op, None, 1),
                [0x80, 0x7f, 0xfe, 0x00],
                "{op} default up"
            );
            assert_eq!(bits(op, Some("up"), 0), [0x80, 0x7f, 0xff, 0x00], "{op}");
            assert_eq!(bits(op, Some("down"), 1), [0x7f, 0x7e, 0xfe, 0x00], "{op}");
            assert_eq!(bits(op, Some("down"), 0), [0x7f, 0x7e, 0xfe, 0xff], "{op}");
            assert_eq!(
                bits(op, Some("nearest"), 1),
                [0x80, 0x7e, 0xfe, 0x00],
                "{op}"
            );
            assert_eq!(
                bits(op, Some("nearest"), 0),
                [0x80, 0x7e, 0xff, 0xff],
                "{op}"
            );
            for bad in ["UP", "zero", ""] {
                let e = e8m0_op(op, Some(bad), 1).unwrap_err();
                assert!(e.to_string().contains("round_mode"), "{op} {bad:?}: {e}");
            }
        }
    }

    #[test]
    fn bad_target_type_is_an_error() {
        for to in [
            Attribute::Int(14),
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
                fusion: &crate::ir::Fusion::NONE,
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
            fusion: &crate::ir::Fusion::NONE,
        };
        assert!(crate::ops::build("", "Cast", &ctx).is_err(), "missing `to`");
        let o = cast_op(DType::F32);
        assert_eq!(o.flops(&[], &[Fact::new(DType::F32, vec![3, 4])]), 12);
    }
}
