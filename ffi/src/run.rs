//! `ramify_session_run` and `ramify_session_run_with_options`: named,
//! caller-owned input buffers in (copied); one runtime-owned tensor per model
//! output back. Both share one body; the second adds run options (deadline,
//! cancellation, event callback).

use crate::error::{arg_ref, arg_slice, arg_str, guard, FfiError, FfiResult, RamifyStatus};
use crate::run_options::{record_report, run_options_of, RamifyRunOptions};
use crate::session::RamifySession;
use crate::tensor::{tensor_from_view, RamifyInput, RamifyTensor};

/// Runs the model once.
///
/// Inputs: `n_inputs` entries at `inputs`, each naming the model input it
/// feeds, in any order; every model input must be given exactly once. The
/// input buffers are copied during the call and stay the caller's. (To
/// share buffers without a copy, choose outputs or write them into your
/// own buffers, use a `RamifyBinding` and `ramify_session_run_binding`.)
///
/// Outputs: `outputs` is the caller's array of `n_outputs` pointers, where
/// `n_outputs` must equal `ramify_session_output_count`. On success
/// `outputs[i]` is a new tensor for model output `i` (the order of
/// `ramify_session_output_name`), owned by the caller, to be freed with
/// `ramify_tensor_release`. On any failure every `outputs[i]` is NULL.
///
/// Many threads may run one session at the same time.
///
/// # Safety
/// `session` must be NULL or a live handle; `inputs` NULL (when `n_inputs`
/// is 0) or an array of `n_inputs` entries whose pointers are valid as
/// `RamifyInput` describes; `outputs` NULL or an array of `n_outputs`
/// writable pointers.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_run(
    session: *const RamifySession,
    inputs: *const RamifyInput,
    n_inputs: usize,
    outputs: *mut *mut RamifyTensor,
    n_outputs: usize,
) -> RamifyStatus {
    guard("ramify_session_run", || unsafe {
        run(
            session,
            inputs,
            n_inputs,
            outputs,
            n_outputs,
            std::ptr::null(),
        )
    })
}

/// Runs the model once under `opts`, as `ramify_session_run` does (same
/// inputs, outputs and ownership); `opts` NULL runs with the defaults.
/// A run stopped by the options' deadline or time limit returns
/// `RAMIFY_STATUS_DEADLINE`, one cancelled through them
/// `RAMIFY_STATUS_CANCELLED`; every `outputs[i]` is then NULL and the
/// session stays usable. Events of the run go to the options' callback
/// before this returns.
///
/// # Safety
/// As `ramify_session_run`; `opts` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_session_run_with_options(
    session: *const RamifySession,
    inputs: *const RamifyInput,
    n_inputs: usize,
    outputs: *mut *mut RamifyTensor,
    n_outputs: usize,
    opts: *const RamifyRunOptions,
) -> RamifyStatus {
    guard("ramify_session_run_with_options", || unsafe {
        run(session, inputs, n_inputs, outputs, n_outputs, opts)
    })
}

unsafe fn run(
    session: *const RamifySession,
    inputs: *const RamifyInput,
    n_inputs: usize,
    outputs: *mut *mut RamifyTensor,
    n_outputs: usize,
    opts: *const RamifyRunOptions,
) -> FfiResult {
    // The outputs first, so that every failure after this leaves them NULL.
    let outs = arg_slice(outputs as *const *mut RamifyTensor, n_outputs, "outputs")?;
    let outs = outs.as_ptr() as *mut *mut RamifyTensor;
    for i in 0..n_outputs {
        outs.add(i).write(std::ptr::null_mut());
    }
    let s = arg_ref(session, "session")?;
    if n_outputs != s.outputs.len() {
        return Err(FfiError::arg(format!(
            "n_outputs is {n_outputs}, but the model has {} outputs",
            s.outputs.len()
        )));
    }
    let views = arg_slice(inputs, n_inputs, "inputs")?;
    let mut feeds: Vec<(&str, ramify::Tensor)> = Vec::with_capacity(n_inputs);
    for (i, view) in views.iter().enumerate() {
        let name = arg_str(view.name, &format!("inputs[{i}].name"))?;
        if feeds.iter().any(|(n, _)| *n == name) {
            return Err(FfiError::new(
                RamifyStatus::InvalidInput,
                format!("input {name:?} is given more than once"),
            ));
        }
        let tensor = tensor_from_view(view, &format!("inputs[{i}] ({name:?})"))?;
        feeds.push((name, tensor));
    }
    let options = run_options_of(opts)?;
    let (results, report) = s.session.run_with_options(feeds, &options)?;
    record_report(opts, &report);
    if results.len() != n_outputs {
        return Err(FfiError::new(
            RamifyStatus::InternalError,
            format!(
                "the run returned {} outputs, the model declares {n_outputs}",
                results.len()
            ),
        ));
    }
    for (i, (_, t)) in results.into_iter().enumerate() {
        outs.add(i)
            .write(Box::into_raw(Box::new(RamifyTensor::new(t))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ramify_last_error;
    use crate::session::{ramify_session_create_from_memory, ramify_session_destroy};
    use crate::tensor::ramify_tensor_release;
    use crate::test_models::{matmul_add_bytes, MATMUL_B, MATMUL_W};
    use std::ffi::{c_void, CStr};
    use std::ptr;

    fn last() -> String {
        unsafe { CStr::from_ptr(ramify_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    struct Fixture {
        session: *mut RamifySession,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            unsafe { ramify_session_destroy(self.session) };
        }
    }

    fn fixture() -> Fixture {
        let bytes = matmul_add_bytes();
        let mut s = ptr::null_mut();
        let st = unsafe {
            ramify_session_create_from_memory(
                bytes.as_ptr() as *const c_void,
                bytes.len(),
                ptr::null(),
                &mut s,
            )
        };
        assert_eq!(st, RamifyStatus::Ok, "{}", last());
        Fixture { session: s }
    }

    fn view(data: &[f32], shape: &[i64]) -> RamifyInput {
        RamifyInput {
            name: c"x".as_ptr(),
            data: data.as_ptr() as *const c_void,
            byte_size: std::mem::size_of_val(data),
            element_type: 1,
            shape: shape.as_ptr(),
            rank: shape.len(),
        }
    }

    /// Runs with one input named `name`; returns the status and the one output.
    fn run_one(f: &Fixture, name: &CStr, v: RamifyInput) -> (RamifyStatus, *mut RamifyTensor) {
        let v = RamifyInput {
            name: name.as_ptr(),
            ..v
        };
        let mut out = [std::ptr::dangling_mut::<RamifyTensor>()];
        let st = unsafe { ramify_session_run(f.session, &v, 1, out.as_mut_ptr(), 1) };
        (st, out[0])
    }

    #[test]
    fn run_returns_the_outputs() {
        let f = fixture();
        let x = [-1.0f32, 0.5, -2.0, 3.0, 1.0, 1.0, 1.0, 1.0];
        let shape = [2i64, 4];
        let (st, out) = run_one(&f, c"x", view(&x, &shape));
        assert_eq!(st, RamifyStatus::Ok, "{}", last());
        let t = unsafe { &*out }.tensor();
        // y = x·W + b, by hand.
        let mut want = vec![0.0f32; 6];
        for r in 0..2 {
            for c in 0..3 {
                let dot: f32 = (0..4).map(|k| x[r * 4 + k] * MATMUL_W[k * 3 + c]).sum();
                want[r * 3 + c] = dot + MATMUL_B[c];
            }
        }
        assert_eq!(t, &ramify::Tensor::from_vec(&[2, 3], want).unwrap());
        unsafe { ramify_tensor_release(out) };
    }

    #[test]
    fn run_rejects_bad_inputs_with_clear_messages() {
        let f = fixture();
        let x = [0.0f32; 4];
        let (st, out) = run_one(&f, c"nope", view(&x, &[1, 4]));
        assert_eq!(st, RamifyStatus::InvalidInput);
        assert!(out.is_null(), "outputs are NULL after a failure");
        assert!(
            last().starts_with("ramify_session_run: unknown input \"nope\""),
            "{}",
            last()
        );

        let y = [0.0f32; 5];
        let (st, _) = run_one(&f, c"x", view(&y, &[1, 5]));
        assert_eq!(st, RamifyStatus::InvalidInput);
        assert!(
            last().contains("input \"x\" has shape [1, 5]"),
            "{}",
            last()
        );

        // Four int32 values take the same 16 bytes as four floats.
        let v = RamifyInput {
            element_type: 6,
            ..view(&x, &[1, 4])
        };
        let (st, _) = run_one(&f, c"x", v);
        assert_eq!(st, RamifyStatus::InvalidInput);
        assert!(
            last().contains("input \"x\" has element type int32"),
            "{}",
            last()
        );

        let v = RamifyInput {
            byte_size: 15,
            ..view(&x, &[1, 4])
        };
        let (st, _) = run_one(&f, c"x", v);
        assert_eq!(st, RamifyStatus::InvalidArgument);
        assert!(
            last().contains("inputs[0] (\"x\"): byte_size is 15"),
            "{}",
            last()
        );
    }

    #[test]
    fn run_rejects_null_and_miscounted_arguments() {
        let f = fixture();
        let x = [0.0f32; 4];
        let shape = [1i64, 4];
        let v = view(&x, &shape);
        let mut out = [ptr::null_mut::<RamifyTensor>(); 2];
        let o = out.as_mut_ptr();
        let s = f.session;
        let unnamed = RamifyInput {
            name: ptr::null(),
            ..v
        };
        type Call<'a> = Box<dyn Fn() -> RamifyStatus + 'a>;
        let cases: Vec<(Call, &str)> = vec![
            (
                Box::new(|| unsafe { ramify_session_run(ptr::null(), &v, 1, o, 1) }),
                "ramify_session_run: session is NULL",
            ),
            (
                Box::new(|| unsafe { ramify_session_run(s, ptr::null(), 1, o, 1) }),
                "ramify_session_run: inputs is NULL but its length is 1",
            ),
            (
                Box::new(|| unsafe { ramify_session_run(s, &v, 1, ptr::null_mut(), 1) }),
                "ramify_session_run: outputs is NULL but its length is 1",
            ),
            (
                Box::new(|| unsafe { ramify_session_run(s, &v, 1, o, 2) }),
                "ramify_session_run: n_outputs is 2, but the model has 1 outputs",
            ),
            (
                Box::new(|| unsafe { ramify_session_run(s, &unnamed, 1, o, 1) }),
                "ramify_session_run: inputs[0].name is NULL",
            ),
        ];
        for (call, text) in cases {
            assert_eq!(call(), RamifyStatus::InvalidArgument, "{text}");
            assert_eq!(last(), text);
        }
        unsafe {
            // A missing input and a duplicated one.
            let st = ramify_session_run(f.session, ptr::null(), 0, out.as_mut_ptr(), 1);
            assert_eq!(st, RamifyStatus::InvalidInput);
            assert_eq!(last(), "ramify_session_run: missing input \"x\"");
            let two = [v, v];
            let st = ramify_session_run(f.session, two.as_ptr(), 2, out.as_mut_ptr(), 1);
            assert_eq!(st, RamifyStatus::InvalidInput);
            assert_eq!(
                last(),
                "ramify_session_run: input \"x\" is given more than once"
            );
        }
        assert!(out.iter().all(|p| p.is_null()));
    }

    #[test]
    fn run_with_options_stops_for_cancel_and_time_and_recovers() {
        use crate::run_options::*;
        let f = fixture();
        let x = [0.5f32; 4];
        let shape = [1i64, 4];
        let v = view(&x, &shape);
        let mut out = [ptr::null_mut::<RamifyTensor>()];
        let o_ = out.as_mut_ptr();
        let run = |opts| unsafe { ramify_session_run_with_options(f.session, &v, 1, o_, 1, opts) };
        unsafe {
            let mut o = ptr::null_mut();
            assert_eq!(ramify_run_options_create(&mut o), RamifyStatus::Ok);
            // NULL options are the defaults.
            assert_eq!(run(ptr::null()), RamifyStatus::Ok, "{}", last());
            ramify_tensor_release(out[0]);
            assert_eq!(ramify_run_options_cancel(o), RamifyStatus::Ok);
            assert_eq!(run(o), RamifyStatus::Cancelled);
            assert_eq!(
                last(),
                "ramify_session_run_with_options: the run was cancelled"
            );
            assert!(out[0].is_null());
            // Still cancelled until reset.
            assert_eq!(run(o), RamifyStatus::Cancelled);
            assert_eq!(ramify_run_options_reset_cancel(o), RamifyStatus::Ok);
            assert_eq!(run(o), RamifyStatus::Ok, "{}", last());
            ramify_tensor_release(out[0]);
            // A time limit of a nanosecond has passed by the first operator.
            assert_eq!(
                ramify_run_options_set_time_limit_ms(o, 1e-6),
                RamifyStatus::Ok
            );
            assert_eq!(run(o), RamifyStatus::Deadline);
            assert!(last().contains("deadline: the time limit"), "{}", last());
            assert!(out[0].is_null());
            assert_eq!(
                ramify_run_options_set_time_limit_ms(o, 0.0),
                RamifyStatus::Ok
            );
            // A delay ratio needs a deadline.
            assert_eq!(ramify_run_options_set_delay_ratio(o, 2.0), RamifyStatus::Ok);
            assert_eq!(run(o), RamifyStatus::InvalidArgument);
            assert!(last().contains("without a deadline"), "{}", last());
            assert_eq!(
                ramify_run_options_set_deadline_ms(o, 10_000.0),
                RamifyStatus::Ok
            );
            assert_eq!(run(o), RamifyStatus::Ok, "{}", last());
            ramify_tensor_release(out[0]);
            ramify_run_options_destroy(o);
        }
    }
}
