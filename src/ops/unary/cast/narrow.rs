//! Cast to and from the narrow types: float8 / float4 destinations encode the
//! exact source value once (with or without saturation), the 4- and 2-bit
//! integers convert like the other integers (truncate floats, wrap), and
//! every narrow source converts through its exact value. FLOAT8E8M0 takes
//! its power of two from the exact value (see [`crate::tensor::F8E8M0`]).

use super::{float_string, CastDst, CastSrc, FromWide};
use crate::error::{Error, Result};
use crate::ops::unary::kernel::contiguous;
use crate::ops::unary::kernel::par_map;
use crate::tensor::{
    DType, RoundMode, Tensor, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2,
    U4,
};
use ndarray::ArrayD;

macro_rules! small_int_cast {
    ($($t:ident),*) => {$(
        impl FromWide for $t {
            fn from_f64(v: f64) -> Self { $t::from_f64(v) }
            fn from_i64(v: i64) -> Self { $t::wrapping(v) }
            fn from_u64(v: u64) -> Self { $t::wrapping(v as i64) }
            fn from_bool(v: bool) -> Self { $t::wrapping(v as i64) }
        }
        impl CastDst for $t {
            fn wrap(a: ArrayD<Self>) -> Tensor { Tensor::$t(a) }
        }
        impl CastSrc for $t {
            fn cast<D: FromWide>(self) -> D { D::from_i64(self.get()) }
            fn as_f64(self) -> f64 { self.get() as f64 }
        }
    )*};
}
small_int_cast!(U4, I4, U2, I2);

macro_rules! minifloat_src {
    ($($t:ident),*) => {$(
        impl CastSrc for $t {
            fn cast<D: FromWide>(self) -> D { D::from_f64(self.to_f32() as f64) }
            fn as_f64(self) -> f64 { self.to_f32() as f64 }
        }
    )*};
}
minifloat_src!(F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F4E2M1, F8E8M0);

/// The values of `a` as f64 (exact for every source but 64-bit integers
/// beyond 2^53), in `a`'s shape: the one loop an encoded cast compiles per
/// source type.
fn to_wide<S: CastSrc + Clone>(a: &ArrayD<S>) -> Result<ArrayD<f64>> {
    let wide: Vec<f64> = contiguous(a).iter().map(|x| x.as_f64()).collect();
    ArrayD::from_shape_vec(a.shape(), wide)
        .map_err(|_| Error::op("Cast", "internal: values do not fill the shape"))
}

/// Converts to FLOAT8E8M0: every source through its f64 values (so that
/// the encoding loop is compiled once, not once per source type).
pub(super) fn to_e8m0<S: CastSrc + Clone>(
    a: &ArrayD<S>,
    saturate: bool,
    round: RoundMode,
) -> Result<Tensor> {
    e8m0_from_wide(&to_wide(a)?, saturate, round)
}

fn e8m0_from_wide(wide: &ArrayD<f64>, saturate: bool, round: RoundMode) -> Result<Tensor> {
    Ok(Tensor::F8E8M0(par_map("Cast", wide, |&x| {
        F8E8M0::from_f64(x, saturate, round)
    })?))
}

/// Converts to a float8 / float4 type `to`, through the f64 values as
/// [`to_e8m0`] does.
pub(super) fn to_minifloat<S: CastSrc + Clone>(
    a: &ArrayD<S>,
    to: DType,
    saturate: bool,
) -> Result<Tensor> {
    minifloat_from_wide(&to_wide(a)?, to, saturate)
}

fn minifloat_from_wide(a: &ArrayD<f64>, to: DType, saturate: bool) -> Result<Tensor> {
    let op = "Cast";
    Ok(match to {
        DType::F8E4M3FN => Tensor::F8E4M3FN(par_map(op, a, |&x| F8E4M3FN::from_f64(x, saturate))?),
        DType::F8E4M3FNUZ => {
            Tensor::F8E4M3FNUZ(par_map(op, a, |&x| F8E4M3FNUZ::from_f64(x, saturate))?)
        }
        DType::F8E5M2 => Tensor::F8E5M2(par_map(op, a, |&x| F8E5M2::from_f64(x, saturate))?),
        DType::F8E5M2FNUZ => {
            Tensor::F8E5M2FNUZ(par_map(op, a, |&x| F8E5M2FNUZ::from_f64(x, saturate))?)
        }
        DType::F4E2M1 => Tensor::F4E2M1(par_map(op, a, |&x| F4E2M1::from_f64(x, saturate))?),
        other => {
            return Err(Error::op(
                op,
                format!("internal: {other} is not a minifloat"),
            ))
        }
    })
}

/// The narrow types printed as numbers (minifloats through f32).
pub(super) fn to_strings(t: &Tensor) -> Result<ArrayD<String>> {
    let op = "Cast";
    fn float<T: Copy + Sync>(a: &ArrayD<T>, f: impl Fn(T) -> f32 + Sync) -> Result<ArrayD<String>> {
        par_map("Cast", a, |&x| {
            let v = f(x);
            float_string(v as f64, Some(v))
        })
    }
    match t {
        Tensor::F8E4M3FN(a) => float(a, F8E4M3FN::to_f32),
        Tensor::F8E4M3FNUZ(a) => float(a, F8E4M3FNUZ::to_f32),
        Tensor::F8E5M2(a) => float(a, F8E5M2::to_f32),
        Tensor::F8E5M2FNUZ(a) => float(a, F8E5M2FNUZ::to_f32),
        Tensor::F4E2M1(a) => float(a, F4E2M1::to_f32),
        Tensor::F8E8M0(a) => float(a, F8E8M0::to_f32),
        Tensor::U4(a) => par_map(op, a, |x| x.get().to_string()),
        Tensor::I4(a) => par_map(op, a, |x| x.get().to_string()),
        Tensor::U2(a) => par_map(op, a, |x| x.get().to_string()),
        Tensor::I2(a) => par_map(op, a, |x| x.get().to_string()),
        other => Err(Error::op(
            op,
            format!("internal: {} handled elsewhere", other.dtype()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::cast_sat;
    use super::*;

    fn v<T: crate::Element>(d: Vec<T>) -> Tensor {
        Tensor::from_vec(&[d.len()], d).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u8> {
        match t {
            Tensor::F8E4M3FN(a) => a.iter().map(|x| x.to_bits()).collect(),
            Tensor::F8E5M2(a) => a.iter().map(|x| x.to_bits()).collect(),
            Tensor::F8E4M3FNUZ(a) => a.iter().map(|x| x.to_bits()).collect(),
            Tensor::F4E2M1(a) => a.iter().map(|x| x.to_bits()).collect(),
            other => panic!("not a minifloat: {other}"),
        }
    }

    #[test]
    fn float_to_float8_with_and_without_saturation() {
        let x = v(vec![0.5f32, 1e6, -1e6, f32::INFINITY, f32::NAN, 1e-7]);
        let sat = cast_sat(&x, DType::F8E4M3FN, true).unwrap();
        assert_eq!(bits(&sat), [0x30, 0x7e, 0xfe, 0x7e, 0x7f, 0x00]);
        let raw = cast_sat(&x, DType::F8E4M3FN, false).unwrap();
        assert_eq!(bits(&raw), [0x30, 0x7f, 0xff, 0x7f, 0x7f, 0x00]);
        let e5 = cast_sat(&x, DType::F8E5M2, false).unwrap();
        assert_eq!(bits(&e5), [0x38, 0x7c, 0xfc, 0x7c, 0x7e, 0x00]);
        let uz = cast_sat(&x, DType::F8E4M3FNUZ, false).unwrap();
        assert_eq!(bits(&uz), [0x38, 0x80, 0x80, 0x80, 0x80, 0x00]);
        // f16 and integer sources take the same path.
        let h = v(vec![half::f16::from_f32(0.5), half::f16::from_f32(-3.0)]);
        assert_eq!(
            bits(&cast_sat(&h, DType::F4E2M1, true).unwrap()),
            [0x1, 0xd]
        );
        let i = v(vec![500i32, -3]);
        assert_eq!(
            bits(&cast_sat(&i, DType::F8E4M3FN, true).unwrap()),
            [0x7e, 0xc4]
        );
    }

    #[test]
    fn minifloats_widen_exactly() {
        let t = v([0x7eu8, 0x01, 0xff].map(F8E4M3FN::from_bits).to_vec());
        let f = cast_sat(&t, DType::F16, true).unwrap();
        let a = f.array::<half::f16>().unwrap();
        assert_eq!(a[0].to_f32(), 448.0);
        assert_eq!(a[1].to_f32(), 2f32.powi(-9));
        assert!(a[2].is_nan());
        let t = v([0x7u8, 0xf].map(F4E2M1::from_bits).to_vec());
        assert_eq!(
            cast_sat(&t, DType::F32, true).unwrap(),
            v(vec![6.0f32, -6.0])
        );
        assert_eq!(cast_sat(&t, DType::I8, true).unwrap(), v(vec![6i8, -6]));
    }

    #[test]
    fn small_ints_wrap_both_ways() {
        let x = v(vec![-9.0f32, -8.0, 7.9, 8.0, 15.0]);
        let i4 = cast_sat(&x, DType::I4, true).unwrap();
        assert_eq!(i4.to_i64_vec().unwrap(), [7, -8, 7, -8, -1]);
        let u2 = cast_sat(&v(vec![-3i64, 2, 5]), DType::U2, true).unwrap();
        assert_eq!(u2.to_i64_vec().unwrap(), [1, 2, 1]);
        assert_eq!(
            cast_sat(&i4, DType::I8, true).unwrap(),
            v(vec![7i8, -8, 7, -8, -1])
        );
        assert_eq!(
            cast_sat(&i4, DType::U8, true).unwrap(),
            v(vec![7u8, 248, 7, 248, 255])
        );
        let back = cast_sat(&i4, DType::F32, true).unwrap();
        assert_eq!(back, v(vec![7.0f32, -8.0, 7.0, -8.0, -1.0]));
    }

    fn e8m0_bits(t: &Tensor) -> Vec<u8> {
        t.array::<F8E8M0>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    /// The node cases' values (`test_cast_e8m0_*`), from every kind of
    /// source, and back to floats, integers and strings.
    #[test]
    fn e8m0_from_and_to_every_kind() {
        let vals = [0.0f64, 0.124, 0.25, 0.5, 1.1, 2.0, 4.0, 8.0];
        let want = [0x00u8, 0x7c, 0x7d, 0x7e, 0x80, 0x80, 0x81, 0x82];
        let f32s = v(vals.iter().map(|&x| x as f32).collect());
        let e = cast_sat(&f32s, DType::F8E8M0, true).unwrap();
        assert_eq!(e8m0_bits(&e), want);
        let h = v(vals.iter().map(|&x| half::f16::from_f64(x)).collect());
        assert_eq!(e8m0_bits(&cast_sat(&h, DType::F8E8M0, true).unwrap()), want);
        let i = v(vec![1i64, 3, -8, 1 << 40]);
        let e = cast_sat(&i, DType::F8E8M0, true).unwrap();
        assert_eq!(e8m0_bits(&e), [0x7f, 0x81, 0x82, 0x7f + 40]);
        let s = v(["0.3", "NaN", "1e39"].map(String::from).to_vec());
        let e = cast_sat(&s, DType::F8E8M0, false).unwrap();
        assert_eq!(e8m0_bits(&e), [0x7e, 0xff, 0xff]);
        // Back: exact powers of two, NaN, 2^-127 (zero in f16).
        let t = v([0x00u8, 0x7f, 0x82, 0xfe, 0xff]
            .map(F8E8M0::from_bits)
            .to_vec());
        let f = cast_sat(&t, DType::F32, true).unwrap();
        let f = f.array::<f32>().unwrap();
        assert_eq!(
            &f.as_slice().unwrap()[..4],
            &[2f32.powi(-127), 1.0, 8.0, 2f32.powi(127)]
        );
        assert!(f[4].is_nan());
        let h = cast_sat(&t, DType::F16, true).unwrap();
        let h = h.array::<half::f16>().unwrap();
        assert_eq!(h[0].to_f32(), 0.0);
        assert_eq!(h[2].to_f32(), 8.0);
        assert!(h[3].is_infinite() && h[4].is_nan());
        let i = cast_sat(&t.clone(), DType::I32, true).unwrap();
        assert_eq!(i.to_i64_vec().unwrap()[..3], [0, 1, 8]);
        let s = cast_sat(&t, DType::String, true).unwrap();
        assert_eq!(s.array::<String>().unwrap()[2], "8");
        assert_eq!(s.array::<String>().unwrap()[4], "NaN");
        // E8M0 to another float8 goes through its value.
        let f8 = cast_sat(&t, DType::F8E4M3FN, true).unwrap();
        assert_eq!(bits(&f8)[1..3], [0x38, 0x50]);
    }

    #[test]
    fn narrow_types_through_strings() {
        let t = v([0x38u8, 0xc4].map(F8E4M3FN::from_bits).to_vec());
        let s = cast_sat(&t, DType::String, true).unwrap();
        assert_eq!(s, v(vec!["1".to_string(), "-3".to_string()]));
        assert_eq!(cast_sat(&s, DType::F8E4M3FN, true).unwrap(), t);
        let i = v(vec![I2::wrapping(-2), I2::wrapping(1)]);
        let s = cast_sat(&i, DType::String, true).unwrap();
        assert_eq!(s, v(vec!["-2".to_string(), "1".to_string()]));
        assert_eq!(cast_sat(&s, DType::I2, true).unwrap(), i);
    }
}
