//! The parallel GEMM engine shared by Gemm, MatMul and Conv: the `gemm` crate
//! (single-threaded, strided, packed, AVX2/AVX-512 kernels) on output tiles chosen from the
//! problem size alone, run on the current rayon pool. Each output element is
//! produced by the same call whatever the number of threads, so results are
//! bit-identical across pool sizes. Vector-by-matrix products (one output row
//! or column) use dedicated GEMV loops instead of packing the whole matrix.

use super::simd::multiversion;
use crate::ops::parallel::{par_for, SendPtr};
use num_traits::Float;
use std::cell::RefCell;
use std::fmt::Debug;

/// Target floating-point operations per parallel task (about 20–50 µs).
/// Each task repacks its panels of A and B, but smaller tasks still win:
/// at 2^23 every convolution under about 16 MFLOP was one task and ran on
/// one thread. Interleaved A/B runs of `ramify bench --mode serial` (2^23 →
/// 2^20, median ratio): example model 0.87 at 1 CPU and 0.84 at 2, densenet121
/// 0.97 and 0.90, squeezenet 1.01 and 0.95, resnet50 1.01 and 1.01.
pub(crate) const TASK_FLOPS: usize = 1 << 20;
/// Upper bound on tasks per call, to bound scheduling overhead.
pub(crate) const MAX_TASKS: usize = 64;
/// Narrowest column block the planner creates by splitting.
const NB_MIN: usize = 64;
/// Fewest rows in a block the planner creates by splitting (the height of
/// the AVX-512 f32 micro-kernel, so split blocks keep full-height tiles).
const MB_MIN: usize = 64;
/// Output elements per GEMV task at least.
const GEMV_MIN_BLOCK: usize = 64;

/// A strided read-only matrix: element (i, j) is at `ptr + i*rs + j*cs`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mat<T> {
    /// Element (0, 0).
    pub ptr: *const T,
    /// Row stride, in elements.
    pub rs: isize,
    /// Column stride, in elements.
    pub cs: isize,
}
// SAFETY: a read-only view handed to parallel tasks.
unsafe impl<T> Send for Mat<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Mat<T> {}

impl<T> Mat<T> {
    /// A row-major matrix with `cols` columns starting at `ptr`.
    pub(crate) fn row_major(ptr: *const T, cols: usize) -> Mat<T> {
        Mat {
            ptr,
            rs: cols as isize,
            cs: 1,
        }
    }

    /// The same matrix starting `off` elements further.
    pub(crate) fn offset(self, off: usize) -> Mat<T> {
        Mat {
            ptr: self.ptr.wrapping_add(off),
            ..self
        }
    }

    /// The same matrix transposed.
    pub(crate) fn t(self) -> Mat<T> {
        Mat {
            ptr: self.ptr,
            rs: self.cs,
            cs: self.rs,
        }
    }

    /// Pointer to element (i, j).
    ///
    /// # Safety
    /// (i, j) must be inside the matrix.
    unsafe fn at(&self, i: usize, j: usize) -> *const T {
        // SAFETY: (i, j) is inside the matrix (the contract), and so is
        // (i, 0) on the way.
        unsafe {
            self.ptr
                .offset(i as isize * self.rs)
                .offset(j as isize * self.cs)
        }
    }
}

/// Floating-point types the GEMM engine handles.
pub(crate) trait GemmFloat:
    Float
    + super::fused::ActivationFloat
    + crate::tensor::recycle::Recycled
    + Default
    + Debug
    + Send
    + Sync
    + 'static
{
    /// `C ← alpha·A·B + beta·C` for strided m×k, k×n and m×n matrices.
    ///
    /// # Safety
    /// All pointers and strides must describe valid, non-aliasing matrices
    /// (C writable).
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: Mat<Self>,
        b: Mat<Self>,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );

    /// Runs `f` with a scratch buffer of `len` elements (contents unspecified)
    /// reused across calls on the same thread.
    fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [Self]) -> R) -> R;
}

/// Largest scratch buffer a thread keeps between calls (bigger ones are
/// allocated per call), so idle pools do not hold on to much memory.
const SCRATCH_KEEP_BYTES: usize = 32 << 20;

/// Runs `f` on the first `len` elements of the thread's buffer in `cell`
/// (grown as needed, contents unspecified), or on a fresh buffer when that
/// one is too large to keep or already in use further up the stack.
pub(crate) fn scratch<T: Copy + Default, R>(
    cell: &'static std::thread::LocalKey<RefCell<Vec<T>>>,
    len: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    if len > SCRATCH_KEEP_BYTES / std::mem::size_of::<T>().max(1) {
        // Too large to keep alive between calls: a one-off buffer.
        return f(&mut vec![T::default(); len]);
    }
    cell.with(|c| match c.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len {
                v.resize(len, T::default());
            }
            f(&mut v[..len])
        }
        Err(_) => f(&mut vec![T::default(); len]),
    })
}

thread_local! {
    static SCRATCH_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static SCRATCH_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// `C ← alpha·A·B + beta·C` on one thread with the `gemm` crate (packed,
/// cache-blocked, runtime-dispatched AVX2/AVX-512/NEON kernels). Always
/// single-threaded: parallelism comes from the engine's own size-only
/// tiling, which keeps results independent of the thread count.
///
/// # Safety
/// As [`GemmFloat::gemm`].
#[allow(clippy::too_many_arguments)]
unsafe fn kernel_gemm<T>(
    m: usize,
    k: usize,
    n: usize,
    alpha: T,
    a: Mat<T>,
    b: Mat<T>,
    beta: T,
    c: *mut T,
    rsc: isize,
    csc: isize,
) where
    T: 'static + Copy + num_traits::Zero + PartialEq,
{
    // gemm computes dst ← α·dst + β·lhs·rhs, reading dst only when asked.
    let read_dst = beta != T::zero();
    // SAFETY: the matrices are valid and C writable and apart from A and B
    // (this function's contract), which is what `gemm::gemm` asks.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            csc,
            rsc,
            read_dst,
            a.ptr,
            a.cs,
            a.rs,
            b.ptr,
            b.cs,
            b.rs,
            beta,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

impl GemmFloat for f32 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: Mat<f32>,
        b: Mat<f32>,
        beta: f32,
        c: *mut f32,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: the trait method's contract is `kernel_gemm`'s.
        unsafe { kernel_gemm(m, k, n, alpha, a, b, beta, c, rsc, csc) }
    }

    fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
        scratch(&SCRATCH_F32, len, f)
    }
}

impl GemmFloat for f64 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f64,
        a: Mat<f64>,
        b: Mat<f64>,
        beta: f64,
        c: *mut f64,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: the trait method's contract is `kernel_gemm`'s.
        unsafe { kernel_gemm(m, k, n, alpha, a, b, beta, c, rsc, csc) }
    }

    fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f64]) -> R) -> R {
        scratch(&SCRATCH_F64, len, f)
    }
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// How an m×n output is cut into blocks of `mb` rows by `nb` columns. It
/// depends only on the problem's sizes, never on the thread count: the
/// `gemm` crate's rounding depends on the block it is given, so the same
/// blocks on any pool keep results bit-identical across pool sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tiling {
    /// Rows of the output.
    pub m: usize,
    /// Columns of the output.
    pub n: usize,
    /// Rows per block.
    pub mb: usize,
    /// Columns per block.
    pub nb: usize,
}

impl Tiling {
    /// Tiles for `batches` products of (m×k)·(k×n), with blocks at most
    /// `nb_cap` columns wide: enough blocks to keep a few threads busy when
    /// there is work for them, splitting columns first (cheap to repack).
    pub(crate) fn plan(batches: usize, m: usize, n: usize, k: usize, nb_cap: usize) -> Tiling {
        let flops = 2usize
            .saturating_mul(m)
            .saturating_mul(n)
            .saturating_mul(k.max(1))
            .saturating_mul(batches);
        let target = (flops / TASK_FLOPS).clamp(1, MAX_TASKS);
        let per_batch = target.div_ceil(batches.max(1));
        let mut mb = m.max(1);
        let mut nb = if n > nb_cap {
            (nb_cap / 16 * 16).max(16)
        } else {
            n.max(1)
        };
        loop {
            let tiles = m.div_ceil(mb) * n.div_ceil(nb);
            if tiles >= per_batch {
                break;
            }
            if nb >= 2 * NB_MIN {
                nb = round_up(nb.div_ceil(2), 16);
            } else if mb >= 2 * MB_MIN {
                mb = round_up(mb.div_ceil(2), 8);
            } else {
                break;
            }
        }
        Tiling { m, n, mb, nb }
    }

    /// Number of blocks.
    pub(crate) fn count(&self) -> usize {
        self.m.div_ceil(self.mb) * self.n.div_ceil(self.nb)
    }

    /// Block `i` as (first row, end row, first column, end column).
    pub(crate) fn block(&self, i: usize) -> (usize, usize, usize, usize) {
        let cols = self.n.div_ceil(self.nb);
        let (bi, bj) = (i / cols, i % cols);
        let r0 = bi * self.mb;
        let c0 = bj * self.nb;
        (
            r0,
            (r0 + self.mb).min(self.m),
            c0,
            (c0 + self.nb).min(self.n),
        )
    }
}

/// One finished output block, as handed to an epilogue: batch, rows
/// `r0..r1`, columns `c0..c1`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    /// Batch index.
    pub batch: usize,
    /// First row.
    pub r0: usize,
    /// End row (exclusive).
    pub r1: usize,
    /// First column.
    pub c0: usize,
    /// End column (exclusive).
    pub c1: usize,
}

/// A batch of products `C_b = alpha · A_b · B_b`, each C row-major m×n.
pub(crate) struct Batched<'a, T> {
    /// Number of products.
    pub batches: usize,
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// Scale of the product.
    pub alpha: T,
    /// A of batch b.
    pub a: &'a (dyn Fn(usize) -> Mat<T> + Sync),
    /// B of batch b.
    pub b: &'a (dyn Fn(usize) -> Mat<T> + Sync),
    /// C of batch b: row-major, row stride n.
    pub c: &'a (dyn Fn(usize) -> SendPtr<T> + Sync),
    /// Called on each block right after it is written (bias, activation).
    pub epilogue: Option<&'a (dyn Fn(Block) + Sync)>,
}

impl<T: GemmFloat> Batched<'_, T> {
    /// Computes every product, overwriting C.
    ///
    /// # Safety
    /// The matrices returned by `a`, `b` and `c` must be valid for the sizes
    /// given, and the C of distinct batches must not overlap.
    pub(crate) unsafe fn run(&self) {
        let (m, n, k) = (self.m, self.n, self.k);
        if m == 0 || n == 0 || self.batches == 0 {
            return;
        }
        if m == 1 || n == 1 {
            // One output row (or column): C = a·B as a vector-matrix product.
            let len = if m == 1 { n } else { m };
            let block = round_up(
                (TASK_FLOPS / (2 * k.max(1))).max(GEMV_MIN_BLOCK).min(len),
                16,
            );
            let per = len.div_ceil(block);
            par_for(self.batches * per, |t| {
                let (bi, j) = (t / per, t % per);
                let (j0, j1) = (j * block, ((j + 1) * block).min(len));
                let (a, b) = ((self.a)(bi), (self.b)(bi));
                // Row vector x (k) and matrix W (k × len) with y = x·W.
                let (x, w) = if m == 1 { (a, b) } else { (b.t(), a.t()) };
                // SAFETY: C of batch bi is valid for its m×n = len values
                // (the contract), j0 < j1 ≤ len, and the tasks' column
                // ranges are disjoint; x and w are valid for k and k × len.
                unsafe {
                    let out = (self.c)(bi).slice(j0, j1 - j0);
                    gemv(k, self.alpha, x, w, j0, out);
                }
                if let Some(e) = self.epilogue {
                    let blk = if m == 1 {
                        Block {
                            batch: bi,
                            r0: 0,
                            r1: 1,
                            c0: j0,
                            c1: j1,
                        }
                    } else {
                        Block {
                            batch: bi,
                            r0: j0,
                            r1: j1,
                            c0: 0,
                            c1: 1,
                        }
                    };
                    e(blk);
                }
            });
            return;
        }
        let tiling = Tiling::plan(self.batches, m, n, k, usize::MAX);
        let per = tiling.count();
        par_for(self.batches * per, |t| {
            let bi = t / per;
            let (r0, r1, c0, c1) = tiling.block(t % per);
            let (a, b, c) = ((self.a)(bi), (self.b)(bi), (self.c)(bi));
            // SAFETY: the block's rows r0..r1 ≤ m and columns c0..c1 ≤ n
            // are inside batch bi's A (m×k), B (k×n) and C (m×n), valid by
            // the contract; the tiling's blocks are disjoint, so no other
            // task writes this one.
            unsafe {
                let a = Mat {
                    ptr: a.at(r0, 0),
                    ..a
                };
                let b = Mat {
                    ptr: b.at(0, c0),
                    ..b
                };
                T::gemm(
                    r1 - r0,
                    k,
                    c1 - c0,
                    self.alpha,
                    a,
                    b,
                    T::zero(),
                    c.0.add(r0 * n + c0),
                    n as isize,
                    1,
                );
            }
            if let Some(e) = self.epilogue {
                e(Block {
                    batch: bi,
                    r0,
                    r1,
                    c0,
                    c1,
                });
            }
        });
    }
}

/// `y[j - j0] = alpha · Σ_k x[k]·w[k][j]` for columns `j0 .. j0 + y.len()` of
/// the row vector `x` (1×k, column stride `x.cs`) times `w` (k×n).
///
/// # Safety
/// `x` and `w` must be valid for those sizes.
unsafe fn gemv<T: GemmFloat>(k: usize, alpha: T, x: Mat<T>, w: Mat<T>, j0: usize, y: &mut [T]) {
    let len = y.len();
    T::with_scratch(k, |xs| {
        for (i, v) in xs.iter_mut().enumerate() {
            // SAFETY: x is valid for k columns (the contract), i < k.
            *v = unsafe { *x.at(0, i) };
        }
        if w.cs == 1 {
            // Rows of w are contiguous: accumulate scaled rows (axpy).
            let rows: Vec<&[T]> = (0..k)
                // SAFETY: row i < k of w, columns j0..j0 + len, contiguous
                // (cs = 1) and valid (the contract).
                .map(|i| unsafe { std::slice::from_raw_parts(w.at(i, j0), len) })
                .collect();
            gemv_rows(xs, &rows, y);
        } else if w.rs == 1 {
            // Columns of w are contiguous: one dot product per output.
            for (j, out) in y.iter_mut().enumerate() {
                // SAFETY: column j0 + j of w, k rows, contiguous (rs = 1)
                // and valid (the contract).
                let col = unsafe { std::slice::from_raw_parts(w.at(0, j0 + j), k) };
                *out = dot(xs, col);
            }
        } else {
            for (j, out) in y.iter_mut().enumerate() {
                let mut acc = T::zero();
                for (i, &xv) in xs.iter().enumerate() {
                    // SAFETY: element (i, j0 + j) of w, i < k (the contract).
                    acc = acc + xv * unsafe { *w.at(i, j0 + j) };
                }
                *out = acc;
            }
        }
    });
    if alpha != T::one() {
        for v in y.iter_mut() {
            *v = *v * alpha;
        }
    }
}

multiversion! {
    /// `y[j] = Σ_i x[i]·rows[i][j]`, summing in order of i.
    fn gemv_rows<T: GemmFloat>(x: &[T], rows: &[&[T]], y: &mut [T]) {
        for v in y.iter_mut() {
            *v = T::zero();
        }
        let len = y.len();
        let mut i = 0;
        while i + 4 <= x.len() {
            let (x0, x1, x2, x3) = (x[i], x[i + 1], x[i + 2], x[i + 3]);
            let (r0, r1, r2, r3) = (&rows[i][..len], &rows[i + 1][..len], &rows[i + 2][..len], &rows[i + 3][..len]);
            for j in 0..len {
                y[j] = y[j] + x0 * r0[j] + x1 * r1[j] + x2 * r2[j] + x3 * r3[j];
            }
            i += 4;
        }
        while i < x.len() {
            let (xv, r) = (x[i], &rows[i][..len]);
            for j in 0..len {
                y[j] = y[j] + xv * r[j];
            }
            i += 1;
        }
    }
}

multiversion! {
    /// Dot product with 16 interleaved partial sums (a fixed order).
    pub(crate) fn dot<T: GemmFloat>(a: &[T], b: &[T]) -> T {
        let n = a.len().min(b.len());
        let mut acc = [T::zero(); 16];
        let chunks = n / 16;
        for c in 0..chunks {
            let (pa, pb) = (&a[c * 16..c * 16 + 16], &b[c * 16..c * 16 + 16]);
            for l in 0..16 {
                acc[l] = acc[l] + pa[l] * pb[l];
            }
        }
        for i in chunks * 16..n {
            acc[i - chunks * 16] = acc[i - chunks * 16] + a[i] * b[i];
        }
        let mut w = 8;
        while w > 0 {
            for l in 0..w {
                acc[l] = acc[l] + acc[l + w];
            }
            w /= 2;
        }
        acc[0]
    }
}
