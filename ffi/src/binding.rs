//! `RamifyBinding`: what a run reads and where its results go, set once and
//! reused run after run (onnxruntime's IoBinding, TensorFlow Lite's tensor
//! buffers). Inputs are tensors shared with the run, not copied; outputs are
//! chosen by name (the rest of the graph is pruned) and either written into
//! the caller's buffers or returned as tensors.

use crate::error::{arg_mut, arg_ref, arg_str, guard, guard_void, out_ptr, FfiError, FfiResult};
use crate::run_options::{record_report, run_options_of, RamifyRunOptions};
use crate::session::RamifySession;
use crate::tensor::RamifyTensor;
use crate::RamifyStatus;
use ramify::{Outputs, Tensor};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// The inputs and outputs of runs. Create with `ramify_binding_create`,
/// destroy with `ramify_binding_destroy`. Not synchronised: one thread at
/// a time (give each thread its own binding; they may share a session).
pub struct RamifyBinding {
    inputs: Vec<(String, *const RamifyTensor)>,
    outputs: Vec<(String, Option<(*mut u8, usize)>)>,
    results: Vec<OutputResult>,
}

/// One output after a run: its shape, and its tensor when it was selected.
struct OutputResult {
    name: String,
    dims: Vec<i64>,
    tensor: Option<Arc<Tensor>>,
}

/// Creates an empty binding: no input bound, no output chosen (a run then
/// returns every output, read with `ramify_binding_output`).
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_binding_create(out: *mut *mut RamifyBinding) -> RamifyStatus {
    guard("ramify_binding_create", || unsafe {
        let out = out_ptr(out, "out")?;
        out.write(Box::into_raw(Box::new(RamifyBinding {
            inputs: Vec::new(),
            outputs: Vec::new(),
            results: Vec::new(),
        })));
        Ok(())
    })
}

/// Destroys a binding and the results it holds. NULL is accepted and
/// ignored. Tensors it bound stay the caller's; tensors handed out by
/// `ramify_binding_output` stay valid.
///
/// # Safety
/// `binding` must be NULL or a live handle not used by another thread.
#[no_mangle]
pub unsafe extern "C" fn ramify_binding_destroy(binding: *mut RamifyBinding) {
    guard_void("ramify_binding_destroy", || {
        if !binding.is_null() {
            drop(unsafe { Box::from_raw(binding) });
        }
    })
}

/// Binds `tensor` (from `ramify_tensor_create`, or a run's output) as model
/// input `name`, replacing an earlier binding of that name. Runs read its
/// elements in place, without a copy.
///
/// Lifetime rule: the binding keeps the handle, not a copy. The tensor must
/// stay alive (not released) until the binding is destroyed, cleared or the
/// name is bound again, and the app must not write into it while a run
/// with this binding is in progress; between runs it may write the next
/// frame through `ramify_tensor_mutable_data`.
///
/// # Safety
/// `binding` must be NULL or a live handle; `name` NULL or a NUL-terminated
/// string; `tensor` NULL or a live tensor handle that follows the rule above.
#[no_mangle]
pub unsafe extern "C" fn ramify_binding_bind_input(
    binding: *mut RamifyBinding,
    name: *const c_char,
    tensor: *const RamifyTensor,
) -> RamifyStatus {
    guard("ramify_binding_bind_input", || unsafe {
        let b = arg_mut(binding, "binding")?;
        let name = arg_str(name, "name")?;
        arg_ref(tensor, "tensor")?;
        b.inputs.retain(|(n, _)| n != name);
        b.inputs.push((name.to_string(), tensor));
        Ok(())
    })
}

/// Chooses output `name` and gives it the caller's buffer: each run writes
/// the output's elements there (row-major, the layout of `ramify_tensor_data`)
/// once it has finished. A buffer larger than the output keeps its extra
/// bytes; a smaller one fails the run with `RAMIFY_STATUS_BUFFER_TOO_SMALL`
/// (before anything runs when the shape is known in advance), and
/// `ramify_binding_output_shape` then tells the shape needed. `data` may be
/// NULL only when `byte_size` is 0. The buffer must stay valid, and must
/// not overlap another bound buffer, while runs with this binding go on.
///
/// # Safety
/// `binding` must be NULL or a live handle; `name` NULL or a NUL-terminated
/// string; `data` NULL or writable for `byte_size` bytes during runs.
#[no_mangle]
pub unsafe extern "C" fn ramify_binding_bind_output(
    binding: *mut RamifyBinding,
    name: *const c_char,
    data: *mut c_void,
    byte_size: usize,
) -> RamifyStatus {
    guard("ramify_binding_bind_output", || unsafe {
        let b = arg_mut(binding, "binding")?;
        let name = arg_str(name, "name")?;
        if data.is_null() && byte_size > 0 {
            return Err(FfiError::arg(format!(
                "data is NULL but byte_size is {byte_size}"
            )));
        }
        if byte_size > isize::MAX as usize {
            return Err(FfiError::arg(format!("byte_size {byte_size} is too large")));
        }
        let start = data as usize;
        let overlaps = b.outputs.iter().any(|(n, buf)| {
            n != name
                && buf.is_some_and(|(p, len)| {
                    let p = p as usize;
                    byte_size > 0 && len > 0 && start < p + len && p < start + byte_size
                })
        });
        if overlaps {
            return Err(FfiError::arg(format!(
                "the buffer of output {name:?} overlaps another bound output's buffer"
            )));
        }
        choose(b, name, Some((data as *mut u8, byte_size)));
        Ok(())
    })
}

/// Chooses output `name`: each run returns it as a tensor, read with
/// `ramify_binding_output`. Replaces a buffer bound to that name.
///
/// # Safety
/// `binding` must be NULL or a live handle; `name` NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ramify_binding_select_output(
    binding: *mut RamifyBinding,
    name: *const c_char,
) -> RamifyStatus {
    guard("ramify_binding_select_output", || unsafe {
        let b = arg_mut(binding, "binding")?;
        let name = arg_str(name, "name")?;
        choose(b, name, None);
        Ok(())
    })
}

fn choose(b: &mut RamifyBinding, name: &str, buffer: Option<(*mut u8, usize)>) {
    match b.outputs.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = buffer,
        None => b.outputs.push((name.to_string(), buffer)),
    }
}

/// Forgets every bound input, chosen output and result.
///
/// # Safety
/// `binding` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_binding_clear(binding: *mut RamifyBinding) -> RamifyStatus {
    guard("ramify_binding_clear", || unsafe {
        let b = arg_mut(binding, "binding")?;
        b.inputs.clear();
        b.outputs.clear();
        b.results.clear();
        Ok(())
    })
}

/// Runs the model once with `binding`'s inputs, computing only its chosen
/// outputs (all when none is chosen): buffers bound with
/// `ramify_binding_bind_output` receive their outputs, selected outputs are
/// kept in the binding for `ramify_binding_output`. Every model input must
/// be bound. On failure no buffer is written and earlier results are gone
/// (after `RAMIFY_STATUS_BUFFER_TOO_SMALL`, `ramify_binding_output_shape`
/// still tells the shapes needed).
///
/// # Safety
/// `session` must be NULL or a live handle; `binding` NULL or a live handle
/// whose bound tensors and buffers follow the rules of the bind functions.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_run_binding(
    session: *const RamifySession,
    binding: *mut RamifyBinding,
) -> RamifyStatus {
    guard("ramify_session_run_binding", || unsafe {
        run(session, binding, std::ptr::null())
    })
}

/// Runs the model once with `binding` under `opts`, as
/// `ramify_session_run_binding` does; `opts` NULL runs with the defaults.
/// A run stopped by the options' deadline or time limit returns
/// `RAMIFY_STATUS_DEADLINE`, one cancelled through them
/// `RAMIFY_STATUS_CANCELLED`; no buffer is then written, earlier results
/// are gone, and the session stays usable.
///
/// # Safety
/// As `ramify_session_run_binding`; `opts` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_run_binding_with_options(
    session: *const RamifySession,
    binding: *mut RamifyBinding,
    opts: *const RamifyRunOptions,
) -> RamifyStatus {
    guard("ramify_session_run_binding_with_options", || unsafe {
        run(session, binding, opts)
    })
}

unsafe fn run(
    session: *const RamifySession,
    binding: *mut RamifyBinding,
    opts: *const RamifyRunOptions,
) -> FfiResult {
    let s = arg_ref(session, "session")?;
    let b = arg_mut(binding, "binding")?;
    b.results.clear();
    let options = run_options_of(opts)?;
    let inputs: Vec<(&str, Arc<Tensor>)> = b
        .inputs
        .iter()
        .map(|(n, t)| (n.as_str(), Arc::clone(&(**t).tensor)))
        .collect();
    let mut outputs = Outputs::new();
    for (name, buffer) in &b.outputs {
        match buffer {
            // SAFETY: the caller keeps each buffer valid and unshared during
            // runs (checked against overlap when bound).
            Some((p, len)) if *len > 0 => {
                outputs.bind(name, std::slice::from_raw_parts_mut(*p, *len));
            }
            Some(_) => {
                outputs.bind(name, &mut []);
            }
            None => {
                outputs.select(name);
            }
        }
    }
    let status = s.session.run_bound(inputs, &mut outputs, &options);
    let names: Vec<String> = outputs.names().map(str::to_string).collect();
    for name in names {
        let dims = outputs
            .shape(&name)
            .map(|d| d.iter().map(|&x| x as i64).collect());
        let tensor = outputs.take(&name).map(Arc::new);
        if let Some(dims) = dims {
            b.results.push(OutputResult { name, dims, tensor });
        }
    }
    record_report(opts, &status?);
    Ok(())
}

/// The result of output `name` from the binding's last run.
fn result<'a>(b: &'a RamifyBinding, name: &str) -> FfiResult<&'a OutputResult> {
    b.results.iter().find(|r| r.name == name).ok_or_else(|| {
        FfiError::arg(format!(
            "output {name:?} has no result: it was not chosen, or the last run failed before computing it"
        ))
    })
}

/// Writes a new handle to selected output `name` from the binding's last
/// run to `*out` (the caller releases it with `ramify_tensor_release`; it
/// shares the data with the binding until the next run, so
/// `ramify_tensor_mutable_data` refuses it meanwhile). Outputs bound to a
/// buffer were written there instead and are refused here.
///
/// # Safety
/// `binding` must be NULL or a live handle; `name` NULL or a NUL-terminated
/// string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_binding_output(
    binding: *const RamifyBinding,
    name: *const c_char,
    out: *mut *mut RamifyTensor,
) -> RamifyStatus {
    guard("ramify_binding_output", || unsafe {
        let out = out_ptr(out, "out")?;
        out.write(std::ptr::null_mut());
        let b = arg_ref(binding, "binding")?;
        let name = arg_str(name, "name")?;
        let r = result(b, name)?;
        let t = r.tensor.as_ref().ok_or_else(|| {
            FfiError::arg(format!(
                "output {name:?} went to its bound buffer; its shape: ramify_binding_output_shape"
            ))
        })?;
        out.write(Box::into_raw(Box::new(RamifyTensor::shared(Arc::clone(t)))));
        Ok(())
    })
}

/// Writes the shape of output `name` from the binding's last run (selected
/// or bound to a buffer; also after `RAMIFY_STATUS_BUFFER_TOO_SMALL`, the
/// shape the buffer must hold): `*rank` dimensions at `*dims`, owned by the
/// binding until its next run.
///
/// # Safety
/// `binding` must be NULL or a live handle; `name` NULL or a NUL-terminated
/// string; `dims` and `rank` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_binding_output_shape(
    binding: *const RamifyBinding,
    name: *const c_char,
    dims: *mut *const i64,
    rank: *mut usize,
) -> RamifyStatus {
    guard("ramify_binding_output_shape", || unsafe {
        let dims = out_ptr(dims, "dims")?;
        let rank = out_ptr(rank, "rank")?;
        let b = arg_ref(binding, "binding")?;
        let r = result(b, arg_str(name, "name")?)?;
        dims.write(r.dims.as_ptr());
        rank.write(r.dims.len());
        Ok(())
    })
}

impl std::fmt::Debug for RamifyBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RamifyBinding")
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs.len())
            .finish()
    }
}
