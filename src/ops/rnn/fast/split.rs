//! One direction's time loop with every time step split across the pool's
//! threads (a single direction has no other parallel work: batch 1 GRU or
//! LSTM). The hidden units are cut into blocks of one recurrence panel
//! ([`NR`] units); a block computes, for every batch row, its units' rows
//! of each gate's product with the previous state and then their gates, so
//! blocks of a step share nothing but the previous state they read. Steps
//! follow one another through [`par_steps`]; the state is double-buffered
//! so that a block writing step `s`'s state never overwrites what another
//! block of step `s` still reads.
//!
//! Each output is the same sum over k, in the same order, and the gate
//! kernels are element-wise, so results are bit-identical to the serial
//! loop's on every pool.

use super::super::driver::DirOut;
use super::super::gates;
use super::super::pack::{Packed, NR};
use super::super::spec::{CellKind, Dims};
use super::{Dir, Recurrence};
use crate::ops::parallel::{op_threads, par_steps, SendPtr};
use crate::tensor::recycle::take_or_default;

/// Hidden units per block: one panel of each gate's rows.
const UNITS: usize = NR;

/// The most gates a cell has (LSTM's four).
const MAX_GATES: usize = 4;

/// The fewest multiply-adds a step's recurrence product must have for the
/// step to be split: below, synchronising the threads costs more than the
/// product.
const MIN_STEP_MACS: usize = 1 << 15;

/// R's pack when `dir` is run by [`direction`]: one direction on a pool of
/// several threads, f32 weights in one pack (not GRU without
/// `linear_before_reset`, whose step is two dependent products), hidden
/// units in at least two whole blocks, and a step worth splitting.
pub(super) fn fits<'a>(d: &Dims, dir: &Dir<'a>) -> Option<&'a Packed> {
    let Recurrence::F32([pack]) = dir.rec else {
        return None;
    };
    let lbr0 = matches!(
        dir.kind,
        CellKind::Gru {
            linear_before_reset: false
        }
    );
    let gh = dir.kind.gates() * d.hidden;
    let fits = d.dirs == 1
        && !lbr0
        && pack.n == gh
        && d.hidden.is_multiple_of(UNITS)
        && d.hidden >= 2 * UNITS
        && gh.saturating_mul(d.hidden).saturating_mul(d.batch) >= MIN_STEP_MACS
        && op_threads() > 1;
    fits.then_some(pack)
}

/// The time loop of [`super::direction`], each step split into blocks of
/// hidden units (see the module header); `pack` is R's, from [`fits`].
pub(super) fn direction(d: &Dims, dir: &Dir, pack: &Packed) -> DirOut<f32> {
    let (h, b, seq) = (d.hidden, d.batch, d.seq);
    let gates = dir.kind.gates();
    let blocks = h / UNITS;
    let block_rec = gates * UNITS;
    // Steps past a row's sequence length stay zero.
    let mut ys = take_or_default::<f32>(seq * b * h);
    ys.fill(0.0);
    let mut states = [dir.h0.to_vec(), dir.h0.to_vec()];
    let mut cs = dir.c0.to_vec();
    let mut rec = vec![0f32; blocks * b * block_rec];
    let [even, odd] = &mut states;
    let (even, odd) = (SendPtr(even.as_mut_ptr()), SendPtr(odd.as_mut_ptr()));
    let (ys_at, cs_at, rec_at) = (
        SendPtr(ys.as_mut_ptr()),
        SendPtr(cs.as_mut_ptr()),
        SendPtr(rec.as_mut_ptr()),
    );
    par_steps(seq, blocks, &|s, u| {
        let (prev, next) = if s % 2 == 0 { (even, odd) } else { (odd, even) };
        let u0 = u * UNITS;
        // SAFETY: during step s, `prev` (the state after step s − 1) is
        // only read: it was last written in step s − 1, which finished
        // before any block of step s started (par_steps), and it is next
        // written in step s + 1.
        let hprev = unsafe { std::slice::from_raw_parts(prev.0, b * h) };
        // SAFETY: block u alone uses its b·block_rec values of `rec`.
        let rec = unsafe { rec_at.slice(u * b * block_rec, b * block_rec) };
        for g in 0..gates {
            pack.mul_panel(g * blocks + u, hprev, b, h, rec, block_rec, g * UNITS);
        }
        for bi in 0..b {
            let unit0 = bi * h + u0;
            // SAFETY: units u0 .. u0 + UNITS of row bi of the next state
            // (and of the cell state) belong to block u alone in step s.
            let hn = unsafe { next.slice(unit0, UNITS) };
            hn.copy_from_slice(&hprev[unit0..unit0 + UNITS]);
            let Some(t) = dir.time(s, bi) else { continue };
            let x = gather(dir.xrow(d, t, bi), gates, h, u0);
            let r = &rec[bi * block_rec..(bi + 1) * block_rec];
            match dir.kind {
                CellKind::Lstm { input_forget } => {
                    let p = gather(dir.p, 3, h, u0);
                    // SAFETY: as for `hn`; `cs` has b·h values for an LSTM.
                    let c = unsafe { cs_at.slice(unit0, UNITS) };
                    gates::lstm(dir.cfg, input_forget, &x, r, &p, hn, c);
                }
                CellKind::Simple => gates::rnn(dir.cfg, &x, r, hn),
                CellKind::Gru { .. } => {
                    gates::gru_lbr(dir.cfg, &x, r, &dir.rbn[u0..u0 + UNITS], hn)
                }
            }
            // SAFETY: row (t, bi) of Y is written in step s alone (one
            // time index per step and row), its units u0.. by block u.
            let y = unsafe { ys_at.slice((t * b + bi) * h + u0, UNITS) };
            y.copy_from_slice(hn);
        }
    });
    let [even, odd] = states;
    let hs = if seq % 2 == 0 { even } else { odd };
    (ys, hs, cs)
}

/// Units `u0 .. u0 + UNITS` of each of the first `gates` gate segments (of
/// `h` values each) of `src`, side by side.
fn gather(src: &[f32], gates: usize, h: usize, u0: usize) -> [f32; MAX_GATES * UNITS] {
    let mut out = [0f32; MAX_GATES * UNITS];
    for g in 0..gates.min(MAX_GATES) {
        out[g * UNITS..(g + 1) * UNITS].copy_from_slice(&src[g * h + u0..g * h + u0 + UNITS]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::super::gates::GateCfg;
    use super::*;
    use crate::ops::testutil::with_threads;

    const GRU: CellKind = CellKind::Gru {
        linear_before_reset: true,
    };

    /// Whether a direction of `kind` with these sizes is split.
    fn splits(kind: CellKind, hidden: usize, batch: usize, dirs: usize) -> bool {
        let gh = kind.gates() * hidden;
        let pack = Packed::new(&vec![0.0; gh * hidden], gh, hidden);
        let packs = [pack];
        let zeros = vec![0f32; 4 * hidden * batch];
        let lens = vec![1; batch];
        let dir = Dir {
            kind,
            rec: Recurrence::F32(&packs),
            xw: &zeros,
            ld: gh,
            col0: 0,
            batch_first: false,
            lens: &lens,
            reversed: false,
            p: &zeros,
            rbn: &zeros,
            cfg: GateCfg {
                acts: None,
                clip: None,
            },
            h0: &zeros,
            c0: &zeros,
        };
        let d = Dims {
            seq: 1,
            batch,
            input: 1,
            hidden,
            dirs,
        };
        fits(&d, &dir).is_some()
    }

    #[test]
    fn splits_one_direction_of_whole_panels_on_several_threads() {
        with_threads(2, || {
            assert!(splits(GRU, 128, 1, 1));
            assert!(splits(
                CellKind::Lstm {
                    input_forget: false
                },
                256,
                4,
                1
            ));
            assert!(splits(CellKind::Simple, 192, 1, 1));
            // Two directions already run in parallel.
            assert!(!splits(GRU, 128, 1, 2));
            // Units not in whole panels, or a single panel.
            assert!(!splits(GRU, 160, 1, 1));
            assert!(!splits(GRU, 64, 4, 1));
            // A step too small to split: 128 × 128 multiply-adds.
            assert!(!splits(CellKind::Simple, 128, 1, 1));
        });
        with_threads(1, || assert!(!splits(GRU, 256, 1, 1)));
    }
}
