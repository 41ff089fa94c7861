//! Sessions: creation from a file or a memory buffer, destruction, what the
//! model's inputs and outputs are, and host state pushed in by the app.

use crate::error::{
    arg_ref, arg_slice, arg_str, guard, guard_void, out_ptr, FfiError, FfiResult, RamifyStatus,
};
use crate::options::RamifySessionOptions;
use crate::tensor::element_code;
use ramify::graph::Dim;
use ramify::load::HostState;
use ramify::{IoInfo, Session};
use std::ffi::{c_char, c_void, CString};

/// A loaded model, ready to run. Create with `ramify_session_create_from_file`
/// or `ramify_session_create_from_memory`, destroy with `ramify_session_destroy`.
pub struct RamifySession {
    pub(crate) session: Session,
    pub(crate) inputs: Vec<IoMeta>,
    pub(crate) outputs: Vec<IoMeta>,
    pub(crate) metadata: crate::metadata::MetadataStrings,
}

/// What C sees of one model input or output, kept for the session's lifetime
/// so the pointers handed out stay valid.
pub(crate) struct IoMeta {
    /// The name, or None when it holds a NUL byte (C cannot see it whole).
    pub name: Option<CString>,
    pub element_type: i32,
    /// Declared dimensions, symbolic ones as -1; None when the rank is unknown.
    pub dims: Option<Vec<i64>>,
    /// Per dimension: the symbolic name ("" when anonymous), None when fixed.
    pub dim_names: Vec<Option<CString>>,
}

impl IoMeta {
    fn new(info: &IoInfo) -> IoMeta {
        let (element_type, dims) = match &info.declared {
            None => (0, None),
            Some(d) => (
                element_code(d.dtype),
                d.dims.as_ref().map(|dims| {
                    dims.iter()
                        .map(|d| match d {
                            Dim::Fixed(n) => i64::try_from(*n).unwrap_or(-1),
                            Dim::Symbolic(_) => -1,
                        })
                        .collect()
                }),
            ),
        };
        let dim_names = info
            .declared
            .iter()
            .flat_map(|d| d.dims.iter().flatten())
            .map(|d| match d {
                Dim::Fixed(_) => None,
                Dim::Symbolic(name) => Some(crate::metadata::c_text(name)),
            })
            .collect();
        IoMeta {
            name: CString::new(info.name.as_str()).ok(),
            element_type,
            dims,
            dim_names,
        }
    }
}

impl RamifySession {
    /// Wraps a loaded session.
    pub fn new(session: Session) -> RamifySession {
        let inputs = session.inputs().iter().map(IoMeta::new).collect();
        let outputs = session.outputs().iter().map(IoMeta::new).collect();
        let metadata = crate::metadata::MetadataStrings::new(session.metadata());
        RamifySession {
            session,
            inputs,
            outputs,
            metadata,
        }
    }

    /// The wrapped session.
    pub fn session(&self) -> &Session {
        &self.session
    }
}

/// Builds a session with the options (defaults when NULL) and hands it out.
unsafe fn create(
    options: *const RamifySessionOptions,
    out: *mut *mut RamifySession,
    load: impl FnOnce(ramify::SessionBuilder) -> ramify::Result<Session>,
) -> FfiResult {
    let builder = if options.is_null() {
        ramify::SessionBuilder::new()
    } else {
        arg_ref(options, "options")?.builder()
    };
    let session = load(builder)?;
    out.write(Box::into_raw(Box::new(RamifySession::new(session))));
    Ok(())
}

/// Loads a model file (external data is read from beside it) into a new
/// session. `options` may be NULL for the defaults; it is not kept. On
/// success `*out` is the session; on failure it is NULL.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string; `options` NULL or a live
/// options handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_create_from_file(
    path: *const c_char,
    options: *const RamifySessionOptions,
    out: *mut *mut RamifySession,
) -> RamifyStatus {
    guard("ramify_session_create_from_file", || {
        let out = unsafe { out_ptr(out, "out") }?;
        unsafe { out.write(std::ptr::null_mut()) };
        let path = unsafe { arg_str(path, "path") }?;
        unsafe { create(options, out, |b| b.build_from_file(path)) }
    })
}

/// Loads a model from `size` bytes at `data` (a serialized ONNX ModelProto)
/// into a new session. The bytes are read during the call only: the caller
/// may free them when it returns. `options` may be NULL for the defaults. On
/// success `*out` is the session; on failure it is NULL.
///
/// # Safety
/// `data` must be NULL or readable for `size` bytes; `options` NULL or a live
/// options handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_create_from_memory(
    data: *const c_void,
    size: usize,
    options: *const RamifySessionOptions,
    out: *mut *mut RamifySession,
) -> RamifyStatus {
    guard("ramify_session_create_from_memory", || {
        let out = unsafe { out_ptr(out, "out") }?;
        unsafe { out.write(std::ptr::null_mut()) };
        let bytes = unsafe { arg_slice(data as *const u8, size, "data") }?;
        unsafe { create(options, out, |b| b.build_from_bytes(bytes)) }
    })
}

/// Destroys a session, its thread pools and load monitor. NULL is accepted
/// and ignored. Tensors it returned stay valid. No other thread may be using
/// the session. Every thread the session started has exited when this
/// returns, and the library keeps no thread of its own: once the last session
/// is destroyed, an app may unload the library (`dlclose`).
///
/// # Safety
/// `session` must be NULL or a live handle from a `ramify_session_create_*`
/// function, not destroyed before, not in use by any other thread.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_destroy(session: *mut RamifySession) {
    guard_void("ramify_session_destroy", || {
        if !session.is_null() {
            drop(unsafe { Box::from_raw(session) });
        }
    })
}

/// Which list of a session's values a call is about.
#[derive(Clone, Copy)]
enum Side {
    Input,
    Output,
}

impl Side {
    fn list(self, s: &RamifySession) -> &[IoMeta] {
        match self {
            Side::Input => &s.inputs,
            Side::Output => &s.outputs,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Side::Input => "input",
            Side::Output => "output",
        }
    }
}

/// The entry `index` of a side, or an out-of-range error.
unsafe fn meta<'a>(
    session: *const RamifySession,
    side: Side,
    index: usize,
) -> FfiResult<&'a IoMeta> {
    let s = arg_ref(session, "session")?;
    let list = side.list(s);
    list.get(index).ok_or_else(|| {
        FfiError::arg(format!(
            "{} index {index} is out of range: the model has {} {}s",
            side.word(),
            list.len(),
            side.word()
        ))
    })
}

unsafe fn count(session: *const RamifySession, side: Side, out: *mut usize) -> FfiResult {
    let out = out_ptr(out, "out")?;
    let s = arg_ref(session, "session")?;
    out.write(side.list(s).len());
    Ok(())
}

unsafe fn name(
    session: *const RamifySession,
    side: Side,
    index: usize,
    out: *mut *const c_char,
) -> FfiResult {
    let out = out_ptr(out, "out")?;
    let m = meta(session, side, index)?;
    let name = m.name.as_ref().ok_or_else(|| {
        FfiError::new(
            RamifyStatus::Unsupported,
            format!("{} {index}'s name contains a NUL byte", side.word()),
        )
    })?;
    out.write(name.as_ptr());
    Ok(())
}

unsafe fn element_type(
    session: *const RamifySession,
    side: Side,
    index: usize,
    out: *mut i32,
) -> FfiResult {
    let out = out_ptr(out, "out")?;
    out.write(meta(session, side, index)?.element_type);
    Ok(())
}

unsafe fn shape(
    session: *const RamifySession,
    side: Side,
    index: usize,
    dims: *mut *const i64,
    rank: *mut usize,
) -> FfiResult {
    let dims = out_ptr(dims, "dims")?;
    let rank = out_ptr(rank, "rank")?;
    match &meta(session, side, index)?.dims {
        None => {
            dims.write(std::ptr::null());
            rank.write(RAMIFY_RANK_UNKNOWN);
        }
        Some(d) => {
            dims.write(d.as_ptr());
            rank.write(d.len());
        }
    }
    Ok(())
}

/// The `rank` that `ramify_session_input_shape` and
/// `ramify_session_output_shape` report when the model declares no shape.
pub const RAMIFY_RANK_UNKNOWN: usize = usize::MAX;

unsafe fn dim_name(
    session: *const RamifySession,
    side: Side,
    index: usize,
    dim: usize,
    out: *mut *const c_char,
) -> FfiResult {
    let out = out_ptr(out, "out")?;
    let m = meta(session, side, index)?;
    let Some(dims) = &m.dims else {
        return Err(FfiError::arg(format!(
            "{} {index} has no declared shape",
            side.word()
        )));
    };
    let name = m.dim_names.get(dim).ok_or_else(|| {
        FfiError::arg(format!(
            "dimension {dim} is out of range: {} {index} has rank {}",
            side.word(),
            dims.len()
        ))
    })?;
    out.write(name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()));
    Ok(())
}

/// Writes the name of dimension `dim` of input `index`'s declared shape to
/// `*out`: the symbolic name (e.g. "batch"), "" for an unnamed free
/// dimension, or NULL for a fixed one. Owned by the session.
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_input_dim_name(
    session: *const RamifySession,
    index: usize,
    dim: usize,
    out: *mut *const c_char,
) -> RamifyStatus {
    guard("ramify_session_input_dim_name", || unsafe {
        dim_name(session, Side::Input, index, dim, out)
    })
}

/// Writes the name of dimension `dim` of output `index`'s declared shape,
/// as `ramify_session_input_dim_name` does.
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_output_dim_name(
    session: *const RamifySession,
    index: usize,
    dim: usize,
    out: *mut *const c_char,
) -> RamifyStatus {
    guard("ramify_session_output_dim_name", || unsafe {
        dim_name(session, Side::Output, index, dim, out)
    })
}

/// Writes the number of model inputs the caller feeds to `*out`.
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_input_count(
    session: *const RamifySession,
    out: *mut usize,
) -> RamifyStatus {
    guard("ramify_session_input_count", || unsafe {
        count(session, Side::Input, out)
    })
}

/// Writes the number of model outputs a run returns to `*out`.
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_output_count(
    session: *const RamifySession,
    out: *mut usize,
) -> RamifyStatus {
    guard("ramify_session_output_count", || unsafe {
        count(session, Side::Output, out)
    })
}

/// Writes the name of input `index` (0-based, in the model's order) to
/// `*out`: NUL-terminated UTF-8 owned by the session, valid until it is destroyed.
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_input_name(
    session: *const RamifySession,
    index: usize,
    out: *mut *const c_char,
) -> RamifyStatus {
    guard("ramify_session_input_name", || unsafe {
        name(session, Side::Input, index, out)
    })
}

/// Writes the name of output `index` (0-based, in the order `ramify_session_run`
/// returns outputs) to `*out`, owned by the session.
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_output_name(
    session: *const RamifySession,
    index: usize,
    out: *mut *const c_char,
) -> RamifyStatus {
    guard("ramify_session_output_name", || unsafe {
        name(session, Side::Output, index, out)
    })
}

/// Writes the declared `RamifyElementType` of input `index` to `*out`
/// (`RAMIFY_ELEMENT_TYPE_UNDEFINED` when the model does not declare it).
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_input_element_type(
    session: *const RamifySession,
    index: usize,
    out: *mut i32,
) -> RamifyStatus {
    guard("ramify_session_input_element_type", || unsafe {
        element_type(session, Side::Input, index, out)
    })
}

/// Writes the declared `RamifyElementType` of output `index` to `*out`.
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_output_element_type(
    session: *const RamifySession,
    index: usize,
    out: *mut i32,
) -> RamifyStatus {
    guard("ramify_session_output_element_type", || unsafe {
        element_type(session, Side::Output, index, out)
    })
}

/// Writes the declared shape of input `index`: `*rank` dimensions at `*dims`
/// (owned by the session), symbolic dimensions (e.g. a batch size "N") as -1
/// (their names: `ramify_session_input_dim_name`). When the model declares
/// no shape, `*rank` is `RAMIFY_RANK_UNKNOWN` and `*dims` NULL.
///
/// # Safety
/// `session` must be NULL or a live handle; `dims` and `rank` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_input_shape(
    session: *const RamifySession,
    index: usize,
    dims: *mut *const i64,
    rank: *mut usize,
) -> RamifyStatus {
    guard("ramify_session_input_shape", || unsafe {
        shape(session, Side::Input, index, dims, rank)
    })
}

/// Writes the declared shape of output `index`, as `ramify_session_input_shape` does.
///
/// # Safety
/// `session` must be NULL or a live handle; `dims` and `rank` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_output_shape(
    session: *const RamifySession,
    index: usize,
    dims: *mut *const i64,
    rank: *mut usize,
) -> RamifyStatus {
    guard("ramify_session_output_shape", || unsafe {
        shape(session, Side::Output, index, dims, rank)
    })
}

/// A host measurement: a value in [0, 1], or negative for "not measured".
fn measurement(name: &str, v: f64) -> FfiResult<Option<f64>> {
    if v.is_nan() || v > 1.0 {
        return Err(FfiError::arg(format!(
            "{name} must be in [0, 1] or negative (not measured), got {v}"
        )));
    }
    Ok((v >= 0.0).then_some(v))
}

/// Pushes device state the app measured into the session's load monitor; it
/// counts from the next fork on, when the session's load sources include
/// `RAMIFY_LOAD_HOST`. Each value is in [0, 1], or negative when not measured:
/// `cpu_utilisation` (0 idle, 1 all CPUs busy), `battery_level` (0 empty,
/// 1 full), `thermal` (0 nominal, 1 critical; e.g. Android's thermal status / 6
/// or iOS's `thermalState` / 3). Safe to call from any thread, also while runs
/// are in progress.
///
/// # Safety
/// `session` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_push_host_state(
    session: *const RamifySession,
    cpu_utilisation: f64,
    battery_level: f64,
    thermal: f64,
) -> RamifyStatus {
    guard("ramify_session_push_host_state", || {
        let s = unsafe { arg_ref(session, "session") }?;
        let state = HostState {
            cpu_utilisation: measurement("cpu_utilisation", cpu_utilisation)?,
            battery_level: measurement("battery_level", battery_level)?,
            thermal: measurement("thermal", thermal)?,
        };
        s.session.push_host_state(state);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ramify_last_error;
    use crate::test_models::matmul_add_bytes;
    use std::ffi::CStr;
    use std::ptr;

    fn last() -> String {
        unsafe { CStr::from_ptr(ramify_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    pub(crate) fn session() -> *mut RamifySession {
        let bytes = matmul_add_bytes();
        let mut s = ptr::null_mut();
        let status = unsafe {
            ramify_session_create_from_memory(
                bytes.as_ptr() as *const c_void,
                bytes.len(),
                ptr::null(),
                &mut s,
            )
        };
        assert_eq!(status, RamifyStatus::Ok, "{}", last());
        s
    }

    #[test]
    fn create_from_memory_describes_inputs_and_outputs() {
        let s = session();
        unsafe {
            let mut n = 0;
            assert_eq!(ramify_session_input_count(s, &mut n), RamifyStatus::Ok);
            assert_eq!(n, 1);
            assert_eq!(ramify_session_output_count(s, &mut n), RamifyStatus::Ok);
            assert_eq!(n, 1);
            let mut name_ptr = ptr::null();
            assert_eq!(
                ramify_session_input_name(s, 0, &mut name_ptr),
                RamifyStatus::Ok
            );
            assert_eq!(CStr::from_ptr(name_ptr).to_str().unwrap(), "x");
            assert_eq!(
                ramify_session_output_name(s, 0, &mut name_ptr),
                RamifyStatus::Ok
            );
            assert_eq!(CStr::from_ptr(name_ptr).to_str().unwrap(), "y");
            let mut code = 0;
            assert_eq!(
                ramify_session_input_element_type(s, 0, &mut code),
                RamifyStatus::Ok
            );
            assert_eq!(code, 1);
            assert_eq!(
                ramify_session_output_element_type(s, 0, &mut code),
                RamifyStatus::Ok
            );
            assert_eq!(code, 1);
            let (mut dims, mut rank) = (ptr::null(), 0usize);
            assert_eq!(
                ramify_session_input_shape(s, 0, &mut dims, &mut rank),
                RamifyStatus::Ok
            );
            assert_eq!(std::slice::from_raw_parts(dims, rank), &[-1, 4]);
            assert_eq!(
                ramify_session_output_shape(s, 0, &mut dims, &mut rank),
                RamifyStatus::Ok
            );
            assert_eq!(std::slice::from_raw_parts(dims, rank), &[-1, 3]);
            ramify_session_destroy(s);
            ramify_session_destroy(ptr::null_mut());
        }
    }

    #[test]
    fn info_calls_reject_null_and_out_of_range() {
        let s = session();
        unsafe {
            let mut n = 0;
            assert_eq!(
                ramify_session_input_count(ptr::null(), &mut n),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(last(), "ramify_session_input_count: session is NULL");
            assert_eq!(
                ramify_session_output_count(s, ptr::null_mut()),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                last(),
                "ramify_session_output_count: out (the output pointer) is NULL"
            );
            let mut name_ptr = ptr::null();
            assert_eq!(
                ramify_session_input_name(s, 1, &mut name_ptr),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                last(),
                "ramify_session_input_name: input index 1 is out of range: the model has 1 inputs"
            );
            let mut code = 0;
            assert_eq!(
                ramify_session_output_element_type(s, usize::MAX, &mut code),
                RamifyStatus::InvalidArgument
            );
            assert!(last().contains("output index 18446744073709551615 is out of range"));
            let mut dims = ptr::null();
            assert_eq!(
                ramify_session_input_shape(s, 0, &mut dims, ptr::null_mut()),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                last(),
                "ramify_session_input_shape: rank (the output pointer) is NULL"
            );
            ramify_session_destroy(s);
        }
    }

    #[test]
    fn create_reports_bad_files_and_bytes() {
        unsafe {
            let mut s = std::ptr::dangling_mut::<RamifySession>();
            let status = ramify_session_create_from_file(
                c"/nonexistent/model.onnx".as_ptr(),
                ptr::null(),
                &mut s,
            );
            assert_eq!(status, RamifyStatus::IoError);
            assert!(s.is_null(), "out is cleared on failure");
            assert!(last().contains("/nonexistent/model.onnx"), "{}", last());
            assert!(last().starts_with("ramify_session_create_from_file: "));

            let garbage = [0xffu8, 0xff, 0xff, 0x07];
            let status = ramify_session_create_from_memory(
                garbage.as_ptr() as *const c_void,
                garbage.len(),
                ptr::null(),
                &mut s,
            );
            assert_eq!(status, RamifyStatus::InvalidModel, "{}", last());
            assert!(s.is_null());

            let status = ramify_session_create_from_file(ptr::null(), ptr::null(), &mut s);
            assert_eq!(status, RamifyStatus::InvalidArgument);
            assert_eq!(last(), "ramify_session_create_from_file: path is NULL");
            let bad = b"m\xc3.onnx\0";
            let status =
                ramify_session_create_from_file(bad.as_ptr() as *const c_char, ptr::null(), &mut s);
            assert_eq!(status, RamifyStatus::InvalidArgument);
            assert!(last().contains("path is not valid UTF-8"));
            let status = ramify_session_create_from_memory(ptr::null(), 10, ptr::null(), &mut s);
            assert_eq!(status, RamifyStatus::InvalidArgument);
            assert!(last().contains("data is NULL but its length is 10"));
            let status =
                ramify_session_create_from_file(c"m.onnx".as_ptr(), ptr::null(), ptr::null_mut());
            assert_eq!(status, RamifyStatus::InvalidArgument);
            assert!(last().contains("out (the output pointer) is NULL"));
        }
    }

    #[test]
    fn options_are_used_and_checked_at_creation() {
        use crate::options::*;
        let bytes = matmul_add_bytes();
        unsafe {
            let mut o = ptr::null_mut();
            ramify_session_options_create(&mut o);
            ramify_session_options_set_cpus(o, 2);
            ramify_session_options_set_theta1(o, 0.3);
            ramify_session_options_set_theta2(o, 0.6);
            let mut s = ptr::null_mut();
            let status = ramify_session_create_from_memory(
                bytes.as_ptr() as *const c_void,
                bytes.len(),
                o,
                &mut s,
            );
            assert_eq!(status, RamifyStatus::InvalidArgument);
            assert!(last().contains("theta2 <= theta1"), "{}", last());
            assert!(s.is_null());
            ramify_session_options_set_theta2(o, 0.2);
            ramify_session_options_set_mode(o, RamifyMode::Serial as i32);
            let status = ramify_session_create_from_memory(
                bytes.as_ptr() as *const c_void,
                bytes.len(),
                o,
                &mut s,
            );
            assert_eq!(status, RamifyStatus::Ok, "{}", last());
            ramify_session_options_destroy(o);
            // The session does not need its options any more.
            let cfg = (*s).session().scheduler().config().clone();
            assert_eq!(cfg.policy.cpus, 2);
            assert_eq!((cfg.policy.theta1, cfg.policy.theta2), (0.3, 0.2));
            assert_eq!(cfg.mode, ramify::Mode::Serial);
            ramify_session_destroy(s);
        }
    }

    #[test]
    fn host_state_values_are_checked() {
        let s = session();
        unsafe {
            assert_eq!(
                ramify_session_push_host_state(s, 0.5, -1.0, 0.0),
                RamifyStatus::Ok
            );
            assert_eq!(
                ramify_session_push_host_state(s, 1.5, -1.0, 0.0),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                last(),
                "ramify_session_push_host_state: cpu_utilisation must be in [0, 1] or negative (not measured), got 1.5"
            );
            assert_eq!(
                ramify_session_push_host_state(s, 0.1, 0.2, f64::NAN),
                RamifyStatus::InvalidArgument
            );
            assert!(last().contains("thermal must be in [0, 1]"));
            assert_eq!(
                ramify_session_push_host_state(ptr::null(), 0.1, 0.2, 0.3),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(last(), "ramify_session_push_host_state: session is NULL");
            ramify_session_destroy(s);
        }
        assert_eq!(measurement("x", -0.5).unwrap(), None);
        assert_eq!(measurement("x", 0.75).unwrap(), Some(0.75));
    }
}
