//! The C API of ramify, for apps that reach the runtime through C: JNI on
//! Android, Swift or Objective-C on iOS, or plain C and C++.
//!
//! Its shape follows onnxruntime's and TensorFlow Lite's C APIs: opaque
//! handles (`RamifySessionOptions`, `RamifySession`, `RamifyTensor`,
//! `RamifyBinding`, `RamifyRunOptions`), calls that return a `RamifyStatus`
//! and leave a message for `ramify_last_error()`, element types as ONNX
//! `TensorProto.DataType` codes, caller-owned input buffers that are copied
//! in or tensors shared with runs without a copy, outputs chosen by name and
//! returned as tensors or written into the caller's buffers, and run options
//! (deadline, time limit, cancellation from any thread, an event callback).
//!
//! Every exported function runs its body under `catch_unwind`: a panic becomes
//! `RAMIFY_STATUS_INTERNAL_ERROR`, never an unwind into C. NULL pointers and
//! out-of-range values are refused with `RAMIFY_STATUS_INVALID_ARGUMENT`
//! before anything is dereferenced. The header `include/ramify.h` is generated
//! from this crate by cbindgen (see `tests/header.rs`); build notes for Android
//! and iOS are in `README.md`.

mod binding;
mod error;
mod event;
mod int8;
mod metadata;
mod options;
mod placement;
mod run;
mod run_options;
mod session;
mod tensor;
mod tensor_alloc;

pub use binding::{
    ramify_binding_bind_input, ramify_binding_bind_output, ramify_binding_clear,
    ramify_binding_create, ramify_binding_destroy, ramify_binding_output,
    ramify_binding_output_shape, ramify_binding_select_output, ramify_session_run_binding,
    ramify_session_run_binding_with_options, RamifyBinding,
};
pub use error::RamifyStatus;
pub use event::{
    RamifyEvent, RamifyEventCallback, RamifyEventKind, RamifyEventSource, RamifyMetric,
};
pub use int8::{
    ramify_run_options_int8_recomputed, ramify_run_options_set_int8_guard,
    ramify_run_options_set_int8_kernel, RamifyInt8Kernel,
};
pub use metadata::{
    ramify_session_cpu_count, ramify_session_cpu_set, ramify_session_custom_metadata,
    ramify_session_lookup_metadata, ramify_session_metadata, RamifyModelMetadata,
};
pub use options::{
    ramify_session_options_create, ramify_session_options_destroy,
    ramify_session_options_set_cpu_set, ramify_session_options_set_cpus,
    ramify_session_options_set_fixed_load, ramify_session_options_set_load_sources,
    ramify_session_options_set_m1, ramify_session_options_set_m2, ramify_session_options_set_mode,
    ramify_session_options_set_pin_threads, ramify_session_options_set_theta1,
    ramify_session_options_set_theta2, RamifyMode, RamifySessionOptions, RAMIFY_LOAD_HOST,
    RAMIFY_LOAD_MEMORY, RAMIFY_LOAD_RUNNABLE, RAMIFY_LOAD_RUN_QUEUE, RAMIFY_LOAD_SYSTEM_CPU,
    RAMIFY_MAX_CPUS,
};
pub use placement::{
    ramify_session_options_add_cluster_power, ramify_session_options_set_placement,
    ramify_session_set_placement, RamifyPlacement,
};
pub use run::{ramify_session_run, ramify_session_run_with_options};
pub use run_options::{
    ramify_run_options_cancel, ramify_run_options_create, ramify_run_options_destroy,
    ramify_run_options_reset_cancel, ramify_run_options_set_deadline_ms,
    ramify_run_options_set_delay_ratio, ramify_run_options_set_event_callback,
    ramify_run_options_set_time_limit_ms, RamifyRunOptions,
};
pub use session::{
    ramify_session_create_from_file, ramify_session_create_from_memory, ramify_session_destroy,
    ramify_session_input_count, ramify_session_input_dim_name, ramify_session_input_element_type,
    ramify_session_input_name, ramify_session_input_shape, ramify_session_output_count,
    ramify_session_output_dim_name, ramify_session_output_element_type, ramify_session_output_name,
    ramify_session_output_shape, ramify_session_push_host_state, RamifySession,
    RAMIFY_RANK_UNKNOWN,
};
pub use tensor::{
    ramify_tensor_byte_size, ramify_tensor_data, ramify_tensor_element_count,
    ramify_tensor_element_type, ramify_tensor_rank, ramify_tensor_release, ramify_tensor_shape,
    RamifyElementType, RamifyInput, RamifyTensor,
};
pub use tensor_alloc::{ramify_tensor_create, ramify_tensor_mutable_data};

use std::ffi::c_char;
use std::panic::catch_unwind;

/// The major version of the header: compare with `ramify_version()` at run
/// time to detect a library older than the header.
pub const RAMIFY_VERSION_MAJOR: u32 = 0;
/// The minor version of the header.
pub const RAMIFY_VERSION_MINOR: u32 = 1;
/// The patch version of the header.
pub const RAMIFY_VERSION_PATCH: u32 = 0;

/// The library version, e.g. "0.1.0": a static NUL-terminated string.
#[no_mangle]
pub extern "C" fn ramify_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// The message of the last failed call on the calling thread, naming the
/// function and the problem (e.g. `ramify_session_run: unknown input "img";
/// the model's inputs are ["input"]`); "" when no call has failed on this
/// thread. Never NULL. Successful calls leave it unchanged. The pointer is
/// valid until the next failing call on the same thread; copy the text to
/// keep it.
#[no_mangle]
pub extern "C" fn ramify_last_error() -> *const c_char {
    catch_unwind(error::last_error_ptr).unwrap_or(c"".as_ptr())
}

/// A static name for a status, e.g. "RAMIFY_STATUS_INVALID_INPUT";
/// "RAMIFY_STATUS_UNKNOWN" for a value that is not a `RamifyStatus`.
#[no_mangle]
pub extern "C" fn ramify_status_name(status: i32) -> *const c_char {
    let name: &'static std::ffi::CStr = match status {
        0 => c"RAMIFY_STATUS_OK",
        1 => c"RAMIFY_STATUS_INVALID_ARGUMENT",
        2 => c"RAMIFY_STATUS_IO_ERROR",
        3 => c"RAMIFY_STATUS_INVALID_MODEL",
        4 => c"RAMIFY_STATUS_UNSUPPORTED",
        5 => c"RAMIFY_STATUS_INVALID_INPUT",
        6 => c"RAMIFY_STATUS_RUNTIME_ERROR",
        7 => c"RAMIFY_STATUS_INTERNAL_ERROR",
        8 => c"RAMIFY_STATUS_MEMORY_LIMIT",
        9 => c"RAMIFY_STATUS_BUFFER_TOO_SMALL",
        10 => c"RAMIFY_STATUS_DEADLINE",
        11 => c"RAMIFY_STATUS_CANCELLED",
        _ => c"RAMIFY_STATUS_UNKNOWN",
    };
    name.as_ptr()
}

#[cfg(test)]
#[path = "../tests/common/model.rs"]
mod test_models;

/// Tensors start on a cache line (see `ramify::AlignedAllocator`): the
/// library's allocations, the outputs handed to the app included, go
/// through it.
#[global_allocator]
static ALLOCATOR: ramify::AlignedAllocator = ramify::AlignedAllocator;

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn version_is_the_crate_version() {
        let v = unsafe { CStr::from_ptr(ramify_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn version_macros_are_the_crate_version() {
        let parts = [
            RAMIFY_VERSION_MAJOR,
            RAMIFY_VERSION_MINOR,
            RAMIFY_VERSION_PATCH,
        ];
        let want: Vec<u32> = [
            env!("CARGO_PKG_VERSION_MAJOR"),
            env!("CARGO_PKG_VERSION_MINOR"),
            env!("CARGO_PKG_VERSION_PATCH"),
        ]
        .iter()
        .map(|p| p.parse().unwrap())
        .collect();
        assert_eq!(parts.to_vec(), want, "update the version constants");
    }

    #[test]
    fn status_names_cover_every_status() {
        let all = [
            RamifyStatus::Ok,
            RamifyStatus::InvalidArgument,
            RamifyStatus::IoError,
            RamifyStatus::InvalidModel,
            RamifyStatus::Unsupported,
            RamifyStatus::InvalidInput,
            RamifyStatus::RuntimeError,
            RamifyStatus::InternalError,
            RamifyStatus::MemoryLimit,
            RamifyStatus::BufferTooSmall,
            RamifyStatus::Deadline,
            RamifyStatus::Cancelled,
        ];
        for s in all {
            let name = unsafe { CStr::from_ptr(ramify_status_name(s as i32)) };
            let name = name.to_str().unwrap();
            // The name is the header's constant: RAMIFY_STATUS_ + the variant in caps.
            let variant = format!("{s:?}");
            let mut caps = String::new();
            for (i, c) in variant.chars().enumerate() {
                if c.is_uppercase() && i > 0 {
                    caps.push('_');
                }
                caps.push(c.to_ascii_uppercase());
            }
            assert_eq!(name, format!("RAMIFY_STATUS_{caps}"));
        }
        let unknown = unsafe { CStr::from_ptr(ramify_status_name(99)) };
        assert_eq!(unknown.to_str().unwrap(), "RAMIFY_STATUS_UNKNOWN");
    }

    #[test]
    fn last_error_is_never_null() {
        std::thread::spawn(|| {
            let p = ramify_last_error();
            assert!(!p.is_null());
            assert_eq!(unsafe { CStr::from_ptr(p) }.to_bytes(), b"");
        })
        .join()
        .unwrap();
    }
}
