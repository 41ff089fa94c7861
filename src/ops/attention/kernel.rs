//! The attention kernel, one (batch, query head, query position) row at a
//! time: scaled `Q·Kᵀ`, softcap, additive bias (mask, causal, window and
//! padding), softmax, fully-masked-row guard and `P·V`.
//!
//! Data of type `T` is computed in `C` (f32 for f32/f16/bf16, f64 for f64),
//! rounding to `T` at the same points as the ONNX reference (which computes
//! in `T`), and the softmax in `P` (the `softmax_precision` type). Rows are
//! split over the rayon pool with `par_rows`; each row is computed by one
//! call in a fixed order, so results do not depend on the thread count.

use super::geom::Geom;
use crate::ops::norm::Real;
use crate::ops::unary::kernel::Float;
use crate::ops::util::par_rows;
use crate::tensor::DType;
use half::bf16;

/// The additive bias sources of one node.
pub(crate) struct Bias<C> {
    /// The mask as additive values (`-inf` where a boolean mask is false or
    /// the last axis was padded), shape `dims` with the last axis padded to
    /// the total sequence length.
    pub mask: Option<(Vec<C>, [usize; 4])>,
    /// Causal masking.
    pub causal: bool,
    /// Sliding window (left, right); negative is unbounded.
    pub window: (i64, i64),
    /// Per-batch count of valid keys (`nonpad_kv_seqlen`).
    pub nonpad: Option<Vec<i64>>,
}

impl<C: Real> Bias<C> {
    /// Whether anything is added to the scores.
    fn any(&self) -> bool {
        self.mask.is_some()
            || self.causal
            || self.window.0 >= 0
            || self.window.1 >= 0
            || self.nonpad.is_some()
    }

    /// Fills `out` with the bias row of (batch `b`, head `h`, query `i`).
    fn row(&self, g: &Geom, b: usize, h: usize, i: usize, out: &mut [C]) {
        let off = match &self.nonpad {
            Some(n) if g.past == 0 => n[b] - g.sq as i64,
            _ => g.past as i64,
        };
        let padding = self.nonpad.as_ref().map(|n| n[b]);
        let (left, right) = self.window;
        let ninf = C::neg_infinity();
        let mrow = self.mask.as_ref().map(|(v, d)| {
            let at = |x: usize, dim: usize| if dim == 1 { 0 } else { x };
            let idx = ((at(b, d[0]) * d[1] + at(h, d[1])) * d[2] + at(i, d[2])) * d[3];
            &v[idx..idx + d[3]]
        });
        for (j, o) in out.iter_mut().enumerate() {
            let diff = i as i64 + off - j as i64;
            let mut ok = !self.causal || diff >= 0;
            ok &= left < 0 || diff <= left;
            ok &= right < 0 || -diff <= right;
            ok &= padding.is_none_or(|n| (j as i64) < n);
            let m = mrow.map_or(C::zero(), |r| r[j]);
            *o = if ok { m } else { m + ninf };
        }
    }
}

/// Scalar settings of the kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// `sqrt(scale)`, applied to both Q and K.
    pub scale_sqrt: f64,
    /// Softcap (applied when > 0).
    pub softcap: f32,
    /// qk_matmul_output_mode, or `None` when that output is not requested.
    pub qk_mode: Option<i64>,
}

/// The inputs of the kernel, row-major in their ONNX layouts.
pub(crate) struct Inputs<'a, T> {
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    pub past: Option<(&'a [T], &'a [T])>,
}

/// Y, present_key, present_value and qk_matmul_output (empty unless requested).
pub(crate) type Outputs<T> = (Vec<T>, Vec<T>, Vec<T>, Vec<T>);

#[inline(always)]
fn rt<T: Float, C: Real>(x: C) -> C {
    C::from_elem(x.to_elem::<T>())
}

/// Concatenates past and new keys (or values) into `[b, hkv, total, d]`.
fn present<T: Copy>(g: &Geom, past: Option<&[T]>, new: &[T], d: usize) -> Vec<T> {
    let total = g.total();
    let mut out = Vec::with_capacity(g.b * g.hkv * total * d);
    for b in 0..g.b {
        for h in 0..g.hkv {
            if let Some(p) = past {
                let s = (b * g.hkv + h) * g.past * d;
                out.extend_from_slice(&p[s..s + g.past * d]);
            }
            for j in 0..g.skv {
                let s = if g.rank3 {
                    (b * g.skv + j) * g.hkv * d + h * d
                } else {
                    ((b * g.hkv + h) * g.skv + j) * d
                };
                out.extend_from_slice(&new[s..s + d]);
            }
        }
    }
    out
}

/// The softmax in a given precision (the `softmax_precision` type): chosen
/// once per run, so the attention kernel is compiled once per data and
/// compute type, not once more per precision.
#[derive(Clone, Copy)]
pub(crate) struct Softmax<C> {
    run: fn(&mut [C], bool),
    /// The sum is rounded after every step (bfloat16, as NumPy sums it).
    per_step: bool,
}

impl<C: Real> Softmax<C> {
    /// The softmax rounding to `p` (f64, f32, f16; any other type: bf16).
    pub(crate) fn new(p: DType) -> Softmax<C> {
        let run: fn(&mut [C], bool) = match p {
            DType::F64 => softmax::<C, f64>,
            DType::F32 => softmax::<C, f32>,
            DType::F16 => softmax::<C, half::f16>,
            _ => softmax::<C, bf16>,
        };
        let per_step = !matches!(p, DType::F64 | DType::F32 | DType::F16);
        Softmax { run, per_step }
    }
}

/// Runs attention with the softmax `sm`.
pub(crate) fn attend<T: Float, C: Real>(
    g: &Geom,
    prm: &Params,
    x: &Inputs<T>,
    bias: &Bias<C>,
    sm: Softmax<C>,
) -> Outputs<T> {
    let total = g.total();
    let pk = present(g, x.past.map(|p| p.0), x.k, g.dh);
    let pv = present(g, x.past.map(|p| p.1), x.v, g.dv);
    let s = C::from_elem(T::from_f64(prm.scale_sqrt));
    let ks: Vec<C> = pk
        .iter()
        .map(|&e| rt::<T, C>(C::from_elem(e) * s))
        .collect();
    let vs: Vec<C> = pv.iter().map(|&e| C::from_elem(e)).collect();
    let qs: Vec<C> =
        x.q.iter()
            .map(|&e| rt::<T, C>(C::from_elem(e) * s))
            .collect();
    let cap = rt::<T, C>(C::of(prm.softcap as f64));
    let qk_len = if prm.qk_mode.is_some() { total } else { 0 };
    let row_len = g.dv + qk_len;
    let rows = g.b * g.hq * g.sq;
    let mut buf = vec![T::default(); rows * row_len];
    let reps = g.hq / g.hkv;
    let has_bias = bias.any();
    par_rows(&mut buf, row_len, |first, chunk| {
        let mut sc = vec![C::zero(); total];
        let mut bs = vec![C::zero(); total];
        let mut acc = vec![C::zero(); g.dv];
        // Rows of no columns (no values, no scores) leave nothing to do.
        for (r, out) in chunk.chunks_mut(row_len.max(1)).enumerate() {
            let r = first + r;
            let (b, h, i) = (r / (g.hq * g.sq), (r / g.sq) % g.hq, r % g.sq);
            let hk = h / reps;
            let qrow = if g.rank3 {
                let s = (b * g.sq + i) * g.hq * g.dh + h * g.dh;
                &qs[s..s + g.dh]
            } else {
                &qs[r * g.dh..(r + 1) * g.dh]
            };
            let kbase = (b * g.hkv + hk) * total;
            let (y, qk) = out.split_at_mut(g.dv);
            for (j, o) in sc.iter_mut().enumerate() {
                let krow = &ks[(kbase + j) * g.dh..(kbase + j + 1) * g.dh];
                let mut d = C::zero();
                for (&a, &c) in qrow.iter().zip(krow) {
                    d = d + a * c;
                }
                let mut v = rt::<T, C>(d);
                if prm.softcap > 0.0 {
                    v = rt::<T, C>(rt::<T, C>(rt::<T, C>(v / cap).tanh()) * cap);
                }
                *o = v;
            }
            if matches!(prm.qk_mode, Some(0) | Some(1)) {
                for (o, &v) in qk.iter_mut().zip(&sc) {
                    *o = v.to_elem::<T>();
                }
            }
            let mut masked = false;
            if has_bias {
                bias.row(g, b, h, i, &mut bs);
                for (o, &a) in sc.iter_mut().zip(&bs) {
                    *o = rt::<T, C>(*o + a);
                }
                masked = total > 0 && bs.iter().all(|&a| a == C::neg_infinity());
            }
            if prm.qk_mode == Some(2) {
                for (o, &v) in qk.iter_mut().zip(&sc) {
                    *o = v.to_elem::<T>();
                }
            }
            (sm.run)(&mut sc, sm.per_step);
            if masked {
                sc.fill(C::zero());
            }
            if prm.qk_mode == Some(3) {
                for (o, &v) in qk.iter_mut().zip(&sc) {
                    *o = v.to_elem::<T>();
                }
            }
            acc.fill(C::zero());
            let vbase = (b * g.hkv + hk) * total;
            for (j, &p) in sc.iter().enumerate() {
                let p = rt::<T, C>(p);
                let vrow = &vs[(vbase + j) * g.dv..(vbase + j + 1) * g.dv];
                for (a, &v) in acc.iter_mut().zip(vrow) {
                    *a = *a + p * v;
                }
            }
            for (o, &a) in y.iter_mut().zip(&acc) {
                *o = a.to_elem::<T>();
            }
        }
    });
    split(g, buf, row_len, pk, pv)
}

/// Separates Y (transposed back to `[b, sq, hq·dv]` for 3-D inputs) and
/// qk_matmul_output from the row buffer.
fn split<T: Copy>(g: &Geom, buf: Vec<T>, row_len: usize, pk: Vec<T>, pv: Vec<T>) -> Outputs<T> {
    let rows = g.b * g.hq * g.sq;
    let mut y = Vec::with_capacity(rows * g.dv);
    if g.rank3 {
        for b in 0..g.b {
            for i in 0..g.sq {
                for h in 0..g.hq {
                    let r = (b * g.hq + h) * g.sq + i;
                    y.extend_from_slice(&buf[r * row_len..r * row_len + g.dv]);
                }
            }
        }
    } else {
        for r in 0..rows {
            y.extend_from_slice(&buf[r * row_len..r * row_len + g.dv]);
        }
    }
    let mut qk = Vec::new();
    if row_len > g.dv {
        qk.reserve(rows * (row_len - g.dv));
        for r in 0..rows {
            qk.extend_from_slice(&buf[r * row_len + g.dv..(r + 1) * row_len]);
        }
    }
    (y, pk, pv, qk)
}

/// The reference softmax in precision `P`: a fully `-inf` row gives zeros,
/// NaN propagates. The sum is rounded to `P` after every step when
/// `per_step` (how NumPy sums bfloat16), else once.
fn softmax<C: Real, P: Float>(x: &mut [C], per_step: bool) {
    let mut m = C::neg_infinity();
    for v in x.iter_mut() {
        *v = rt::<P, C>(*v);
        if v.is_nan() || m.is_nan() {
            m = C::nan();
        } else if *v > m {
            m = *v;
        }
    }
    let m = if m == C::neg_infinity() { C::zero() } else { m };
    let mut sum = C::zero();
    for v in x.iter_mut() {
        *v = rt::<P, C>(rt::<P, C>(*v - m).exp());
        sum = sum + *v;
        if per_step {
            sum = rt::<P, C>(sum);
        }
    }
    let mut sum = rt::<P, C>(sum);
    if sum == C::zero() {
        sum = C::one();
    }
    for v in x.iter_mut() {
        *v = rt::<P, C>(*v / sum);
    }
}
