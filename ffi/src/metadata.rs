//! What a session tells about its model and its CPUs: the model's metadata
//! (producer, version, description, custom key/value pairs), the CPU limit
//! in force and the CPUs its threads may run on.

use crate::error::{arg_ref, arg_str, guard, out_ptr, FfiError, FfiResult, RamifyStatus};
use crate::session::RamifySession;
use ramify::graph::ModelMetadata;
use std::ffi::{c_char, CString};

/// Text for C: NUL bytes (which C strings cannot hold) become U+FFFD.
pub(crate) fn c_text(s: &str) -> CString {
    CString::new(s.replace('\0', "\u{FFFD}")).unwrap_or_default()
}

/// The metadata's strings, kept for the session's lifetime so the pointers
/// handed out stay valid.
pub(crate) struct MetadataStrings {
    producer_name: CString,
    producer_version: CString,
    domain: CString,
    description: CString,
    graph_name: CString,
    graph_description: CString,
    model_version: i64,
    ir_version: i64,
    custom: Vec<(CString, CString)>,
}

impl MetadataStrings {
    pub(crate) fn new(m: &ModelMetadata) -> MetadataStrings {
        MetadataStrings {
            producer_name: c_text(&m.producer_name),
            producer_version: c_text(&m.producer_version),
            domain: c_text(&m.domain),
            description: c_text(&m.description),
            graph_name: c_text(&m.graph_name),
            graph_description: c_text(&m.graph_description),
            model_version: m.model_version,
            ir_version: m.ir_version,
            custom: m
                .custom
                .iter()
                .map(|(k, v)| (c_text(k), c_text(v)))
                .collect(),
        }
    }
}

/// What a model file says about itself. Every string is NUL-terminated
/// UTF-8 owned by the session (valid until it is destroyed), "" when the
/// model leaves it empty.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RamifyModelMetadata {
    /// The tool that wrote the model (e.g. "pytorch").
    pub producer_name: *const c_char,
    /// That tool's version.
    pub producer_version: *const c_char,
    /// The model's namespace (e.g. "com.example.vision").
    pub domain: *const c_char,
    /// The model's description (its doc string).
    pub description: *const c_char,
    /// The main graph's name.
    pub graph_name: *const c_char,
    /// The main graph's description.
    pub graph_description: *const c_char,
    /// The model's own version number (0 when unset).
    pub model_version: i64,
    /// The ONNX IR version of the file.
    pub ir_version: i64,
    /// How many custom key/value pairs the model has
    /// (`ramify_session_custom_metadata`).
    pub custom_count: usize,
}

/// Writes the model's metadata to `*out`.
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_metadata(
    session: *const RamifySession,
    out: *mut RamifyModelMetadata,
) -> RamifyStatus {
    guard("ramify_session_metadata", || unsafe {
        let out = out_ptr(out, "out")?;
        let m = &arg_ref(session, "session")?.metadata;
        out.write(RamifyModelMetadata {
            producer_name: m.producer_name.as_ptr(),
            producer_version: m.producer_version.as_ptr(),
            domain: m.domain.as_ptr(),
            description: m.description.as_ptr(),
            graph_name: m.graph_name.as_ptr(),
            graph_description: m.graph_description.as_ptr(),
            model_version: m.model_version,
            ir_version: m.ir_version,
            custom_count: m.custom.len(),
        });
        Ok(())
    })
}

/// Writes custom metadata pair `index` (0-based, in file order, below
/// `custom_count`) to `*key` and `*value`, owned by the session.
///
/// # Safety
/// `session` must be NULL or a live handle; `key` and `value` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_custom_metadata(
    session: *const RamifySession,
    index: usize,
    key: *mut *const c_char,
    value: *mut *const c_char,
) -> RamifyStatus {
    guard("ramify_session_custom_metadata", || unsafe {
        let key = out_ptr(key, "key")?;
        let value = out_ptr(value, "value")?;
        let m = &arg_ref(session, "session")?.metadata;
        let (k, v) = m.custom.get(index).ok_or_else(|| {
            FfiError::arg(format!(
                "index {index} is out of range: the model has {} custom metadata pairs",
                m.custom.len()
            ))
        })?;
        key.write(k.as_ptr());
        value.write(v.as_ptr());
        Ok(())
    })
}

/// Writes the value of custom metadata key `key` to `*value` (owned by the
/// session), or NULL when the model has no such key (the last one wins when
/// a key repeats).
///
/// # Safety
/// `session` must be NULL or a live handle; `key` NULL or a NUL-terminated
/// string; `value` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_lookup_metadata(
    session: *const RamifySession,
    key: *const c_char,
    value: *mut *const c_char,
) -> RamifyStatus {
    guard("ramify_session_lookup_metadata", || unsafe {
        let value = out_ptr(value, "value")?;
        let m = &arg_ref(session, "session")?.metadata;
        let key = arg_str(key, "key")?;
        let found = m
            .custom
            .iter()
            .rev()
            .find(|(k, _)| k.to_bytes() == key.as_bytes())
            .map_or(std::ptr::null(), |(_, v)| v.as_ptr());
        value.write(found);
        Ok(())
    })
}

/// Writes the CPU limit m in force to `*out`: the CPUs asked for
/// (`ramify_session_options_set_cpus`), bounded by those the process may
/// run on or by the CPU set.
///
/// # Safety
/// `session` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_cpu_count(
    session: *const RamifySession,
    out: *mut usize,
) -> RamifyStatus {
    guard("ramify_session_cpu_count", || unsafe {
        let out = out_ptr(out, "out")?;
        out.write(arg_ref(session, "session")?.session.cpus());
        Ok(())
    })
}

/// Writes the CPUs the session's threads may run on (its CPU set, or every
/// CPU the process may use, ascending), as the OS numbers them:
/// the first `capacity` of them to `cpus`, and how many there are to
/// `*count`. Call with `capacity` 0 (and `cpus` NULL) to learn the count.
///
/// # Safety
/// `session` must be NULL or a live handle; `cpus` NULL or writable for
/// `capacity` values; `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_cpu_set(
    session: *const RamifySession,
    cpus: *mut usize,
    capacity: usize,
    count: *mut usize,
) -> RamifyStatus {
    guard("ramify_session_cpu_set", || unsafe {
        cpu_set(session, cpus, capacity, count)
    })
}

unsafe fn cpu_set(
    session: *const RamifySession,
    cpus: *mut usize,
    capacity: usize,
    count: *mut usize,
) -> FfiResult {
    let count = out_ptr(count, "count")?;
    if capacity > 0 && cpus.is_null() {
        return Err(FfiError::arg(format!(
            "cpus is NULL but its capacity is {capacity}"
        )));
    }
    let set = arg_ref(session, "session")?.session.cpu_set();
    for (i, &c) in set.iter().take(capacity).enumerate() {
        cpus.add(i).write(c);
    }
    count.write(set.len());
    Ok(())
}
