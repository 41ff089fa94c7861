//! The time loop shared by RNN, GRU and LSTM: converts the inputs to the
//! compute type and the sequence-major layout, projects every time step's
//! input through W in one product per direction, steps the cell through time
//! (honouring `sequence_lens`: a batch row stops at its length, its state is
//! held and its later Y rows are zero), and lays out Y, Y_h and Y_c.
//! Directions run in parallel; each writes only its own outputs.

use super::spec::{Cell, Dims, Recurrent, Scalar, StepCtx};
use crate::error::{Error, Result};
use crate::ops::gemm::checked_product;
use crate::ops::parallel::par_collect;
use crate::tensor::recycle::{give_back, take_or_default};
use crate::tensor::{DType, Tensor};
use half::{bf16, f16};
use ndarray::{ArrayD, ArrayView2, ArrayViewMut2, IxDyn};

/// `out = a·wᵀ + beta·out` for row-major `a` (m×k), `w` (n×k), `out` (m×n).
pub(super) fn matmul_t<C: Scalar>(
    op: &str,
    a: &[C],
    (m, k, n): (usize, usize, usize),
    w: &[C],
    beta: C,
    out: &mut [C],
) -> Result<()> {
    let bad = |e| Error::op(op, format!("internal product shape: {e}"));
    let a = ArrayView2::from_shape((m, k), a).map_err(bad)?;
    let w = ArrayView2::from_shape((n, k), w).map_err(bad)?;
    let mut c = ArrayViewMut2::from_shape((m, n), out).map_err(bad)?;
    ndarray::linalg::general_mat_mul(C::one(), &a, &w.t(), beta, &mut c);
    Ok(())
}

/// A float tensor's values in the compute type.
fn values<C: Scalar>(t: &Tensor) -> Result<Vec<C>> {
    Ok(t.to_f64_vec()?
        .into_iter()
        .map(|v| C::from(v).unwrap_or_else(C::zero))
        .collect())
}

/// Swaps the first two axes of a row-major `[a, b, rest]` buffer.
pub(super) fn swap01<C: Copy>(v: &[C], a: usize, b: usize, rest: usize) -> Vec<C> {
    let mut out = Vec::with_capacity(v.len());
    for j in 0..b {
        for i in 0..a {
            let at = (i * b + j) * rest;
            out.extend_from_slice(&v[at..at + rest]);
        }
    }
    out
}

/// Row-major data of `shape` as a tensor of `dtype` (f16/bf16 rounded).
pub(super) fn to_tensor<C: Scalar>(
    op: &str,
    dtype: DType,
    shape: &[usize],
    data: Vec<C>,
) -> Result<Tensor> {
    fn arr<T>(op: &str, shape: &[usize], v: Vec<T>) -> Result<ArrayD<T>> {
        ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| Error::op(op, format!("internal: {e}")))
    }
    let f = |v: &C| v.to_f64().unwrap_or(f64::NAN);
    Ok(match dtype {
        DType::F64 => Tensor::F64(arr(op, shape, data.iter().map(f).collect())?),
        DType::F32 => Tensor::F32(arr(op, shape, data.iter().map(|v| f(v) as f32).collect())?),
        DType::F16 => Tensor::F16(arr(
            op,
            shape,
            data.iter().map(|v| f16::from_f64(f(v))).collect(),
        )?),
        DType::BF16 => Tensor::BF16(arr(
            op,
            shape,
            data.iter().map(|v| bf16::from_f64(f(v))).collect(),
        )?),
        other => return Err(Error::op(op, format!("unsupported element type {other}"))),
    })
}

/// One direction's inputs.
struct DirIn<'a, C> {
    w: &'a [C],
    step: StepCtx<'a, C>,
    wb: &'a [C],
    h0: Vec<C>,
    c0: Vec<C>,
    reversed: bool,
}

/// One direction's outputs: Y as `[seq, batch, hidden]`, final h and c.
pub(super) type DirOut<C> = (Vec<C>, Vec<C>, Vec<C>);

fn direction<K: Cell, C: Scalar>(
    cell: &K,
    d: &Dims,
    x: &[C],
    lens: &[usize],
    inp: DirIn<C>,
) -> Result<DirOut<C>> {
    let (h, gh, b) = (d.hidden, K::GATES * d.hidden, d.batch);
    let rows = d.seq * b;
    let mut xw = vec![C::zero(); checked_product(K::OP, &[rows, gh])?];
    matmul_t(K::OP, x, (rows, d.input, gh), inp.w, C::zero(), &mut xw)?;
    for row in xw.chunks_mut(gh.max(1)) {
        for (v, &bias) in row.iter_mut().zip(inp.wb) {
            *v = *v + bias;
        }
    }
    let mut ys = vec![C::zero(); checked_product(K::OP, &[rows, h])?];
    let (mut hs, mut cs) = (inp.h0, inp.c0);
    let mut buf = vec![C::zero(); b * gh];
    let mut h_new = vec![C::zero(); b * h];
    let mut c_new = vec![C::zero(); cs.len()];
    let c_w = if K::HAS_C { h } else { 0 };
    for s in 0..d.seq {
        // The time index each batch row reads at this step, if still running.
        let time = |bi: usize| -> Option<usize> {
            let len = lens[bi];
            (s < len).then(|| if inp.reversed { len - 1 - s } else { s })
        };
        for bi in 0..b {
            if let Some(t) = time(bi) {
                let src = (t * b + bi) * gh;
                buf[bi * gh..(bi + 1) * gh].copy_from_slice(&xw[src..src + gh]);
            }
        }
        cell.step(&inp.step, &mut buf, &hs, &cs, &mut h_new, &mut c_new)?;
        for bi in 0..b {
            if let Some(t) = time(bi) {
                let row = bi * h..(bi + 1) * h;
                hs[row.clone()].copy_from_slice(&h_new[row.clone()]);
                let dst = (t * b + bi) * h;
                ys[dst..dst + h].copy_from_slice(&h_new[row]);
                let crow = bi * c_w..(bi + 1) * c_w;
                cs[crow.clone()].copy_from_slice(&c_new[crow]);
            }
        }
    }
    Ok((ys, hs, cs))
}

/// Runs the node in compute type `C`: Y, Y_h and Y_c in the node's layout.
pub(super) fn run<K: Cell, C: Scalar>(
    node: &Recurrent<K>,
    d: &Dims,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Vec<C>>> {
    let op = K::OP;
    let get = |i: usize| inputs.get(i).copied().flatten();
    let bf = node.common.batch_first;
    let (h, gh, b, dirs) = (d.hidden, K::GATES * d.hidden, d.batch, d.dirs);
    let state_len = checked_product(op, &[dirs, b, h])?;
    checked_product(op, &[d.seq, state_len])?;
    let mut x = values::<C>(get(0).ok_or_else(|| Error::op(op, "X is missing"))?)?;
    if bf {
        x = swap01(&x, b, d.seq, d.input);
    }
    let w = values::<C>(get(1).ok_or_else(|| Error::op(op, "W is missing"))?)?;
    let r = values::<C>(get(2).ok_or_else(|| Error::op(op, "R is missing"))?)?;
    let bias = match get(3) {
        Some(t) => values::<C>(t)?,
        None => vec![C::zero(); dirs * 2 * gh],
    };
    let lens = lens(op, get(4), d)?;
    let state = |i: usize, has: bool| -> Result<Vec<C>> {
        match get(i) {
            Some(t) if has => {
                let v = values::<C>(t)?;
                Ok(if bf { swap01(&v, b, dirs, h) } else { v })
            }
            _ => Ok(vec![C::zero(); if has { state_len } else { 0 }]),
        }
    };
    let h0 = state(5, true)?;
    let c0 = state(6, K::HAS_C)?;
    let p = match get(7) {
        Some(t) if K::HAS_C => Some(values::<C>(t)?),
        _ => None,
    };
    let clip = node.common.clip.map(|c| C::from(c).unwrap_or_else(C::zero));
    let per_dir = K::ACTS.len();
    let c_len = if K::HAS_C { b * h } else { 0 };
    // The directions run in parallel unless the operator is held to one
    // thread.
    let per_task = if crate::ops::util::op_threads() > 1 {
        1
    } else {
        dirs.max(1)
    };
    let results: Vec<DirOut<C>> = par_collect(dirs, per_task, |di| {
        let inp = DirIn {
            w: &w[di * gh * d.input..(di + 1) * gh * d.input],
            wb: &bias[di * 2 * gh..di * 2 * gh + gh],
            h0: h0[di * b * h..(di + 1) * b * h].to_vec(),
            c0: c0[di * c_len..(di + 1) * c_len].to_vec(),
            reversed: node.common.direction.reversed(di),
            step: StepCtx {
                hidden: h,
                batch: b,
                r: &r[di * gh * h..(di + 1) * gh * h],
                rb: &bias[di * 2 * gh + gh..(di + 1) * 2 * gh],
                p: p.as_deref().map(|p| &p[di * 3 * h..(di + 1) * 3 * h]),
                acts: &node.common.acts[di * per_dir..(di + 1) * per_dir],
                clip,
            },
        };
        direction(&node.cell, d, &x, &lens, inp)
    })
    .into_iter()
    .collect::<Result<_>>()?;
    Ok(assemble(results, d, bf, K::HAS_C))
}

/// The `sequence_lens` input as lengths (every row `d.seq` without it).
pub(super) fn lens(op: &str, t: Option<&Tensor>, d: &Dims) -> Result<Vec<usize>> {
    match t {
        Some(t) => t
            .to_i64_vec()?
            .into_iter()
            .map(|l| match usize::try_from(l) {
                Ok(l) if l <= d.seq => Ok(l),
                _ => Err(Error::op(
                    op,
                    format!("sequence_lens value {l} is outside [0, {}]", d.seq),
                )),
            })
            .collect(),
        None => Ok(vec![d.seq; d.batch]),
    }
}

/// Lays out the directions' results (Y as `[seq, batch, hidden]` each) as
/// Y, Y_h and (with a cell state) Y_c in the node's layout.
pub(super) fn assemble<C: Copy + Default + 'static>(
    results: Vec<DirOut<C>>,
    d: &Dims,
    bf: bool,
    has_c: bool,
) -> Vec<Vec<C>> {
    let (h, b, dirs) = (d.hidden, d.batch, d.dirs);
    // Y as [seq, dirs, batch, hidden] (or [batch, seq, dirs, hidden]),
    // in a recycled buffer: each span below is copied to its place in turn.
    let mut y = take_or_default::<C>(d.seq * dirs * b * h);
    let mut spans = y.chunks_exact_mut(if bf { h } else { b * h }.max(1));
    let mut put = |src: &[C]| {
        if let Some(dst) = spans.next() {
            dst.copy_from_slice(src);
        }
    };
    if bf {
        for bi in 0..b {
            for t in 0..d.seq {
                for (ys, _, _) in &results {
                    let at = (t * b + bi) * h;
                    put(&ys[at..at + h]);
                }
            }
        }
    } else {
        for t in 0..d.seq {
            for (ys, _, _) in &results {
                put(&ys[t * b * h..(t + 1) * b * h]);
            }
        }
    }
    let gather = |pick: &dyn Fn(&DirOut<C>) -> &Vec<C>| -> Vec<C> {
        let flat: Vec<C> = results
            .iter()
            .flat_map(|r| pick(r).iter().copied())
            .collect();
        if bf {
            swap01(&flat, dirs, b, h)
        } else {
            flat
        }
    };
    let yh = gather(&|r| &r.1);
    let mut outs = vec![y, yh];
    if has_c {
        outs.push(gather(&|r| &r.2));
    }
    for (ys, _, _) in results {
        give_back(ys);
    }
    outs
}
