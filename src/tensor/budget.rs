//! The memory budget: the most bytes one tensor (and one plan's live
//! values) may take. Shapes read from a model or computed from its data are
//! checked against it with overflow-free arithmetic *before* anything is
//! allocated, because Rust's global allocator aborts the whole process when
//! an allocation fails, and a hostile model can ask for terabytes.
//!
//! The limit in force is per thread: a session sets it around loading,
//! planning and every operator it runs ([`with_limit`]), and kernels whose
//! output size depends on input *values* (a shape input, a count, a trip
//! count) call [`check`] before they allocate. Outside any session the
//! process default applies: half of the device's physical memory.

pub use crate::error::format_bytes;
use crate::error::{Error, Result};
use crate::tensor::DType;
use std::cell::Cell;
use std::sync::OnceLock;

/// Used when the physical memory cannot be read.
const FALLBACK_PHYSICAL: u64 = 8 << 30;

thread_local! {
    static LIMIT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The default budget: half of the device's physical memory (8 GiB assumed
/// when it cannot be read), so that one model can never take the device down.
pub fn default_limit() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        let mut system = sysinfo::System::new();
        system.refresh_memory();
        let physical = match system.total_memory() {
            0 => FALLBACK_PHYSICAL,
            bytes => bytes,
        };
        usize::try_from(physical / 2).unwrap_or(usize::MAX)
    })
}

/// The limit in force on this thread.
pub fn current_limit() -> usize {
    LIMIT.with(|l| l.get()).unwrap_or_else(default_limit)
}

/// Runs `f` with `limit` in force on this thread, restoring the previous
/// limit afterwards (also when `f` panics).
pub fn with_limit<R>(limit: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LIMIT.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(LIMIT.with(|l| l.replace(Some(limit))));
    f()
}

/// Bytes of a tensor of `dtype` and `shape`, without overflow: `None` when
/// the count does not fit in 128 bits.
pub fn tensor_bytes(dtype: DType, shape: &[usize]) -> Option<u128> {
    shape.iter().try_fold(dtype.size_of() as u128, |acc, &d| {
        acc.checked_mul(d as u128)
    })
}

/// Checks that a tensor of `dtype` and `shape` fits the budget in force,
/// returning its size in bytes. `what` names the tensor in the error (for
/// example `"output 0"` or `"initializer \"w\""`).
pub fn check(what: &str, dtype: DType, shape: &[usize]) -> Result<usize> {
    if !addressable(shape) {
        return Err(Error::op(
            "shape",
            format!(
                "{what}: shape {shape:?} cannot be addressed (the product of its non-zero \
                 dimensions overflows), even if a zero dimension leaves it empty"
            ),
        ));
    }
    let limit = current_limit();
    match tensor_bytes(dtype, shape) {
        Some(bytes) if bytes <= limit as u128 => Ok(bytes as usize),
        bytes => Err(Error::MemoryLimit {
            what: what.to_string(),
            dtype: dtype.to_string(),
            shape: shape.to_vec(),
            bytes,
            limit,
        }),
    }
}

/// Whether an array of `shape` can exist: the product of its non-zero
/// dimensions must fit `isize` (ndarray's rule, and pointer arithmetic's),
/// also when a zero dimension makes it empty.
fn addressable(shape: &[usize]) -> bool {
    shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .is_some_and(|n| n <= isize::MAX as usize)
}

/// Checks an element count computed from data (a dimension product, a
/// repeat count) before a kernel allocates `count` elements of `dtype`.
pub fn check_count(what: &str, dtype: DType, count: u128) -> Result<usize> {
    let limit = current_limit();
    let bytes = count.checked_mul(dtype.size_of() as u128);
    match bytes {
        Some(b) if b <= limit as u128 => Ok(count as usize),
        _ => Err(Error::MemoryLimit {
            what: what.to_string(),
            dtype: dtype.to_string(),
            shape: Vec::new(),
            bytes,
            limit,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_computed_without_overflow() {
        assert_eq!(tensor_bytes(DType::F32, &[2, 3]), Some(24));
        assert_eq!(tensor_bytes(DType::F64, &[]), Some(8));
        assert_eq!(tensor_bytes(DType::F32, &[0, usize::MAX]), Some(0));
        let huge = [usize::MAX, usize::MAX, usize::MAX];
        assert_eq!(tensor_bytes(DType::F32, &huge), None);
    }

    #[test]
    fn the_limit_in_force_is_scoped_and_restored() {
        let outer = current_limit();
        with_limit(1000, || {
            assert_eq!(current_limit(), 1000);
            assert!(check("t", DType::F32, &[250]).is_ok());
            let err = check("output 0", DType::F32, &[251]).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("output 0"), "{msg}");
            assert!(msg.contains("[251]"), "{msg}");
            assert!(msg.contains("1004 bytes"), "{msg}");
            with_limit(10, || assert_eq!(current_limit(), 10));
            assert_eq!(current_limit(), 1000);
        });
        assert_eq!(current_limit(), outer);
    }

    #[test]
    fn empty_shapes_whose_other_dimensions_overflow_are_refused() {
        assert!(check("t", DType::F32, &[0, 1 << 40]).is_ok());
        let err = check("output 0", DType::F32, &[0, 1 << 40, 1 << 40]).unwrap_err();
        assert!(err.to_string().contains("cannot be addressed"), "{err}");
    }

    #[test]
    fn a_terabyte_tensor_is_refused_by_default() {
        let err = check("x", DType::F32, &[1 << 40]).unwrap_err();
        assert!(matches!(err, Error::MemoryLimit { .. }), "{err}");
        assert!(default_limit() > 0);
    }

    #[test]
    fn counts_that_overflow_are_refused() {
        with_limit(64, || {
            assert_eq!(check_count("c", DType::U8, 64).unwrap(), 64);
            assert!(check_count("c", DType::U8, 65).is_err());
            assert!(check_count("c", DType::F64, u128::MAX).is_err());
        });
    }

    #[test]
    fn bytes_are_printed_in_binary_units() {
        assert_eq!(format_bytes(12), "12 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(1 << 40), "1.0 TiB");
    }
}
