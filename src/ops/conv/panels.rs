//! The panel GEMM (AVX2 and AVX-512 on x86-64, NEON on aarch64) behind
//! the 1×1, Winograd and im2col convolutions (f32): batches of products
//! `Y = W·X`, with W packed once into panels of 6 rows, X read as `k` rows of `n` columns at any pitch (a channel's
//! plane, a Winograd position's transformed tiles, a row of im2col's
//! column matrix) and Y written as rows of `n` at its own pitch.
//!
//! A register block holds 6 rows × 16 consecutive columns in 12
//! accumulators: per step of k it loads two vectors of X, broadcasts 6
//! weights and does 12 fused multiply-adds (a row's last 8 or fewer columns
//! take a block of one vector, and the last panel, when the rows are not a
//! multiple of 6, a block of only its rows). Where X is a small plane's
//! channels (within L2, rows end to end) the blocks read it in place, cut
//! into near-equal runs with no pass before them. Else X is packed a strip
//! of 16 columns at a time (by the task that uses the strip, or once for
//! all the tasks that share it), and each panel of W runs over a chunk of
//! strips that stays in L2. Bias, residual and Relu or Clip are applied in
//! registers before the one store, so no pass over Y follows (other
//! activations run over each stored block). The `gemm` crate packed both
//! operands on every call and left the epilogue to a second pass; on the
//! small-K layers of ResNet and ShuffleNet that cost as much as the
//! products, and on Winograd's thin products (ResNet's 256 channels on
//! 14×14: 49 tiles) its edge kernels and packing took a third of the time.
//!
//! On AVX-512 machines a whole strip's block is one 16-float register per
//! row, two panels (12 rows) at a time, each weight's broadcast folded into
//! its multiply-add (Zen 4, the example model's 1×1 layers on two threads:
//! inception_b/1x1 99 → 80 µs; on one, 3–13 % faster).
//! Two whole strips side by side run as one block of 12 rows × 32
//! columns (`x86_pair`): 14 loads per 24 multiply-adds instead of 13 per
//! 12, which Intel's two vector loads a cycle could not keep up with
//! (Sapphire Rapids-class Xeon, 1 thread, p10 of 8 alternating rounds:
//! 512→256 1×1 on 28×28 1.53 → 1.35 ms, 512→512 2.92 → 2.57; ResNeXt-50
//! and ResNet-50 2.5 % faster).
//!
//! Each output sums its k products in order from zero, then adds bias and
//! residual, whichever block and thread computes it; blocks at the right
//! edge are pulled back over outputs already computed (the same bits)
//! rather than running past the edge.

use crate::ops::gemm::engine::scratch;
use crate::ops::gemm::fused::Activation;
use crate::ops::parallel::par_for;
use crate::ops::parallel::SendPtr;
use std::cell::RefCell;

/// Rows per panel.
pub(super) const MR: usize = 6;
/// Columns per register block (two vectors of 8).
pub(super) const NR: usize = 16;
/// Floats of packed X strips one chunk holds (192 KiB: within L2).
const CHUNK_FLOATS: usize = 48 * 1024;
/// Columns one task covers at least: below this, the split costs more
/// than it saves.
const MIN_TASK_COLUMNS: usize = 4 * NR;
/// Most floats of one product's X that the blocks read in place, without
/// packing its strips: 1 MiB, the L2. On 12×12 planes (256
/// channels: 147 KB) the packing took 7 % of a 1×1 layer on one thread,
/// and on two its own parallel pass and the wait for it.
const IN_PLACE_FLOATS: usize = 256 * 1024;
/// Most columns of an X read in place, whose rows must also lie end to
/// end (a 1×1 layer's input planes): planes up to 16×16. In the example
/// model (per-node trace, 2 CPUs, 12 rounds) the 12×12 1×1 layers gained
/// 2–8 µs each, while the 24×24 ones gained nothing and Winograd F(2×2)'s
/// products (36 columns at a pitch of 832) lost 4–11 µs: their strips'
/// rows fall into a quarter of the L1 sets. At 56×56 (12.5 KB rows) a
/// 64→64 layer ran 6 % (one thread) to 24 % (two) slower in place.
const IN_PLACE_COLUMNS: usize = 256;

thread_local! {
    /// Each thread's packed strips, apart from the scratch of the callers
    /// (Winograd and im2col hold theirs while the products run).
    static STRIPS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The strips of a whole batch, packed once for the tasks that share
    /// them (held by the thread that runs the batch).
    static SHARED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
use x86::dispatch;
#[cfg(target_arch = "x86_64")]
mod x86_pair;

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "aarch64")]
use neon::dispatch;

/// Whether this CPU runs the kernel: AVX2 with FMA on x86-64; on aarch64
/// always (NEON is part of the target) unless the portable code is asked
/// for (`RAMIFY_PORTABLE_KERNELS=1`).
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::implicit::cpu_has_kernel()
    }
    #[cfg(target_arch = "aarch64")]
    {
        crate::ops::gemm::simd::neon_kernels()
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Whether products of `T` run here: f32 on a CPU that has the kernel.
pub(super) fn takes<T: 'static>() -> bool {
    crate::ops::util::as_f32::<T>(&[]).is_some() && available()
}

/// Rows of panel `i` of `rows` rows: 6, or fewer for the last panel.
/// (Pulling that panel back over rows already computed, as the strips are,
/// cost 12 % more products on layers of 16 or 32 channels.)
fn panel_rows(i: usize, rows: usize) -> usize {
    MR.min(rows - i * MR)
}

/// Packs `matrices` row-major `rows × k` matrices, one after another in
/// `w`, into panels: per matrix, per panel, per step of k, the panel's 6
/// weights (zero past the last row). Matrix `i` then starts at
/// `i · rows.div_ceil(6) · k · 6`.
///
/// Each weight row is read once, in order, and scattered at a stride of 6
/// (a load and a store per weight: packing Inception v1's weights took 91
/// million instructions on aarch64 through a gather per weight).
pub(super) fn pack(matrices: usize, rows: usize, k: usize, w: &[f32]) -> Vec<f32> {
    let panel_len = k * MR;
    let panels = rows.div_ceil(MR);
    let mut data = vec![0.0; matrices * panels * panel_len];
    if data.is_empty() {
        return data;
    }
    for (g, matrix) in data.chunks_exact_mut(panels * panel_len).enumerate() {
        for (i, panel) in matrix.chunks_exact_mut(panel_len).enumerate() {
            let r0 = g * rows + i * MR;
            for r in 0..panel_rows(i, rows) {
                let row = &w[(r0 + r) * k..(r0 + r + 1) * k];
                for (slot, &v) in panel[r..].iter_mut().step_by(MR).zip(row) {
                    *slot = v;
                }
            }
        }
    }
    data
}

/// The row-major `matrices × rows × k` weights that [`pack`] packed into
/// `packed`: the inverse of `pack`, exact (a weight's bits move, nothing is
/// computed), for a layer whose original weights were let go.
pub(super) fn unpack(matrices: usize, rows: usize, k: usize, packed: &[f32]) -> Vec<f32> {
    let panel_len = k * MR;
    let panels = rows.div_ceil(MR);
    let mut w = vec![0.0; matrices * rows * k];
    if w.is_empty() {
        return w;
    }
    for (g, matrix) in packed.chunks_exact(panels * panel_len).enumerate() {
        for (i, panel) in matrix.chunks_exact(panel_len).enumerate() {
            let r0 = g * rows + i * MR;
            for r in 0..panel_rows(i, rows) {
                let row = &mut w[(r0 + r) * k..(r0 + r + 1) * k];
                for (v, &slot) in row.iter_mut().zip(panel[r..].iter().step_by(MR)) {
                    *v = slot;
                }
            }
        }
    }
    w
}

/// Where one product of a batch starts.
#[derive(Debug, Clone, Copy)]
pub(super) struct At {
    /// Offset of X's first row in the batch's X.
    pub x: usize,
    /// Index of W among the packed matrices.
    pub w: usize,
    /// Offset of Y's first row in the output (and in Z).
    pub y: usize,
    /// Index of the bias of Y's first row.
    pub bias: usize,
}

/// A batch of products `Y_i = act(W_i·X_i + bias + Z_i)`.
pub(super) struct Products<'a> {
    /// Products in the batch.
    pub count: usize,
    /// Rows of each W and Y.
    pub rows: usize,
    /// Columns of each W, rows of each X.
    pub k: usize,
    /// Columns of each X and Y (at least [`NR`]).
    pub n: usize,
    /// Distance between rows of X.
    pub x_pitch: usize,
    /// Distance between rows of Y (and Z).
    pub y_pitch: usize,
    /// Where product `i` starts.
    pub at: &'a (dyn Fn(usize) -> At + Sync),
    pub x: &'a [f32],
    /// W packed by [`pack`].
    pub packed: &'a [f32],
    pub bias: Option<&'a [f32]>,
    /// The residual, laid out like the output.
    pub z: Option<&'a [f32]>,
    pub act: Option<Activation>,
}

impl Products<'_> {
    /// Computes every product into `y`, split into tasks over (product,
    /// range of strips, range of panels) so each thread gets a few.
    ///
    /// # Safety
    /// The CPU must have the kernel ([`available`]), and the Y blocks of
    /// distinct products must not overlap. (Every operand's extent is
    /// checked against its slice.)
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    pub(super) unsafe fn run(&self, y: &mut [f32]) {
        let in_place = self.x_pitch == self.n
            && self.n <= IN_PLACE_COLUMNS
            && self.k * self.n <= IN_PLACE_FLOATS;
        // SAFETY: the contract is `run_on`'s, and `zmm_blocks` asks for
        // the 512-bit block only where the CPU has it.
        unsafe { self.run_on(y, zmm_blocks(), in_place) }
    }

    /// [`Products::run`] with the 512-bit block for whole strips where
    /// `zmm` (and the CPU has it), else the 256-bit one; reading X in place
    /// where `in_place`, else from packed strips.
    ///
    /// # Safety
    /// As for [`Products::run`].
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    unsafe fn run_on(&self, y: &mut [f32], zmm: bool, in_place: bool) {
        let zmm = zmm && zmm_blocks();
        let (rows, k, n) = (self.rows, self.k, self.n);
        let (strips, panels) = (n.div_ceil(NR), rows.div_ceil(MR));
        assert!(n >= NR && k >= 1 && rows >= 1);
        for i in 0..self.count {
            let at = (self.at)(i);
            assert!(at.x + (k - 1) * self.x_pitch + n <= self.x.len());
            assert!(at.y + (rows - 1) * self.y_pitch + n <= y.len());
            assert!(self.z.is_none_or(|z| z.len() >= y.len()));
            assert!(self.bias.is_none_or(|b| b.len() >= at.bias + rows));
            assert!(self.packed.len() >= (at.w + 1) * panels * k * MR);
        }
        let want = crate::ops::util::TASKS_PER_THREAD * crate::ops::util::op_threads();
        let epi = Epilogue::of(self.act);
        let yp = SendPtr(y.as_mut_ptr());
        if in_place {
            // Blocks in order, strip by strip, pair of panels by pair (or
            // pair by pair where W is the larger operand), cut into
            // near-equal runs.
            let per_product = want.div_ceil(self.count).min(strips * panels.div_ceil(2));
            let pair_major = rows > n;
            par_for(self.count * per_product, |t| {
                let (i, run) = (t / per_product, t % per_product);
                let at = (self.at)(i);
                for (these, panel_range) in block_run(run, per_product, n, panels, pair_major) {
                    self.multiply(&at, these, Strips::InPlace, panel_range, yp, &epi, zmm);
                }
            });
            return;
        }
        // Split the strips (then the panels) so each thread gets a few
        // tasks; the last two strips overlap, so they stay together.
        let per_product = want.div_ceil(self.count).max(1);
        let strip_tasks = per_product.min((n / MIN_TASK_COLUMNS).max(1)).min(strips);
        let panel_tasks = per_product
            .div_ceil(strip_tasks)
            .min(panels.div_ceil(2))
            .max(1);
        let tasks = self.count * strip_tasks * panel_tasks;
        // Near-equal shares: with ceil-sized ones, 36 strips in 8 tasks
        // were 7 of 5 and one of 1, and neither of two threads could take
        // less than 20 of them (inception_b/1x1, 2 CPUs).
        let ranges = |t: usize| {
            let (i, rest) = (
                t / (strip_tasks * panel_tasks),
                t % (strip_tasks * panel_tasks),
            );
            let (st, pt) = (rest / panel_tasks, rest % panel_tasks);
            (
                i,
                task_range(st, strip_tasks, strips),
                pair_range(pt, panel_tasks, panels),
            )
        };
        if panel_tasks == 1 {
            // Each strip is one task's: it packs its own, chunk by chunk.
            par_for(tasks, |t| {
                let (i, strip_range, panel_range) = ranges(t);
                let at = (self.at)(i);
                self.packing_task(&at, strip_range, panel_range, yp, &epi, zmm);
            });
            return;
        }
        // Several tasks share each strip: pack every strip once, in
        // parallel, then let the tasks read them (packing per task copied
        // X once per range of panels: four times on ResNet's 7×7 layers).
        let strip_len = k * NR;
        scratch(&SHARED, self.count * strips * strip_len, |shared| {
            let sp = SendPtr(shared.as_mut_ptr());
            // At most a chunk per task, and at least one task per thread:
            // one thread packing all 256 channels of a 12×12 plane while
            // the other waited cost 1×1 layers their second thread.
            let threads = crate::ops::util::op_threads();
            let per = (CHUNK_FLOATS / strip_len)
                .min(strips.div_ceil(threads))
                .max(1);
            let pack_tasks = strips.div_ceil(per);
            par_for(self.count * pack_tasks, |t| {
                let (i, first) = (t / pack_tasks, (t % pack_tasks) * per);
                let these = first..(first + per).min(strips);
                let at = (self.at)(i);
                let x = &self.x[at.x..at.x + (k - 1) * self.x_pitch + n];
                let start = (i * strips + first) * strip_len;
                // SAFETY: each (product, strip range) owns its part of the
                // shared buffer.
                let dst = unsafe { sp.slice(start, these.len() * strip_len) };
                pack_strips(x, self.x_pitch, n, these, dst);
            });
            let shared = &*shared;
            par_for(tasks, |t| {
                let (i, strip_range, panel_range) = ranges(t);
                let at = (self.at)(i);
                for here in chunks(strip_range, CHUNK_FLOATS / strip_len) {
                    let start = (i * strips + here.start) * strip_len;
                    let packed_x = &shared[start..start + here.len() * strip_len];
                    let panels = panel_range.clone();
                    self.multiply(&at, here, Strips::Packed(packed_x), panels, yp, &epi, zmm);
                }
            });
        });
    }

    /// One task that packs its strips itself: the given strips and panels
    /// of one product.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn packing_task(
        &self,
        at: &At,
        strip_range: std::ops::Range<usize>,
        panel_range: std::ops::Range<usize>,
        yp: SendPtr<f32>,
        epi: &Epilogue,
        zmm: bool,
    ) {
        let (k, n) = (self.k, self.n);
        let x = &self.x[at.x..at.x + (k - 1) * self.x_pitch + n];
        // Strips are packed in chunks that stay in L2; each panel of W then
        // runs over the whole chunk while it sits in L1.
        let chunk = (CHUNK_FLOATS / (k * NR)).max(1);
        scratch(&STRIPS, k * NR * chunk.min(strip_range.len()), |packed_x| {
            for here in chunks(strip_range, chunk) {
                pack_strips(x, self.x_pitch, n, here.clone(), packed_x);
                let x = Strips::Packed(packed_x);
                self.multiply(at, here, x, panel_range.clone(), yp, epi, zmm);
            }
        });
    }

    /// The blocks of `strips` (read from `x`) ×
    /// `panel_range` of one product, each panel (each pair of panels, for
    /// the 512-bit block: `zmm`, which the caller checked the CPU has) over
    /// all the strips.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[allow(clippy::too_many_arguments)]
    fn multiply(
        &self,
        at: &At,
        strips: std::ops::Range<usize>,
        x: Strips,
        panel_range: std::ops::Range<usize>,
        yp: SendPtr<f32>,
        epi: &Epilogue,
        zmm: bool,
    ) {
        let (k, n) = (self.k, self.n);
        let panels = self.rows.div_ceil(MR);
        let mut i = panel_range.start;
        while i < panel_range.end {
            let count = if zmm && i + 1 < panel_range.end { 2 } else { 1 };
            let r = i * MR;
            let rows = (count * MR).min(self.rows - r);
            let w = &self.packed[(at.w * panels + i) * k * MR..][..count * k * MR];
            i += count;
            let bias = self.bias.map(|b| &b[at.bias + r..at.bias + r + rows]);
            // Strip s's first row of X, its pitch, first column and width.
            let strip = |s: usize| {
                let (j, wide) = strip_at(s, n);
                match x {
                    Strips::Packed(packed) => {
                        let rows = &packed[(s - strips.start) * k * NR..][..k * wide];
                        (rows.as_ptr(), wide, j, wide)
                    }
                    Strips::InPlace => {
                        let rows = &self.x[at.x + j..at.x + (k - 1) * self.x_pitch + j + wide];
                        (rows.as_ptr(), self.x_pitch, j, wide)
                    }
                }
            };
            let packed = matches!(x, Strips::Packed(_));
            let mut s = strips.start;
            while s < strips.end {
                let (xp, xs, j, wide) = strip(s);
                let y_at = at.y + r * self.y_pitch + j;
                let resid = self.z.map(|z| z[y_at..].as_ptr());
                let ys = yp.offset(y_at).0;
                let args = (xp, xs, self.y_pitch, k, w, bias, resid, ys, epi);
                #[cfg(target_arch = "x86_64")]
                if zmm && wide == NR && s + 1 < strips.end && strip_at(s + 1, n).1 == NR {
                    let (x1, _, j1, _) = strip(s + 1);
                    let second = x86_pair::Second { x: x1, dj: j1 - j };
                    // SAFETY: as for the single block below, for both
                    // whole strips (sliced by `strip`): their outputs are
                    // columns j..j1 + 16 of the block's rows, inside Y.
                    unsafe { x86_pair::dispatch_pair(rows, packed, args, second) };
                    s += 2;
                    continue;
                }
                // SAFETY: the CPU has the kernel (AVX2 and FMA, or NEON:
                // the caller of `run` checked); the strip holds k rows of `wide` at pitch `xs`
                // (sliced above), the block's `rows` rows × `wide` columns
                // lie inside Y (and Z; `run` checked the extents), and no
                // other task writes them (the ranges split strips and
                // panels disjointly, and products do not overlap).
                unsafe { dispatch(rows, wide == NR, zmm, packed, args) };
                s += 1;
            }
        }
    }
}

/// Copies the columns of `strips` from the `k` rows (pitch `pitch`, `n`
/// columns) of `x` into `packed`, one strip after another, each row-major
/// (16 or 8 columns per row). Made contiguous because, read in place, each
/// row was a new page for the TLB and the prefetchers; the copies have
/// fixed widths so that they compile to vector moves (with the width a
/// runtime value each was a call to `memmove`, a quarter of the time of
/// the layers with few output channels).
fn pack_strips(
    x: &[f32],
    pitch: usize,
    n: usize,
    strips: std::ops::Range<usize>,
    packed: &mut [f32],
) {
    let k = (x.len() - n) / pitch + 1;
    for (s, strip) in strips.zip(packed.chunks_exact_mut(k * NR)) {
        let (j, wide) = strip_at(s, n);
        let rows = (0..k).map(|r| &x[r * pitch + j..]);
        if wide == NR {
            for (dst, row) in strip.chunks_exact_mut(NR).zip(rows) {
                dst.copy_from_slice(&row[..NR]);
            }
        } else {
            for (dst, row) in strip[..k * (NR / 2)].chunks_exact_mut(NR / 2).zip(rows) {
                dst.copy_from_slice(&row[..NR / 2]);
            }
        }
    }
}

/// First column and width of strip `s` of `n` columns: whole strips of 16,
/// then the rest as a strip of 16 or of 8 pulled back to end at column n.
fn strip_at(s: usize, n: usize) -> (usize, usize) {
    if s < n / NR {
        (s * NR, NR)
    } else if n % NR > NR / 2 {
        (n - NR, NR)
    } else {
        (n - NR / 2, NR / 2)
    }
}

/// `range` in consecutive pieces of `per` items (at least 1), the last one
/// shorter if need be: the chunks of strips whose packed copies stay in L2.
fn chunks(
    range: std::ops::Range<usize>,
    per: usize,
) -> impl Iterator<Item = std::ops::Range<usize>> {
    let (end, per) = (range.end, per.max(1));
    range
        .step_by(per)
        .map(move |first| first..(first + per).min(end))
}

/// Range `t` of `tasks` near-equal ranges of `total` items (sizes differ by
/// at most one); the last item, which overlaps the one before it, always
/// shares that one's range.
fn task_range(t: usize, tasks: usize, total: usize) -> std::ops::Range<usize> {
    let bound = |i: usize| {
        let b = i * total / tasks.max(1);
        if b + 1 == total && total > 1 {
            b - 1
        } else {
            b
        }
    };
    bound(t)..bound(t + 1)
}

/// Range `t` of `tasks` near-equal ranges of `total` panels, cut between
/// pairs so that the 512-bit block runs two at a time.
fn pair_range(t: usize, tasks: usize, total: usize) -> std::ops::Range<usize> {
    let pairs = total.div_ceil(2);
    let bound = |i: usize| (2 * (i * pairs / tasks.max(1))).min(total);
    bound(t)..bound(t + 1)
}

/// Run `t` of `runs` near-equal runs of the blocks of a product of `n`
/// columns and `panels` panels, taken strip by strip and, within a strip,
/// pair of panels by pair (or, where `pair_major`, pair by pair and, within
/// a pair, strip by strip): per piece it touches, the strips and panels.
/// Where the last strip is pulled back over the one before it, the two go
/// together, so no two tasks write the same outputs.
///
/// Strip-major, so a strip of X is read from memory once per run and its
/// pairs of panels reuse it; pair-major runs read X's strips once per pair
/// (24×24 planes, 176→64: 594 against 567 µs for 8 layers on two threads).
/// Where W has more rows than X has columns, W is the operand that does
/// not stay in cache (ResNeXt's 1024→2048 on 7×7: 8 MiB of W, 200 KiB of
/// X), and strip-major read all of it from memory once per strip: there
/// each pair of panels runs over all the strips instead.
fn block_run(
    t: usize,
    runs: usize,
    n: usize,
    panels: usize,
    pair_major: bool,
) -> impl Iterator<Item = (std::ops::Range<usize>, std::ops::Range<usize>)> {
    let strips = n.div_ceil(NR);
    let units = if strips > 1 && !n.is_multiple_of(NR) {
        strips - 1
    } else {
        strips
    };
    let pairs = panels.div_ceil(2);
    let blocks = units * pairs;
    let runs = runs.max(1);
    let (first, end) = (t * blocks / runs, (t + 1) * blocks / runs);
    // Blocks per step of the outer index (a strip unit, or a pair).
    let inner = if pair_major { units } else { pairs };
    (first / inner..end.div_ceil(inner)).filter_map(move |o| {
        let i0 = first.max(o * inner) - o * inner;
        let i1 = end.min((o + 1) * inner) - o * inner;
        if i0 >= i1 {
            return None;
        }
        // Units u0..u1 as strips: the last unit takes the pulled-back strip.
        let strips_of = |u0: usize, u1: usize| u0..if u1 == units { strips } else { u1 };
        Some(if pair_major {
            (strips_of(i0, i1), 2 * o..(2 * o + 2).min(panels))
        } else {
            (strips_of(o, o + 1), 2 * i0..(2 * i1).min(panels))
        })
    })
}

/// Where the blocks read X's strips.
#[derive(Clone, Copy)]
enum Strips<'a> {
    /// Packed one after another from the first strip of the range.
    Packed(&'a [f32]),
    /// In X's own rows.
    InPlace,
}

/// The activation applied in registers, or after each block's store.
enum Epilogue {
    None,
    Relu,
    Clip(f32, f32),
    /// In registers on x86-64 (a multiply then an add, as
    /// `Activation::eval`: the same bits); elsewhere an `Other`.
    #[cfg(target_arch = "x86_64")]
    HardSwish,
    Other(Activation),
}

impl Epilogue {
    fn of(act: Option<Activation>) -> Epilogue {
        match act {
            None => Epilogue::None,
            Some(Activation::Relu) => Epilogue::Relu,
            Some(Activation::Clip(lo, hi)) => Epilogue::Clip(lo, hi),
            #[cfg(target_arch = "x86_64")]
            Some(Activation::HardSwish) => Epilogue::HardSwish,
            Some(a) => Epilogue::Other(a),
        }
    }
}

/// The arguments of [`block`].
type BlockArgs<'a> = (
    *const f32,
    usize,
    usize,
    usize,
    &'a [f32],
    Option<&'a [f32]>,
    Option<*const f32>,
    *mut f32,
    &'a Epilogue,
);

/// Whether the CPU has the 512-bit block (AVX-512F), which takes whole
/// strips two panels at a time.
fn zmm_blocks() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::ops::gemm::simd::has_avx512()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unpacking gives back every weight bit for bit, for row counts that
    /// fill their last panel and rows that do not.
    #[test]
    fn unpack_inverts_pack() {
        for (matrices, rows, k) in [(1, 6, 5), (3, 7, 4), (2, 13, 1), (1, 1, 9), (0, 4, 4)] {
            let w: Vec<f32> = (0..matrices * rows * k)
                .map(|i| (i as f32 * 0.37).sin())
                .collect();
            let packed = pack(matrices, rows, k, &w);
            let back = unpack(matrices, rows, k, &packed);
            assert_eq!(back.len(), w.len());
            assert!(back.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    /// Chunks cover their range in order, each `per` long but the last.
    #[test]
    fn chunks_cover_the_range_in_order() {
        let got: Vec<_> = chunks(3..11, 3).collect();
        assert_eq!(got, [3..6, 6..9, 9..11]);
        assert_eq!(chunks(4..9, 0).count(), 5, "per 0 counts as 1");
        assert_eq!(chunks(2..2, 4).count(), 0);
    }

    /// The strip helpers cover each column once; the last task range always
    /// takes the overlapping last item with the one before it.
    #[test]
    fn strips_and_task_ranges_cover_everything() {
        for n in [16, 23, 24, 25, 49, 57, 100] {
            let mut seen = vec![0; n];
            for s in 0..n.div_ceil(NR) {
                let (j, wide) = strip_at(s, n);
                assert!(j + wide <= n);
                seen[j..j + wide].iter_mut().for_each(|v| *v += 1);
            }
            assert!(seen.iter().all(|&v| v >= 1), "{n}: {seen:?}");
        }
        for total in 1..40 {
            for tasks in 1..10 {
                let ranges: Vec<_> = (0..tasks).map(|t| task_range(t, tasks, total)).collect();
                let pairs: Vec<_> = (0..tasks).map(|t| pair_range(t, tasks, total)).collect();
                for rs in [&ranges, &pairs] {
                    // In order, each item once.
                    assert_eq!(rs[0].start, 0);
                    assert_eq!(rs[tasks - 1].end, total);
                    assert!(rs.windows(2).all(|w| w[0].end == w[1].start));
                }
                assert!(
                    total < 2
                        || ranges
                            .iter()
                            .any(|r| r.contains(&(total - 2)) && r.contains(&(total - 1)))
                );
                // Near-equal: one item apart (two where the last item joins
                // its neighbour; a pair apart for panels).
                let lens = |rs: &[std::ops::Range<usize>]| {
                    let l: Vec<_> = rs.iter().map(|r| r.len()).collect();
                    l.iter().max().unwrap() - l.iter().min().unwrap()
                };
                assert!(lens(&ranges) <= 2, "{total} / {tasks}: {ranges:?}");
                assert!(lens(&pairs) <= 2, "{total} / {tasks}: {pairs:?}");
                assert!(pairs.iter().all(|r| r.start % 2 == 0));
            }
        }
    }

    /// Runs of blocks take every (strip, panel) once, in
    /// near-equal numbers, and keep a pulled-back last strip with the one
    /// it overlaps, in either order.
    #[test]
    fn block_runs_cover_every_block_once() {
        for n in [16usize, 17, 24, 32, 40, 47, 49, 144, 150] {
            let strips = n.div_ceil(NR);
            let pulled = strips > 1 && !n.is_multiple_of(NR);
            for panels in 1..14 {
                for runs in 1..10 {
                    for pair_major in [false, true] {
                        let pieces: Vec<Vec<_>> = (0..runs)
                            .map(|t| block_run(t, runs, n, panels, pair_major).collect())
                            .collect();
                        let got: Vec<Vec<(usize, usize)>> = pieces
                            .iter()
                            .map(|run| {
                                run.iter()
                                    .flat_map(|(ss, ps): &(std::ops::Range<usize>, _)| {
                                        let ss = ss.clone();
                                        ps.clone()
                                            .step_by(2)
                                            .flat_map(move |p| ss.clone().map(move |s| (s, p)))
                                    })
                                    .collect()
                            })
                            .collect();
                        let mut sorted: Vec<_> = got.iter().flatten().copied().collect();
                        let mut want: Vec<_> = (0..strips)
                            .flat_map(|s| (0..panels).step_by(2).map(move |p| (s, p)))
                            .collect();
                        sorted.sort_unstable();
                        want.sort_unstable();
                        let what = format!("{n}/{panels}/{runs}/{pair_major}");
                        assert_eq!(sorted, want, "{what}");
                        // Pulled back: the last strip comes with the one before.
                        for (ss, _) in pieces.iter().flatten() {
                            if pulled && (ss.contains(&(strips - 1)) || ss.contains(&(strips - 2)))
                            {
                                assert!(ss.contains(&(strips - 1)) && ss.contains(&(strips - 2)));
                            }
                        }
                        // Near-equal: one block apart, a pulled-back pair counting once.
                        let weight = |s: usize| if pulled && s + 2 >= strips { 0.5 } else { 1.0 };
                        let lens: Vec<f64> = got
                            .iter()
                            .map(|r| r.iter().map(|&(s, _)| weight(s)).sum())
                            .collect();
                        let spread = lens.iter().cloned().fold(0.0, f64::max)
                            - lens.iter().cloned().fold(f64::MAX, f64::min);
                        assert!(spread <= 1.0 + 1e-9, "{what}: {lens:?}");
                    }
                }
            }
        }
    }

    /// Packing puts weight (matrix g, row r, step kk) at its panel's slot
    /// and zero in the rows past the last; no rows or no steps pack to
    /// nothing or to zeros.
    #[test]
    fn pack_lays_out_panels_of_six_rows() {
        for (matrices, rows, k) in [(1, 6, 3), (2, 13, 5), (3, 1, 4), (2, 7, 0), (1, 0, 3)] {
            let w: Vec<f32> = (0..matrices * rows * k).map(|i| i as f32 + 1.0).collect();
            let packed = pack(matrices, rows, k, &w);
            let panels = rows.div_ceil(MR);
            assert_eq!(packed.len(), matrices * panels * k * MR);
            for g in 0..matrices {
                for i in 0..panels {
                    for kk in 0..k {
                        for r in 0..MR {
                            let row = i * MR + r;
                            let want = if row < rows {
                                w[(g * rows + row) * k + kk]
                            } else {
                                0.0
                            };
                            let at = ((g * panels + i) * k + kk) * MR + r;
                            assert_eq!(
                                packed[at], want,
                                "{matrices}×{rows}×{k}: g {g} row {row} kk {kk}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Pitched X and Y, several products, bias and Relu: every output is
    /// the naive sum (to rounding), and outputs outside the blocks stay.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn products_match_naive_sums() {
        use crate::ops::testutil::rand_vec;
        if !available() {
            return;
        }
        // The second shape has more rows than columns: its blocks run pair
        // of panels by pair where X is read in place.
        for (count, rows, k, n, x_pitch, y_pitch) in
            [(3, 13, 7, 37, 41, 40), (2, 40, 9, 19, 19, 19)]
        {
            let x = rand_vec(count * k * x_pitch, 1);
            let w = rand_vec(count * rows * k, 2);
            let b = rand_vec(count * rows, 3);
            let packed = pack(count, rows, k, &w);
            let at = |i: usize| At {
                x: i * k * x_pitch,
                w: i,
                y: i * rows * y_pitch,
                bias: i * rows,
            };
            let job = Products {
                count,
                rows,
                k,
                n,
                x_pitch,
                y_pitch,
                at: &at,
                x: &x,
                packed: &packed,
                bias: Some(&b),
                z: None,
                act: Some(Activation::Relu),
            };
            let run = |zmm, in_place| {
                let mut y = vec![f32::NAN; count * rows * y_pitch];
                // SAFETY: the kernel is available and the products' Y rows
                // are disjoint.
                unsafe { job.run_on(&mut y, zmm, in_place) };
                y
            };
            let y = run(false, false);
            // The 512-bit block (two panels, whole strips), where the CPU has
            // it, and X read in place rather than packed do the same products
            // in the same order.
            for (zmm, in_place) in [(true, false), (false, true), (true, true)] {
                let same = run(zmm, in_place)
                    .iter()
                    .zip(&y)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "blocks differ (zmm {zmm}, in place {in_place})");
            }
            // Hard-swish in registers (x86-64) gives the bits of the sums
            // without it followed by the activation's own pass, on every
            // kind of block.
            for (zmm, in_place) in [(false, false), (true, false), (false, true), (true, true)] {
                let with = |act| {
                    let job = Products { act, ..job };
                    let mut y = vec![f32::NAN; count * rows * y_pitch];
                    // SAFETY: as above.
                    unsafe { job.run_on(&mut y, zmm, in_place) };
                    y
                };
                let mut want = with(None);
                Activation::HardSwish.apply(&mut want);
                let got = with(Some(Activation::HardSwish));
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                assert!(same, "hard-swish differs (zmm {zmm}, in place {in_place})");
                assert!(got.iter().any(|v| *v != 0.0 && v.is_finite()));
            }
            for i in 0..count {
                for r in 0..rows {
                    for j in 0..y_pitch {
                        let got = y[(i * rows + r) * y_pitch + j];
                        if j >= n {
                            assert!(got.is_nan(), "column {j} past n written");
                            continue;
                        }
                        let sum: f32 = (0..k)
                            .map(|kk| w[(i * rows + r) * k + kk] * x[(i * k + kk) * x_pitch + j])
                            .sum::<f32>()
                            + b[i * rows + r];
                        let want = sum.max(0.0);
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
