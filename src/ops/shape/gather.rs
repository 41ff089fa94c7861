//! Gather, GatherElements and GatherND: reading elements or slices at
//! positions given by an integer index tensor. Negative indices count from
//! the end; indices out of range are errors.

use super::{increment, movement_flops, norm_axis, numel_of, strides};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, par_rows};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, Bits};
use crate::tensor::Tensor;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Gather", 1, build_gather);
    r.add("GatherElements", 11, build_gather_elements);
    r.add("GatherND", 11, build_gather_nd);
}

/// The values of an integer index tensor of any rank.
pub(super) fn index_values(op: &str, t: &Tensor) -> Result<Vec<i64>> {
    match t {
        Tensor::I64(_)
        | Tensor::I32(_)
        | Tensor::I16(_)
        | Tensor::I8(_)
        | Tensor::U8(_)
        | Tensor::U16(_)
        | Tensor::U32(_)
        | Tensor::U64(_) => t.to_i64_vec(),
        other => Err(Error::op(
            op,
            format!("indices must be integers, found {}", other.dtype()),
        )),
    }
}

/// Resolves index `i` (negative counts from the end) against `dim`.
pub(super) fn resolve(op: &str, i: i64, dim: usize) -> Result<usize> {
    let d = dim as i64;
    let v = if i < 0 { i + d } else { i };
    if v < 0 || v >= d {
        return Err(Error::op(
            op,
            format!("index {i} is out of range for a dimension of size {dim}"),
        ));
    }
    Ok(v as usize)
}

fn check_type(op: &str, f: &Fact) -> Result<()> {
    if f.dtype.is_float() || f.dtype == crate::DType::String || f.dtype == crate::DType::Bool {
        return Err(Error::op(
            op,
            format!("indices must be integers, found {}", f.dtype),
        ));
    }
    Ok(())
}

#[derive(Debug)]
struct Gather {
    axis: i64,
}

const GATHER: &str = "Gather";

fn build_gather(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Gather {
        axis: ctx.attrs.int("axis", 0)?,
    }))
}

fn gather_shape(axis: i64, data: &[usize], idx: &[usize]) -> Result<(usize, Vec<usize>)> {
    let a = norm_axis(GATHER, axis, data.len())?;
    let mut out = data[..a].to_vec();
    out.extend_from_slice(idx);
    out.extend_from_slice(&data[a + 1..]);
    Ok((a, out))
}

fn gather(x: &Tensor, axis: usize, idx: &[i64], out: &[usize]) -> Result<Tensor> {
    let s = x.shape();
    let rows: Vec<usize> = idx
        .iter()
        .map(|&i| resolve(GATHER, i, s[axis]))
        .collect::<Result<_>>()?;
    let block = Blocks {
        len: s[axis],
        inner: s[axis + 1..].iter().product(),
    };
    let v = by_width!(x, bits => Bits::vec(gather_blocks(bits, &block, &rows, out)?));
    Tensor::from_width(GATHER, x.dtype(), out, v)
}

/// Data seen as blocks of `len` rows of `inner` contiguous elements (one
/// block per position of the axes before Gather's): a Gather picks rows.
struct Blocks {
    len: usize,
    inner: usize,
}

/// For each outer block, its rows `rows` (validated, `< len`) in order:
/// one contiguous copy of `inner` elements per output row, into an output
/// of shape `out` (checked for size).
fn gather_blocks<T: Clone + Send + Sync + Default + 'static>(
    src: &[T],
    b: &Blocks,
    rows: &[usize],
    out: &[usize],
) -> Result<Vec<T>> {
    let n = numel_of::<T>(GATHER, out)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    // Every element is written below: a recycled buffer needs no zero-fill.
    let mut y = crate::tensor::recycle::take_or_default::<T>(n);
    par_rows(&mut y, b.inner, |first, chunk| {
        for (r, dst) in (first..).zip(chunk.chunks_mut(b.inner)) {
            let (o, j) = (r / rows.len(), r % rows.len());
            let at = (o * b.len + rows[j]) * b.inner;
            dst.clone_from_slice(&src[at..at + b.inner]);
        }
    });
    Ok(y)
}

impl Operator for Gather {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(GATHER, inputs, 0)?;
        let i = fact(GATHER, inputs, 1)?;
        check_type(GATHER, i)?;
        Ok(vec![match (&f.shape, &i.shape) {
            (Some(d), Some(ix)) => Fact::new(f.dtype, gather_shape(self.axis, d, ix)?.1),
            _ => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(GATHER, inputs, 0)?;
        let it = input(GATHER, inputs, 1)?;
        let idx = index_values(GATHER, it)?;
        let (axis, out) = gather_shape(self.axis, x.shape(), it.shape())?;
        Ok(vec![gather(x, axis, &idx, &out)?])
    }
}

#[derive(Debug)]
struct GatherElements {
    axis: i64,
}

const GE: &str = "GatherElements";

fn build_gather_elements(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(GatherElements {
        axis: ctx.attrs.int("axis", 0)?,
    }))
}

/// Checks the shapes of GatherElements / ScatterElements: same rank, and the
/// index tensor no larger than the data outside `axis`. Returns the axis.
pub(super) fn check_elements(op: &str, axis: i64, data: &[usize], idx: &[usize]) -> Result<usize> {
    let a = norm_axis(op, axis, data.len())?;
    if idx.len() != data.len() {
        return Err(Error::op(
            op,
            format!("indices shape {idx:?} and data shape {data:?} differ in rank"),
        ));
    }
    for d in 0..data.len() {
        if d != a && idx[d] > data[d] {
            return Err(Error::op(
                op,
                format!("indices shape {idx:?} exceeds data shape {data:?} outside axis {a}"),
            ));
        }
    }
    Ok(a)
}

/// For each position of the index tensor (row-major), the data offset it
/// addresses along `axis`; validated.
pub(super) fn element_offsets(
    op: &str,
    data: &[usize],
    idx_shape: &[usize],
    idx: &[i64],
    axis: usize,
) -> Result<Vec<usize>> {
    let st = strides(data);
    let mut pos = vec![0usize; idx_shape.len()];
    let mut out = Vec::with_capacity(idx.len());
    for &i in idx {
        let mut off = resolve(op, i, data[axis])? * st[axis];
        for d in 0..pos.len() {
            if d != axis {
                off += pos[d] * st[d];
            }
        }
        out.push(off);
        increment(&mut pos, idx_shape);
    }
    Ok(out)
}

fn gather_elements(x: &Tensor, offs: &[usize], shape: &[usize]) -> Result<Tensor> {
    let v = by_width!(x, s => Bits::vec(gather_elements_bits(s, offs, shape)?));
    Tensor::from_width(GE, x.dtype(), shape, v)
}

/// GatherElements on bits: `out[i] = src[offs[i]]`.
#[inline(never)]
fn gather_elements_bits<B: Clone + Default + Send + Sync>(
    src: &[B],
    offs: &[usize],
    shape: &[usize],
) -> Result<Vec<B>> {
    let n = numel_of::<B>(GE, shape)?;
    if offs.iter().any(|&o| o >= src.len()) {
        return Err(Error::op(GE, "internal error: offset out of range"));
    }
    let mut out = vec![B::default(); n];
    par_rows(&mut out, 1, |first, chunk| {
        for (o, &off) in chunk.iter_mut().zip(&offs[first..]) {
            *o = src[off].clone();
        }
    });
    Ok(out)
}

impl Operator for GatherElements {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(GE, inputs, 0)?;
        let i = fact(GE, inputs, 1)?;
        check_type(GE, i)?;
        if let (Some(d), Some(ix)) = (&f.shape, &i.shape) {
            check_elements(GE, self.axis, d, ix)?;
        }
        Ok(vec![super::fact_or_unknown(f.dtype, i.shape.clone())])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(GE, inputs, 0)?;
        let it = input(GE, inputs, 1)?;
        let axis = check_elements(GE, self.axis, x.shape(), it.shape())?;
        let idx = index_values(GE, it)?;
        let offs = element_offsets(GE, x.shape(), it.shape(), &idx, axis)?;
        Ok(vec![gather_elements(x, &offs, it.shape())?])
    }
}

#[derive(Debug)]
struct GatherNd {
    batch_dims: usize,
}

const GND: &str = "GatherND";

fn build_gather_nd(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let b = if ctx.opset >= 12 {
        ctx.attrs.int("batch_dims", 0)?
    } else {
        0
    };
    let batch_dims = usize::try_from(b).map_err(|_| {
        ctx.attrs
            .error("batch_dims", format!("must be non-negative, found {b}"))
    })?;
    Ok(Box::new(GatherNd { batch_dims }))
}

/// Shapes of a GatherND / ScatterND: returns (k, output shape).
pub(super) fn nd_shape(
    op: &str,
    b: usize,
    data: &[usize],
    idx: &[usize],
) -> Result<(usize, Vec<usize>)> {
    let q = idx.len();
    let r = data.len();
    if q == 0 || r == 0 {
        return Err(Error::op(op, "data and indices must have rank at least 1"));
    }
    if b >= q.min(r) {
        return Err(Error::op(
            op,
            format!("batch_dims {b} must be less than the ranks of data ({r}) and indices ({q})"),
        ));
    }
    if data[..b] != idx[..b] {
        return Err(Error::op(
            op,
            format!("batch dimensions differ: data {data:?}, indices {idx:?}"),
        ));
    }
    let k = idx[q - 1];
    if k < 1 || k > r - b {
        return Err(Error::op(
            op,
            format!(
                "the last indices dimension ({k}) must be in 1..={} for data {data:?}",
                r - b
            ),
        ));
    }
    let mut out = idx[..q - 1].to_vec();
    out.extend_from_slice(&data[b + k..]);
    Ok((k, out))
}

/// For each index tuple of a GatherND / ScatterND, the offset of its slice in the data.
pub(super) fn nd_offsets(
    op: &str,
    b: usize,
    k: usize,
    data: &[usize],
    idx_shape: &[usize],
    idx: &[i64],
) -> Result<Vec<usize>> {
    let st = strides(data);
    let q = idx_shape.len();
    let per_batch: usize = idx_shape[b..q - 1].iter().product();
    let batch_stride: usize = data[b..].iter().product();
    idx.chunks(k.max(1))
        .enumerate()
        .map(|(j, tuple)| {
            let batch = j.checked_div(per_batch).unwrap_or(0);
            let mut off = batch * batch_stride;
            for (m, &i) in tuple.iter().enumerate() {
                off += resolve(op, i, data[b + m])? * st[b + m];
            }
            Ok(off)
        })
        .collect()
}

fn gather_nd(x: &Tensor, offs: &[usize], slice: usize, out_shape: &[usize]) -> Result<Tensor> {
    let v = by_width!(x, s => Bits::vec(gather_nd_bits(s, offs, slice, out_shape)?));
    Tensor::from_width(GND, x.dtype(), out_shape, v)
}

/// GatherND on bits: slice `r` of the output is `src[offs[r]..][..slice]`.
#[inline(never)]
fn gather_nd_bits<B: Clone + Default + Send + Sync>(
    src: &[B],
    offs: &[usize],
    slice: usize,
    out_shape: &[usize],
) -> Result<Vec<B>> {
    let n = numel_of::<B>(GND, out_shape)?;
    if offs.iter().any(|&o| o + slice > src.len()) {
        return Err(Error::op(GND, "internal error: offset out of range"));
    }
    let mut out = vec![B::default(); n];
    if n > 0 {
        par_rows(&mut out, slice, |first, chunk| {
            for (r, dst) in chunk.chunks_mut(slice).enumerate() {
                let o = offs[first + r];
                dst.clone_from_slice(&src[o..o + slice]);
            }
        });
    }
    Ok(out)
}

impl Operator for GatherNd {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(GND, inputs, 0)?;
        let i = fact(GND, inputs, 1)?;
        if i.dtype != crate::DType::I64 {
            return Err(Error::op(
                GND,
                format!("indices must be int64, found {}", i.dtype),
            ));
        }
        Ok(vec![match (&f.shape, &i.shape) {
            (Some(d), Some(ix)) => Fact::new(f.dtype, nd_shape(GND, self.batch_dims, d, ix)?.1),
            _ => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(GND, inputs, 0)?;
        let it = input(GND, inputs, 1)?;
        let (k, out) = nd_shape(GND, self.batch_dims, x.shape(), it.shape())?;
        let idx = index_values(GND, it)?;
        let offs = nd_offsets(GND, self.batch_dims, k, x.shape(), it.shape(), &idx)?;
        let slice: usize = x.shape()[self.batch_dims + k..].iter().product();
        Ok(vec![gather_nd(x, &offs, slice, &out)?])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::ir::attributes::Attribute;
    use crate::tensor::Tensor;

    #[test]
    fn gather_axes_and_index_types() {
        let x = iota(&[3, 4]);
        // Axis 0, 2-D indices with a negative one.
        let y = run1(
            "Gather",
            13,
            &[],
            &[x.clone(), t(&[2, 2], vec![0i64, -1, 1, 2])],
        );
        assert_eq!(y.shape(), &[2, 2, 4]);
        let want: Vec<f64> = [0, 2, 1, 2]
            .iter()
            .flat_map(|&r| (0..4).map(move |c| (r * 4 + c) as f64))
            .collect();
        assert_eq!(y.to_f64_vec().unwrap(), want);
        // Axis -1 with i32 indices.
        let y = run1(
            "Gather",
            11,
            &[("axis", Attribute::Int(-1))],
            &[x.clone(), t(&[3], vec![3i32, 0, 3])],
        );
        assert_eq!(
            y,
            t(
                &[3, 3],
                vec![3.0f32, 0.0, 3.0, 7.0, 4.0, 7.0, 11.0, 8.0, 11.0]
            )
        );
        // Scalar index drops the axis.
        let y = run1(
            "Gather",
            13,
            &[("axis", Attribute::Int(1))],
            &[x.clone(), Tensor::scalar(2i64)],
        );
        assert_eq!(y, t(&[3], vec![2.0f32, 6.0, 10.0]));
        // Empty indices.
        let y = run1("Gather", 13, &[], &[x.clone(), t(&[0], Vec::<i64>::new())]);
        assert_eq!(y.shape(), &[0, 4]);
        // Strings.
        let st = t(&[3], ["a", "b", "c"].map(String::from).to_vec());
        let y = run1("Gather", 13, &[], &[st, t(&[2], vec![2i64, 0])]);
        assert_eq!(y, t(&[2], ["c", "a"].map(String::from).to_vec()));
    }

    /// Gather of every axis of a 3-D tensor against a naive index walk:
    /// blocks wide and narrow, repeated and negative indices, output large
    /// enough to split across threads with the same values.
    #[test]
    fn gather_every_axis_matches_a_naive_walk() {
        let dims = [5usize, 7, 600];
        let x = iota(&dims);
        let xv = x.to_f64_vec().unwrap();
        for axis in 0..3 {
            let len = dims[axis] as i64;
            let idx = vec![len - 1, 0, -1, 1, 1, -len];
            let y = run1(
                "Gather",
                13,
                &[("axis", Attribute::Int(axis as i64))],
                &[x.clone(), t(&[2, 3], idx.clone())],
            );
            let mut shape = dims.to_vec();
            shape.splice(axis..=axis, [2, 3]);
            assert_eq!(y.shape(), shape.as_slice());
            let outer: usize = dims[..axis].iter().product();
            let inner: usize = dims[axis + 1..].iter().product();
            let mut want = Vec::new();
            for p in 0..outer {
                for &i in &idx {
                    let row = if i < 0 { i + len } else { i } as usize;
                    for q in 0..inner {
                        want.push(xv[(p * dims[axis] + row) * inner + q]);
                    }
                }
            }
            assert_eq!(y.to_f64_vec().unwrap(), want, "axis {axis}");
            let two = crate::ops::testutil::with_threads(2, || {
                run1(
                    "Gather",
                    13,
                    &[("axis", Attribute::Int(axis as i64))],
                    &[x.clone(), t(&[2, 3], idx.clone())],
                )
            });
            assert_eq!(two, y, "axis {axis}, 2 threads");
        }
    }

    #[test]
    fn gather_errors() {
        let x = iota(&[3, 4]);
        let msg = fails("Gather", 13, &[], &[x.clone(), t(&[1], vec![3i64])]);
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails("Gather", 13, &[], &[x.clone(), t(&[1], vec![-4i64])]);
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails(
            "Gather",
            13,
            &[("axis", Attribute::Int(2))],
            &[x.clone(), t(&[1], vec![0i64])],
        );
        assert!(msg.contains("axis"), "{msg}");
        let msg = fails("Gather", 13, &[], &[x.clone(), t(&[1], vec![0.0f32])]);
        assert!(msg.contains("integers"), "{msg}");
        let msg = fails(
            "Gather",
            13,
            &[],
            &[Tensor::scalar(1.0f32), t(&[1], vec![0i64])],
        );
        assert!(msg.contains("axis"), "{msg}");
    }

    #[test]
    fn gather_elements_spec_examples() {
        let x = t(&[2, 2], vec![1i32, 2, 3, 4]);
        let y = run1(
            "GatherElements",
            13,
            &[("axis", Attribute::Int(1))],
            &[x, t(&[2, 2], vec![0i64, 0, 1, 0])],
        );
        assert_eq!(y, t(&[2, 2], vec![1i32, 1, 4, 3]));
        let x = iota(&[3, 3]);
        let y = run1(
            "GatherElements",
            13,
            &[("axis", Attribute::Int(0))],
            &[x.clone(), t(&[2, 3], vec![1i32, 2, 0, 2, 0, -3])],
        );
        assert_eq!(y, t(&[2, 3], vec![3.0f32, 7.0, 2.0, 6.0, 1.0, 2.0]));
        // Negative axis.
        let y = run1(
            "GatherElements",
            13,
            &[("axis", Attribute::Int(-1))],
            &[x.clone(), t(&[1, 2], vec![2i64, 1])],
        );
        assert_eq!(y, t(&[1, 2], vec![2.0f32, 1.0]));
        let msg = fails(
            "GatherElements",
            13,
            &[],
            &[x.clone(), t(&[1, 1], vec![3i64])],
        );
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails(
            "GatherElements",
            13,
            &[],
            &[x.clone(), t(&[3], vec![0i64; 3])],
        );
        assert!(msg.contains("rank"), "{msg}");
        let msg = fails(
            "GatherElements",
            13,
            &[("axis", Attribute::Int(0))],
            &[x, t(&[1, 4], vec![0i64; 4])],
        );
        assert!(msg.contains("exceeds"), "{msg}");
    }

    #[test]
    fn gather_nd_spec_examples() {
        let x = t(&[2, 2], vec![0i32, 1, 2, 3]);
        let y = run1(
            "GatherND",
            11,
            &[],
            &[x.clone(), t(&[2, 2], vec![0i64, 0, 1, 1])],
        );
        assert_eq!(y, t(&[2], vec![0i32, 3]));
        let y = run1("GatherND", 11, &[], &[x.clone(), t(&[2, 1], vec![1i64, 0])]);
        assert_eq!(y, t(&[2, 2], vec![2i32, 3, 0, 1]));
        let x3 = t(&[2, 2, 2], (0..8).collect::<Vec<i32>>());
        let y = run1(
            "GatherND",
            11,
            &[],
            &[x3.clone(), t(&[2, 2], vec![0i64, 1, 1, 0])],
        );
        assert_eq!(y, t(&[2, 2], vec![2i32, 3, 4, 5]));
        let y = run1(
            "GatherND",
            11,
            &[],
            &[x3.clone(), t(&[2, 1, 2], vec![0i64, 1, 1, 0])],
        );
        assert_eq!(y, t(&[2, 1, 2], vec![2i32, 3, 4, 5]));
        // batch_dims = 1.
        let y = run1(
            "GatherND",
            12,
            &[("batch_dims", Attribute::Int(1))],
            &[x3.clone(), t(&[2, 1], vec![1i64, 0])],
        );
        assert_eq!(y, t(&[2, 2], vec![2i32, 3, 4, 5]));
        // Negative index.
        let y = run1(
            "GatherND",
            13,
            &[],
            &[x.clone(), t(&[1, 2], vec![-1i64, -2])],
        );
        assert_eq!(y, t(&[1], vec![2i32]));
    }

    #[test]
    fn gather_nd_errors() {
        let x = t(&[2, 2], vec![0i32, 1, 2, 3]);
        let msg = fails("GatherND", 13, &[], &[x.clone(), t(&[1, 2], vec![2i64, 0])]);
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails("GatherND", 13, &[], &[x.clone(), t(&[1, 3], vec![0i64; 3])]);
        assert!(msg.contains("last indices dimension"), "{msg}");
        let msg = fails("GatherND", 13, &[], &[x.clone(), t(&[1, 1], vec![0i32])]);
        assert!(msg.contains("int64"), "{msg}");
        let msg = fails(
            "GatherND",
            13,
            &[("batch_dims", Attribute::Int(2))],
            &[x.clone(), t(&[2, 1], vec![0i64; 2])],
        );
        assert!(msg.contains("batch_dims"), "{msg}");
        let msg = fails(
            "GatherND",
            13,
            &[("batch_dims", Attribute::Int(1))],
            &[x, t(&[3, 1], vec![0i64; 3])],
        );
        assert!(msg.contains("batch dimensions"), "{msg}");
    }
}
