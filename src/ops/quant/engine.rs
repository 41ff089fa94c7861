//! The int8 matrix-product engine behind the quantized convolutions and
//! matrix products: `C = (W − zw) · (X − zx)` with W an s8 operand packed
//! once ([`PackedS8`], the weights) and X a u8 operand packed per run in
//! panels of [`NR`] columns ([`panel`]), accumulated exactly in i32 (AVX-512
//! VNNI `vpdpbusd` where the CPU has it, else the narrow AVX2 kernel under
//! the overflow guard; NEON `sdot` or widening multiplies on aarch64; else
//! a portable kernel: see [`kernel`]; integer
//! arithmetic, so every path and every split gives the same bits), then
//! handed tile by tile to a [`Sink`] that requantizes or stores (or, on the
//! VNNI kernel, requantized in registers when the sink allows it).
//!
//! Any 8-bit signedness maps onto u8 × s8: a u8 weight `w` is the s8 value
//! `w − 128` (its zero point moves by −128) and an s8 activation `x` is the
//! u8 value `x + 128` (its zero point moves by +128); both are `byte ^ 0x80`.
//! Zero points enter through sums: `Σ(w−zw)(x−zx) = Σwx − zx·Σw − zw·Σx +
//! K·zx·zw`, with `Σw` per row at packing and `Σx` per column only when some
//! `zw ≠ 0`.

mod few;
mod float_sink;
mod in_place;
mod kernel;
mod lanes;
pub(crate) mod matrix;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
pub(crate) mod panel;
pub(crate) mod sink;
mod weights;

pub(crate) use float_sink::FloatSink;
pub(crate) use in_place::InPlace;
#[cfg(target_arch = "x86_64")]
pub(crate) use kernel::has_vnni512;
#[cfg(target_arch = "aarch64")]
pub(crate) use neon::has_dotprod;
pub(crate) use sink::{QuantSink, Sink, WideSink};
pub(crate) use weights::PackedS8;

use crate::ops::overflow as guard;
use crate::ops::util::op_threads;

/// Rows of C per micro-kernel tile (output channels).
pub(crate) const MR: usize = 8;
/// Columns of C per micro-kernel tile (pixels, or rows of a matrix product's
/// left operand).
pub(crate) const NR: usize = 32;
/// One tile of i32 results, row-major with stride [`NR`].
pub(crate) type Tile = [i32; MR * NR];

/// Packs columns `c0 .. c0 + n` (n ≤ [`NR`]) of the u8 operand into a panel
/// (see [`panel`]); called once per panel per run, from any thread.
pub(crate) trait PanelSource: Sync {
    /// Fills `panel` (`k4 · NR · 4` bytes) for columns `c0 .. c0 + n`.
    fn pack(&self, panel: &mut [u8], c0: usize, n: usize);
}

/// One product `C[rows × cols] = (W − zw)(X − zx) + bias`.
pub(crate) struct Product<'a> {
    /// The packed s8 operand (rows of C).
    pub w: &'a PackedS8,
    /// Columns of C.
    pub cols: usize,
    /// The u8 operand's zero point (in the u8 domain).
    pub zero_x: i32,
    /// Per row of C, added to the exact sum (QLinearConv's bias).
    pub bias: Option<&'a [i32]>,
}

impl Product<'_> {
    /// Runs the product, in parallel over column panels and row blocks on
    /// the current pool, handing each finished tile to `sink`.
    pub(crate) fn run(&self, src: &dyn PanelSource, sink: &dyn Sink) {
        self.run_with(src, sink, true);
    }

    /// [`Product::run`], with the channels-in-lanes kernel ([`lanes`]) for
    /// partial panels where it takes them and `lanes` allows it.
    pub(crate) fn run_with(&self, src: &dyn PanelSource, sink: &dyn Sink, lanes: bool) {
        let w = self.w;
        let row_add = self.row_add();
        let col_sums_needed = w.zero.iter().any(|&z| z != 0);
        let panels = self.cols.div_ceil(NR);
        let blocks = w.blocks();
        let (col_tasks, row_tasks) = self.task_split(panels);
        // The run's kernel and guard, read on the operator's thread.
        let settings = guard::current();
        let (kind, guarded) = (settings.kernel.resolve(), settings.guard);
        let recomputed = std::sync::atomic::AtomicU64::new(0);
        // Tiles requantized straight from the kernel's registers, where the
        // sink and the kernel allow it and no column correction is needed.
        let requant = if col_sums_needed || kind != guard::Resolved::Vnni {
            None
        } else {
            sink.requant()
        };
        // A product of few columns (one, as a rule: a matrix-vector product)
        // reduces along k instead of filling 32-column tiles.
        let few_columns = self.cols <= few::FEW && kind == guard::Resolved::Vnni;
        // Adds the rows' additions (and column corrections) to a tile of
        // rows r0 .. r0 + nr, panel columns pc .. pc + nc, and stores it.
        let finish = |tile: &mut Tile, sums: &[i32; NR], (r0, nr): (usize, usize), c0, pc, nc| {
            for r in 0..nr {
                let add = row_add[r0 + r];
                let zw = w.zero[r0 + r];
                let row = &mut tile[r * NR..][..nc];
                if col_sums_needed && zw != 0 {
                    for (v, s) in row.iter_mut().zip(&sums[pc..]) {
                        *v = v.wrapping_add(add).wrapping_sub(zw.wrapping_mul(*s));
                    }
                } else {
                    row.iter_mut().for_each(|v| *v = v.wrapping_add(add));
                }
            }
            sink.store(r0, c0 + pc, nr, nc, tile);
        };
        // One panel split by rows (a matrix-vector product, as a rule) is
        // packed once here rather than by every task.
        let shared = (panels == 1 && row_tasks > 1)
            .then(|| PackedPanel::new(src, w.k4, self.cols, col_sums_needed, few_columns));
        let task = |t: usize| {
            let (ct, rt) = (t / row_tasks, t % row_tasks);
            let (p0, p1) = split(panels, col_tasks, ct);
            let (b0, b1) = split(blocks, row_tasks, rt);
            let mut own = None;
            let mut tile: Tile = [0; MR * NR];
            for p in p0..p1 {
                let c0 = p * NR;
                let n = NR.min(self.cols - c0);
                let packed = match &shared {
                    Some(packed) => packed,
                    None => {
                        let packed = own.get_or_insert_with(|| PackedPanel::empty(w.k4));
                        packed.pack(src, c0, n, col_sums_needed, few_columns);
                        packed
                    }
                };
                let (buf, sums, pairs) = (&packed.buf, &packed.sums, &packed.pairs);
                if lanes && !few_columns && kind == guard::Resolved::Vnni && lanes::takes(n, w.rows)
                {
                    self.lanes_panel(buf, (b0, b1), (c0, n), &requant, &row_add, sums, &finish);
                    continue;
                }
                for b in b0..b1 {
                    let r0 = b * MR;
                    let nr = MR.min(w.rows - r0);
                    if few_columns && few::tile(w.block(b), pairs, w.k4, n, &mut tile) {
                        // Exact sums (VNNI); the rows' additions and the
                        // sink follow as for any tile.
                    } else if let Some(dst) = &requant {
                        let add = &row_add[r0..r0 + nr];
                        if kernel::tile_requant(w.block(b), buf, w.k4, add, dst, (r0, c0), (nr, n))
                        {
                            continue;
                        }
                        self.full_tile(kind, guarded, b, buf, &mut tile, &recomputed);
                    } else {
                        self.full_tile(kind, guarded, b, buf, &mut tile, &recomputed);
                    }
                    finish(&mut tile, sums, (r0, nr), c0, 0, n);
                }
            }
        };
        crate::ops::parallel::par_for(col_tasks * row_tasks, task);
        guard::record(recomputed.into_inner());
    }
}

impl Product<'_> {
    /// Per row of C, what its exact sums add: the bias, less the x zero
    /// point's share (`zx·Σw`), plus `K·zx·zw`.
    fn row_add(&self) -> Vec<i32> {
        let w = self.w;
        let (k, zx) = (w.k as i32, self.zero_x);
        (0..w.rows)
            .map(|r| {
                let b = self.bias.map_or(0, |b| b[r]);
                b.wrapping_sub(zx.wrapping_mul(w.row_sums[r]))
                    .wrapping_add(k.wrapping_mul(zx).wrapping_mul(w.zero[r]))
            })
            .collect()
    }

    /// How [`Product::run`] splits `panels` column panels and the row
    /// blocks into tasks: (column tasks, row tasks).
    fn task_split(&self, panels: usize) -> (usize, usize) {
        let threads = op_threads();
        // Split columns first (each panel is packed once per task), then rows
        // when there are too few panels to keep every thread busy.
        let want = threads * crate::ops::util::TASKS_PER_THREAD;
        let col_tasks = panels.min(want).max(1);
        let row_tasks = if panels >= threads * 2 {
            1
        } else {
            self.w.blocks().min(want.div_ceil(col_tasks)).max(1)
        };
        (col_tasks, row_tasks)
    }
}

/// One packed panel of the u8 operand with what the kernels read beside it.
struct PackedPanel {
    /// The panel, `k4 · NR · 4` bytes.
    buf: Vec<u8>,
    /// Per column, the sum of its bytes (when some weight zero point is set).
    sums: [i32; NR],
    /// The columns' four-k groups in pairs (for the few-columns kernel).
    pairs: Vec<u8>,
}

impl PackedPanel {
    fn empty(k4: usize) -> PackedPanel {
        PackedPanel {
            buf: vec![0u8; k4 * NR * 4],
            sums: [0; NR],
            pairs: Vec::new(),
        }
    }

    /// Columns `0 .. cols` (at most [`NR`]) packed.
    fn new(src: &dyn PanelSource, k4: usize, cols: usize, sums: bool, few: bool) -> PackedPanel {
        let mut p = PackedPanel::empty(k4);
        p.pack(src, 0, cols.min(NR), sums, few);
        p
    }

    /// Packs columns `c0 .. c0 + n`, with their sums and pairs where asked.
    fn pack(&mut self, src: &dyn PanelSource, c0: usize, n: usize, sums: bool, few: bool) {
        let k4 = self.buf.len() / (NR * 4);
        src.pack(&mut self.buf, c0, n);
        if sums {
            panel::column_sums(&self.buf, k4, &mut self.sums);
        }
        if few {
            few::pairs(&self.buf, k4, n, &mut self.pairs);
        }
    }
}

/// The tail of [`Product::run`]'s tiles: adds, corrects and stores one.
type Finish<'a> = dyn Fn(&mut Tile, &[i32; NR], (usize, usize), usize, usize, usize) + 'a;

impl Product<'_> {
    /// Blocks `b0 .. b1` by the panel's `n` columns on the channels-in-lanes
    /// kernel ([`lanes`]): fused requantization into `requant` where given,
    /// else the sums through `finish` as the tile kernel's.
    #[allow(clippy::too_many_arguments)]
    fn lanes_panel(
        &self,
        panel: &[u8],
        (b0, b1): (usize, usize),
        (c0, n): (usize, usize),
        requant: &Option<sink::Requant>,
        row_add: &[i32],
        col_sums: &[i32; NR],
        finish: &Finish,
    ) {
        let w = self.w;
        let mut sums: lanes::Sums = [[0; lanes::ROWS]; lanes::PX];
        let mut tile: Tile = [0; MR * NR];
        for b in (b0..b1).step_by(lanes::BLOCKS) {
            let blocks: [&[i8]; lanes::BLOCKS] =
                std::array::from_fn(|j| w.block(if b + j < b1 { b + j } else { b }));
            let r0 = b * MR;
            let nr = (lanes::ROWS).min(b1 * MR - r0).min(w.rows - r0);
            for (pc, p) in lanes::tiles(n) {
                if let Some(dst) = requant {
                    let add = &row_add[r0..r0 + nr];
                    if lanes::requant(blocks, panel, w.k4, (pc, p), add, dst, (r0, nr), c0 + pc) {
                        continue;
                    }
                }
                let exact = lanes::sums(blocks, panel, w.k4, (pc, p), &mut sums);
                assert!(
                    exact,
                    "the channels-in-lanes kernel ran without its CPU features"
                );
                for j in 0..nr.div_ceil(MR) {
                    let rj = MR.min(nr - j * MR);
                    for r in 0..rj {
                        for (c, col) in sums.iter().enumerate().take(p) {
                            tile[r * NR + c] = col[j * MR + r];
                        }
                    }
                    finish(&mut tile, col_sums, (r0 + j * MR, rj), c0, pc, p);
                }
            }
        }
    }

    /// Block `b`'s whole tile on the run's kernel `kind`; under the guard, a
    /// tile whose narrow sums may have saturated is recomputed exactly (and
    /// counted in `recomputed`).
    fn full_tile(
        &self,
        kind: guard::Resolved,
        guarded: bool,
        b: usize,
        panel: &[u8],
        tile: &mut Tile,
        recomputed: &std::sync::atomic::AtomicU64,
    ) {
        let w = self.w.block(b);
        if !kernel::tile(kind, w, panel, self.w.k4, tile) && guarded {
            kernel::tile(guard::Resolved::Portable, w, panel, self.w.k4, tile);
            recomputed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The `i`-th of `parts` near-equal ranges of `0..n`.
fn split(n: usize, parts: usize, i: usize) -> (usize, usize) {
    (n * i / parts, n * (i + 1) / parts)
}

#[cfg(test)]
mod tests;
