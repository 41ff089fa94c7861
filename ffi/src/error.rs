//! Status codes, the thread-local last-error message, and the guard every
//! exported function runs its body in: it catches panics, turns errors into a
//! status plus a message, and never lets an unwind cross into C.

use ramify::Error;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call returned. `RAMIFY_STATUS_OK` is 0; every other value is an
/// error, described by `ramify_last_error()` on the same thread.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamifyStatus {
    /// The call succeeded.
    Ok = 0,
    /// An argument is NULL, out of range, not valid UTF-8, or inconsistent with
    /// another argument (e.g. a byte size that does not match the shape), or
    /// the session options contradict each other.
    InvalidArgument = 1,
    /// A file could not be read (missing, unreadable, a directory).
    IoError = 2,
    /// The model is not a valid ONNX model (malformed protobuf, broken graph,
    /// bad attribute, unusable external data).
    InvalidModel = 3,
    /// The model needs an operator, operator-set domain or element type that
    /// ramify (or the C API) does not support.
    Unsupported = 4,
    /// The run's inputs or outputs do not fit the model: an unknown or
    /// missing input name, an unknown output name, a wrong element type or a
    /// shape the model's declaration rules out.
    InvalidInput = 5,
    /// An operator failed while loading or running the model (shapes it cannot
    /// work with, values out of range).
    RuntimeError = 6,
    /// A bug inside ramify (a caught panic). The session stays usable.
    InternalError = 7,
    /// A tensor of the model, or the intermediate values a run holds at
    /// once, would exceed the session's memory limit
    /// (`ramify_session_options_set_memory_limit`); nothing was allocated.
    MemoryLimit = 8,
    /// A caller's output buffer (`ramify_binding_bind_output`) is smaller
    /// than the output; `ramify_binding_output_shape` tells the shape it
    /// needs. Nothing was written.
    BufferTooSmall = 9,
    /// The run stopped early for its time: it passed the time limit of its
    /// `RamifyRunOptions` (`ramify_run_options_set_time_limit_ms`), or it
    /// could not finish within the deadline × delay ratio
    /// (`ramify_run_options_set_deadline_ms`). The message says how far it
    /// got. No output was returned or written; the session stays usable.
    Deadline = 10,
    /// The run was cancelled through its `RamifyRunOptions`
    /// (`ramify_run_options_cancel`). No output was returned or written; the
    /// session stays usable.
    Cancelled = 11,
}

/// An error on its way to C: the status to return and the message to keep.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FfiError {
    pub status: RamifyStatus,
    pub message: String,
}

impl FfiError {
    /// An argument error.
    pub fn arg(message: impl Into<String>) -> FfiError {
        FfiError {
            status: RamifyStatus::InvalidArgument,
            message: message.into(),
        }
    }

    /// An error with an explicit status.
    pub fn new(status: RamifyStatus, message: impl Into<String>) -> FfiError {
        FfiError {
            status,
            message: message.into(),
        }
    }
}

/// The status for each kind of library error.
pub(crate) fn status_of(e: &Error) -> RamifyStatus {
    match e {
        Error::Io { .. } => RamifyStatus::IoError,
        Error::Malformed(_)
        | Error::InvalidModel(_)
        | Error::Cycle { .. }
        | Error::MissingValue { .. }
        | Error::ExternalData { .. }
        | Error::Attribute { .. } => RamifyStatus::InvalidModel,
        Error::UnsupportedOperator { .. }
        | Error::OperatorLeftOut { .. }
        | Error::UnsupportedType(_)
        | Error::UnsupportedFeature { .. }
        // A sequence or optional input or output: the C API passes tensors.
        | Error::ValueKind { .. } => RamifyStatus::Unsupported,
        Error::UnknownInput { .. }
        | Error::MissingInput(_)
        | Error::InputShape { .. }
        | Error::InputType { .. }
        | Error::UnknownOutput { .. } => RamifyStatus::InvalidInput,
        Error::OutputBuffer { .. } => RamifyStatus::BufferTooSmall,
        Error::MemoryLimit { .. } | Error::PlanMemory { .. } => RamifyStatus::MemoryLimit,
        Error::Node { source, .. } => match status_of(source) {
            // An operator wrapped in its node keeps its own kind when it is
            // about the model (attributes, types, memory) or the run was
            // stopped from outside (time, cancellation); anything else
            // failed at run time.
            s @ (RamifyStatus::InvalidModel
            | RamifyStatus::Unsupported
            | RamifyStatus::MemoryLimit
            | RamifyStatus::Deadline
            | RamifyStatus::Cancelled) => s,
            _ => RamifyStatus::RuntimeError,
        },
        Error::Deadline(_) => RamifyStatus::Deadline,
        Error::Cancelled => RamifyStatus::Cancelled,
        Error::Op { .. } => RamifyStatus::RuntimeError,
        Error::Internal(_) => RamifyStatus::InternalError,
        Error::Config(_) => RamifyStatus::InvalidArgument,
        // `Error` is non-exhaustive: kinds added later are reported as run-time errors.
        _ => RamifyStatus::RuntimeError,
    }
}

impl From<Error> for FfiError {
    fn from(e: Error) -> FfiError {
        FfiError {
            status: status_of(&e),
            message: e.to_string(),
        }
    }
}

/// The result type of exported function bodies.
pub(crate) type FfiResult<T = ()> = Result<T, FfiError>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Keeps `message` as this thread's last error (NUL bytes are escaped so the
/// whole message reaches C).
pub(crate) fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // During thread teardown the slot may be gone; the message is then lost.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = c;
        }
    });
}

/// A pointer to this thread's last error message ("" when none), valid until
/// the next failing call on this thread.
pub(crate) fn last_error_ptr() -> *const c_char {
    static EMPTY: &CStr = c"";
    LAST_ERROR
        .try_with(|slot| match slot.try_borrow() {
            Ok(s) => s.as_ptr(),
            Err(_) => EMPTY.as_ptr(),
        })
        .unwrap_or(EMPTY.as_ptr())
}

/// The text of a caught panic's payload.
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Runs an exported function's body: catches panics, keeps the message of any
/// error (prefixed with the function's name) as the thread's last error, and
/// returns the status.
pub(crate) fn guard(func: &str, body: impl FnOnce() -> FfiResult) -> RamifyStatus {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => RamifyStatus::Ok,
        Ok(Err(e)) => {
            set_last_error(&format!("{func}: {}", e.message));
            e.status
        }
        Err(p) => {
            set_last_error(&format!(
                "{func}: internal error: panic: {}",
                panic_text(p.as_ref())
            ));
            RamifyStatus::InternalError
        }
    }
}

/// Runs a body that returns nothing (destroy and release functions): a panic
/// is caught and kept as the last error, never unwound into C.
pub(crate) fn guard_void(func: &str, body: impl FnOnce()) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(body)) {
        set_last_error(&format!(
            "{func}: internal error: panic: {}",
            panic_text(p.as_ref())
        ));
    }
}

/// Borrows the object behind a non-NULL, aligned pointer.
///
/// # Safety
/// A non-NULL `p` must point to a live `T` for the returned lifetime.
pub(crate) unsafe fn arg_ref<'a, T>(p: *const T, name: &str) -> FfiResult<&'a T> {
    if p.is_null() {
        return Err(FfiError::arg(format!("{name} is NULL")));
    }
    if !p.is_aligned() {
        return Err(FfiError::arg(format!("{name} is not aligned")));
    }
    Ok(&*p)
}

/// Borrows the object behind a non-NULL, aligned mutable pointer.
///
/// # Safety
/// A non-NULL `p` must point to a live `T` that nothing else uses for the
/// returned lifetime.
pub(crate) unsafe fn arg_mut<'a, T>(p: *mut T, name: &str) -> FfiResult<&'a mut T> {
    if p.is_null() {
        return Err(FfiError::arg(format!("{name} is NULL")));
    }
    if !p.is_aligned() {
        return Err(FfiError::arg(format!("{name} is not aligned")));
    }
    Ok(&mut *p)
}

/// Checks an out-pointer and returns it for writing.
///
/// # Safety
/// A non-NULL `p` must be valid for writing a `T`.
pub(crate) unsafe fn out_ptr<T>(p: *mut T, name: &str) -> FfiResult<*mut T> {
    if p.is_null() {
        return Err(FfiError::arg(format!(
            "{name} (the output pointer) is NULL"
        )));
    }
    if !p.is_aligned() {
        return Err(FfiError::arg(format!("{name} is not aligned")));
    }
    Ok(p)
}

/// A slice of `n` elements at `p`; `p` may be NULL only when `n` is 0.
///
/// # Safety
/// A non-NULL `p` must point to `n` live elements for the returned lifetime.
pub(crate) unsafe fn arg_slice<'a, T>(p: *const T, n: usize, name: &str) -> FfiResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(FfiError::arg(format!(
            "{name} is NULL but its length is {n}"
        )));
    }
    if !p.is_aligned() {
        return Err(FfiError::arg(format!("{name} is not aligned")));
    }
    if n > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(FfiError::arg(format!("{name}: length {n} is out of range")));
    }
    Ok(std::slice::from_raw_parts(p, n))
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// A non-NULL `p` must point to a NUL-terminated string that lives for the
/// returned lifetime.
pub(crate) unsafe fn arg_str<'a>(p: *const c_char, name: &str) -> FfiResult<&'a str> {
    if p.is_null() {
        return Err(FfiError::arg(format!("{name} is NULL")));
    }
    CStr::from_ptr(p).to_str().map_err(|e| {
        FfiError::arg(format!(
            "{name} is not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn guard_passes_ok_and_keeps_error_messages() {
        set_last_error("");
        assert_eq!(guard("f", || Ok(())), RamifyStatus::Ok);
        assert_eq!(last(), "");
        let s = guard("ramify_x", || Err(FfiError::arg("cpus is 0")));
        assert_eq!(s, RamifyStatus::InvalidArgument);
        assert_eq!(last(), "ramify_x: cpus is 0");
        // A later success leaves the message in place (errno-like).
        assert_eq!(guard("f", || Ok(())), RamifyStatus::Ok);
        assert_eq!(last(), "ramify_x: cpus is 0");
    }

    #[test]
    fn guard_catches_panics() {
        let s = guard("ramify_boom", || panic!("kaboom {}", 42));
        assert_eq!(s, RamifyStatus::InternalError);
        assert_eq!(last(), "ramify_boom: internal error: panic: kaboom 42");
        guard_void("ramify_void", || panic!("static text"));
        assert_eq!(last(), "ramify_void: internal error: panic: static text");
    }

    #[test]
    fn last_error_is_per_thread() {
        set_last_error("main thread");
        std::thread::spawn(|| {
            assert_eq!(last(), "");
            set_last_error("other thread");
            assert_eq!(last(), "other thread");
        })
        .join()
        .unwrap();
        assert_eq!(last(), "main thread");
    }

    #[test]
    fn nul_bytes_in_messages_are_escaped() {
        set_last_error("a\0b");
        assert_eq!(last(), "a\\0b");
    }

    #[test]
    fn library_errors_map_to_statuses() {
        let io = Error::Io {
            path: "m.onnx".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(status_of(&io), RamifyStatus::IoError);
        assert_eq!(
            status_of(&Error::Malformed("x".into())),
            RamifyStatus::InvalidModel
        );
        assert_eq!(
            status_of(&Error::UnsupportedType("complex64".into())),
            RamifyStatus::Unsupported
        );
        let sequence_output = Error::ValueKind {
            what: "output \"seq\"".into(),
            actual: "sequence".into(),
            expected: "tensor".into(),
        };
        assert_eq!(status_of(&sequence_output), RamifyStatus::Unsupported);
        assert_eq!(
            status_of(&Error::MissingInput("x".into())),
            RamifyStatus::InvalidInput
        );
        assert_eq!(
            status_of(&Error::op("Conv", "bad")),
            RamifyStatus::RuntimeError
        );
        let node = |source| Error::Node {
            node: "n".into(),
            op: "Conv".into(),
            source: Box::new(source),
        };
        assert_eq!(
            status_of(&node(Error::op("Conv", "bad"))),
            RamifyStatus::RuntimeError
        );
        assert_eq!(
            status_of(&node(Error::UnsupportedType("string".into()))),
            RamifyStatus::Unsupported
        );
        assert_eq!(
            status_of(&Error::Config("theta".into())),
            RamifyStatus::InvalidArgument
        );
        assert_eq!(
            status_of(&Error::Internal("bug".into())),
            RamifyStatus::InternalError
        );
        let miss = || {
            Error::Deadline(Box::new(ramify::DeadlineMiss::new(
                "late",
                Default::default(),
            )))
        };
        assert_eq!(status_of(&miss()), RamifyStatus::Deadline);
        assert_eq!(status_of(&Error::Cancelled), RamifyStatus::Cancelled);
        // Stops seen through the nodes (and nested nodes) that wrap them.
        assert_eq!(status_of(&node(miss())), RamifyStatus::Deadline);
        assert_eq!(
            status_of(&node(node(Error::Cancelled))),
            RamifyStatus::Cancelled
        );
        let e = FfiError::from(Error::MissingInput("x".into()));
        assert_eq!(e.message, "missing input \"x\"");
    }

    #[test]
    fn argument_helpers_reject_null_misaligned_and_bad_utf8() {
        unsafe {
            let e = arg_ref::<u32>(std::ptr::null(), "session").unwrap_err();
            assert_eq!(e.message, "session is NULL");
            let words = [0u32; 2];
            let odd = (words.as_ptr() as *const u8).add(1) as *const u32;
            assert!(arg_ref(odd, "p").unwrap_err().message.contains("aligned"));
            assert!(out_ptr::<u32>(std::ptr::null_mut(), "out")
                .unwrap_err()
                .message
                .contains("out (the output pointer) is NULL"));
            assert!(arg_slice::<u32>(std::ptr::null(), 0, "xs")
                .unwrap()
                .is_empty());
            assert!(arg_slice::<u32>(std::ptr::null(), 2, "xs")
                .unwrap_err()
                .message
                .contains("xs is NULL but its length is 2"));
            let bad = b"mod\xffel.onnx\0";
            let e = arg_str(bad.as_ptr() as *const c_char, "path").unwrap_err();
            assert_eq!(e.status, RamifyStatus::InvalidArgument);
            assert!(
                e.message.contains("path is not valid UTF-8"),
                "{}",
                e.message
            );
            assert_eq!(arg_str(c"ok".as_ptr(), "path").unwrap(), "ok");
        }
    }
}
