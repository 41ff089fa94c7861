//! BitCast (opset 26): reinterprets each element's bit pattern as another
//! element type of the same bit width (`to`), keeping the shape. Unlike Cast
//! no value is converted: float32 1.0 becomes int32 0x3F800000.
//!
//! Elements are reinterpreted one by one through their integer encodings
//! (`f32::to_bits`, `i16 as u16`, the narrow types' stored bits), which is
//! what the spec's little-endian byte view means and does not depend on the
//! host's byte order. Widths: 64 bits (double, int64, uint64), 32 (float,
//! int32, uint32), 16 (float16, bfloat16, int16, uint16), 8 (int8, uint8,
//! bool, the float8 types), 4 (int4, uint4, float4e2m1) and 2 (int2, uint2).
//! A bool holds one byte: to bool, a nonzero byte is `true` (a bool tensor
//! cannot hold other bytes), from bool, `true` is 1. Strings have no bit
//! pattern and are refused; complex and float8e8m0 are not element types of
//! ramify.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::shape::movement_flops;
use crate::ops::util::{fact, input};
use crate::tensor::{
    DType, Element, Tensor, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2,
    U4,
};
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

const OP: &str = "BitCast";

#[derive(Debug)]
struct BitCast {
    to: DType,
}

pub(crate) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let code = ctx.attrs.int_req("to")?;
    let code = i32::try_from(code).map_err(|_| ctx.attrs.error("to", "not a data type"))?;
    let to = match DType::from_onnx_code(code) {
        Ok(t) => t,
        // COMPLEX64 and COMPLEX128 are valid targets that ramify has no
        // element type for.
        Err(e) if matches!(code, 14 | 15) => return Err(e),
        Err(e) => return Err(ctx.attrs.error("to", e.to_string())),
    };
    if to == DType::String {
        return Err(ctx.attrs.error(
            "to",
            "BitCast to string is not allowed (strings have no bit pattern)",
        ));
    }
    Ok(Box::new(BitCast { to }))
}

/// The bit width of one element, `None` for strings.
pub(crate) fn bit_width(t: DType) -> Option<u32> {
    Some(match t {
        DType::F64 | DType::I64 | DType::U64 => 64,
        DType::F32 | DType::I32 | DType::U32 => 32,
        DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 16,
        DType::I8
        | DType::U8
        | DType::Bool
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0 => 8,
        DType::U4 | DType::I4 | DType::F4E2M1 => 4,
        DType::U2 | DType::I2 => 2,
        DType::String => return None,
    })
}

/// Checks that `from` can be reinterpreted as `to`.
fn check(from: DType, to: DType) -> Result<()> {
    let w = bit_width(from).ok_or_else(|| {
        Error::op(
            OP,
            "BitCast from string is not allowed (strings have no bit pattern)",
        )
    })?;
    // `to` is never a string (refused when building).
    let v = bit_width(to).unwrap_or(0);
    if w != v {
        return Err(Error::op(
            OP,
            format!(
                "input and output types must have the same bit width, \
                 but {from} has {w} bits and {to} has {v}"
            ),
        ));
    }
    Ok(())
}

/// Element encodings, by width (the 4- and 2-bit types in the low bits of a byte).
enum Bits {
    W8(Vec<u8>),
    W16(Vec<u16>),
    W32(Vec<u32>),
    W64(Vec<u64>),
}

fn enc<T: Clone, U>(a: &ArrayD<T>, f: impl Fn(T) -> U) -> Vec<U> {
    a.iter().cloned().map(f).collect()
}

/// The encodings of a tensor's elements in row-major order.
fn to_bits(t: &Tensor) -> Result<Bits> {
    Ok(match t {
        Tensor::F64(a) => Bits::W64(enc(a, f64::to_bits)),
        Tensor::I64(a) => Bits::W64(enc(a, |v| v as u64)),
        Tensor::U64(a) => Bits::W64(enc(a, |v| v)),
        Tensor::F32(a) => Bits::W32(enc(a, f32::to_bits)),
        Tensor::I32(a) => Bits::W32(enc(a, |v| v as u32)),
        Tensor::U32(a) => Bits::W32(enc(a, |v| v)),
        Tensor::F16(a) => Bits::W16(enc(a, f16::to_bits)),
        Tensor::BF16(a) => Bits::W16(enc(a, bf16::to_bits)),
        Tensor::I16(a) => Bits::W16(enc(a, |v| v as u16)),
        Tensor::U16(a) => Bits::W16(enc(a, |v| v)),
        Tensor::I8(a) => Bits::W8(enc(a, |v| v as u8)),
        Tensor::U8(a) => Bits::W8(enc(a, |v| v)),
        Tensor::Bool(a) => Bits::W8(enc(a, u8::from)),
        Tensor::F8E4M3FN(a) => Bits::W8(enc(a, F8E4M3FN::to_bits)),
        Tensor::F8E4M3FNUZ(a) => Bits::W8(enc(a, F8E4M3FNUZ::to_bits)),
        Tensor::F8E5M2(a) => Bits::W8(enc(a, F8E5M2::to_bits)),
        Tensor::F8E5M2FNUZ(a) => Bits::W8(enc(a, F8E5M2FNUZ::to_bits)),
        Tensor::F8E8M0(a) => Bits::W8(enc(a, F8E8M0::to_bits)),
        Tensor::F4E2M1(a) => Bits::W8(enc(a, F4E2M1::to_bits)),
        Tensor::U4(a) => Bits::W8(enc(a, U4::to_bits)),
        Tensor::I4(a) => Bits::W8(enc(a, I4::to_bits)),
        Tensor::U2(a) => Bits::W8(enc(a, U2::to_bits)),
        Tensor::I2(a) => Bits::W8(enc(a, I2::to_bits)),
        Tensor::String(_) => {
            return Err(Error::op(
                OP,
                "BitCast from string is not allowed (strings have no bit pattern)",
            ))
        }
    })
}

fn dec<T: Element, U: Copy>(shape: &[usize], v: Vec<U>, f: impl Fn(U) -> T) -> Result<Tensor> {
    let data: Vec<T> = v.into_iter().map(f).collect();
    ArrayD::from_shape_vec(IxDyn(shape), data)
        .map(T::into_tensor)
        .map_err(|_| Error::op(OP, "internal error: element count does not fill the shape"))
}

/// The tensor of type `to` and `shape` with these encodings.
fn from_bits(to: DType, shape: &[usize], bits: Bits) -> Result<Tensor> {
    match (to, bits) {
        (DType::F64, Bits::W64(v)) => dec(shape, v, f64::from_bits),
        (DType::I64, Bits::W64(v)) => dec(shape, v, |b| b as i64),
        (DType::U64, Bits::W64(v)) => dec(shape, v, |b| b),
        (DType::F32, Bits::W32(v)) => dec(shape, v, f32::from_bits),
        (DType::I32, Bits::W32(v)) => dec(shape, v, |b| b as i32),
        (DType::U32, Bits::W32(v)) => dec(shape, v, |b| b),
        (DType::F16, Bits::W16(v)) => dec(shape, v, f16::from_bits),
        (DType::BF16, Bits::W16(v)) => dec(shape, v, bf16::from_bits),
        (DType::I16, Bits::W16(v)) => dec(shape, v, |b| b as i16),
        (DType::U16, Bits::W16(v)) => dec(shape, v, |b| b),
        (DType::I8, Bits::W8(v)) => dec(shape, v, |b| b as i8),
        (DType::U8, Bits::W8(v)) => dec(shape, v, |b| b),
        (DType::Bool, Bits::W8(v)) => dec(shape, v, |b| b != 0),
        (DType::F8E4M3FN, Bits::W8(v)) => dec(shape, v, F8E4M3FN::from_bits),
        (DType::F8E4M3FNUZ, Bits::W8(v)) => dec(shape, v, F8E4M3FNUZ::from_bits),
        (DType::F8E5M2, Bits::W8(v)) => dec(shape, v, F8E5M2::from_bits),
        (DType::F8E5M2FNUZ, Bits::W8(v)) => dec(shape, v, F8E5M2FNUZ::from_bits),
        (DType::F8E8M0, Bits::W8(v)) => dec(shape, v, F8E8M0::from_bits),
        (DType::F4E2M1, Bits::W8(v)) => dec(shape, v, F4E2M1::from_bits),
        (DType::U4, Bits::W8(v)) => dec(shape, v, U4::from_bits),
        (DType::I4, Bits::W8(v)) => dec(shape, v, I4::from_bits),
        (DType::U2, Bits::W8(v)) => dec(shape, v, U2::from_bits),
        (DType::I2, Bits::W8(v)) => dec(shape, v, I2::from_bits),
        (to, _) => Err(Error::op(
            OP,
            format!("internal error: encodings of the wrong width for {to}"),
        )),
    }
}

/// Reinterprets `x` as `to` (same bit width).
pub(crate) fn bitcast(x: &Tensor, to: DType) -> Result<Tensor> {
    check(x.dtype(), to)?;
    if x.dtype() == to {
        return Ok(x.clone());
    }
    from_bits(to, x.shape(), to_bits(x)?)
}

impl Operator for BitCast {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        check(x.dtype, self.to)?;
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: self.to,
            shape: x.shape.clone(),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![bitcast(input(OP, inputs, 0)?, self.to)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{build_op, infer_and_run, int};

    fn op(to: DType) -> Box<dyn Operator> {
        build_op(
            "BitCast",
            26,
            &[("to", int(to.onnx_code() as i64))],
            &[],
            1,
            1,
        )
        .unwrap()
    }

    fn run(x: &Tensor, to: DType) -> Result<Tensor> {
        Ok(infer_and_run(op(to).as_ref(), &[Some(x)])?.remove(0))
    }

    #[test]
    fn float_and_int_patterns() {
        let x = Tensor::from_vec(&[2, 2], vec![1.0f32, -2.0, 0.0, f32::INFINITY]).unwrap();
        let y = run(&x, DType::I32).unwrap();
        let want = Tensor::from_vec(
            &[2, 2],
            vec![0x3F80_0000i32, 0xC000_0000u32 as i32, 0, 0x7F80_0000],
        )
        .unwrap();
        assert_eq!(y, want);
        // And back, bit for bit (a NaN payload survives).
        let nan = f32::from_bits(0x7FC0_1234);
        let x = Tensor::from_vec(&[1], vec![nan]).unwrap();
        let back = run(&run(&x, DType::U32).unwrap(), DType::F32).unwrap();
        assert_eq!(back.view::<f32>().unwrap()[[0]].to_bits(), 0x7FC0_1234);
    }

    #[test]
    fn every_pair_of_equal_width_round_trips() {
        let groups: [&[DType]; 6] = [
            &[DType::F64, DType::I64, DType::U64],
            &[DType::F32, DType::I32, DType::U32],
            &[DType::F16, DType::BF16, DType::I16, DType::U16],
            &[
                DType::I8,
                DType::U8,
                DType::F8E4M3FN,
                DType::F8E4M3FNUZ,
                DType::F8E5M2,
                DType::F8E5M2FNUZ,
            ],
            &[DType::U4, DType::I4, DType::F4E2M1],
            &[DType::U2, DType::I2],
        ];
        for group in groups {
            let w = bit_width(group[0]).unwrap();
            // Every pattern of the narrow widths, a spread of patterns otherwise.
            let patterns: Vec<u64> = if w <= 8 {
                (0..1u64 << w).collect()
            } else {
                [
                    0u64,
                    1,
                    0x5A,
                    0x8000,
                    0x3C00,
                    0x7FFF,
                    0x1234_5678,
                    0xFFFF_FFFF_FFFF,
                ]
                .iter()
                .map(|&p| p & (u64::MAX >> (64 - w)))
                .collect()
            };
            let n = patterns.len();
            let src = match group[0] {
                DType::F64 | DType::I64 | DType::U64 => Tensor::from_vec(&[n], patterns.clone()),
                DType::F32 | DType::I32 | DType::U32 => {
                    Tensor::from_vec(&[n], patterns.iter().map(|&p| p as u32).collect::<Vec<_>>())
                        .and_then(|t| bitcast(&t, group[0]))
                }
                _ if w == 16 => {
                    Tensor::from_vec(&[n], patterns.iter().map(|&p| p as u16).collect::<Vec<_>>())
                        .and_then(|t| bitcast(&t, group[0]))
                }
                DType::U4 => Tensor::from_vec(
                    &[n],
                    patterns.iter().map(|&p| U4::from_bits(p as u8)).collect(),
                ),
                DType::U2 => Tensor::from_vec(
                    &[n],
                    patterns.iter().map(|&p| U2::from_bits(p as u8)).collect(),
                ),
                _ => Tensor::from_vec(&[n], patterns.iter().map(|&p| p as i8).collect()),
            }
            .unwrap();
            for &a in group {
                let x = bitcast(&src, a).unwrap();
                for &b in group {
                    let y = run(&x, b).unwrap();
                    assert_eq!(y.dtype(), b);
                    let back = run(&y, group[0]).unwrap();
                    assert_eq!(
                        back.as_bytes(),
                        src.as_bytes(),
                        "{a} -> {b} -> {} changed the bits",
                        group[0]
                    );
                }
            }
        }
    }

    #[test]
    fn known_cross_type_values() {
        let x = Tensor::from_vec(&[3], vec![-1i8, -128, 5]).unwrap();
        assert_eq!(
            run(&x, DType::U8).unwrap(),
            Tensor::from_vec(&[3], vec![255u8, 128, 5]).unwrap()
        );
        let x = Tensor::from_vec(&[1], vec![f16::from_f32(1.0)]).unwrap();
        assert_eq!(
            run(&x, DType::U16).unwrap(),
            Tensor::from_vec(&[1], vec![0x3C00u16]).unwrap()
        );
        let x = Tensor::from_vec(&[2], vec![I4::wrapping(-1), I4::wrapping(7)]).unwrap();
        assert_eq!(
            run(&x, DType::U4).unwrap(),
            Tensor::from_vec(&[2], vec![U4::wrapping(15), U4::wrapping(7)]).unwrap()
        );
        let x = Tensor::from_vec(&[1], vec![-1.0f64]).unwrap();
        assert_eq!(
            run(&x, DType::U64).unwrap(),
            Tensor::from_vec(&[1], vec![0xBFF0_0000_0000_0000u64]).unwrap()
        );
    }

    #[test]
    fn bool_and_bytes() {
        let x = Tensor::from_vec(&[3], vec![true, false, true]).unwrap();
        assert_eq!(
            run(&x, DType::U8).unwrap(),
            Tensor::from_vec(&[3], vec![1u8, 0, 1]).unwrap()
        );
        let x = Tensor::from_vec(&[3], vec![0u8, 1, 2]).unwrap();
        assert_eq!(
            run(&x, DType::Bool).unwrap(),
            Tensor::from_vec(&[3], vec![false, true, true]).unwrap()
        );
    }

    #[test]
    fn scalars_empty_and_strided_inputs() {
        let x = Tensor::scalar(1.5f32);
        let y = run(&x, DType::I32).unwrap();
        assert_eq!(y.shape(), &[] as &[usize]);
        assert_eq!(y, Tensor::scalar(1.5f32.to_bits() as i32));
        let e = Tensor::from_vec(&[0, 3], Vec::<u32>::new()).unwrap();
        assert_eq!(run(&e, DType::F32).unwrap().shape(), &[0, 3]);
        // A transposed (non-standard layout) input is read in logical order.
        let a = ndarray::Array2::from_shape_vec((2, 3), vec![1i32, 2, 3, 4, 5, 6])
            .unwrap()
            .reversed_axes()
            .into_dyn();
        let y = run(&Tensor::I32(a), DType::U32).unwrap();
        assert_eq!(
            y.into_standard_layout(),
            Tensor::from_vec(&[3, 2], vec![1u32, 4, 2, 5, 3, 6]).unwrap()
        );
    }

    #[test]
    fn unequal_widths_and_strings_are_errors() {
        let x = Tensor::from_vec(&[1], vec![1.0f32]).unwrap();
        let e = run(&x, DType::I64).unwrap_err().to_string();
        assert!(
            e.contains("same bit width") && e.contains("32") && e.contains("64"),
            "{e}"
        );
        let x = Tensor::from_vec(&[1], vec![1u8]).unwrap();
        assert!(run(&x, DType::U4).is_err());
        assert!(run(&x, DType::F16).is_err());
        let s = Tensor::from_vec(&[1], vec!["a".to_string()]).unwrap();
        assert!(run(&s, DType::U8).is_err());
        let to_string = build_op("BitCast", 26, &[("to", int(8))], &[], 1, 1);
        assert!(matches!(to_string, Err(Error::Attribute { .. })));
        let complex = build_op("BitCast", 26, &[("to", int(14))], &[], 1, 1);
        assert!(matches!(complex, Err(Error::UnsupportedType(_))));
        let bogus = build_op("BitCast", 26, &[("to", int(99))], &[], 1, 1);
        assert!(matches!(bogus, Err(Error::Attribute { .. })));
        let missing = build_op("BitCast", 26, &[], &[], 1, 1);
        assert!(missing.is_err());
        // Before opset 26 the operator does not exist.
        let old = build_op("BitCast", 25, &[("to", int(6))], &[], 1, 1);
        assert!(matches!(old, Err(Error::UnsupportedOperator { .. })));
    }
}
