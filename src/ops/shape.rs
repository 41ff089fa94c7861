//! Data-movement operators: concatenation and splitting, slicing, reshaping,
//! transposition, gathers and scatters, padding, broadcasting and tiling,
//! tensor generators (Range, ConstantOfShape, EyeLike, OneHot), and the
//! selection operators (Trilu, NonZero, Compress, CumSum).
//!
//! Most kernels are generic over [`Element`] so that every element type,
//! bool and String included, moves through the same code. The shared engine
//! is [`offset_copy`]: each output dimension maps its index to an input offset,
//! which covers transposes, slices, broadcasts, tiles, pads and gathers.

use super::util::par_rows;
use super::Registrar;
use crate::error::{Error, Result};
use crate::ir::Fact;
use crate::tensor::bits::AsBits;
use crate::tensor::widths::{by_width, same_width, Bits};
use crate::tensor::{Element, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::borrow::Cow;

mod center_crop_pad;
pub(crate) mod concat;
mod expand;
mod gather;
mod generate;
pub(crate) mod num;
mod onehot;
mod pad;
mod passthrough;
mod reshape;
mod runs;
mod scatter;
mod select;
mod slice;
mod tensor_scatter;
mod tiled;
mod transpose;

pub(crate) fn register(r: &mut impl Registrar) {
    center_crop_pad::register(r);
    concat::register(r);
    expand::register(r);
    gather::register(r);
    generate::register(r);
    onehot::register(r);
    pad::register(r);
    passthrough::register(r);
    reshape::register(r);
    scatter::register(r);
    select::register(r);
    slice::register(r);
    tensor_scatter::register(r);
    transpose::register(r);
}

/// Marks an output position that reads no input element (padding) in the
/// maps given to [`offset_copy`].
pub(crate) const PAD: usize = usize::MAX;

/// [`numel_of`] for the element type of `_like` (in a per-width body).
pub(crate) fn numel_like<B>(op: &str, _like: &[B], shape: &[usize]) -> Result<usize> {
    numel_of::<B>(op, shape)
}

/// The number of elements of `shape`, or an error if it overflows, or if the
/// elements of type `T` would not fit in memory.
pub(crate) fn numel_of<T>(op: &str, shape: &[usize]) -> Result<usize> {
    let mut n: usize = 1;
    for &d in shape {
        n = n
            .checked_mul(d)
            .ok_or_else(|| Error::op(op, format!("shape {shape:?} has too many elements")))?;
    }
    let bytes = n.checked_mul(std::mem::size_of::<T>().max(1));
    match bytes {
        Some(b) if b <= isize::MAX as usize => Ok(n),
        _ => Err(Error::op(
            op,
            format!("shape {shape:?} has too many elements"),
        )),
    }
}

/// The number of elements of `shape` (bytes per element unknown: one byte assumed).
pub(crate) fn numel(op: &str, shape: &[usize]) -> Result<usize> {
    numel_of::<u8>(op, shape)
}

/// Row-major strides (in elements) of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// The data of `a` as a row-major slice (borrowed when already standard layout).
pub(crate) fn data<T: AsBits>(a: &ArrayD<T>) -> Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(crate::tensor::bits::row_major(a)),
    }
}

/// Wraps row-major data of `shape` into a tensor.
pub(crate) fn make<T: Element>(op: &str, shape: &[usize], data: Vec<T>) -> Result<Tensor> {
    let n = data.len();
    ArrayD::from_shape_vec(IxDyn(shape), data)
        .map(T::into_tensor)
        .map_err(|_| {
            Error::op(
                op,
                format!("internal error: {n} elements do not fill shape {shape:?}"),
            )
        })
}

/// Wraps row-major data of `shape` into an array.
pub(crate) fn make_array<T>(op: &str, shape: &[usize], data: Vec<T>) -> Result<ArrayD<T>> {
    let n = data.len();
    ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|_| {
        Error::op(
            op,
            format!("internal error: {n} elements do not fill shape {shape:?}"),
        )
    })
}

/// The values of an integer tensor of rank 0 or 1 (`what` names it in errors).
pub(crate) fn int_list(op: &str, t: &Tensor, what: &str) -> Result<Vec<i64>> {
    if t.shape().len() > 1 {
        return Err(Error::op(
            op,
            format!("{what} must be a 1-D tensor, found shape {:?}", t.shape()),
        ));
    }
    match t {
        Tensor::I64(_) | Tensor::I32(_) | Tensor::I16(_) | Tensor::I8(_) => t.to_i64_vec(),
        Tensor::U8(_) | Tensor::U16(_) | Tensor::U32(_) | Tensor::U64(_) => t.to_i64_vec(),
        other => Err(Error::op(
            op,
            format!("{what} must be an integer tensor, found {}", other.dtype()),
        )),
    }
}

/// The single value of an integer tensor holding exactly one element.
pub(crate) fn int_scalar(op: &str, t: &Tensor, what: &str) -> Result<i64> {
    if t.len() != 1 {
        return Err(Error::op(
            op,
            format!(
                "{what} must hold exactly one value, found shape {:?}",
                t.shape()
            ),
        ));
    }
    let v = match t {
        Tensor::Bool(_) | Tensor::String(_) => None,
        other if other.dtype().is_float() => None,
        other => other.to_i64_vec()?.first().copied(),
    };
    v.ok_or_else(|| {
        Error::op(
            op,
            format!("{what} must be an integer tensor, found {}", t.dtype()),
        )
    })
}

/// The values of a float or integer tensor as f64 (`what` names it in errors).
pub(crate) fn f64_list(op: &str, t: &Tensor, what: &str) -> Result<Vec<f64>> {
    if t.shape().len() > 1 {
        return Err(Error::op(
            op,
            format!("{what} must be a 1-D tensor, found shape {:?}", t.shape()),
        ));
    }
    match t {
        Tensor::String(_) | Tensor::Bool(_) => Err(Error::op(
            op,
            format!("{what} must be numeric, found {}", t.dtype()),
        )),
        other => other.to_f64_vec(),
    }
}

/// Converts a list of dimensions read from data into `usize`, rejecting negatives.
pub(crate) fn to_dims(op: &str, v: &[i64], what: &str) -> Result<Vec<usize>> {
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| Error::op(op, format!("{what} has a negative dimension {d}: {v:?}")))
        })
        .collect()
}

/// Builds the fact for `dtype` with `shape`, or the unknown fact when `None`.
pub(crate) fn fact_or_unknown(dtype: crate::tensor::DType, shape: Option<Vec<usize>>) -> Fact {
    match shape {
        Some(s) => Fact::new(dtype, s),
        None => Fact::unknown_shape(dtype),
    }
}

/// Normalizes `axis` against `rank`, accepting `[-rank, rank)`; rank 0 has no axes.
pub(crate) fn norm_axis(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(Error::op(
            op,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(a as usize)
}

/// Normalizes a list of axes against `rank`, rejecting duplicates.
pub(crate) fn norm_axes(op: &str, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = norm_axis(op, a, rank)?;
        if out.contains(&n) {
            return Err(Error::op(op, format!("axis {a} is repeated in {axes:?}")));
        }
        out.push(n);
    }
    Ok(out)
}

/// Output elements as FLOPs for data movement, at least 1 when work is done.
pub(crate) fn movement_flops(inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
    let out: u64 = outputs.iter().map(|f| f.len().unwrap_or(0) as u64).sum();
    if out > 0 {
        return out;
    }
    let any_input = inputs
        .iter()
        .flatten()
        .any(|f| f.len().is_none_or(|n| n > 0));
    u64::from(any_input)
}

/// A tensor of shape `out` whose elements are `x`'s read at the offsets of
/// `maps` (see [`offset_copy`]), compiled once per element width.
pub(crate) fn move_tensor(
    op: &str,
    x: &Tensor,
    out: &[usize],
    maps: &[Vec<usize>],
) -> Result<Tensor> {
    let v = by_width!(x, s => Bits::vec(offset_copy(op, s, maps, None)?));
    Tensor::from_width(op, x.dtype(), out, v)
}

/// [`move_tensor`] with zero (the type's default) where a map holds [`PAD`].
pub(crate) fn move_tensor_or_zero(
    op: &str,
    x: &Tensor,
    out: &[usize],
    maps: &[Vec<usize>],
) -> Result<Tensor> {
    let v = by_width!(x, s => Bits::vec(offset_copy(op, s, maps, Some(&Default::default()))?));
    Tensor::from_width(op, x.dtype(), out, v)
}

/// [`move_tensor`] with `fill`, one element of `x`'s type, where a map
/// holds [`PAD`].
pub(crate) fn move_tensor_fill(
    op: &str,
    x: &Tensor,
    out: &[usize],
    maps: &[Vec<usize>],
    fill: &Tensor,
) -> Result<Tensor> {
    if fill.dtype() != x.dtype() || fill.len() != 1 {
        return Err(Error::op(op, "internal error: fill value of another type"));
    }
    let wf = fill.width();
    let v = by_width!(x, s => {
        let f = same_width(s, &wf).and_then(|f| f.first());
        Bits::vec(offset_copy(op, s, maps, f)?)
    });
    Tensor::from_width(op, x.dtype(), out, v)
}

/// Builds an output by reading `src` at offsets: the output has one dimension
/// per map, of the map's length, and its element at index `(i0, i1, ...)` is
/// `src[maps[0][i0] + maps[1][i1] + ...]`, or `fill` where any map holds [`PAD`].
/// The offsets are validated against `src` first, so a bad map is an error,
/// never a panic. Work is split over output rows on the current rayon pool.
pub(crate) fn offset_copy<T: Clone + Send + Sync + Default + 'static>(
    op: &str,
    src: &[T],
    maps: &[Vec<usize>],
    fill: Option<&T>,
) -> Result<Vec<T>> {
    // Whole trailing blocks as one run: long contiguous copies.
    let merged = runs::merge_maps(maps);
    let maps = merged.as_deref().unwrap_or(maps);
    let out_shape: Vec<usize> = maps.iter().map(|m| m.len()).collect();
    let n = numel_of::<T>(op, &out_shape)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut reads = true;
    let mut max_off: usize = 0;
    let mut pads = false;
    for m in maps {
        let mut mx: Option<usize> = None;
        for &v in m {
            if v == PAD {
                pads = true;
            } else {
                mx = Some(mx.map_or(v, |x: usize| x.max(v)));
            }
        }
        match mx {
            Some(v) => {
                max_off = max_off
                    .checked_add(v)
                    .ok_or_else(|| Error::op(op, "internal error: offset overflow"))?
            }
            None => reads = false,
        }
    }
    if reads && max_off >= src.len() {
        return Err(Error::op(
            op,
            format!(
                "internal error: offset {max_off} out of range for {} elements",
                src.len()
            ),
        ));
    }
    if pads && fill.is_none() {
        return Err(Error::op(
            op,
            "internal error: padding without a fill value",
        ));
    }
    let fill_val = fill.cloned().unwrap_or_default();
    let rank = maps.len();
    let row = if rank == 0 { 1 } else { out_shape[rank - 1] };
    let outer = &out_shape[..rank.saturating_sub(1)];
    let last: &[usize] = if rank == 0 { &[0] } else { &maps[rank - 1] };
    let contiguous = last.first().is_some_and(|&f| {
        f != PAD
            && last
                .iter()
                .enumerate()
                .all(|(j, &v)| v != PAD && v == f + j)
    });
    // Every element is written below: a recycled buffer needs no zero-fill.
    let mut out = crate::tensor::recycle::take_or_default::<T>(n);
    par_rows(&mut out, row, |first_row, chunk| {
        let mut idx = unravel(first_row, outer);
        for r in chunk.chunks_mut(row) {
            let mut base = 0usize;
            let mut pad = false;
            for (d, &i) in idx.iter().enumerate() {
                let v = maps[d][i];
                if v == PAD {
                    pad = true;
                    break;
                }
                base += v;
            }
            if pad {
                r.fill(fill_val.clone());
            } else if contiguous {
                let s = base + last[0];
                r.clone_from_slice(&src[s..s + row]);
            } else {
                for (o, &v) in r.iter_mut().zip(last) {
                    *o = if v == PAD {
                        fill_val.clone()
                    } else {
                        src[base + v].clone()
                    };
                }
            }
            increment(&mut idx, outer);
        }
    });
    Ok(out)
}

/// The multi-index of flat position `flat` in `shape` (row-major).
pub(crate) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    idx
}

/// Advances a row-major multi-index by one (wrapping to zero at the end).
pub(crate) fn increment(idx: &mut [usize], shape: &[usize]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return;
        }
        idx[d] = 0;
    }
}

/// Offset maps for a plain strided view: dimension `d` of the output reads
/// input offsets `start[d] + i * step[d]` (in elements, steps may be negative
/// through `start` at the far end). Used by transposes, slices and broadcasts.
pub(crate) fn linear_map(len: usize, start: usize, step: isize) -> Vec<usize> {
    (0..len)
        .map(|i| (start as isize + i as isize * step) as usize)
        .collect()
}

#[cfg(test)]
pub(crate) mod test_util {
    //! Helpers for operator tests: build through the registry, check `infer`
    //! against `run`, and compare results across thread counts.

    use crate::ir::attributes::Attribute;
    use crate::ir::{Fact, InferInput};
    use crate::ops::testutil::build_op;
    use crate::tensor::{Element, Tensor};
    use crate::Result;

    /// A tensor from a shape and data.
    pub fn t<T: Element>(shape: &[usize], data: Vec<T>) -> Tensor {
        Tensor::from_vec(shape, data).unwrap()
    }

    /// A 1-D i64 tensor.
    pub fn i64s(v: &[i64]) -> Tensor {
        t(&[v.len()], v.to_vec())
    }

    /// A 1-D f32 tensor.
    pub fn f32s(v: &[f32]) -> Tensor {
        t(&[v.len()], v.to_vec())
    }

    /// f32 data 0, 1, 2, ... of `shape`.
    pub fn iota(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        t(shape, (0..n).map(|v| v as f32).collect())
    }

    /// An `Ints` attribute.
    pub fn ints(v: &[i64]) -> Attribute {
        Attribute::Ints(v.to_vec())
    }

    /// A string attribute.
    pub fn s(v: &str) -> Attribute {
        Attribute::String(v.as_bytes().to_vec())
    }

    /// Builds `op` at `opset`, checks `infer` (with and without constant
    /// values) against the real outputs, checks FLOPs, and runs it on one and
    /// on three threads, which must agree exactly.
    pub fn run_n(
        op: &str,
        opset: i64,
        list: &[(&str, Attribute)],
        inputs: &[Option<Tensor>],
        num_outputs: usize,
    ) -> Result<Vec<Tensor>> {
        let operator = build_op(op, opset, list, &[], inputs.len(), num_outputs)?;
        let facts: Vec<Option<Fact>> = inputs.iter().map(|x| x.as_ref().map(Fact::of)).collect();
        let with_values: Vec<InferInput> = facts
            .iter()
            .zip(inputs)
            .map(|(f, v)| InferInput {
                fact: f.as_ref(),
                value: v.as_ref(),
            })
            .collect();
        let without: Vec<InferInput> = facts
            .iter()
            .map(|f| InferInput {
                fact: f.as_ref(),
                value: None,
            })
            .collect();
        let inferred = operator.infer(&with_values)?;
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(|x| x.as_ref()).collect();
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let three = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let out = one.install(|| operator.run(&refs))?;
        let out3 = three.install(|| operator.run(&refs)).unwrap();
        assert_eq!(
            format!("{out:?}"),
            format!("{out3:?}"),
            "{op}: results differ between 1 and 3 threads"
        );
        let inferred_plain = operator
            .infer(&without)
            .expect("infer without values failed where run succeeded");
        assert_eq!(inferred.len(), out.len(), "{op}: output count");
        for (i, o) in out.iter().enumerate() {
            assert!(
                o.is_standard_layout_tensor(),
                "{op}: output {i} not standard layout"
            );
            for f in [&inferred[i], &inferred_plain[i]] {
                assert_eq!(f.dtype, o.dtype(), "{op}: inferred dtype of output {i}");
                if let Some(sh) = &f.shape {
                    assert_eq!(
                        sh.as_slice(),
                        o.shape(),
                        "{op}: inferred shape of output {i}"
                    );
                }
            }
            assert!(
                inferred[i].shape.is_some(),
                "{op}: shape of output {i} unknown although all values are known"
            );
        }
        let in_facts: Vec<Option<&Fact>> = facts.iter().map(|f| f.as_ref()).collect();
        let out_facts: Vec<Fact> = out.iter().map(Fact::of).collect();
        if out.iter().any(|o| !o.is_empty()) {
            assert!(
                operator.flops(&in_facts, &out_facts) > 0,
                "{op}: zero FLOPs for a non-empty output"
            );
        }
        Ok(out)
    }

    /// [`run_n`] with one output.
    pub fn run(
        op: &str,
        opset: i64,
        list: &[(&str, Attribute)],
        inputs: &[Option<Tensor>],
    ) -> Result<Vec<Tensor>> {
        run_n(op, opset, list, inputs, 1)
    }

    /// [`run`] for an operator that must succeed: its single first output.
    pub fn run1(op: &str, opset: i64, list: &[(&str, Attribute)], inputs: &[Tensor]) -> Tensor {
        let ins: Vec<Option<Tensor>> = inputs.iter().cloned().map(Some).collect();
        run(op, opset, list, &ins)
            .unwrap_or_else(|e| panic!("{op} failed: {e}"))
            .remove(0)
    }

    /// The error message of an operator that must fail.
    pub fn fails(op: &str, opset: i64, list: &[(&str, Attribute)], inputs: &[Tensor]) -> String {
        let ins: Vec<Option<Tensor>> = inputs.iter().cloned().map(Some).collect();
        match run(op, opset, list, &ins) {
            Ok(o) => panic!("{op} should have failed, gave {o:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Asserts two float tensors are close (same type and shape).
    pub fn assert_close(a: &Tensor, b: &Tensor, tol: f64) {
        assert_eq!(a.dtype(), b.dtype(), "types differ");
        assert_eq!(a.shape(), b.shape(), "shapes differ");
        let x = a.to_f64_vec().unwrap();
        let y = b.to_f64_vec().unwrap();
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            let ok = (p.is_nan() && q.is_nan()) || p == q || (p - q).abs() <= tol * (1.0 + q.abs());
            assert!(ok, "element {i}: {p} vs {q}\n{x:?}\n{y:?}");
        }
    }

    trait StdLayout {
        fn is_standard_layout_tensor(&self) -> bool;
    }
    impl StdLayout for Tensor {
        fn is_standard_layout_tensor(&self) -> bool {
            crate::dispatch!(self, a => a.is_standard_layout())
        }
    }
}
