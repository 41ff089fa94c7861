//! Tensors across the boundary: element type codes, caller-owned input
//! buffers described by `RamifyInput` (copied in), and runtime-owned
//! tensors (`RamifyTensor`: run outputs, or made by the app to be shared
//! with runs) with their accessors and release function.

use crate::error::{arg_ref, arg_slice, guard, guard_void, out_ptr, FfiError, FfiResult};
use crate::RamifyStatus;
use ramify::{DType, Element, Tensor};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// Element types: the codes of ONNX's `TensorProto.DataType`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamifyElementType {
    /// No type: a model value whose type the model does not declare.
    Undefined = 0,
    /// 32-bit IEEE float (`float`).
    Float = 1,
    /// `uint8_t`.
    Uint8 = 2,
    /// `int8_t`.
    Int8 = 3,
    /// `uint16_t`.
    Uint16 = 4,
    /// `int16_t`.
    Int16 = 5,
    /// `int32_t`.
    Int32 = 6,
    /// `int64_t`.
    Int64 = 7,
    /// UTF-8 strings (not supported by the C API's buffers).
    String = 8,
    /// One byte per element, 0 or 1 (inputs: any non-zero byte is true).
    Bool = 9,
    /// IEEE half precision, 2 bytes per element.
    Float16 = 10,
    /// 64-bit IEEE float (`double`).
    Double = 11,
    /// `uint32_t`.
    Uint32 = 12,
    /// `uint64_t`.
    Uint64 = 13,
    /// bfloat16, 2 bytes per element.
    Bfloat16 = 16,
}

/// One named input of `ramify_session_run`, in a caller-owned buffer:
/// `byte_size` bytes of row-major (C order) elements of `element_type`,
/// with `rank` dimensions at `shape`. ramify copies the data during the
/// call; the caller keeps ownership and may free or reuse the buffer as
/// soon as the call returns. `data` needs no particular alignment; it may
/// be NULL only when `byte_size` is 0, and `shape` only when `rank` is 0.
/// (To share a buffer with runs without a copy, see `ramify_tensor_create`
/// and `ramify_binding_bind_input`.)
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RamifyInput {
    /// The model input this feeds: NUL-terminated UTF-8.
    pub name: *const c_char,
    /// The elements, row-major.
    pub data: *const c_void,
    /// Bytes at `data`: must equal the element count times the element size.
    pub byte_size: usize,
    /// A `RamifyElementType` code.
    pub element_type: i32,
    /// `rank` dimensions, each ≥ 0.
    pub shape: *const i64,
    /// Number of dimensions (0 for a scalar).
    pub rank: usize,
}

/// A tensor: a run's output, or one the app made with `ramify_tensor_create`.
/// The caller owns the handle and frees it with `ramify_tensor_release`; it
/// stays valid after its session is destroyed. Pointers read from it (shape,
/// data) are valid until it is released.
#[derive(Debug)]
pub struct RamifyTensor {
    pub(crate) tensor: Arc<Tensor>,
    dims: Vec<i64>,
}

impl RamifyTensor {
    /// Wraps a run output (made standard layout, so its data is one row-major block).
    pub(crate) fn new(t: Tensor) -> RamifyTensor {
        RamifyTensor::shared(Arc::new(t.into_standard_layout()))
    }

    /// Wraps a tensor shared with others (a binding's results); it must be
    /// in standard layout.
    pub(crate) fn shared(tensor: Arc<Tensor>) -> RamifyTensor {
        debug_assert!(tensor.is_standard_layout());
        let dims = tensor
            .shape()
            .iter()
            .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
            .collect();
        RamifyTensor { tensor, dims }
    }

    /// The wrapped tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }
}

/// The `RamifyElementType` code of a library type.
pub(crate) fn element_code(dtype: DType) -> i32 {
    dtype.onnx_code()
}

/// Copies `n` elements of a type for which every bit pattern is a value.
///
/// # Safety
/// `data` must be readable for `n * size_of::<T>()` bytes (any alignment), and
/// every bit pattern must be a valid `T`.
unsafe fn copy_plain<T: Element + Copy>(
    data: *const u8,
    n: usize,
    shape: &[usize],
) -> FfiResult<Tensor> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    std::ptr::copy_nonoverlapping(
        data,
        v.as_mut_ptr() as *mut u8,
        n * std::mem::size_of::<T>(),
    );
    v.set_len(n);
    Tensor::from_vec(shape, v).map_err(FfiError::from)
}

/// The size in bytes of `n` elements of `dtype`, or an error on overflow.
pub(crate) fn bytes_for(dtype: DType, n: usize, what: &str) -> FfiResult<usize> {
    n.checked_mul(dtype.size_of())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| FfiError::arg(format!("{what}: the tensor is too large")))
}

/// The library type of a `RamifyElementType` code that has a flat buffer.
pub(crate) fn dtype_of(code: i32, what: &str) -> FfiResult<DType> {
    match code {
        8 => Err(FfiError::new(
            RamifyStatus::Unsupported,
            format!("{what}: string tensors are not supported by the C API"),
        )),
        // Only the codes of RamifyElementType reach the library's conversion.
        1..=7 | 9..=13 | 16 => Ok(DType::from_onnx_code(code)?),
        _ => Err(FfiError::arg(format!(
            "{what}: element_type {code} is not a RamifyElementType"
        ))),
    }
}

/// A caller's `rank` dimensions at `dims` as sizes, with their product.
///
/// # Safety
/// `dims` must be NULL or readable for `rank` values.
pub(crate) unsafe fn shape_of(
    dims: *const i64,
    rank: usize,
    what: &str,
) -> FfiResult<(Vec<usize>, usize)> {
    let dims = arg_slice(dims, rank, &format!("{what}: shape"))?;
    let mut shape = Vec::with_capacity(dims.len());
    let mut count: usize = 1;
    for (axis, &d) in dims.iter().enumerate() {
        let d = usize::try_from(d)
            .map_err(|_| FfiError::arg(format!("{what}: dimension {axis} is negative ({d})")))?;
        count = count
            .checked_mul(d)
            .ok_or_else(|| FfiError::arg(format!("{what}: the shape {dims:?} overflows")))?;
        shape.push(d);
    }
    Ok((shape, count))
}

/// Reads a caller's view into an owned tensor (a copy). `what` names the view
/// in messages, e.g. `inputs[1] ("mask")`.
///
/// # Safety
/// The view's pointers must be valid as its fields describe.
pub(crate) unsafe fn tensor_from_view(view: &RamifyInput, what: &str) -> FfiResult<Tensor> {
    let dtype = dtype_of(view.element_type, what)?;
    let (shape, count) = shape_of(view.shape, view.rank, what)?;
    let bytes = bytes_for(dtype, count, what)?;
    if view.byte_size != bytes {
        return Err(FfiError::arg(format!(
            "{what}: byte_size is {}, but shape {shape:?} of {dtype} needs {bytes} bytes",
            view.byte_size
        )));
    }
    if bytes > 0 && view.data.is_null() {
        return Err(FfiError::arg(format!("{what}: data is NULL")));
    }
    let data = if bytes == 0 {
        std::ptr::NonNull::<u8>::dangling().as_ptr() as *const u8
    } else {
        view.data as *const u8
    };
    use half::{bf16, f16};
    match dtype {
        DType::F32 => copy_plain::<f32>(data, count, &shape),
        DType::F64 => copy_plain::<f64>(data, count, &shape),
        DType::F16 => copy_plain::<f16>(data, count, &shape),
        DType::BF16 => copy_plain::<bf16>(data, count, &shape),
        DType::I8 => copy_plain::<i8>(data, count, &shape),
        DType::I16 => copy_plain::<i16>(data, count, &shape),
        DType::I32 => copy_plain::<i32>(data, count, &shape),
        DType::I64 => copy_plain::<i64>(data, count, &shape),
        DType::U8 => copy_plain::<u8>(data, count, &shape),
        DType::U16 => copy_plain::<u16>(data, count, &shape),
        DType::U32 => copy_plain::<u32>(data, count, &shape),
        DType::U64 => copy_plain::<u64>(data, count, &shape),
        DType::Bool => {
            // Not every byte is a valid Rust bool: read bytes, then compare.
            let raw = std::slice::from_raw_parts(data, count);
            let v: Vec<bool> = raw.iter().map(|&b| b != 0).collect();
            Tensor::from_vec(&shape, v).map_err(FfiError::from)
        }
        DType::String => unreachable!("string views are refused above"),
        other => Err(FfiError::new(
            RamifyStatus::Unsupported,
            format!("{what}: {other} is not supported by the C API"),
        )),
    }
}

/// Borrows a tensor handle.
pub(crate) unsafe fn tensor_ref<'a>(tensor: *const RamifyTensor) -> FfiResult<&'a RamifyTensor> {
    arg_ref(tensor, "tensor")
}

/// Frees a tensor returned by `ramify_session_run`. NULL is accepted and ignored.
///
/// # Safety
/// `tensor` must be NULL or a handle from `ramify_session_run` not yet
/// released, and no other thread may be using it.
#[no_mangle]
pub unsafe extern "C" fn ramify_tensor_release(tensor: *mut RamifyTensor) {
    guard_void("ramify_tensor_release", || {
        if !tensor.is_null() {
            drop(unsafe { Box::from_raw(tensor) });
        }
    })
}

/// Writes the tensor's `RamifyElementType` code to `*out`.
///
/// # Safety
/// `tensor` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_tensor_element_type(
    tensor: *const RamifyTensor,
    out: *mut i32,
) -> RamifyStatus {
    guard("ramify_tensor_element_type", || {
        let out = unsafe { out_ptr(out, "out") }?;
        let t = unsafe { tensor_ref(tensor) }?;
        unsafe { out.write(element_code(t.tensor.dtype())) };
        Ok(())
    })
}

/// Writes the tensor's number of dimensions to `*out`.
///
/// # Safety
/// `tensor` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_tensor_rank(
    tensor: *const RamifyTensor,
    out: *mut usize,
) -> RamifyStatus {
    guard("ramify_tensor_rank", || {
        let out = unsafe { out_ptr(out, "out") }?;
        let t = unsafe { tensor_ref(tensor) }?;
        unsafe { out.write(t.dims.len()) };
        Ok(())
    })
}

/// Writes a pointer to the tensor's `rank` dimensions to `*dims` (owned by
/// the tensor, valid until it is released) and, when `rank` is not NULL, the
/// rank to `*rank`.
///
/// # Safety
/// `tensor` must be NULL or a live handle; `dims` NULL or writable; `rank`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_tensor_shape(
    tensor: *const RamifyTensor,
    dims: *mut *const i64,
    rank: *mut usize,
) -> RamifyStatus {
    guard("ramify_tensor_shape", || {
        let dims_out = unsafe { out_ptr(dims, "dims") }?;
        let t = unsafe { tensor_ref(tensor) }?;
        if !rank.is_null() {
            let rank = unsafe { out_ptr(rank, "rank") }?;
            unsafe { rank.write(t.dims.len()) };
        }
        unsafe { dims_out.write(t.dims.as_ptr()) };
        Ok(())
    })
}

/// Writes the tensor's number of elements (the product of its dimensions) to `*out`.
///
/// # Safety
/// `tensor` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_tensor_element_count(
    tensor: *const RamifyTensor,
    out: *mut usize,
) -> RamifyStatus {
    guard("ramify_tensor_element_count", || {
        let out = unsafe { out_ptr(out, "out") }?;
        let t = unsafe { tensor_ref(tensor) }?;
        unsafe { out.write(t.tensor.len()) };
        Ok(())
    })
}

/// Writes the size of the tensor's data in bytes (element count × element
/// size) to `*out`. String tensors have no flat buffer: `RAMIFY_STATUS_UNSUPPORTED`.
///
/// # Safety
/// `tensor` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_tensor_byte_size(
    tensor: *const RamifyTensor,
    out: *mut usize,
) -> RamifyStatus {
    guard("ramify_tensor_byte_size", || {
        let out = unsafe { out_ptr(out, "out") }?;
        let t = unsafe { tensor_ref(tensor) }?;
        refuse_strings(t)?;
        unsafe { out.write(t.tensor.len() * t.tensor.dtype().size_of()) };
        Ok(())
    })
}

/// Writes a pointer to the tensor's elements, row-major, to `*out` (owned by
/// the tensor, valid until it is released; aligned for the element type).
/// Bool elements are one byte each, 0 or 1; float16 and bfloat16 are 2-byte
/// bit patterns. String tensors: `RAMIFY_STATUS_UNSUPPORTED`.
///
/// # Safety
/// `tensor` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_tensor_data(
    tensor: *const RamifyTensor,
    out: *mut *const c_void,
) -> RamifyStatus {
    guard("ramify_tensor_data", || {
        let out = unsafe { out_ptr(out, "out") }?;
        let t = unsafe { tensor_ref(tensor) }?;
        refuse_strings(t)?;
        let p = ramify::dispatch!(&*t.tensor, a => a.as_ptr() as *const c_void);
        unsafe { out.write(p) };
        Ok(())
    })
}

fn refuse_strings(t: &RamifyTensor) -> FfiResult {
    if t.tensor.dtype() == DType::String {
        return Err(FfiError::new(
            RamifyStatus::Unsupported,
            "string tensors have no flat data buffer in the C API",
        ));
    }
    if t.tensor.dtype().is_narrow() || t.tensor.dtype() == DType::F8E8M0 {
        return Err(FfiError::new(
            RamifyStatus::Unsupported,
            format!(
                "{} tensors have no RamifyElementType data buffer in the C API",
                t.tensor.dtype()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ramify_last_error;
    use std::ffi::CStr;
    use std::ptr;

    fn last() -> String {
        unsafe { CStr::from_ptr(ramify_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    fn view<T>(data: &[T], code: i32, shape: &[i64]) -> RamifyInput {
        RamifyInput {
            name: c"x".as_ptr(),
            data: data.as_ptr() as *const c_void,
            byte_size: std::mem::size_of_val(data),
            element_type: code,
            shape: shape.as_ptr(),
            rank: shape.len(),
        }
    }

    #[test]
    fn element_codes_match_onnx() {
        for (code, dtype) in [
            (RamifyElementType::Float, DType::F32),
            (RamifyElementType::Uint8, DType::U8),
            (RamifyElementType::Int8, DType::I8),
            (RamifyElementType::Uint16, DType::U16),
            (RamifyElementType::Int16, DType::I16),
            (RamifyElementType::Int32, DType::I32),
            (RamifyElementType::Int64, DType::I64),
            (RamifyElementType::String, DType::String),
            (RamifyElementType::Bool, DType::Bool),
            (RamifyElementType::Float16, DType::F16),
            (RamifyElementType::Double, DType::F64),
            (RamifyElementType::Uint32, DType::U32),
            (RamifyElementType::Uint64, DType::U64),
            (RamifyElementType::Bfloat16, DType::BF16),
        ] {
            assert_eq!(code as i32, element_code(dtype), "{dtype}");
        }
    }

    #[test]
    fn views_are_copied_with_their_shape() {
        let data = [1.0f32, -2.0, 3.5, 4.0, 5.0, 6.0];
        let t = unsafe { tensor_from_view(&view(&data, 1, &[2, 3]), "x") }.unwrap();
        assert_eq!(t, Tensor::from_vec(&[2, 3], data.to_vec()).unwrap());
        let ints = [7i64, -8];
        let t = unsafe { tensor_from_view(&view(&ints, 7, &[2]), "x") }.unwrap();
        assert_eq!(t, Tensor::from_vec(&[2], ints.to_vec()).unwrap());
        let halfs = [half::f16::from_f32(1.5), half::f16::from_f32(-0.25)];
        let t = unsafe { tensor_from_view(&view(&halfs, 10, &[1, 2]), "x") }.unwrap();
        assert_eq!(t, Tensor::from_vec(&[1, 2], halfs.to_vec()).unwrap());
        // A scalar: rank 0, shape may be NULL.
        let one = [9u8];
        let mut v = view(&one, 2, &[]);
        v.shape = ptr::null();
        let t = unsafe { tensor_from_view(&v, "x") }.unwrap();
        assert_eq!(t.shape(), &[] as &[usize]);
        // An empty tensor: data may be NULL.
        let mut v = view::<f32>(&[], 1, &[0, 4]);
        v.data = ptr::null();
        let t = unsafe { tensor_from_view(&v, "x") }.unwrap();
        assert_eq!(t.shape(), &[0, 4]);
    }

    #[test]
    fn unaligned_buffers_are_read() {
        let mut bytes = [0u8; 1 + 3 * 4];
        for (i, v) in [1.0f32, 2.0, 3.0].iter().enumerate() {
            bytes[1 + 4 * i..5 + 4 * i].copy_from_slice(&v.to_ne_bytes());
        }
        let v = RamifyInput {
            name: c"x".as_ptr(),
            data: bytes[1..].as_ptr() as *const c_void,
            byte_size: 12,
            element_type: 1,
            shape: [3i64].as_ptr(),
            rank: 1,
        };
        let t = unsafe { tensor_from_view(&v, "x") }.unwrap();
        assert_eq!(t, Tensor::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap());
    }

    #[test]
    fn bool_bytes_other_than_one_read_as_true() {
        let raw = [0u8, 1, 2, 255];
        let t = unsafe { tensor_from_view(&view(&raw, 9, &[4]), "m") }.unwrap();
        assert_eq!(
            t,
            Tensor::from_vec(&[4], vec![false, true, true, true]).unwrap()
        );
    }

    #[test]
    fn bad_views_are_refused_with_their_reason() {
        let data = [1.0f32; 4];
        let cases: Vec<(RamifyInput, RamifyStatus, &str)> = vec![
            (
                view(&data, 42, &[4]),
                RamifyStatus::InvalidArgument,
                "x: element_type 42 is not a RamifyElementType",
            ),
            (
                view(&data, 8, &[4]),
                RamifyStatus::Unsupported,
                "x: string tensors are not supported",
            ),
            (
                view(&data, 1, &[5]),
                RamifyStatus::InvalidArgument,
                "x: byte_size is 16, but shape [5] of float32 needs 20 bytes",
            ),
            (
                view(&data, 1, &[-4]),
                RamifyStatus::InvalidArgument,
                "x: dimension 0 is negative (-4)",
            ),
            (
                view(&data, 1, &[i64::MAX, i64::MAX]),
                RamifyStatus::InvalidArgument,
                "overflows",
            ),
            (
                view(&data, 11, &[1 << 61]),
                RamifyStatus::InvalidArgument,
                "x: the tensor is too large",
            ),
            (
                RamifyInput {
                    shape: ptr::null(),
                    ..view(&data, 1, &[4])
                },
                RamifyStatus::InvalidArgument,
                "x: shape is NULL but its length is 1",
            ),
            (
                RamifyInput {
                    data: ptr::null(),
                    ..view(&data, 1, &[4])
                },
                RamifyStatus::InvalidArgument,
                "x: data is NULL",
            ),
        ];
        for (v, status, text) in cases {
            let e = unsafe { tensor_from_view(&v, "x") }.unwrap_err();
            assert_eq!(e.status, status, "{text}");
            assert!(e.message.contains(text), "{:?} lacks {text:?}", e.message);
        }
    }

    #[test]
    fn accessors_describe_the_tensor() {
        let t = Tensor::from_vec(&[2, 3], vec![1i32, 2, 3, 4, 5, 6]).unwrap();
        let h = Box::into_raw(Box::new(RamifyTensor::new(t)));
        unsafe {
            let mut code = 0;
            assert_eq!(ramify_tensor_element_type(h, &mut code), RamifyStatus::Ok);
            assert_eq!(code, RamifyElementType::Int32 as i32);
            let mut rank = 0;
            assert_eq!(ramify_tensor_rank(h, &mut rank), RamifyStatus::Ok);
            assert_eq!(rank, 2);
            let mut dims = ptr::null();
            let mut rank2 = 0;
            assert_eq!(
                ramify_tensor_shape(h, &mut dims, &mut rank2),
                RamifyStatus::Ok
            );
            assert_eq!(std::slice::from_raw_parts(dims, rank2), &[2, 3]);
            assert_eq!(
                ramify_tensor_shape(h, &mut dims, ptr::null_mut()),
                RamifyStatus::Ok
            );
            let (mut count, mut bytes) = (0, 0);
            assert_eq!(ramify_tensor_element_count(h, &mut count), RamifyStatus::Ok);
            assert_eq!(ramify_tensor_byte_size(h, &mut bytes), RamifyStatus::Ok);
            assert_eq!((count, bytes), (6, 24));
            let mut data = ptr::null();
            assert_eq!(ramify_tensor_data(h, &mut data), RamifyStatus::Ok);
            assert_eq!(
                std::slice::from_raw_parts(data as *const i32, 6),
                &[1, 2, 3, 4, 5, 6]
            );
            ramify_tensor_release(h);
        }
    }

    #[test]
    fn accessors_reject_null_and_strings() {
        unsafe {
            let mut n = 0usize;
            assert_eq!(
                ramify_tensor_rank(ptr::null(), &mut n),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(last(), "ramify_tensor_rank: tensor is NULL");
            let mut data = ptr::null();
            assert_eq!(
                ramify_tensor_data(ptr::null(), &mut data),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(last(), "ramify_tensor_data: tensor is NULL");
            let t = Tensor::from_vec(&[1], vec!["a".to_string()]).unwrap();
            let h = Box::into_raw(Box::new(RamifyTensor::new(t)));
            assert_eq!(
                ramify_tensor_rank(h, ptr::null_mut()),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                last(),
                "ramify_tensor_rank: out (the output pointer) is NULL"
            );
            assert_eq!(ramify_tensor_data(h, &mut data), RamifyStatus::Unsupported);
            assert!(last().contains("string tensors have no flat data buffer"));
            assert_eq!(
                ramify_tensor_byte_size(h, &mut n),
                RamifyStatus::Unsupported
            );
            let mut code = 0;
            assert_eq!(ramify_tensor_element_type(h, &mut code), RamifyStatus::Ok);
            assert_eq!(code, RamifyElementType::String as i32);
            ramify_tensor_release(h);
            ramify_tensor_release(ptr::null_mut());
        }
    }
}
