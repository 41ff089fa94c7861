//! A tensor's elements by width: the operators that only move elements
//! (split, concat, ...) match on [`Width`] and run one generic body per
//! width (1, 2, 4, 8 bytes, strings), not one per element type, and hand
//! their result back through [`Tensor::from_width`], the one place that
//! rebuilds each element type. [`super::bits`] gives the element-level
//! conversions; this is the tensor-level dispatch on top of them.

use super::bits::{row_major, AsBits};
use super::{DType, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2, U4};
use crate::error::{Error, Result};
use crate::Tensor;
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use std::borrow::Cow;

/// A tensor's elements in row-major order as bits of their width
/// (borrowed when the tensor is contiguous).
#[derive(Debug)]
pub(crate) enum Width<'a> {
    /// One-byte types.
    W8(Cow<'a, [u8]>),
    /// Two-byte types.
    W16(Cow<'a, [u16]>),
    /// Four-byte types.
    W32(Cow<'a, [u32]>),
    /// Eight-byte types.
    W64(Cow<'a, [u64]>),
    /// Strings.
    Str(Cow<'a, [String]>),
}

impl Width<'_> {
    /// The elements, owned (copied only where they were borrowed).
    pub(crate) fn into_owned(self) -> WidthVec {
        match self {
            Width::W8(c) => WidthVec::W8(c.into_owned()),
            Width::W16(c) => WidthVec::W16(c.into_owned()),
            Width::W32(c) => WidthVec::W32(c.into_owned()),
            Width::W64(c) => WidthVec::W64(c.into_owned()),
            Width::Str(c) => WidthVec::Str(c.into_owned()),
        }
    }
}

/// Elements produced by a per-width body, to become a tensor again.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WidthVec {
    /// One-byte types.
    W8(Vec<u8>),
    /// Two-byte types.
    W16(Vec<u16>),
    /// Four-byte types.
    W32(Vec<u32>),
    /// Eight-byte types.
    W64(Vec<u64>),
    /// Strings.
    Str(Vec<String>),
}

/// The bits types: how a slice or vector of them becomes a [`Width`] or a
/// [`WidthVec`].
pub(crate) trait Bits: Clone + Default + Send + Sync + 'static {
    /// The borrowed or copied elements as a [`Width`].
    fn width(c: Cow<'_, [Self]>) -> Width<'_>;
    /// The elements as a [`WidthVec`].
    fn vec(v: Vec<Self>) -> WidthVec;
    /// The elements of `w` if it holds this width.
    fn slice<'a>(w: &'a Width<'_>) -> Option<&'a [Self]>;
}

macro_rules! bits {
    ($($t:ty => $w:ident),*) => {$(
        impl Bits for $t {
            fn width(c: Cow<'_, [Self]>) -> Width<'_> {
                Width::$w(c)
            }
            fn vec(v: Vec<Self>) -> WidthVec {
                WidthVec::$w(v)
            }
            fn slice<'a>(w: &'a Width<'_>) -> Option<&'a [Self]> {
                match w {
                    Width::$w(c) => Some(c),
                    _ => None,
                }
            }
        }
    )*};
}
bits!(u8 => W8, u16 => W16, u32 => W32, u64 => W64, String => Str);

/// `w`'s elements if they have the width of `_like`'s: in a [`by_width!`]
/// body, the other tensors' elements in the body's width.
pub(crate) fn same_width<'a, B: Bits>(_like: &[B], w: &'a Width<'_>) -> Option<&'a [B]> {
    B::slice(w)
}

fn width_of<T: AsBits>(a: &ArrayD<T>) -> Width<'_>
where
    T::Bits: Bits,
{
    match a.as_slice() {
        Some(s) => T::Bits::width(Cow::Borrowed(T::to_bits(s))),
        None => T::Bits::width(Cow::Owned(T::into_bits(row_major(a)))),
    }
}

impl Tensor {
    /// The elements as bits of their width, row-major.
    pub(crate) fn width(&self) -> Width<'_> {
        crate::dispatch!(self, a => width_of(a))
    }

    /// A tensor of `dtype` and `shape` from elements of that type's width
    /// (produced from tensors of that type); an error naming `op` if the
    /// width or the count does not match.
    pub(crate) fn from_width(
        op: &str,
        dtype: DType,
        shape: &[usize],
        v: WidthVec,
    ) -> Result<Tensor> {
        fn make<T: AsBits>(op: &str, shape: &[usize], v: Vec<T::Bits>) -> Result<Tensor> {
            let n = v.len();
            ArrayD::from_shape_vec(IxDyn(shape), T::from_bits(v))
                .map(T::into_tensor)
                .map_err(|_| {
                    Error::op(
                        op,
                        format!("internal error: {n} elements do not fill shape {shape:?}"),
                    )
                })
        }
        let mismatch = |v: &WidthVec| {
            Error::op(
                op,
                format!("internal error: {dtype} from elements of another width ({v:?})"),
            )
        };
        match (dtype, v) {
            (DType::F32, WidthVec::W32(v)) => make::<f32>(op, shape, v),
            (DType::I32, WidthVec::W32(v)) => make::<i32>(op, shape, v),
            (DType::U32, WidthVec::W32(v)) => make::<u32>(op, shape, v),
            (DType::F64, WidthVec::W64(v)) => make::<f64>(op, shape, v),
            (DType::I64, WidthVec::W64(v)) => make::<i64>(op, shape, v),
            (DType::U64, WidthVec::W64(v)) => make::<u64>(op, shape, v),
            (DType::F16, WidthVec::W16(v)) => make::<f16>(op, shape, v),
            (DType::BF16, WidthVec::W16(v)) => make::<bf16>(op, shape, v),
            (DType::I16, WidthVec::W16(v)) => make::<i16>(op, shape, v),
            (DType::U16, WidthVec::W16(v)) => make::<u16>(op, shape, v),
            (DType::I8, WidthVec::W8(v)) => make::<i8>(op, shape, v),
            (DType::U8, WidthVec::W8(v)) => make::<u8>(op, shape, v),
            (DType::Bool, WidthVec::W8(v)) => make::<bool>(op, shape, v),
            (DType::F8E4M3FN, WidthVec::W8(v)) => make::<F8E4M3FN>(op, shape, v),
            (DType::F8E4M3FNUZ, WidthVec::W8(v)) => make::<F8E4M3FNUZ>(op, shape, v),
            (DType::F8E5M2, WidthVec::W8(v)) => make::<F8E5M2>(op, shape, v),
            (DType::F8E5M2FNUZ, WidthVec::W8(v)) => make::<F8E5M2FNUZ>(op, shape, v),
            (DType::F4E2M1, WidthVec::W8(v)) => make::<F4E2M1>(op, shape, v),
            (DType::F8E8M0, WidthVec::W8(v)) => make::<F8E8M0>(op, shape, v),
            (DType::U4, WidthVec::W8(v)) => make::<U4>(op, shape, v),
            (DType::I4, WidthVec::W8(v)) => make::<I4>(op, shape, v),
            (DType::U2, WidthVec::W8(v)) => make::<U2>(op, shape, v),
            (DType::I2, WidthVec::W8(v)) => make::<I2>(op, shape, v),
            (DType::String, WidthVec::Str(v)) => make::<String>(op, shape, v),
            (_, v) => Err(mismatch(&v)),
        }
    }
}

/// Runs `$body` with `$s` bound to the tensor's elements as a slice of
/// their width's bits (`&[u8]`, `&[u16]`, `&[u32]`, `&[u64]` or
/// `&[String]`); the body is compiled once per width.
macro_rules! by_width {
    ($t:expr, $s:ident => $body:expr) => {
        match $t.width() {
            $crate::tensor::widths::Width::W8(c) => {
                let $s: &[u8] = &c;
                $body
            }
            $crate::tensor::widths::Width::W16(c) => {
                let $s: &[u16] = &c;
                $body
            }
            $crate::tensor::widths::Width::W32(c) => {
                let $s: &[u32] = &c;
                $body
            }
            $crate::tensor::widths::Width::W64(c) => {
                let $s: &[u64] = &c;
                $body
            }
            $crate::tensor::widths::Width::Str(c) => {
                let $s: &[String] = &c;
                $body
            }
        }
    };
}
pub(crate) use by_width;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Element;

    /// Every element type goes to its width and back unchanged, from a
    /// contiguous and from a transposed tensor.
    #[test]
    fn every_type_round_trips_through_its_width() {
        let cases = [
            Tensor::from_vec(&[2, 2], vec![1.5f32, -0.0, f32::NAN, 4.0]).unwrap(),
            Tensor::from_vec(&[2, 2], vec![1i64, -2, i64::MAX, i64::MIN]).unwrap(),
            Tensor::from_vec(&[2, 2], vec![f16::ONE, f16::MAX, f16::MIN, f16::ZERO]).unwrap(),
            Tensor::from_vec(&[2, 2], vec![true, false, false, true]).unwrap(),
            Tensor::from_vec(
                &[2, 2],
                vec![
                    I4::wrapping(-8),
                    I4::wrapping(7),
                    I4::wrapping(0),
                    I4::wrapping(-1),
                ],
            )
            .unwrap(),
            Tensor::from_vec(&[2, 2], ["a", "bc", "", "d"].map(String::from).to_vec()).unwrap(),
            Tensor::from_vec(
                &[2, 2],
                [0u8, 0x7f, 0xfe, 0xff].map(F8E8M0::from_bits).to_vec(),
            )
            .unwrap(),
        ];
        for t in cases {
            let back = |t: &Tensor| {
                let v = by_width!(t, s => Bits::vec(s.to_vec()));
                Tensor::from_width("T", t.dtype(), t.shape(), v).unwrap()
            };
            assert_eq!(format!("{:?}", back(&t)), format!("{t:?}"));
            let tr = crate::dispatch!(&t, a => Element::into_tensor(a.t().to_owned()));
            assert!(!tr.is_standard_layout() || tr.len() < 2);
            let want = tr.clone().into_standard_layout();
            assert_eq!(format!("{:?}", back(&tr)), format!("{want:?}"));
        }
        // A width that does not fit the type is an error, not a panic.
        let e = Tensor::from_width("T", DType::F32, &[1], WidthVec::W8(vec![1]));
        assert!(e.is_err());
        let e = Tensor::from_width("T", DType::F32, &[2], WidthVec::W32(vec![1]));
        assert!(e.is_err());
    }
}
