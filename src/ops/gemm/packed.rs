//! Packed constant weights for f32 products (issue 43: transformer speed):
//! a MatMul or Gemm whose B is a constant k×n matrix packs it once, at
//! build, into column panels (for each panel, for each kk, the panel's
//! columns contiguous, zero-padded at the right edge), and multiplies
//! activations against them with a register-blocked micro-kernel:
//! 12 rows × 32 columns in 24 `zmm` accumulators with AVX-512F, or
//! 6 rows × 16 columns in 12 `ymm` with AVX2 and FMA.
//!
//! The products run in cache blocks (passes over k, groups of panels;
//! see `PackedWeights::block`).
//!
//! Every output element is one in-order chain of fused multiply-adds over
//! kk = 0..k from 0.0 (`acc = fma(a[i,kk], b[kk,j], acc)`), then `+ bias[j]`
//! (after the full sum), then the fused activation through the same
//! [`Activation::apply`] as every other fused epilogue. How rows and
//! columns are split across threads, and the vector width, change nothing
//! in that chain: both kernels, and any pool size, give the same bits.
//!
//! x86-64 only (the module is compiled there alone); elsewhere the
//! products take the general engine.

use super::engine::TASK_FLOPS;
use super::fused::Activation;
use crate::error::{Error, Result};
use crate::ops::parallel::par_for;
use crate::ops::util::{op_threads, TASKS_PER_THREAD};
use std::arch::x86_64::*;

/// Which micro-kernel weights are packed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// AVX-512F: 32-column panels, 12-row blocks.
    Avx512,
    /// AVX2 with FMA: 16-column panels, 6-row blocks.
    Avx2,
}

impl Kernel {
    /// Columns per panel.
    fn width(self) -> usize {
        match self {
            Kernel::Avx512 => 32,
            Kernel::Avx2 => 16,
        }
    }

    /// Rows per micro-block.
    fn rows(self) -> usize {
        match self {
            Kernel::Avx512 => 12,
            Kernel::Avx2 => 6,
        }
    }

    /// Whether this CPU runs the kernel.
    pub(crate) fn available(self) -> bool {
        match self {
            Kernel::Avx512 => super::simd::has_avx512(),
            Kernel::Avx2 => super::simd::has_avx2_fma(),
        }
    }

    /// The widest kernel this CPU runs, if any.
    pub(crate) fn best() -> Option<Kernel> {
        [Kernel::Avx512, Kernel::Avx2]
            .into_iter()
            .find(|k| k.available())
    }
}

/// Largest packed copy a node keeps, in bytes. The packed panels are a
/// second copy of the weights (the graph keeps its constant), so very large
/// matrices stay unpacked: VGG-19's 25088×4096 and 4096×4096 classifier
/// layers (411 and 67 MB, run one row at a time, where the general GEMV
/// streams B anyway) would take loading past twice the weight bytes
/// (tests/memory.rs). Every BERT/ViT-base/large linear layer fits
/// (at most 1024×4096 = 16 MiB).
const MAX_PACKED_BYTES: usize = 32 << 20;

/// About the most of k one pass sums (A's 12 rows of a micro-block: 18 KB
/// at 384, inside L1 with the panel's stream).
const KC: usize = 384;

/// Bytes of packed B one pass over a group of panels reads for every row
/// block, kept within L2 (1 MB on AMD Zen 5, 2 MB on Intel Sapphire
/// Rapids). Before the cache blocking, every 12-row block streamed the
/// whole of B: 196×1536 by 1536×384 (2.4 MB) at 1 thread on a Sapphire
/// Rapids-class Xeon took 3.2 ms against onnxruntime's 2.0.
const B_BLOCK_BYTES: usize = 512 << 10;

/// Passes over k: one up to a third past [`KC`], else about KC each.
fn k_passes(k: usize) -> usize {
    if k <= KC + KC / 3 {
        1
    } else {
        k.div_ceil(KC)
    }
}

/// Floats a panel row starts on (a cache line, so `zmm` loads never split).
const ALIGN_FLOATS: usize = 16;

/// A constant k×n f32 matrix packed into column panels for one kernel.
#[derive(Clone)]
pub(crate) struct PackedWeights {
    kernel: Kernel,
    k: usize,
    n: usize,
    /// Backing store; the panels start at `start` (64-byte aligned).
    buf: Vec<f32>,
    start: usize,
}

impl std::fmt::Debug for PackedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWeights")
            .field("kernel", &self.kernel)
            .field("k", &self.k)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

/// What follows the sum of each output element.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PackedEpilogue<'a> {
    /// One value per column, added after the full sum.
    pub bias: Option<&'a [f32]>,
    /// The activation after the bias.
    pub act: Option<Activation>,
}

impl PackedWeights {
    /// Packs `b` for the widest kernel the CPU has: `b` is k×n row-major, or
    /// n×k row-major (B transposed) when `trans`. None when the CPU has no
    /// kernel, a dimension is 0, or `b` does not hold k·n values.
    pub(crate) fn new(b: &[f32], k: usize, n: usize, trans: bool) -> Option<PackedWeights> {
        PackedWeights::for_kernel(b, k, n, trans, Kernel::best()?)
    }

    /// Whether [`PackedWeights::new`] packs a k×n matrix (given its k·n
    /// values) on this CPU.
    pub(crate) fn packs(k: usize, n: usize) -> bool {
        Kernel::best().is_some_and(|kernel| Self::packed_len(k, n, kernel).is_some())
    }

    /// Floats of the panels of a k×n matrix packed for `kernel`; None where
    /// the CPU lacks the kernel, a dimension is 0, or the copy would pass
    /// [`MAX_PACKED_BYTES`] (or overflow with its alignment slack).
    fn packed_len(k: usize, n: usize, kernel: Kernel) -> Option<usize> {
        if k == 0 || n == 0 || !kernel.available() {
            return None;
        }
        let w = kernel.width();
        let len = n.div_ceil(w).checked_mul(w)?.checked_mul(k)?;
        if len > MAX_PACKED_BYTES / std::mem::size_of::<f32>() {
            return None;
        }
        len.checked_add(ALIGN_FLOATS)?;
        Some(len)
    }

    /// As [`PackedWeights::new`] for a given kernel (None where the CPU
    /// lacks it).
    pub(crate) fn for_kernel(
        b: &[f32],
        k: usize,
        n: usize,
        trans: bool,
        kernel: Kernel,
    ) -> Option<PackedWeights> {
        if k.checked_mul(n)? != b.len() {
            return None;
        }
        let len = Self::packed_len(k, n, kernel)?;
        let w = kernel.width();
        let mut buf = vec![0.0f32; len.checked_add(ALIGN_FLOATS)?];
        let misalign = (buf.as_ptr() as usize / 4) % ALIGN_FLOATS;
        let start = (ALIGN_FLOATS - misalign) % ALIGN_FLOATS;
        let packed = &mut buf[start..start + len];
        for (p, panel) in packed.chunks_exact_mut(k * w).enumerate() {
            let c0 = p * w;
            let cols = w.min(n - c0);
            for (kk, row) in panel.chunks_exact_mut(w).enumerate() {
                for (j, v) in row[..cols].iter_mut().enumerate() {
                    *v = if trans {
                        b[(c0 + j) * k + kk]
                    } else {
                        b[kk * n + c0 + j]
                    };
                }
            }
        }
        Some(PackedWeights {
            kernel,
            k,
            n,
            buf,
            start,
        })
    }

    /// The weights as they were given to [`PackedWeights::new`]: k×n
    /// row-major, or n×k when `trans`. Exact (the inverse of packing), for
    /// an operator whose original weights were let go.
    pub(crate) fn unpack(&self, trans: bool) -> Vec<f32> {
        let (k, n, w) = (self.k, self.n, self.kernel.width());
        let mut b = vec![0.0f32; k * n];
        let packed = &self.buf[self.start..];
        for (p, panel) in packed.chunks_exact(k * w).take(n.div_ceil(w)).enumerate() {
            let c0 = p * w;
            let cols = w.min(n - c0);
            for (kk, row) in panel.chunks_exact(w).enumerate() {
                for (j, &v) in row[..cols].iter().enumerate() {
                    let at = if trans {
                        (c0 + j) * k + kk
                    } else {
                        kk * n + c0 + j
                    };
                    b[at] = v;
                }
            }
        }
        b
    }

    /// The inner dimension.
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// The columns.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// The kernel the weights are packed for.
    #[cfg(test)]
    pub(crate) fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// `out = act(a · B + bias)` for `a` m×k row-major and `out` m×n
    /// row-major, split over the current pool; `op` names the operator in
    /// errors (wrong lengths).
    pub(crate) fn matmul(
        &self,
        op: &str,
        a: &[f32],
        m: usize,
        epi: PackedEpilogue<'_>,
        out: &mut [f32],
    ) -> Result<()> {
        let (k, n) = (self.k, self.n);
        let need = |rows: usize, cols: usize| rows.checked_mul(cols);
        if need(m, k) != Some(a.len()) || need(m, n) != Some(out.len()) {
            return Err(Error::op(
                op,
                format!(
                    "packed product of {m}×{k} by {k}×{n}: A has {} values, the output {}",
                    a.len(),
                    out.len()
                ),
            ));
        }
        if let Some(bias) = epi.bias {
            if bias.len() != n {
                return Err(Error::op(
                    op,
                    format!("the bias has {} values, expected {n}", bias.len()),
                ));
            }
        }
        if m == 0 {
            return Ok(());
        }
        let (rb, w) = (self.kernel.rows(), self.kernel.width());
        let (row_blocks, panels) = (m.div_ceil(rb), n.div_ceil(w));
        let threads = op_threads();
        let flops = 2usize.saturating_mul(m).saturating_mul(n).saturating_mul(k);
        let tasks = if threads <= 1 {
            1
        } else {
            (threads * TASKS_PER_THREAD)
                .min((flops / TASK_FLOPS).max(1))
                .min(row_blocks * panels)
        };
        let (tr, tc) = split(tasks, (row_blocks, panels), m * k, k * n);
        let outp = OutPtr(out.as_mut_ptr());
        par_for(tr * tc, |t| {
            let (i, j) = (t / tc, t % tc);
            let rows = (
                i * row_blocks / tr * rb,
                ((i + 1) * row_blocks / tr * rb).min(m),
            );
            let cols = (j * panels / tc, (j + 1) * panels / tc);
            // SAFETY: `a` holds m×k values and `out` m×n (checked above);
            // tasks cover disjoint blocks of rows and panels of `out`.
            unsafe { self.block(a.as_ptr(), rows, cols, epi, outp) };
        });
        Ok(())
    }

    /// The output rows `rows.0..rows.1` over panels `panels.0..panels.1`,
    /// in cache blocks: the panels in groups whose packed slice of one pass
    /// over k stays in L2 ([`B_BLOCK_BYTES`]), k in passes of at most
    /// about [`KC`] (so a micro-block's rows of A stay in L1), and for each
    /// group and pass every row block of the task against every panel of
    /// the group. A pass after the first resumes each sum from its value in
    /// `out` (an f32 stored and reloaded exactly), so every output is still
    /// one in-order chain; the bias and activation follow the last pass.
    ///
    /// # Safety
    /// `a` must hold the product's m×k values and `out` its m×n, with the
    /// CPU supporting the kernel; no other task may write this block.
    unsafe fn block(
        &self,
        a: *const f32,
        rows: (usize, usize),
        panels: (usize, usize),
        epi: PackedEpilogue<'_>,
        out: OutPtr,
    ) {
        let k = self.k;
        let w = self.kernel.width();
        let passes = k_passes(k);
        let kc = k.div_ceil(passes);
        let per_group = (B_BLOCK_BYTES / (kc * w * std::mem::size_of::<f32>())).max(1);
        let span = panels.1 - panels.0;
        let groups = span.div_ceil(per_group);
        for g in 0..groups {
            let group = (
                panels.0 + g * span / groups,
                panels.0 + (g + 1) * span / groups,
            );
            for pass in 0..passes {
                let ks = (pass * k / passes, (pass + 1) * k / passes);
                let last = pass + 1 == passes;
                // SAFETY: the caller's contract, with ks inside 0..k.
                unsafe { self.pass(a, rows, group, ks, pass > 0, last.then_some(epi), out) };
            }
        }
    }

    /// One pass over `ks.0..ks.1` of k for rows `rows` and panels `panels`:
    /// sums from zero, or from `out`'s values when `resume`; with `epi` (the
    /// last pass) the bias and the activation follow. Each row block takes
    /// every panel (its rows of A stay in L1, the group of panels in L2;
    /// the other order, each panel taking every row block, measured no
    /// faster even on a language model's 32-row head).
    ///
    /// # Safety
    /// As [`PackedWeights::block`], with `ks` inside 0..k.
    #[allow(clippy::too_many_arguments)]
    unsafe fn pass(
        &self,
        a: *const f32,
        rows: (usize, usize),
        panels: (usize, usize),
        ks: (usize, usize),
        resume: bool,
        epi: Option<PackedEpilogue<'_>>,
        out: OutPtr,
    ) {
        let n = self.n;
        let (rb, w) = (self.kernel.rows(), self.kernel.width());
        let (c0, c1) = (panels.0 * w, (panels.1 * w).min(n));
        let act = |r0: usize, r1: usize| {
            if let Some(act) = epi.and_then(|e| e.act) {
                for i in r0..r1 {
                    // SAFETY: columns c0..c1 ≤ n of row i < m of `out`, this
                    // task's block, borrowed by nothing else meanwhile.
                    act.apply(unsafe {
                        std::slice::from_raw_parts_mut(out.0.add(i * n + c0), c1 - c0)
                    });
                }
            }
        };
        let micro = |r0: usize, r: usize, p: usize| {
            // SAFETY: the caller's contract: rows r0..r0 + r ≤ m, panel p
            // of this task's block, `ks` inside 0..k.
            unsafe { self.micro(a, (r0, r), p, ks, resume, epi, out) }
        };
        for r0 in (rows.0..rows.1).step_by(rb) {
            let r = rb.min(rows.1 - r0);
            let mut p = panels.0;
            if r == 1 {
                // A lone row (a batch-1 linear layer): ROW_PANELS full
                // panels at a time.
                let full = (n / w).min(panels.1);
                while p + ROW_PANELS <= full {
                    // SAFETY: the caller's contract: row r0 < m, panels
                    // p..p + ROW_PANELS full and of this task's block.
                    unsafe { self.row(a, r0, p, ks, resume, epi, out) };
                    p += ROW_PANELS;
                }
            }
            (p..panels.1).for_each(|p| micro(r0, r, p));
            act(r0, r0 + r);
        }
    }

    /// Row `r0` against the [`ROW_PANELS`] full panels from `p` for one
    /// pass, in one kernel: a single row gives a panel only two chains of
    /// FMAs, each waiting on the last; several panels at once keep the
    /// FMA units and the streams of B busy. Each output is the same chain
    /// as in [`PackedWeights::micro`], so the bits are the same. Measured
    /// (one thread, Zen 4, alternating rounds): a 1×960 by 960×1280 Gemm
    /// alone 0.81×, 1×1280 by 1280×1000 0.84×; inside MobileNet v3 its two
    /// classifier layers 0.36 → 0.27 ms each, the model 0.97×. With the
    /// tile kernels' software prefetch of each panel's row ahead (four
    /// streams' worth of prefetches per step of k) the same layers ran
    /// 1.10× as long as before instead: the row kernel leaves B's streams
    /// to the hardware prefetchers.
    ///
    /// # Safety
    /// As [`PackedWeights::pass`], with row r0 < m and panels
    /// p..p + ROW_PANELS full (inside n) and written by this task alone.
    #[allow(clippy::too_many_arguments)]
    unsafe fn row(
        &self,
        a: *const f32,
        r0: usize,
        p: usize,
        ks: (usize, usize),
        resume: bool,
        epi: Option<PackedEpilogue<'_>>,
        out: OutPtr,
    ) {
        let (k, n, w) = (self.k, self.n, self.kernel.width());
        let bias = epi.and_then(|e| e.bias);
        // SAFETY: row r0 < m of A from column ks.0 < k; row ks.0 of panel
        // p of the packed B (panels of k×w back to back after `start`);
        // column p·w of the bias and of row r0 of `out`, whose next
        // ROW_PANELS·w columns lie inside n.
        let t = unsafe {
            let packed = self.buf.as_ptr().add(self.start);
            Tile {
                a: a.add(r0 * k + ks.0),
                lda: k * w,
                b: packed.add(p * k * w + ks.0 * w),
                k: ks.1 - ks.0,
                resume,
                bias: bias.map(|b| b.as_ptr().add(p * w)),
                c: out.0.add(r0 * n + p * w),
                ldc: w,
            }
        };
        // SAFETY: as above; the kernel was chosen for what the CPU supports.
        unsafe {
            match self.kernel {
                Kernel::Avx512 => row512::<ROW_PANELS>(&t),
                Kernel::Avx2 => row256::<ROW_PANELS>(&t),
            }
        }
    }

    /// The micro-block of rows `rows.0..rows.0 + rows.1` and panel `p` for
    /// one pass, at the right edge through a full-width scratch tile.
    ///
    /// # Safety
    /// As [`PackedWeights::pass`], with the rows inside 0..m and `p` a
    /// panel this task alone writes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn micro(
        &self,
        a: *const f32,
        (r0, r): (usize, usize),
        p: usize,
        ks: (usize, usize),
        resume: bool,
        epi: Option<PackedEpilogue<'_>>,
        out: OutPtr,
    ) {
        let (k, n, w) = (self.k, self.n, self.kernel.width());
        let bias = epi.and_then(|e| e.bias);
        // SAFETY: the packed B starts at `start` inside `buf`.
        let packed = unsafe { self.buf.as_ptr().add(self.start) };
        let pc0 = p * w;
        let cols = w.min(n - pc0);
        // SAFETY: row r0 < m of A (m×k) from column ks.0 < k, row
        // ks.0 of panel p < n/w of the packed B (k×w each), column
        // pc0 < n of the bias (n values) and element (r0, pc0) of
        // `out` (m×n): all inside their buffers.
        let mut tile = unsafe {
            Tile {
                a: a.add(r0 * k + ks.0),
                lda: k,
                b: packed.add(p * k * w + ks.0 * w),
                k: ks.1 - ks.0,
                resume,
                bias: bias.map(|b| b.as_ptr().add(pc0)),
                c: out.0.add(r0 * n + pc0),
                ldc: n,
            }
        };
        if cols == w {
            // SAFETY: a full panel: rows r0..r0+r of A and `out`
            // (r0 + r ≤ m) and w columns of B, bias and `out`, which
            // this task alone writes; the caller checked the CPU.
            unsafe { self.tile(r, &tile) };
        } else {
            // The right edge: through a full-width scratch tile
            // (holding the sums so far when resuming, and with a
            // zero-padded bias), then its columns out.
            let mut scratch = Scratch([0.0; 12 * 32]);
            let mut padded = [0.0f32; 32];
            if let Some(b) = bias {
                padded[..cols].copy_from_slice(&b[pc0..pc0 + cols]);
                tile.bias = Some(padded.as_ptr());
            }
            if resume {
                for (i, row) in scratch.0.chunks_exact_mut(w).take(r).enumerate() {
                    // SAFETY: the `cols` = n - pc0 last columns of row
                    // r0 + i < m of `out`, which this task alone writes.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            out.0.add((r0 + i) * n + pc0),
                            row.as_mut_ptr(),
                            cols,
                        )
                    };
                }
            }
            tile.c = scratch.0.as_mut_ptr();
            tile.ldc = w;
            // SAFETY: as for a full panel, with C the scratch tile
            // (12 rows ≥ r of w ≤ 32) and a full-width bias.
            unsafe { self.tile(r, &tile) };
            for i in 0..r {
                // SAFETY: row i < r of the scratch tile, and the
                // `cols` = n - pc0 last columns of row r0 + i < m of
                // `out`, which this task alone writes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        scratch.0.as_ptr().add(i * w),
                        out.0.add((r0 + i) * n + pc0),
                        cols,
                    )
                };
            }
        }
    }

    /// One micro-block of `r` (1 to the kernel's rows) rows.
    ///
    /// # Safety
    /// As [`tile512`].
    unsafe fn tile(&self, r: usize, t: &Tile) {
        macro_rules! rows {
            ($kernel:ident; $($n:literal)*) => {
                match r {
                    $($n => $kernel::<$n>(t),)*
                    _ => {}
                }
            };
        }
        // SAFETY: this function's contract is the kernels' (R = `r`), and
        // the kernel was chosen for what the CPU supports.
        unsafe {
            match self.kernel {
                Kernel::Avx512 => rows!(tile512; 1 2 3 4 5 6 7 8 9 10 11 12),
                Kernel::Avx2 => rows!(tile256; 1 2 3 4 5 6),
            }
        }
    }
}

/// How `tasks` tasks split `blocks` (row blocks, panels): `tr` runs of row
/// blocks by `tc` runs of panels, each task reading its rows of A (`a_len`
/// values in all) and its panels of B (`b_len`). Every run of rows reads
/// its panels of B once more, every run of panels its rows of A: the split
/// with the fewest values read, rows first among equals. A language model's
/// head (32 rows by 128 × 50257, B 25 MB) splits its panels only; a
/// convolution-like 3136 × 96 by 96 × 384 its rows only.
fn split(tasks: usize, blocks: (usize, usize), a_len: usize, b_len: usize) -> (usize, usize) {
    (1..=tasks.min(blocks.0))
        .rev()
        .map(|tr| (tr, tasks.div_ceil(tr).min(blocks.1)))
        .min_by_key(|&(tr, tc)| {
            tr.saturating_mul(b_len)
                .saturating_add(tc.saturating_mul(a_len))
        })
        .unwrap_or((1, 1))
}

/// The output buffer, shared by tasks that write disjoint blocks of it.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint blocks only.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// A scratch tile for a panel at the right edge, cache-line aligned.
#[repr(align(64))]
struct Scratch([f32; 12 * 32]);

/// One micro-block's operands.
struct Tile {
    /// A's first row of the block, row stride `lda`.
    a: *const f32,
    lda: usize,
    /// The packed panel: `k` rows of the panel width.
    b: *const f32,
    k: usize,
    /// Whether the sums start from C's values (a pass after the first).
    resume: bool,
    /// The panel's bias values (a full panel width of them), if any.
    bias: Option<*const f32>,
    /// C's first element of the block, row stride `ldc`.
    c: *mut f32,
    ldc: usize,
}

/// Panels a lone row runs against at once ([`PackedWeights::row`]).
const ROW_PANELS: usize = 4;

/// Defines the kernel of one row by P full panels of two vectors of
/// `$lanes`: each output the same in-order FMA chain as in the tile
/// kernels, plus the bias. In `t`, `lda` is the stride from one panel to
/// the next in the packed B, and `ldc` that between their columns of C.
macro_rules! row_kernel {
    ($(#[$doc:meta])* $name:ident, $feature:literal, $lanes:literal, $zero:ident, $load:ident,
     $set1:ident, $fmadd:ident, $add:ident, $store:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The CPU must support the target features; `t.a` must hold k
        /// values, `t.b` P panels of k rows of
        #[doc = concat!(stringify!($lanes), "·2 values at stride `t.lda`, `t.bias` (if any) P·", stringify!($lanes), "·2")]
        /// values, and `t.c` as many writable ones (read first, when
        /// `t.resume`).
        #[target_feature(enable = $feature)]
        unsafe fn $name<const P: usize>(t: &Tile) {
            const W: usize = 2 * $lanes;
            let mut acc = [[$zero(); 2]; P];
            if t.resume {
                for (q, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: panel q < P's W values of C.
                    unsafe {
                        let c = t.c.add(q * t.ldc);
                        acc[0] = $load(c);
                        acc[1] = $load(c.add($lanes));
                    }
                }
            }
            let mut b = t.b;
            for kk in 0..t.k {
                // SAFETY: column kk < k of A's row.
                let av = $set1(unsafe { *t.a.add(kk) });
                for (q, acc) in acc.iter_mut().enumerate() {
                    let bq = b.wrapping_add(q * t.lda);
                    // SAFETY: row kk of panel q's k rows of W values.
                    let (b0, b1) = unsafe { ($load(bq), $load(bq.add($lanes))) };
                    // As in the tile kernels: the panel's row
                    // PREFETCH_BYTES ahead, never read, never faulting.
                    acc[0] = $fmadd(av, b0, acc[0]);
                    acc[1] = $fmadd(av, b1, acc[1]);
                }
                b = b.wrapping_add(W);
            }
            for (q, acc) in acc.iter_mut().enumerate() {
                if let Some(bias) = t.bias {
                    // SAFETY: panel q < P's W bias values.
                    let (v0, v1) = unsafe { ($load(bias.add(q * W)), $load(bias.add(q * W + $lanes))) };
                    acc[0] = $add(acc[0], v0);
                    acc[1] = $add(acc[1], v1);
                }
                // SAFETY: panel q < P's W writable values of C.
                unsafe {
                    let c = t.c.add(q * t.ldc);
                    $store(c, acc[0]);
                    $store(c.add($lanes), acc[1]);
                }
            }
        }
    };
}

/// How far ahead in the packed panels a micro-kernel asks for B: 8 KiB,
/// 64 steps of k at AVX-512's 32 columns. A language model's head (32
/// rows of A against 128×50257 packed floats, 26 MB) streams B from
/// memory, and the hardware prefetchers alone left the kernel waiting:
/// GPT-2 (tiny) ran 0.72× as long with it (one thread, alternating
/// rounds); 16, 32 and 64 steps ahead gave 0.77, 0.68 and 0.72, 4 steps
/// nothing. Products whose B sits in L2 gained too: ViT-small 0.91×,
/// ConvNeXt-T 0.94×, nn.TransformerEncoder 0.89×, BERT-tiny 0.99×.
const PREFETCH_BYTES: usize = 8 << 10;

/// Defines a micro-kernel of R rows by two vectors of `$lanes`: each
/// output an in-order FMA chain over kk from zero, plus the bias.
macro_rules! tile_kernel {
    ($(#[$doc:meta])* $name:ident, $feature:literal, $lanes:literal, $zero:ident, $load:ident,
     $set1:ident, $fmadd:ident, $add:ident, $store:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The CPU must support the target features; `t.a` must hold R
        /// rows of k values at pitch `t.lda`, `t.b` k rows of
        #[doc = concat!(stringify!($lanes), "·2 values, `t.bias` (if any) as many, and `t.c` R")]
        /// writable rows of that many at pitch `t.ldc` (read first, when
        /// `t.resume`).
        #[target_feature(enable = $feature)]
        unsafe fn $name<const R: usize>(t: &Tile) {
            const W: usize = 2 * $lanes;
            let mut acc = [[$zero(); 2]; R];
            if t.resume {
                for (r, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: row r < R of C, W values at pitch `ldc`.
                    unsafe {
                        let c = t.c.add(r * t.ldc);
                        acc[0] = $load(c);
                        acc[1] = $load(c.add($lanes));
                    }
                }
            }
            let (mut a, mut b) = (t.a, t.b);
            for _ in 0..t.k {
                // SAFETY: `b` walks the k rows of W values of the panel.
                let (b0, b1) = unsafe { ($load(b), $load(b.add($lanes))) };
                // Ask for the panel's row PREFETCH_BYTES ahead (the next
                // panel's, near the end: the panels lie back to back). A
                // prefetch never faults, past the end of the buffer
                // included, and the address is only computed, not read.
                let ahead = b.wrapping_add(PREFETCH_BYTES / 4) as *const i8;
                for line in 0..W * 4 / 64 {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line * 64));
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: column kk < k of row r < R of A at pitch `lda`.
                    let av = $set1(unsafe { *a.add(r * t.lda) });
                    acc[0] = $fmadd(av, b0, acc[0]);
                    acc[1] = $fmadd(av, b1, acc[1]);
                }
                // SAFETY: one past at most the last column of A's first row
                // and the last row of the panel, when the loop ends.
                unsafe {
                    a = a.add(1);
                    b = b.add(W);
                }
            }
            if let Some(bias) = t.bias {
                // SAFETY: the bias holds W values.
                let (v0, v1) = unsafe { ($load(bias), $load(bias.add($lanes))) };
                for acc in acc.iter_mut() {
                    acc[0] = $add(acc[0], v0);
                    acc[1] = $add(acc[1], v1);
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                // SAFETY: row r < R of C, W writable values at pitch `ldc`.
                unsafe {
                    let c = t.c.add(r * t.ldc);
                    $store(c, acc[0]);
                    $store(c.add($lanes), acc[1]);
                }
            }
        }
    };
}

/// Both kernels of one instruction set, from its intrinsics.
macro_rules! packed_kernels {
    ($(#[$tile_doc:meta])* $tile:ident, $(#[$row_doc:meta])* $row:ident,
     $($isa:tt)*) => {
        tile_kernel!($(#[$tile_doc])* $tile, $($isa)*);
        row_kernel!($(#[$row_doc])* $row, $($isa)*);
    };
}

packed_kernels!(
    /// The AVX-512 micro-kernel: R ≤ 12 rows by 32 columns.
    tile512,
    /// One row by P 32-column panels, AVX-512.
    row512,
    "avx512f,fma", 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps,
    _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps
);
packed_kernels!(
    /// The AVX2 micro-kernel: R ≤ 6 rows by 16 columns.
    tile256,
    /// One row by P 16-column panels, AVX2.
    row256,
    "avx2,fma", 8, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_set1_ps,
    _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps
);
