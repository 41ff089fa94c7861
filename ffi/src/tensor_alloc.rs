//! Tensors the app makes and fills itself: `ramify_tensor_create` allocates
//! one (zeroed, aligned) and `ramify_tensor_mutable_data` lends its buffer
//! for writing. Bound to a run with `ramify_binding_bind_input`, such a
//! tensor is read in place: the zero-copy path for camera and audio frames.

use crate::error::{guard, out_ptr, FfiError, FfiResult};
use crate::tensor::{bytes_for, dtype_of, shape_of, RamifyTensor};
use crate::RamifyStatus;
use ramify::Tensor;
use std::ffi::c_void;
use std::sync::Arc;

/// Creates a tensor of `element_type` (any `RamifyElementType` but
/// undefined and string) with `rank` dimensions at `shape`, every element
/// zero. Write its elements through `ramify_tensor_mutable_data`; bind it
/// with `ramify_binding_bind_input` to feed runs without a copy. Free it
/// with `ramify_tensor_release`. A tensor larger than half the device's
/// memory is refused with `RAMIFY_STATUS_MEMORY_LIMIT`.
///
/// # Safety
/// `shape` must be NULL (when `rank` is 0) or readable for `rank` values;
/// `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_tensor_create(
    element_type: i32,
    shape: *const i64,
    rank: usize,
    out: *mut *mut RamifyTensor,
) -> RamifyStatus {
    guard("ramify_tensor_create", || unsafe {
        create(element_type, shape, rank, out)
    })
}

unsafe fn create(
    element_type: i32,
    shape: *const i64,
    rank: usize,
    out: *mut *mut RamifyTensor,
) -> FfiResult {
    let out = out_ptr(out, "out")?;
    out.write(std::ptr::null_mut());
    let dtype = dtype_of(element_type, "the tensor")?;
    let (shape, count) = shape_of(shape, rank, "the tensor")?;
    let bytes = bytes_for(dtype, count, "the tensor")?;
    let limit = ramify::tensor::budget::default_limit();
    if bytes > limit {
        return Err(FfiError::new(
            RamifyStatus::MemoryLimit,
            format!(
                "a {dtype} tensor of shape {shape:?} needs {bytes} bytes, more than the {limit} allowed"
            ),
        ));
    }
    let t = Tensor::zeros(dtype, &shape);
    out.write(Box::into_raw(Box::new(RamifyTensor::new(t))));
    Ok(())
}

/// Writes a pointer to the tensor's elements, for writing, to `*out`: the
/// layout `ramify_tensor_data` describes. The pointer stays valid until the
/// tensor is released. Do not write through it while a run that reads the
/// tensor is in progress. Refused (`RAMIFY_STATUS_INVALID_ARGUMENT`) while
/// the tensor is shared: a run is reading it, or it is a binding's output
/// (`ramify_binding_output`) that the binding or another handle still holds.
///
/// # Safety
/// `tensor` must be NULL or a live handle not used by another thread
/// meanwhile; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_tensor_mutable_data(
    tensor: *mut RamifyTensor,
    out: *mut *mut c_void,
) -> RamifyStatus {
    guard("ramify_tensor_mutable_data", || unsafe {
        mutable_data(tensor, out)
    })
}

unsafe fn mutable_data(tensor: *mut RamifyTensor, out: *mut *mut c_void) -> FfiResult {
    let out = out_ptr(out, "out")?;
    let t = tensor
        .as_mut()
        .ok_or_else(|| FfiError::arg("tensor is NULL"))?;
    if t.tensor.dtype() == ramify::DType::String {
        return Err(FfiError::new(
            RamifyStatus::Unsupported,
            "string tensors have no flat buffer",
        ));
    }
    let data = Arc::get_mut(&mut t.tensor).ok_or_else(|| {
        FfiError::arg(
            "the tensor is shared: a run is reading it, or a binding or another handle holds it",
        )
    })?;
    let p = ramify::dispatch!(data, a => a.as_mut_ptr() as *mut c_void);
    out.write(p);
    Ok(())
}
