//! Elements as plain bits of their width, for the operators that only move
//! elements (gather, slice, transpose, pad, ...): such an operator copies an
//! f32 exactly as it copies an i32, so its loops are compiled once per
//! width (1, 2, 4, 8 bytes, and strings) instead of once per element type.
//! With 24 element types, per-type copies of the movement loops were a
//! large share of the library's size.

use super::{Element, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2, U4};
use half::{bf16, f16};
use ndarray::{ArrayD, ArrayViewD};
use std::fmt::Debug;
use std::mem::{align_of, size_of, ManuallyDrop};

/// An element type seen as the unsigned integer of its width.
pub(crate) trait AsBits: Element {
    /// `u8`, `u16`, `u32` or `u64` (`String` for strings).
    type Bits: Clone + Send + Sync + Default + Debug + 'static;
    /// The elements' bits (the same memory).
    fn to_bits(s: &[Self]) -> &[Self::Bits];
    /// Elements from bits that came from elements of this type (or from
    /// `Bits::default()`, which is every type's default).
    fn from_bits(v: Vec<Self::Bits>) -> Vec<Self>;
    /// The elements' bits, owned (without copying where the layout allows).
    fn into_bits(v: Vec<Self>) -> Vec<Self::Bits>;
}

/// `s` as a slice of `B`.
///
/// # Safety
/// `T` and `B` have the same size and alignment, and every bit pattern of
/// a `T` is a valid `B`.
unsafe fn cast_slice<T, B>(s: &[T]) -> &[B] {
    // SAFETY: same size and alignment, valid bit patterns (the caller's
    // contract); the length and lifetime are the input's.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<B>(), s.len()) }
}

/// `v` as a vector of `T`, without copying.
///
/// # Safety
/// `B` and `T` have the same size and alignment, and every bit pattern of
/// a `B` is a valid `T`.
unsafe fn cast_vec<B, T>(v: Vec<B>) -> Vec<T> {
    let mut v = ManuallyDrop::new(v);
    // SAFETY: the allocation was made for `B`, which has `T`'s size and
    // alignment, so its layout is the one `Vec<T>` frees with; every
    // element is a valid `T` (the caller's contract).
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<T>(), v.len(), v.capacity()) }
}

/// Types for which every bit pattern of the integer is a valid value.
macro_rules! plain {
    ($($t:ty => $b:ty),*) => {$(
        const _: () = assert!(size_of::<$t>() == size_of::<$b>() && align_of::<$t>() == align_of::<$b>());
        impl AsBits for $t {
            type Bits = $b;
            fn to_bits(s: &[Self]) -> &[$b] {
                // SAFETY: same size and alignment (asserted above); the
                // integer accepts every bit pattern.
                unsafe { cast_slice(s) }
            }
            fn from_bits(v: Vec<$b>) -> Vec<Self> {
                // SAFETY: same size and alignment (asserted above); every
                // bit pattern is a valid integer, float, half or E8M0 scale.
                unsafe { cast_vec(v) }
            }
            fn into_bits(v: Vec<Self>) -> Vec<$b> {
                // SAFETY: same size and alignment (asserted above); the
                // integer accepts every bit pattern.
                unsafe { cast_vec(v) }
            }
        }
    )*};
}
plain!(
    f32 => u32, i32 => u32, u32 => u32,
    f64 => u64, i64 => u64, u64 => u64,
    f16 => u16, bf16 => u16, i16 => u16, u16 => u16,
    i8 => u8, u8 => u8, F8E8M0 => u8
);

/// One-byte types with invalid or non-canonical bytes: read as bytes,
/// rebuilt through their checked constructors.
macro_rules! bytes {
    ($($t:ty => |$b:ident| $from:expr),*) => {$(
        const _: () = assert!(size_of::<$t>() == 1 && align_of::<$t>() == 1);
        impl AsBits for $t {
            type Bits = u8;
            fn to_bits(s: &[Self]) -> &[u8] {
                // SAFETY: one byte, alignment 1, and any initialized byte
                // is a valid u8.
                unsafe { cast_slice(s) }
            }
            fn from_bits(v: Vec<u8>) -> Vec<Self> {
                v.into_iter().map(|$b| $from).collect()
            }
            fn into_bits(v: Vec<Self>) -> Vec<u8> {
                <Self as AsBits>::to_bits(&v).to_vec()
            }
        }
    )*};
}
bytes!(
    bool => |b| b != 0,
    F8E4M3FN => |b| F8E4M3FN::from_bits(b),
    F8E4M3FNUZ => |b| F8E4M3FNUZ::from_bits(b),
    F8E5M2 => |b| F8E5M2::from_bits(b),
    F8E5M2FNUZ => |b| F8E5M2FNUZ::from_bits(b),
    F4E2M1 => |b| F4E2M1::from_bits(b),
    U4 => |b| U4::from_bits(b),
    I4 => |b| I4::from_bits(b),
    U2 => |b| U2::from_bits(b),
    I2 => |b| I2::from_bits(b)
);

impl AsBits for String {
    type Bits = String;
    fn to_bits(s: &[Self]) -> &[String] {
        s
    }
    fn from_bits(v: Vec<String>) -> Vec<Self> {
        v
    }
    fn into_bits(v: Vec<String>) -> Vec<String> {
        v
    }
}

/// The elements of `a` in row-major order, whatever its strides. They are
/// copied as their bits, so the strided walk is compiled once per width
/// rather than once per element type.
pub(crate) fn row_major<T: AsBits>(a: &ArrayD<T>) -> Vec<T> {
    let raw = a.raw_view().cast::<T::Bits>();
    // SAFETY: `T::Bits` has `T`'s size and alignment (asserted for every
    // implementation above) and reads each of `T`'s bit patterns; the view
    // borrows `a`, which outlives it.
    T::from_bits(copy_standard(unsafe { raw.deref_into_view() }))
}

/// The elements of `v` in row-major order.
#[inline(never)]
fn copy_standard<B: Clone>(v: ArrayViewD<'_, B>) -> Vec<B> {
    v.iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: AsBits + PartialEq>(values: Vec<T>)
    where
        T::Bits: PartialEq,
    {
        let bits = T::to_bits(&values).to_vec();
        assert_eq!(bits.len(), values.len());
        assert_eq!(T::into_bits(values.clone()), bits);
        assert_eq!(T::from_bits(bits), values, "{:?}", T::DTYPE);
        // The default bits are the default element.
        assert_eq!(T::from_bits(vec![T::Bits::default()]), vec![T::default()]);
    }

    /// Every type's values come back from their bits unchanged, NaN
    /// payloads and negative narrow integers included.
    #[test]
    fn every_type_round_trips_through_its_bits() {
        round_trip(vec![1.5f32, -0.0, f32::INFINITY]);
        round_trip(vec![1.5f64, -2.0, f64::MIN_POSITIVE]);
        round_trip(vec![f16::from_f32(1.5), f16::NEG_INFINITY]);
        round_trip(vec![bf16::from_f32(-3.0), bf16::MAX]);
        round_trip(vec![i8::MIN, -1, 7]);
        round_trip(vec![i16::MIN, 300]);
        round_trip(vec![i32::MIN, -5]);
        round_trip(vec![i64::MIN, i64::MAX]);
        round_trip(vec![0u8, 255]);
        round_trip(vec![u16::MAX]);
        round_trip(vec![u32::MAX, 3]);
        round_trip(vec![u64::MAX]);
        round_trip(vec![true, false, true]);
        round_trip(vec!["a".to_string(), String::new()]);
        round_trip(vec![F8E4M3FN::from_bits(0x7e), F8E4M3FN::from_bits(0x81)]);
        round_trip(vec![F8E4M3FNUZ::from_bits(0x80)]);
        round_trip(vec![F8E5M2::from_bits(0xfc)]);
        round_trip(vec![F8E5M2FNUZ::from_bits(1)]);
        round_trip(vec![F4E2M1::from_bits(0x0f)]);
        round_trip(vec![U4::wrapping(15), U4::wrapping(0)]);
        round_trip(vec![I4::wrapping(-8), I4::wrapping(-1), I4::wrapping(7)]);
        round_trip(vec![U2::wrapping(3)]);
        round_trip(vec![I2::wrapping(-2), I2::wrapping(1)]);
        let nan = [f32::from_bits(0x7fc0_1234)];
        let back = <f32 as AsBits>::from_bits(<f32 as AsBits>::to_bits(&nan).to_vec());
        assert_eq!(back[0].to_bits(), 0x7fc0_1234);
    }

    /// Transposed, reversed and sliced arrays come out in row-major order
    /// with their values, for a plain, a byte-coded and the string type.
    #[test]
    fn standard_layout_copies_any_strides() {
        use ndarray::{s, Axis, IxDyn};
        fn check<T: AsBits + PartialEq>(a: ArrayD<T>) {
            let mut odd = a.clone().reversed_axes();
            odd.invert_axis(Axis(0));
            let odd = odd.slice_move(s![.., 1..;2, ..]).into_dyn();
            assert!(!odd.is_standard_layout());
            let want = T::into_tensor(odd.as_standard_layout().into_owned());
            let got = T::into_tensor(odd).into_standard_layout();
            assert!(got.is_standard_layout());
            assert_eq!(got, want);
            // Already standard: handed back as it is.
            let p = a.as_ptr();
            let same = T::into_tensor(a).into_standard_layout();
            assert_eq!(T::view(&same).map(|v| v.as_ptr()), Some(p));
        }
        let n = |i: usize| (i * 7 % 11) as f32 - 3.5;
        check(ArrayD::from_shape_fn(IxDyn(&[2, 5, 3]), |i| {
            n(i[0] * 15 + i[1] * 3 + i[2])
        }));
        check(ArrayD::from_shape_fn(IxDyn(&[3, 4, 2]), |i| {
            (i[0] + i[1] * i[2]) % 2 == 0
        }));
        check(ArrayD::from_shape_fn(IxDyn(&[2, 3, 2]), |i| {
            format!("{i:?}")
        }));
    }
}
