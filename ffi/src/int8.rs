//! The int8 engine through the C API: which micro-kernel runs with a run
//! options handle, whether the overflow guard (seed 001) recomputes the
//! tiles of the narrow kernel that may have saturated, and how many tiles it
//! recomputed in the runs that used the handle.

use crate::error::{arg_ref, guard, out_ptr, FfiError, FfiResult, RamifyStatus};
use crate::run_options::{update, RamifyRunOptions};
use ramify::Int8Kernel;
use std::sync::atomic::Ordering;

/// The int8 micro-kernel of runs (the values of
/// `ramify_run_options_set_int8_kernel`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamifyInt8Kernel {
    /// The fastest exact kernel the CPU has (the default): AVX-512 VNNI,
    /// else the guarded narrow kernel (AVX2), else the portable one.
    Auto = 0,
    /// AVX-512 VNNI (exact); the automatic choice on CPUs without it.
    Vnni = 1,
    /// AVX2's 16-bit pair sums, which may saturate: the overflow guard
    /// recomputes such tiles exactly; the portable kernel without AVX2.
    Narrow = 2,
    /// Plain 32-bit multiply-adds.
    Portable = 3,
}

fn kernel(value: i32) -> FfiResult<Int8Kernel> {
    match value {
        v if v == RamifyInt8Kernel::Auto as i32 => Ok(Int8Kernel::Auto),
        v if v == RamifyInt8Kernel::Vnni as i32 => Ok(Int8Kernel::Vnni),
        v if v == RamifyInt8Kernel::Narrow as i32 => Ok(Int8Kernel::Narrow),
        v if v == RamifyInt8Kernel::Portable as i32 => Ok(Int8Kernel::Portable),
        v => Err(FfiError::arg(format!(
            "int8 kernel {v} is not a RamifyInt8Kernel (0 auto, 1 vnni, 2 narrow, 3 portable)"
        ))),
    }
}

/// Sets the int8 micro-kernel of runs with these options: a
/// `RamifyInt8Kernel` value (default `RAMIFY_INT8_KERNEL_AUTO`).
///
/// # Safety
/// `opts` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_set_int8_kernel(
    opts: *mut RamifyRunOptions,
    value: i32,
) -> RamifyStatus {
    guard("ramify_run_options_set_int8_kernel", || unsafe {
        let k = kernel(value)?;
        update(opts, |s| s.int8.kernel = k)
    })
}

/// Turns the overflow guard on (nonzero, the default) or off (0). Off, the
/// narrow kernel's saturated sums come out as they are: only to see what the
/// guard prevents.
///
/// # Safety
/// `opts` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_set_int8_guard(
    opts: *mut RamifyRunOptions,
    on: i32,
) -> RamifyStatus {
    guard("ramify_run_options_set_int8_guard", || unsafe {
        update(opts, |s| s.int8.guard = on != 0)
    })
}

/// Writes to `*out` how many int8 tiles the overflow guard recomputed in the
/// finished runs that used these options.
///
/// # Safety
/// `opts` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ramify_run_options_int8_recomputed(
    opts: *const RamifyRunOptions,
    out: *mut u64,
) -> RamifyStatus {
    guard("ramify_run_options_int8_recomputed", || unsafe {
        let out = out_ptr(out, "out")?;
        let o = arg_ref(opts, "opts")?;
        out.write(o.int8_recomputed.load(Ordering::Relaxed));
        Ok(())
    })
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::run::ramify_session_run_with_options;
    use crate::run_options::{ramify_run_options_create, ramify_run_options_destroy};
    use crate::session::{ramify_session_create_from_memory, ramify_session_destroy};
    use crate::tensor::{
        ramify_tensor_byte_size, ramify_tensor_data, ramify_tensor_release, RamifyElementType,
        RamifyInput,
    };
    use crate::test_models::{int8_b, matmul_integer_bytes, INT8_K, INT8_M, INT8_N};
    use std::ptr;

    /// Runs the saturating MatMulInteger with `opts`; returns y.
    unsafe fn run(
        session: *const crate::session::RamifySession,
        opts: *const RamifyRunOptions,
        a: &[u8],
    ) -> Vec<i32> {
        let shape = [INT8_M as i64, INT8_K as i64];
        let input = RamifyInput {
            name: c"a".as_ptr(),
            data: a.as_ptr().cast(),
            byte_size: a.len(),
            element_type: RamifyElementType::Uint8 as i32,
            shape: shape.as_ptr(),
            rank: 2,
        };
        let mut out = ptr::null_mut();
        let status = ramify_session_run_with_options(session, &input, 1, &mut out, 1, opts);
        assert_eq!(status, RamifyStatus::Ok);
        let mut data = ptr::null();
        let mut len = 0usize;
        assert_eq!(ramify_tensor_data(out, &mut data), RamifyStatus::Ok);
        assert_eq!(ramify_tensor_byte_size(out, &mut len), RamifyStatus::Ok);
        let y = std::slice::from_raw_parts(data.cast::<i32>(), len / 4).to_vec();
        ramify_tensor_release(out);
        y
    }

    #[test]
    fn the_guard_is_set_and_counted_through_run_options() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let model = matmul_integer_bytes();
        unsafe {
            let mut session = ptr::null_mut();
            let status = ramify_session_create_from_memory(
                model.as_ptr().cast(),
                model.len(),
                ptr::null(),
                &mut session,
            );
            assert_eq!(status, RamifyStatus::Ok);
            let mut opts = ptr::null_mut();
            assert_eq!(ramify_run_options_create(&mut opts), RamifyStatus::Ok);
            // Rows 0 and 2 all 255, rows 1 and 3 small.
            let a: Vec<u8> = (0..INT8_M * INT8_K)
                .map(|i| {
                    if (i / INT8_K).is_multiple_of(2) {
                        255
                    } else {
                        (i % 9) as u8
                    }
                })
                .collect();
            let exact: Vec<i32> = (0..INT8_M * INT8_N)
                .map(|i| {
                    (0..INT8_K)
                        .map(|k| a[(i / INT8_N) * INT8_K + k] as i32 * int8_b(k, i % INT8_N) as i32)
                        .sum()
                })
                .collect();
            let recomputed = |opts| {
                let mut n = u64::MAX;
                assert_eq!(
                    ramify_run_options_int8_recomputed(opts, &mut n),
                    RamifyStatus::Ok
                );
                n
            };
            assert_eq!(
                ramify_run_options_set_int8_kernel(opts, RamifyInt8Kernel::Narrow as i32),
                RamifyStatus::Ok
            );
            assert_eq!(run(session, opts, &a), exact);
            let guarded = recomputed(opts);
            assert!(guarded >= 1, "the saturated tiles were recomputed");
            assert_eq!(ramify_run_options_set_int8_guard(opts, 0), RamifyStatus::Ok);
            let unguarded = run(session, opts, &a);
            assert!(
                unguarded[0] < exact[0],
                "without the guard the sums saturate"
            );
            assert_eq!(
                recomputed(opts),
                guarded,
                "nothing recomputed without the guard"
            );
            assert_eq!(
                ramify_run_options_set_int8_kernel(opts, RamifyInt8Kernel::Portable as i32),
                RamifyStatus::Ok
            );
            assert_eq!(run(session, opts, &a), exact);
            assert_eq!(
                ramify_run_options_set_int8_kernel(opts, 7),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                ramify_run_options_set_int8_kernel(ptr::null_mut(), 0),
                RamifyStatus::InvalidArgument
            );
            assert_eq!(
                ramify_run_options_int8_recomputed(opts, ptr::null_mut()),
                RamifyStatus::InvalidArgument
            );
            ramify_run_options_destroy(opts);
            ramify_session_destroy(session);
        }
    }
}
