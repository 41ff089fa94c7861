//! The f32 fast path of RNN, GRU and LSTM: data stays in f32; the input
//! projection of every time step and direction is one product through the
//! GEMM engine that MatMul uses (W transposed once, the biases folded into
//! its epilogue); each time step multiplies the hidden state by R packed in
//! panels ([`Packed`]), taking the panels in the opposite order on
//! alternate steps (the same sums; the panels read last are still cached
//! when the next step starts), and runs one fused gate kernel per batch
//! row ([`gates`]). W and R are prepared once at build when they are constants
//! (as in exported models), else on every run. The projection is cut into
//! blocks by size alone and each direction's time loop runs on one thread,
//! so results are bit-identical whatever the number of threads; directions
//! run in parallel. DynamicQuantizeLSTM's 8-bit weights take the same loop
//! with int8 products in place of both f32 ones ([`int8`]).

mod split;

use super::activation::Act;
use super::driver::{self, DirOut};
use super::gates::{self, GateCfg};
use super::int8::{self, Int8Weights, QuantizedMatrix, StepScratch};
use super::pack::Packed;
use super::spec::{Cell, CellKind, Dims, Recurrent};
use crate::error::{Error, Result};
use crate::ir::BuildContext;
use crate::ops::gemm::checked_product;
use crate::ops::gemm::contiguous;
use crate::ops::gemm::engine::{Batched, Block, Mat};
use crate::ops::parallel::par_collect;
use crate::ops::parallel::SendPtr;
use crate::tensor::recycle::{give_back, take_or_default};
use crate::tensor::Tensor;
use std::borrow::Cow;

/// Constant weights packed for the packed-weights GEMM (x86-64; nowhere
/// else, where the projection takes the general engine).
#[cfg(target_arch = "x86_64")]
type PackedW = crate::ops::gemm::packed::PackedWeights;
#[cfg(not(target_arch = "x86_64"))]
#[derive(Debug, Clone)]
enum PackedW {}

/// W and R of every direction, laid out for the fast path.
#[derive(Debug, Clone)]
pub(super) struct Prepared {
    dirs: usize,
    gates_hidden: usize,
    input: usize,
    hidden: usize,
    weights: Weights,
}

/// The weights themselves: f32, or 8-bit (DynamicQuantizeLSTM's).
#[derive(Debug, Clone)]
enum Weights {
    F32 {
        /// Wᵀ of all directions side by side: `input × dirs·gates·hidden`
        /// (empty where `wp` holds it).
        wt: Vec<f32>,
        /// The same Wᵀ packed for the packed-weights GEMM, where the CPU
        /// has its kernel.
        wp: Option<PackedW>,
        /// Per direction, R packed: GRU without `linear_before_reset` has
        /// the z and r gates' rows and the h gate's rows apart; the others
        /// one.
        packs: Vec<Vec<Packed>>,
    },
    Int8(Int8Weights),
}

impl Prepared {
    /// Prepares row-major `w` (`dirs × gh × input`) and `r` (`dirs × gh ×
    /// hidden`).
    fn new(kind: CellKind, w: &[f32], r: &[f32], d: &Dims) -> Result<Prepared> {
        let gh = kind.gates() * d.hidden;
        let cols = checked_product(kind.op(), &[d.dirs, gh])?;
        if w.len() != checked_product(kind.op(), &[cols, d.input])?
            || r.len() != checked_product(kind.op(), &[cols, d.hidden])?
        {
            return Err(Error::op(kind.op(), "internal: weights of unexpected size"));
        }
        // W is `cols × input` row-major: Wᵀ transposed, as the packing takes it.
        #[cfg(target_arch = "x86_64")]
        let wp = PackedW::new(w, d.input, cols, true);
        #[cfg(not(target_arch = "x86_64"))]
        let wp: Option<PackedW> = None;
        let mut wt = Vec::new();
        if wp.is_none() {
            wt = vec![0f32; w.len()];
            for (row, wrow) in w.chunks_exact(d.input.max(1)).enumerate() {
                for (i, &v) in wrow.iter().enumerate() {
                    wt[i * cols + row] = v;
                }
            }
        }
        let hh = d.hidden * d.hidden;
        let packs = (0..d.dirs)
            .map(|di| {
                let r = &r[di * gh * d.hidden..(di + 1) * gh * d.hidden];
                match kind {
                    CellKind::Gru {
                        linear_before_reset: false,
                    } => vec![
                        Packed::new(&r[..2 * hh], 2 * d.hidden, d.hidden),
                        Packed::new(&r[2 * hh..], d.hidden, d.hidden),
                    ],
                    _ => vec![Packed::new(r, gh, d.hidden)],
                }
            })
            .collect();
        Ok(Prepared {
            dirs: d.dirs,
            gates_hidden: gh,
            input: d.input,
            hidden: d.hidden,
            weights: Weights::F32 { wt, wp, packs },
        })
    }

    /// Prepares 8-bit W (`dirs × input × gh`) and R (`dirs × hidden × gh`)
    /// of an LSTM for the int8 products, where those are the fast path on
    /// this CPU and the parts fit together.
    pub(super) fn from_quantized(
        kind: CellKind,
        w: QuantizedMatrix,
        r: QuantizedMatrix,
    ) -> Option<Prepared> {
        let ([dirs, input, gh], [_, hidden, _]) = (w.shape, r.shape);
        if !matches!(kind, CellKind::Lstm { .. }) || gh != kind.gates() * hidden {
            return None;
        }
        if !int8::fast_on_this_cpu() {
            return None;
        }
        Some(Prepared {
            dirs,
            gates_hidden: gh,
            input,
            hidden,
            weights: Weights::Int8(Int8Weights::new(w, r)?),
        })
    }

    /// Prepares constant f32 W and R at build, when they have consistent
    /// shapes (anything else is left to the run, which reports it).
    pub(super) fn from_consts(kind: CellKind, dirs: usize, ctx: &BuildContext) -> Option<Prepared> {
        let (Some(Tensor::F32(w)), Some(Tensor::F32(r))) = (ctx.constant(1), ctx.constant(2))
        else {
            return None;
        };
        if w.shape().first() != Some(&dirs) {
            return None;
        }
        Prepared::from_weights(
            kind,
            (&contiguous(w), w.shape()),
            (&contiguous(r), r.shape()),
        )
    }

    /// Prepares row-major W and R given with their shapes (`dirs × gh ×
    /// input` and `dirs × gh × hidden`), when those are consistent.
    pub(super) fn from_weights(
        kind: CellKind,
        (w, ws): (&[f32], &[usize]),
        (r, rs): (&[f32], &[usize]),
    ) -> Option<Prepared> {
        if ws.len() != 3 || rs.len() != 3 || ws[0] != rs[0] {
            return None;
        }
        let hidden = rs[2];
        if rs[1] != kind.gates() * hidden || ws[1] != rs[1] {
            return None;
        }
        let d = Dims {
            seq: 0,
            batch: 0,
            input: ws[2],
            hidden,
            dirs: ws[0],
        };
        Prepared::new(kind, w, r, &d).ok()
    }

    pub(super) fn fits(&self, d: &Dims, gh: usize) -> bool {
        (self.dirs, self.gates_hidden, self.input, self.hidden) == (d.dirs, gh, d.input, d.hidden)
            && match &self.weights {
                Weights::F32 { .. } => true,
                Weights::Int8(w) => w.fits(d.dirs, gh, d.input, d.hidden),
            }
    }
}

/// A float input's f32 data (the dtype was checked: every float input is f32).
fn data<'a>(op: &str, t: Option<&'a Tensor>, name: &str) -> Result<Option<Cow<'a, [f32]>>> {
    match t {
        None => Ok(None),
        Some(Tensor::F32(a)) => Ok(Some(contiguous(a))),
        Some(other) => Err(Error::op(
            op,
            format!("{name} is {}, X is float32", other.dtype()),
        )),
    }
}

/// The gate settings of a direction with activations `acts`.
fn gate_cfg(kind: CellKind, acts: &[Act], clip: Option<f32>) -> GateCfg {
    let (defaults, pick): (&[Act], [usize; 3]) = match kind {
        CellKind::Simple => (&[Act::Tanh], [0, 0, 0]),
        CellKind::Gru { .. } => (&[Act::Sigmoid, Act::Tanh], [0, 1, 1]),
        CellKind::Lstm { .. } => (&[Act::Sigmoid, Act::Tanh, Act::Tanh], [0, 1, 2]),
    };
    let acts = if acts == defaults {
        None
    } else {
        let get = |i: usize| acts.get(i).copied().unwrap_or(Act::Tanh);
        Some(pick.map(get))
    };
    GateCfg { acts, clip }
}

/// The recurrence products of one direction.
#[derive(Clone, Copy)]
enum Recurrence<'a> {
    /// R packed in f32 (see [`Weights::F32`]).
    F32(&'a [Packed]),
    /// The int8 weights and the direction.
    Int8(&'a Int8Weights, usize),
}

/// What one direction's time loop reads.
struct Dir<'a> {
    kind: CellKind,
    rec: Recurrence<'a>,
    /// The input projection of all directions, `ld` values a row.
    xw: &'a [f32],
    ld: usize,
    /// This direction's first column in `xw`.
    col0: usize,
    batch_first: bool,
    lens: &'a [usize],
    reversed: bool,
    /// Peepholes i, o, f (zeros without them), `3·hidden`.
    p: &'a [f32],
    /// The h gate's recurrence bias (GRU with `linear_before_reset`).
    rbn: &'a [f32],
    cfg: GateCfg,
    h0: &'a [f32],
    c0: &'a [f32],
}

impl Dir<'_> {
    /// The time index batch row `bi` reads at step `s`, if still running.
    fn time(&self, s: usize, bi: usize) -> Option<usize> {
        let len = self.lens[bi];
        (s < len).then(|| if self.reversed { len - 1 - s } else { s })
    }

    /// The input projection (all gates) of batch row `bi` at time `t`.
    fn xrow(&self, d: &Dims, t: usize, bi: usize) -> &[f32] {
        let row = if self.batch_first {
            bi * d.seq + t
        } else {
            t * d.batch + bi
        };
        let at = row * self.ld + self.col0;
        &self.xw[at..at + self.kind.gates() * d.hidden]
    }
}

fn direction(d: &Dims, dir: Dir) -> DirOut<f32> {
    if let Some(pack) = split::fits(d, &dir) {
        return split::direction(d, &dir, pack);
    }
    let (h, b, seq) = (d.hidden, d.batch, d.seq);
    let gh = dir.kind.gates() * h;
    // Steps past a row's sequence length stay zero.
    let mut ys = take_or_default::<f32>(seq * b * h);
    ys.fill(0.0);
    let mut hs = dir.h0.to_vec();
    let mut cs = dir.c0.to_vec();
    let lbr0 = matches!(
        dir.kind,
        CellKind::Gru {
            linear_before_reset: false
        }
    );
    let rec_w = if lbr0 { 2 * h } else { gh };
    let mut rec = vec![0f32; b * rec_w];
    let mut scratch = StepScratch::default();
    let (mut z, mut rh, mut rec2) = if lbr0 {
        (vec![0f32; b * h], vec![0f32; b * h], vec![0f32; b * h])
    } else {
        (Vec::new(), Vec::new(), Vec::new())
    };
    for s in 0..seq {
        let time = |bi: usize| dir.time(s, bi);
        if (0..b).all(|bi| time(bi).is_none()) {
            break;
        }
        let xrow = |t: usize, bi: usize| dir.xrow(d, t, bi);
        match dir.rec {
            Recurrence::F32(packs) if s % 2 == 1 => {
                packs[0].mul_backward(&hs, b, h, &mut rec, rec_w)
            }
            Recurrence::F32(packs) => packs[0].mul(&hs, b, h, &mut rec, rec_w),
            Recurrence::Int8(w, di) => w.step(di, &hs, b, &mut rec, rec_w, &mut scratch),
        }
        for bi in 0..b {
            let Some(t) = time(bi) else { continue };
            let (x, r) = (xrow(t, bi), &rec[bi * rec_w..(bi + 1) * rec_w]);
            let hrow = &mut hs[bi * h..(bi + 1) * h];
            match dir.kind {
                CellKind::Lstm { input_forget } => gates::lstm(
                    dir.cfg,
                    input_forget,
                    x,
                    r,
                    dir.p,
                    hrow,
                    &mut cs[bi * h..(bi + 1) * h],
                ),
                CellKind::Simple => gates::rnn(dir.cfg, x, r, hrow),
                CellKind::Gru {
                    linear_before_reset: true,
                } => gates::gru_lbr(dir.cfg, x, r, dir.rbn, hrow),
                CellKind::Gru { .. } => {
                    let row = bi * h..(bi + 1) * h;
                    gates::gru_zr(dir.cfg, x, r, hrow, &mut z[row.clone()], &mut rh[row]);
                }
            }
        }
        if let (true, Recurrence::F32(packs)) = (lbr0, dir.rec) {
            packs[1].mul(&rh, b, h, &mut rec2, h);
            for bi in 0..b {
                let Some(t) = time(bi) else { continue };
                let row = bi * h..(bi + 1) * h;
                let xn = &xrow(t, bi)[2 * h..];
                gates::gru_h(
                    dir.cfg,
                    xn,
                    &rec2[row.clone()],
                    &z[row.clone()],
                    &mut hs[row],
                );
            }
        }
        for bi in 0..b {
            if let Some(t) = time(bi) {
                ys[(t * b + bi) * h..(t * b + bi + 1) * h]
                    .copy_from_slice(&hs[bi * h..(bi + 1) * h]);
            }
        }
    }
    (ys, hs, cs)
}

/// `xw = X·Wᵀ + bias` for the rows of X (in its own layout) and every
/// direction's gates: on the packed-weights GEMM where W was packed (each
/// element one in-order chain of fused multiply-adds, then the bias),
/// else through the GEMM engine (or the int8 engine).
fn project(x: &[f32], rows: usize, prep: &Prepared, bias: &[f32], xw: &mut [f32]) {
    let (wt, wp) = match &prep.weights {
        Weights::F32 { wt, wp, .. } => (wt, wp),
        Weights::Int8(w) => return w.project(x, rows, bias, xw),
    };
    let (n, k) = (prep.dirs * prep.gates_hidden, prep.input);
    if rows == 0 || n == 0 || x.len() < rows * k || xw.len() < rows * n || bias.len() < n {
        return;
    }
    if let Some(wp) = wp {
        project_packed(wp, &x[..rows * k], rows, &bias[..n], &mut xw[..rows * n]);
        return;
    }
    let out = SendPtr(xw.as_mut_ptr());
    let a = |_| Mat::row_major(x.as_ptr(), k);
    let b = |_| Mat::row_major(wt.as_ptr(), n);
    let c = |_| out;
    let epilogue = |blk: Block| {
        for r in blk.r0..blk.r1 {
            // SAFETY: each block is handed to one epilogue call, after the
            // engine wrote it; the row segment lies inside xw.
            let row = unsafe { out.slice(r * n + blk.c0, blk.c1 - blk.c0) };
            for (v, &bv) in row.iter_mut().zip(&bias[blk.c0..blk.c1]) {
                *v += bv;
            }
        }
    };
    let product = Batched {
        batches: 1,
        m: rows,
        n,
        k,
        alpha: 1.0,
        a: &a,
        b: &b,
        c: &c,
        epilogue: Some(&epilogue),
    };
    // SAFETY: x is rows × k, wt k × n and xw rows × n, all row-major and
    // checked above; xw is not otherwise touched during the product.
    unsafe { product.run() }
}

/// `xw = x·Wᵀ + bias` on the packed weights: x is `rows × k`, xw `rows × n`
/// (the sizes `project` checked).
#[cfg(target_arch = "x86_64")]
fn project_packed(wp: &PackedW, x: &[f32], rows: usize, bias: &[f32], xw: &mut [f32]) {
    let epi = crate::ops::gemm::packed::PackedEpilogue {
        bias: Some(bias),
        act: None,
    };
    let done = wp.matmul("recurrent input projection", x, rows, epi, xw);
    debug_assert!(done.is_ok(), "project checked the sizes");
}

#[cfg(not(target_arch = "x86_64"))]
fn project_packed(wp: &PackedW, _: &[f32], _: usize, _: &[f32], _: &mut [f32]) {
    match *wp {}
}

/// Runs a node whose inputs are f32: Y, Y_h and Y_c in the node's layout.
pub(super) fn run<K: Cell>(
    node: &Recurrent<K>,
    d: &Dims,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Vec<f32>>> {
    let (op, kind) = (K::OP, node.cell.kind());
    let get = |i: usize| inputs.get(i).copied().flatten();
    let bf = node.common.batch_first;
    let (h, b, dirs) = (d.hidden, d.batch, d.dirs);
    let gh = kind.gates() * h;
    let state_len = checked_product(op, &[dirs, b, h])?;
    let rows = checked_product(op, &[d.seq, b])?;
    checked_product(op, &[rows, dirs, gh.max(h)])?;
    let x = data(op, get(0), "X")?.ok_or_else(|| Error::op(op, "X is missing"))?;
    let local;
    let prep = match &node.prepared {
        Some(p) if p.fits(d, gh) => p,
        _ => {
            let w = data(op, get(1), "W")?.ok_or_else(|| Error::op(op, "W is missing"))?;
            let r = data(op, get(2), "R")?.ok_or_else(|| Error::op(op, "R is missing"))?;
            local = Prepared::new(kind, &w, &r, d)?;
            &local
        }
    };
    let zeros = vec![0f32; dirs * 2 * gh];
    let bias = data(op, get(3), "B")?.unwrap_or(Cow::Borrowed(&zeros));
    let lbr = matches!(
        kind,
        CellKind::Gru {
            linear_before_reset: true
        }
    );
    // Wb + Rb per direction, but for the h gate of a GRU with
    // linear_before_reset, whose Rb goes inside the reset product.
    let mut folded = vec![0f32; dirs * gh];
    let mut rbn = vec![0f32; dirs * h];
    for di in 0..dirs {
        let (wb, rb) = (
            &bias[di * 2 * gh..di * 2 * gh + gh],
            &bias[di * 2 * gh + gh..(di + 1) * 2 * gh],
        );
        for j in 0..gh {
            let keep_apart = lbr && j >= 2 * h;
            folded[di * gh + j] = if keep_apart { wb[j] } else { wb[j] + rb[j] };
        }
        if lbr {
            rbn[di * h..(di + 1) * h].copy_from_slice(&rb[2 * h..]);
        }
    }
    // Every element is written by the projection; recycled, as a large
    // block would otherwise be fresh pages on every run.
    let mut xw = take_or_default::<f32>(rows * dirs * gh);
    project(&x, rows, prep, &folded, &mut xw);
    let lens = driver::lens(op, get(4), d)?;
    let state = |i: usize, has: bool| -> Result<Vec<f32>> {
        Ok(match data(op, get(i), "initial state")? {
            Some(v) if has => {
                if bf {
                    driver::swap01(&v, b, dirs, h)
                } else {
                    v.into_owned()
                }
            }
            _ => vec![0f32; if has { state_len } else { 0 }],
        })
    };
    let h0 = state(5, true)?;
    let c0 = state(6, kind.has_c())?;
    let p = match data(op, get(7), "P")? {
        Some(p) if kind.has_c() => p.into_owned(),
        _ => vec![0f32; dirs * 3 * h],
    };
    let c_len = if kind.has_c() { b * h } else { 0 };
    let per_dir = node.common.acts.len() / dirs.max(1);
    let per_task = if crate::ops::util::op_threads() > 1 {
        1
    } else {
        dirs.max(1)
    };
    let results: Vec<DirOut<f32>> = par_collect(dirs, per_task, |di| {
        let acts = node
            .common
            .acts
            .get(di * per_dir..(di + 1) * per_dir)
            .unwrap_or(&[]);
        let dir = Dir {
            kind,
            rec: match &prep.weights {
                Weights::F32 { packs, .. } => Recurrence::F32(&packs[di]),
                Weights::Int8(w) => Recurrence::Int8(w, di),
            },
            xw: &xw,
            ld: dirs * gh,
            col0: di * gh,
            batch_first: bf,
            lens: &lens,
            reversed: node.common.direction.reversed(di),
            p: &p[di * 3 * h..(di + 1) * 3 * h],
            rbn: &rbn[di * h..(di + 1) * h],
            cfg: gate_cfg(kind, acts, node.common.clip),
            h0: &h0[di * b * h..(di + 1) * b * h],
            c0: &c0[di * c_len..(di + 1) * c_len],
        };
        direction(d, dir)
    });
    give_back(xw);
    Ok(driver::assemble(results, d, bf, kind.has_c()))
}
