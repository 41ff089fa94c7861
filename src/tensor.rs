//! `Tensor`: an element type, a shape and row-major data, stored as an ndarray
//! array of the matching Rust type. Every kernel sees and produces tensors in
//! standard (C-contiguous) layout.

use crate::error::{Error, Result};
use half::{bf16, f16};
use ndarray::{ArrayD, ArrayViewD, IxDyn};
use std::fmt;

mod aligned_alloc;
pub(crate) mod bits;
pub mod budget;
mod narrow;
pub mod recycle;
pub(crate) mod widths;
pub use aligned_alloc::AlignedAllocator;
pub use narrow::{
    RoundMode, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2, U4,
};

/// The element types a tensor can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// Boolean.
    Bool,
    /// UTF-8 string.
    String,
    /// FLOAT8E4M3FN.
    F8E4M3FN,
    /// FLOAT8E4M3FNUZ.
    F8E4M3FNUZ,
    /// FLOAT8E5M2.
    F8E5M2,
    /// FLOAT8E5M2FNUZ.
    F8E5M2FNUZ,
    /// FLOAT4E2M1.
    F4E2M1,
    /// FLOAT8E8M0: a power-of-two scale (no sign, no zero; 0xFF is NaN).
    F8E8M0,
    /// Unsigned 4-bit integer.
    U4,
    /// Signed 4-bit integer.
    I4,
    /// Unsigned 2-bit integer.
    U2,
    /// Signed 2-bit integer.
    I2,
}

impl DType {
    /// Size in bytes of one element (strings report the size of a `String`).
    pub fn size_of(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
            // One element per byte in memory (packed only in storage).
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F4E2M1
            | DType::F8E8M0
            | DType::U4
            | DType::I4
            | DType::U2
            | DType::I2 => 1,
            DType::String => std::mem::size_of::<String>(),
        }
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// True for the float8 and float4 types (which `is_float` excludes:
    /// arithmetic kernels do not take them), but not FLOAT8E8M0, a scale
    /// type that only Cast and the movement operators take.
    pub fn is_minifloat(self) -> bool {
        matches!(
            self,
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F4E2M1
        )
    }

    /// True for the nine narrow types: float8, float4, 4- and 2-bit integers
    /// (FLOAT8E8M0 aside).
    pub fn is_narrow(self) -> bool {
        self.is_minifloat() || matches!(self, DType::U4 | DType::I4 | DType::U2 | DType::I2)
    }

    /// Elements per byte in TensorProto storage: 2 for the 4-bit types, 4 for
    /// the 2-bit types, else 1 (use only for the sub-byte types).
    pub fn per_byte(self) -> usize {
        match self {
            DType::U4 | DType::I4 | DType::F4E2M1 => 2,
            DType::U2 | DType::I2 => 4,
            _ => 1,
        }
    }

    /// The ONNX `TensorProto.DataType` code of this type.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::String => 8,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::BF16 => 16,
            DType::F8E4M3FN => 17,
            DType::F8E4M3FNUZ => 18,
            DType::F8E5M2 => 19,
            DType::F8E5M2FNUZ => 20,
            DType::U4 => 21,
            DType::I4 => 22,
            DType::F4E2M1 => 23,
            DType::F8E8M0 => 24,
            DType::U2 => 25,
            DType::I2 => 26,
        }
    }

    /// The type for an ONNX `TensorProto.DataType` code.
    pub fn from_onnx_code(code: i32) -> Result<DType> {
        Ok(match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            7 => DType::I64,
            8 => DType::String,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            12 => DType::U32,
            13 => DType::U64,
            16 => DType::BF16,
            17 => DType::F8E4M3FN,
            18 => DType::F8E4M3FNUZ,
            19 => DType::F8E5M2,
            20 => DType::F8E5M2FNUZ,
            21 => DType::U4,
            22 => DType::I4,
            23 => DType::F4E2M1,
            24 => DType::F8E8M0,
            25 => DType::U2,
            26 => DType::I2,
            other => return Err(Error::UnsupportedType(onnx_type_name(other))),
        })
    }
}

/// A readable name for an ONNX data-type code, known or not.
pub fn onnx_type_name(code: i32) -> String {
    let name = match code {
        0 => "UNDEFINED",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        1..=13 | 16..=26 => match DType::from_onnx_code(code) {
            Ok(t) => return t.to_string(),
            Err(_) => return format!("data type {code}"),
        },
        _ => return format!("data type {code}"),
    };
    name.to_string()
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::Bool => "bool",
            DType::String => "string",
            DType::F8E4M3FN => "float8e4m3fn",
            DType::F8E4M3FNUZ => "float8e4m3fnuz",
            DType::F8E5M2 => "float8e5m2",
            DType::F8E5M2FNUZ => "float8e5m2fnuz",
            DType::F4E2M1 => "float4e2m1",
            DType::F8E8M0 => "float8e8m0",
            DType::U4 => "uint4",
            DType::I4 => "int4",
            DType::U2 => "uint2",
            DType::I2 => "int2",
        };
        f.write_str(s)
    }
}

/// An n-dimensional array of one element type.
#[derive(Clone, PartialEq)]
pub enum Tensor {
    /// 32-bit float data.
    F32(ArrayD<f32>),
    /// 64-bit float data.
    F64(ArrayD<f64>),
    /// Half-precision data.
    F16(ArrayD<f16>),
    /// bfloat16 data.
    BF16(ArrayD<bf16>),
    /// Signed 8-bit data.
    I8(ArrayD<i8>),
    /// Signed 16-bit data.
    I16(ArrayD<i16>),
    /// Signed 32-bit data.
    I32(ArrayD<i32>),
    /// Signed 64-bit data.
    I64(ArrayD<i64>),
    /// Unsigned 8-bit data.
    U8(ArrayD<u8>),
    /// Unsigned 16-bit data.
    U16(ArrayD<u16>),
    /// Unsigned 32-bit data.
    U32(ArrayD<u32>),
    /// Unsigned 64-bit data.
    U64(ArrayD<u64>),
    /// Boolean data.
    Bool(ArrayD<bool>),
    /// String data.
    String(ArrayD<String>),
    /// FLOAT8E4M3FN data.
    F8E4M3FN(ArrayD<F8E4M3FN>),
    /// FLOAT8E4M3FNUZ data.
    F8E4M3FNUZ(ArrayD<F8E4M3FNUZ>),
    /// FLOAT8E5M2 data.
    F8E5M2(ArrayD<F8E5M2>),
    /// FLOAT8E5M2FNUZ data.
    F8E5M2FNUZ(ArrayD<F8E5M2FNUZ>),
    /// FLOAT4E2M1 data (one element per byte).
    F4E2M1(ArrayD<F4E2M1>),
    /// FLOAT8E8M0 data.
    F8E8M0(ArrayD<F8E8M0>),
    /// Unsigned 4-bit data (one element per byte).
    U4(ArrayD<U4>),
    /// Signed 4-bit data (one element per byte).
    I4(ArrayD<I4>),
    /// Unsigned 2-bit data (one element per byte).
    U2(ArrayD<U2>),
    /// Signed 2-bit data (one element per byte).
    I2(ArrayD<I2>),
}

/// The element type, the shape and the values in row-major order (the
/// first [`DEBUG_VALUES`] of a larger tensor). Written by hand: ndarray's
/// nested formatting, compiled once per element type, was some 60 KB of
/// the shipped library.
impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::dispatch!(self, a => debug_array(f, self.dtype(), a))
    }
}

/// How many values a tensor's `Debug` form shows.
const DEBUG_VALUES: usize = 32;

fn debug_array<T: fmt::Debug>(
    f: &mut fmt::Formatter<'_>,
    dtype: DType,
    a: &ArrayD<T>,
) -> fmt::Result {
    write!(f, "Tensor<{dtype}>{:?} [", a.shape())?;
    for (i, v) in a.iter().take(DEBUG_VALUES).enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{v:?}")?;
    }
    if a.len() > DEBUG_VALUES {
        write!(f, ", ... {} more", a.len() - DEBUG_VALUES)?;
    }
    f.write_str("]")
}

/// Runs `$body` with `$a` bound to the tensor's array, whatever its type.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch {
    ($t:expr, $a:ident => $body:expr) => {
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
            $crate::Tensor::Bool($a) => $body,
            $crate::Tensor::String($a) => $body,
            $crate::Tensor::F8E4M3FN($a) => $body,
            $crate::Tensor::F8E4M3FNUZ($a) => $body,
            $crate::Tensor::F8E5M2($a) => $body,
            $crate::Tensor::F8E5M2FNUZ($a) => $body,
            $crate::Tensor::F4E2M1($a) => $body,
            $crate::Tensor::F8E8M0($a) => $body,
            $crate::Tensor::U4($a) => $body,
            $crate::Tensor::I4($a) => $body,
            $crate::Tensor::U2($a) => $body,
            $crate::Tensor::I2($a) => $body,
        }
    };
}

/// Like [`dispatch!`] but rebuilds a tensor of the same variant from the body's array.
#[macro_export]
#[doc(hidden)]
macro_rules! map_same {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::Tensor::F32($a) => $crate::Tensor::F32($body),
            $crate::Tensor::F64($a) => $crate::Tensor::F64($body),
            $crate::Tensor::F16($a) => $crate::Tensor::F16($body),
            $crate::Tensor::BF16($a) => $crate::Tensor::BF16($body),
            $crate::Tensor::I8($a) => $crate::Tensor::I8($body),
            $crate::Tensor::I16($a) => $crate::Tensor::I16($body),
            $crate::Tensor::I32($a) => $crate::Tensor::I32($body),
            $crate::Tensor::I64($a) => $crate::Tensor::I64($body),
            $crate::Tensor::U8($a) => $crate::Tensor::U8($body),
            $crate::Tensor::U16($a) => $crate::Tensor::U16($body),
            $crate::Tensor::U32($a) => $crate::Tensor::U32($body),
            $crate::Tensor::U64($a) => $crate::Tensor::U64($body),
            $crate::Tensor::Bool($a) => $crate::Tensor::Bool($body),
            $crate::Tensor::String($a) => $crate::Tensor::String($body),
            $crate::Tensor::F8E4M3FN($a) => $crate::Tensor::F8E4M3FN($body),
            $crate::Tensor::F8E4M3FNUZ($a) => $crate::Tensor::F8E4M3FNUZ($body),
            $crate::Tensor::F8E5M2($a) => $crate::Tensor::F8E5M2($body),
            $crate::Tensor::F8E5M2FNUZ($a) => $crate::Tensor::F8E5M2FNUZ($body),
            $crate::Tensor::F4E2M1($a) => $crate::Tensor::F4E2M1($body),
            $crate::Tensor::F8E8M0($a) => $crate::Tensor::F8E8M0($body),
            $crate::Tensor::U4($a) => $crate::Tensor::U4($body),
            $crate::Tensor::I4($a) => $crate::Tensor::I4($body),
            $crate::Tensor::U2($a) => $crate::Tensor::U2($body),
            $crate::Tensor::I2($a) => $crate::Tensor::I2($body),
        }
    };
}

/// Rust element types that a [`Tensor`] can hold.
pub trait Element: Clone + Send + Sync + fmt::Debug + Default + 'static {
    /// The matching element type.
    const DTYPE: DType;
    /// Wraps an array in a tensor.
    fn into_tensor(a: ArrayD<Self>) -> Tensor;
    /// Borrows the array if the tensor holds this type.
    fn view(t: &Tensor) -> Option<&ArrayD<Self>>;
    /// Takes the array if the tensor holds this type.
    fn take(t: Tensor) -> std::result::Result<ArrayD<Self>, Tensor>;
}

macro_rules! element {
    ($ty:ty, $var:ident) => {
        impl Element for $ty {
            const DTYPE: DType = DType::$var;
            fn into_tensor(a: ArrayD<Self>) -> Tensor {
                Tensor::$var(a)
            }
            fn view(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$var(a) => Some(a),
                    _ => None,
                }
            }
            fn take(t: Tensor) -> std::result::Result<ArrayD<Self>, Tensor> {
                match t {
                    Tensor::$var(a) => Ok(a),
                    other => Err(other),
                }
            }
        }
        impl From<ArrayD<$ty>> for Tensor {
            fn from(a: ArrayD<$ty>) -> Tensor {
                Tensor::$var(a)
            }
        }
    };
}
element!(f32, F32);
element!(f64, F64);
element!(f16, F16);
element!(bf16, BF16);
element!(i8, I8);
element!(i16, I16);
element!(i32, I32);
element!(i64, I64);
element!(u8, U8);
element!(u16, U16);
element!(u32, U32);
element!(u64, U64);
element!(bool, Bool);
element!(String, String);
element!(F8E4M3FN, F8E4M3FN);
element!(F8E4M3FNUZ, F8E4M3FNUZ);
element!(F8E5M2, F8E5M2);
element!(F8E5M2FNUZ, F8E5M2FNUZ);
element!(F4E2M1, F4E2M1);
element!(F8E8M0, F8E8M0);
element!(U4, U4);
element!(I4, I4);
element!(U2, U2);
element!(I2, I2);

impl Tensor {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Tensor::F32(_) => DType::F32,
            Tensor::F64(_) => DType::F64,
            Tensor::F16(_) => DType::F16,
            Tensor::BF16(_) => DType::BF16,
            Tensor::I8(_) => DType::I8,
            Tensor::I16(_) => DType::I16,
            Tensor::I32(_) => DType::I32,
            Tensor::I64(_) => DType::I64,
            Tensor::U8(_) => DType::U8,
            Tensor::U16(_) => DType::U16,
            Tensor::U32(_) => DType::U32,
            Tensor::U64(_) => DType::U64,
            Tensor::Bool(_) => DType::Bool,
            Tensor::String(_) => DType::String,
            Tensor::F8E4M3FN(_) => DType::F8E4M3FN,
            Tensor::F8E4M3FNUZ(_) => DType::F8E4M3FNUZ,
            Tensor::F8E5M2(_) => DType::F8E5M2,
            Tensor::F8E5M2FNUZ(_) => DType::F8E5M2FNUZ,
            Tensor::F4E2M1(_) => DType::F4E2M1,
            Tensor::F8E8M0(_) => DType::F8E8M0,
            Tensor::U4(_) => DType::U4,
            Tensor::I4(_) => DType::I4,
            Tensor::U2(_) => DType::U2,
            Tensor::I2(_) => DType::I2,
        }
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        dispatch!(self, a => a.shape())
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        dispatch!(self, a => a.len())
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of element data (strings count their UTF-8 bytes).
    pub fn byte_size(&self) -> usize {
        match self {
            Tensor::String(a) => a.iter().map(|s| s.len()).sum(),
            other => other.len() * other.dtype().size_of(),
        }
    }

    /// A tensor of zeros (false, empty strings) of the given type and shape;
    /// FLOAT8E8M0, which has no zero, gets its smallest value, 2^-127.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        fn z<T: Element>(shape: &[usize]) -> Tensor {
            T::into_tensor(ArrayD::default(IxDyn(shape)))
        }
        match dtype {
            DType::F32 => z::<f32>(shape),
            DType::F64 => z::<f64>(shape),
            DType::F16 => z::<f16>(shape),
            DType::BF16 => z::<bf16>(shape),
            DType::I8 => z::<i8>(shape),
            DType::I16 => z::<i16>(shape),
            DType::I32 => z::<i32>(shape),
            DType::I64 => z::<i64>(shape),
            DType::U8 => z::<u8>(shape),
            DType::U16 => z::<u16>(shape),
            DType::U32 => z::<u32>(shape),
            DType::U64 => z::<u64>(shape),
            DType::Bool => z::<bool>(shape),
            DType::String => z::<String>(shape),
            DType::F8E4M3FN => z::<F8E4M3FN>(shape),
            DType::F8E4M3FNUZ => z::<F8E4M3FNUZ>(shape),
            DType::F8E5M2 => z::<F8E5M2>(shape),
            DType::F8E5M2FNUZ => z::<F8E5M2FNUZ>(shape),
            DType::F4E2M1 => z::<F4E2M1>(shape),
            DType::F8E8M0 => z::<F8E8M0>(shape),
            DType::U4 => z::<U4>(shape),
            DType::I4 => z::<I4>(shape),
            DType::U2 => z::<U2>(shape),
            DType::I2 => z::<I2>(shape),
        }
    }

    /// Builds a tensor from a shape and row-major data.
    ///
    /// ```
    /// use ramify::Tensor;
    /// let t = Tensor::from_vec(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    /// assert_eq!(t.shape(), &[2, 2]);
    /// ```
    pub fn from_vec<T: Element>(shape: &[usize], data: Vec<T>) -> Result<Tensor> {
        let n = data.len();
        ArrayD::from_shape_vec(IxDyn(shape), data)
            .map(T::into_tensor)
            .map_err(|_| {
                Error::op(
                    "Tensor",
                    format!("{n} elements do not fill shape {shape:?}"),
                )
            })
    }

    /// A uint8 tensor, or an int8 one when `signed` (the same bytes, not
    /// copied), from bytes an 8-bit kernel wrote.
    pub fn from_bytes(shape: &[usize], bytes: Vec<u8>, signed: bool) -> Result<Tensor> {
        use bits::AsBits;
        if signed {
            Tensor::from_vec(shape, <i8 as AsBits>::from_bits(bytes))
        } else {
            Tensor::from_vec(shape, bytes)
        }
    }

    /// A rank-0 tensor holding one value.
    pub fn scalar<T: Element>(v: T) -> Tensor {
        T::into_tensor(ArrayD::from_elem(IxDyn(&[]), v))
    }

    /// Borrows the data as an array of `T`, or `None` if the type differs.
    pub fn array<T: Element>(&self) -> Option<&ArrayD<T>> {
        T::view(self)
    }

    /// Borrows the data as a view of `T`, or an error naming both types.
    pub fn view<T: Element>(&self) -> Result<ArrayViewD<'_, T>> {
        T::view(self).map(|a| a.view()).ok_or_else(|| {
            Error::op(
                "Tensor",
                format!("expected {} data, found {}", T::DTYPE, self.dtype()),
            )
        })
    }

    /// Takes the data as an array of `T`, or an error naming both types.
    pub fn into_array<T: Element>(self) -> Result<ArrayD<T>> {
        T::take(self).map_err(|t| {
            Error::op(
                "Tensor",
                format!("expected {} data, found {}", T::DTYPE, t.dtype()),
            )
        })
    }

    /// The elements as bytes, row-major, in native byte order (booleans one
    /// byte each, 0 or 1; 16-bit floats as their bit patterns; 4- and 2-bit
    /// types one element per byte). `None` for strings and for tensors not
    /// in standard layout.
    ///
    /// ```
    /// use ramify::Tensor;
    /// let t = Tensor::from_vec(&[2], vec![1u16, 2]).unwrap();
    /// let want: Vec<u8> = [1u16, 2].iter().flat_map(|v| v.to_ne_bytes()).collect();
    /// assert_eq!(t.as_bytes(), Some(&want[..]));
    /// ```
    pub fn as_bytes(&self) -> Option<&[u8]> {
        if self.dtype() == DType::String {
            return None;
        }
        dispatch!(self, a => a.as_slice().map(|s| {
            // SAFETY: every element type but String (excluded above) is
            // plain data without padding or pointers (numbers, bool, and
            // one-byte or half-crate newtypes), so its bytes may be read;
            // the slice covers exactly the elements' memory.
            unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
        }))
    }

    /// The row-major bytes of this tensor (as [`as_bytes`](Self::as_bytes)
    /// gives them): borrowed when it is laid out so, else from a
    /// standard-layout copy. `None` for strings.
    ///
    /// ```
    /// use ramify::Tensor;
    /// let t = Tensor::from_vec(&[2, 2], vec![1u8, 2, 3, 4]).unwrap();
    /// assert_eq!(&*t.standard_bytes().unwrap(), &[1, 2, 3, 4]);
    /// ```
    pub fn standard_bytes(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        use std::borrow::Cow;
        match self.as_bytes() {
            Some(b) => Some(Cow::Borrowed(b)),
            None => self
                .clone()
                .into_standard_layout()
                .as_bytes()
                .map(|b| Cow::Owned(b.to_vec())),
        }
    }

    /// True when the data is laid out row-major and contiguous.
    pub fn is_standard_layout(&self) -> bool {
        dispatch!(self, a => a.is_standard_layout())
    }

    /// This tensor with its data laid out in standard (row-major, contiguous) order.
    pub fn into_standard_layout(self) -> Tensor {
        if self.is_standard_layout() {
            return self;
        }
        // Copied as bits of the element width: one strided walk per width,
        // not one per element type.
        let v = self.width().into_owned();
        match Tensor::from_width("Tensor", self.dtype(), self.shape(), v) {
            Ok(t) => t,
            // Not reached: the elements are this tensor's own, as many as
            // its shape holds, in its type's width.
            Err(_) => self,
        }
    }

    /// Reads an integer tensor (any integer type) as `i64` values.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>> {
        Ok(match self {
            Tensor::I64(a) => a.iter().copied().collect(),
            Tensor::I32(a) => a.iter().map(|&v| v as i64).collect(),
            Tensor::I16(a) => a.iter().map(|&v| v as i64).collect(),
            Tensor::I8(a) => a.iter().map(|&v| v as i64).collect(),
            Tensor::U8(a) => a.iter().map(|&v| v as i64).collect(),
            Tensor::U16(a) => a.iter().map(|&v| v as i64).collect(),
            Tensor::U32(a) => a.iter().map(|&v| v as i64).collect(),
            Tensor::U64(a) => a.iter().map(|&v| v as i64).collect(),
            Tensor::Bool(a) => a.iter().map(|&v| v as i64).collect(),
            Tensor::U4(a) => a.iter().map(|v| v.get()).collect(),
            Tensor::I4(a) => a.iter().map(|v| v.get()).collect(),
            Tensor::U2(a) => a.iter().map(|v| v.get()).collect(),
            Tensor::I2(a) => a.iter().map(|v| v.get()).collect(),
            other => {
                return Err(Error::op(
                    "Tensor",
                    format!("expected integer data, found {}", other.dtype()),
                ))
            }
        })
    }

    /// Reads a numeric tensor as `f64` values (for summaries and comparisons).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(match self {
            Tensor::F32(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::F64(a) => a.iter().copied().collect(),
            Tensor::F16(a) => a.iter().map(|v| v.to_f64()).collect(),
            Tensor::BF16(a) => a.iter().map(|v| v.to_f64()).collect(),
            Tensor::F8E4M3FN(a) => a.iter().map(|v| v.to_f32() as f64).collect(),
            Tensor::F8E4M3FNUZ(a) => a.iter().map(|v| v.to_f32() as f64).collect(),
            Tensor::F8E5M2(a) => a.iter().map(|v| v.to_f32() as f64).collect(),
            Tensor::F8E5M2FNUZ(a) => a.iter().map(|v| v.to_f32() as f64).collect(),
            Tensor::F4E2M1(a) => a.iter().map(|v| v.to_f32() as f64).collect(),
            Tensor::F8E8M0(a) => a.iter().map(|v| v.to_f32() as f64).collect(),
            Tensor::String(_) => return Err(Error::op("Tensor", "string data is not numeric")),
            other => other.to_i64_vec()?.into_iter().map(|v| v as f64).collect(),
        })
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype(), self.shape())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_bytes_borrow_row_major_data_and_copy_the_rest() {
        let a = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2, 3]), vec![1u8, 2, 3, 4, 5, 6])
            .unwrap();
        let plain = Tensor::U8(a.clone());
        assert!(matches!(
            plain.standard_bytes(),
            Some(std::borrow::Cow::Borrowed(&[1, 2, 3, 4, 5, 6]))
        ));
        let transposed = Tensor::U8(a.reversed_axes());
        assert!(transposed.as_bytes().is_none());
        assert_eq!(&*transposed.standard_bytes().unwrap(), &[1, 4, 2, 5, 3, 6]);
        let strings = Tensor::from_vec(&[1], vec![String::from("x")]).unwrap();
        assert!(strings.standard_bytes().is_none());
    }

    #[test]
    fn debug_shows_type_shape_and_the_first_values() {
        let t = Tensor::from_vec(&[2, 2], vec![1.5f32, -2.0, 3.0, 4.0]).unwrap();
        assert_eq!(
            format!("{t:?}"),
            "Tensor<float32>[2, 2] [1.5, -2.0, 3.0, 4.0]"
        );
        let big = Tensor::from_vec(&[40], (0..40i64).collect()).unwrap();
        let text = format!("{big:?}");
        assert!(text.starts_with("Tensor<int64>[40] [0, 1, 2,"), "{text}");
        assert!(text.ends_with(", 31, ... 8 more]"), "{text}");
    }

    #[test]
    fn every_type_code_has_a_name_and_unknown_codes_are_typed_errors() {
        for code in -2..64 {
            let name = onnx_type_name(code);
            assert!(!name.is_empty());
            match DType::from_onnx_code(code) {
                Ok(t) => assert_eq!(t.onnx_code(), code),
                Err(e) => assert!(
                    matches!(e, Error::UnsupportedType(ref n) if *n == name),
                    "{e}"
                ),
            }
        }
        assert_eq!(onnx_type_name(26), "int2");
        assert_eq!(DType::from_onnx_code(26).unwrap(), DType::I2);
        assert_eq!(onnx_type_name(24), "float8e8m0");
        assert_eq!(DType::from_onnx_code(24).unwrap(), DType::F8E8M0);
        assert!(DType::from_onnx_code(14).is_err());
        assert_eq!(onnx_type_name(99), "data type 99");
    }
}
