//! Integer matrix products for MatMul and Gemm (int32, int64, uint32,
//! uint64): a plain row-times-matrix kernel with wrapping arithmetic, parallel
//! over blocks of output rows.

use crate::ops::parallel::par_for;
use crate::ops::parallel::SendPtr;
use num_traits::{WrappingAdd, WrappingMul, Zero};

/// Integer element types with wrapping multiply-add.
pub(crate) trait IntElem:
    Copy + Send + Sync + Default + Zero + WrappingAdd + WrappingMul + 'static
{
    /// The value as f64 (for Gemm's alpha and beta scaling).
    fn to_f64(self) -> f64;
    /// The nearest value to `v`, saturating (NaN gives 0).
    fn from_f64(v: f64) -> Self;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl IntElem for $t {
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    )*};
}
int_elem!(i32, i64, u32, u64);

/// Rows of output per task.
const ROWS_PER_TASK: usize = 16;

/// For each batch b: `out_b = A_b · B_b`, with A_b the row-major m×k matrix at
/// `a[a_offs[b]..]`, B_b the row-major k×n matrix at `b[b_offs[b]..]`, and
/// out_b the b-th m×n block of `out`. Offsets must be in bounds.
#[allow(clippy::too_many_arguments)]
pub(crate) fn int_matmul<T: IntElem>(
    a: &[T],
    b: &[T],
    m: usize,
    k: usize,
    n: usize,
    a_offs: &[usize],
    b_offs: &[usize],
    out: &mut [T],
) {
    let batches = a_offs.len().min(b_offs.len());
    if m == 0 || n == 0 || out.len() < batches * m * n {
        return;
    }
    let per = m.div_ceil(ROWS_PER_TASK);
    let ptr = SendPtr(out.as_mut_ptr());
    par_for(batches * per, |t| {
        let (bi, blk) = (t / per, t % per);
        let (r0, r1) = (blk * ROWS_PER_TASK, ((blk + 1) * ROWS_PER_TASK).min(m));
        let am = &a[a_offs[bi]..a_offs[bi] + m * k];
        let bm = &b[b_offs[bi]..b_offs[bi] + k * n];
        // SAFETY: each task writes its own rows of its own batch.
        let dst = unsafe { ptr.slice(bi * m * n + r0 * n, (r1 - r0) * n) };
        for (i, row) in (r0..r1).zip(dst.chunks_exact_mut(n)) {
            row.fill(T::zero());
            for (kk, &av) in am[i * k..(i + 1) * k].iter().enumerate() {
                for (o, &bv) in row.iter_mut().zip(&bm[kk * n..(kk + 1) * n]) {
                    *o = o.wrapping_add(&av.wrapping_mul(&bv));
                }
            }
        }
    });
}
