//! Concat and Split: joining tensors along an axis and cutting one apart.

use super::{int_list, movement_flops, norm_axis, numel_of, to_dims};
use crate::error::{Error, Result};
use crate::ir::attributes::Attributes;
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, opt_input, par_spans};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, Bits, Width, WidthVec};
use crate::tensor::{DType, Tensor};

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Concat", 4, build_concat);
    r.add("Split", 2, build_split);
}

#[derive(Debug)]
struct Concat {
    axis: i64,
}

fn build_concat(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Concat {
        axis: ctx.attrs.int_req("axis")?,
    }))
}

const CONCAT: &str = "Concat";

impl Concat {
    /// The output shape for these input shapes, and the normalized axis.
    fn out_shape(&self, shapes: &[&[usize]], dtypes: &[DType]) -> Result<(Vec<usize>, usize)> {
        let first = shapes
            .first()
            .ok_or_else(|| Error::op(CONCAT, "needs at least one input"))?;
        let rank = first.len();
        if rank == 0 {
            return Err(Error::op(CONCAT, "cannot concatenate scalars (rank 0)"));
        }
        let axis = norm_axis(CONCAT, self.axis, rank)?;
        let mut out = first.to_vec();
        out[axis] = 0;
        for (i, s) in shapes.iter().enumerate() {
            if dtypes[i] != dtypes[0] {
                return Err(Error::op(
                    CONCAT,
                    format!("input {i} is {}, input 0 is {}", dtypes[i], dtypes[0]),
                ));
            }
            let same = s.len() == rank
                && s.iter()
                    .zip(first.iter())
                    .enumerate()
                    .all(|(d, (a, b))| d == axis || a == b);
            if !same {
                return Err(Error::op(
                    CONCAT,
                    format!(
                        "input {i} has shape {s:?}, which does not match {first:?} outside axis {axis}"
                    ),
                ));
            }
            out[axis] = out[axis]
                .checked_add(s[axis])
                .ok_or_else(|| Error::op(CONCAT, "output too large"))?;
        }
        Ok((out, axis))
    }
}

/// The inputs (of one element type, checked to fit) joined along `axis` of
/// `out_shape`, as bits of their width. Each input's data fills its share
/// of every output row, so a stack along a new axis (each input's shape
/// with a 1 inserted there) is this call too. ConcatFromSequence uses it.
pub(crate) fn concat(inputs: &[&Tensor], out_shape: &[usize], axis: usize) -> Result<Tensor> {
    let widths: Vec<Width> = inputs.iter().map(|t| t.width()).collect();
    let v = match &widths[0] {
        Width::W8(_) => concat_width::<u8>(&widths, out_shape, axis),
        Width::W16(_) => concat_width::<u16>(&widths, out_shape, axis),
        Width::W32(_) => concat_width::<u32>(&widths, out_shape, axis),
        Width::W64(_) => concat_width::<u64>(&widths, out_shape, axis),
        Width::Str(_) => concat_width::<String>(&widths, out_shape, axis),
    }?;
    Tensor::from_width(CONCAT, inputs[0].dtype(), out_shape, v)
}

/// Concat of inputs of one width (their types were checked equal).
fn concat_width<B: Bits>(widths: &[Width], out_shape: &[usize], axis: usize) -> Result<WidthVec> {
    let n = numel_of::<B>(CONCAT, out_shape)?;
    let row: usize = out_shape[axis..].iter().product();
    let outer: usize = out_shape[..axis].iter().product();
    let mut parts = Vec::with_capacity(widths.len());
    for w in widths {
        let s = B::slice(w).ok_or_else(|| Error::op(CONCAT, "inputs differ in type"))?;
        // The input's elements per output row (its shape from `axis` on:
        // it matches the output's outer dimensions).
        let block = s.len().checked_div(outer).unwrap_or(0);
        parts.push((s, block));
    }
    Ok(B::vec(concat_bits(&parts, n, row)))
}

/// Concat on bits (one loop per width): `n` output elements in rows of `row`.
#[inline(never)]
fn concat_bits<B: Clone + Default + Send + Sync + 'static>(
    parts: &[(&[B], usize)],
    n: usize,
    row: usize,
) -> Vec<B> {
    // Every element is written below.
    let mut out = crate::tensor::recycle::take_or_default::<B>(n);
    if n > 0 {
        // Equal spans of the output, whatever the rows: a batch-1 concat
        // along the channels is a single row, and most of DenseNet's time
        // outside its convolutions.
        par_spans(&mut out, |start, span| copy_span(span, start, parts, row));
    }
    out
}

/// Fills `dst`, the output elements from `start` on, from the parts (each
/// `(data, block)`: `block` elements per output row of `row` elements).
fn copy_span<T: Clone>(dst: &mut [T], start: usize, parts: &[(&[T], usize)], row: usize) {
    let end = start + dst.len();
    let mut o = start / row;
    while o * row < end {
        let mut at = o * row;
        for (src, block) in parts {
            // Part columns [at, at + block) of row o, clipped to the span.
            let (lo, hi) = (at.max(start), (at + block).min(end));
            if lo < hi {
                let from = o * block + (lo - at);
                dst[lo - start..hi - start].clone_from_slice(&src[from..from + hi - lo]);
            }
            at += block;
        }
        o += 1;
    }
}

impl Operator for Concat {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let mut shapes = Vec::new();
        let mut dtypes = Vec::new();
        for i in 0..inputs.len() {
            let f = fact(CONCAT, inputs, i)?;
            dtypes.push(f.dtype);
            match &f.shape {
                Some(s) => shapes.push(s.as_slice()),
                None => return Ok(vec![Fact::unknown_shape(dtypes[0])]),
            }
        }
        let (shape, _) = self.out_shape(&shapes, &dtypes)?;
        Ok(vec![Fact::new(dtypes[0], shape)])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn joins_inputs(&self, inputs: &[Option<&Fact>]) -> bool {
        let mut shapes = Vec::with_capacity(inputs.len());
        let mut dtypes = Vec::with_capacity(inputs.len());
        for f in inputs {
            match f {
                Some(Fact {
                    dtype,
                    shape: Some(s),
                    ..
                }) => {
                    shapes.push(s.as_slice());
                    dtypes.push(*dtype);
                }
                _ => return false,
            }
        }
        // Every output row is then the whole output: each input is one
        // contiguous part of it.
        matches!(self.out_shape(&shapes, &dtypes),
            Ok((shape, axis)) if shape[..axis].iter().all(|&d| d == 1))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let ts: Vec<&Tensor> = (0..inputs.len())
            .map(|i| crate::ops::util::input(CONCAT, inputs, i))
            .collect::<Result<_>>()?;
        let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape()).collect();
        let dtypes: Vec<DType> = ts.iter().map(|t| t.dtype()).collect();
        let (shape, axis) = self.out_shape(&shapes, &dtypes)?;
        let out = concat(&ts, &shape, axis)?;
        Ok(vec![out])
    }
}

#[derive(Debug)]
struct Split {
    axis: i64,
    /// Sizes from the attribute (opset < 13).
    split_attr: Option<Vec<i64>>,
    /// `num_outputs` (opset 18).
    num_outputs_attr: Option<i64>,
    /// Outputs the node declares.
    outputs: usize,
    opset: i64,
}

const SPLIT: &str = "Split";

fn build_split(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a: &Attributes = ctx.attrs;
    let split_attr = if ctx.opset < 13 {
        a.ints_opt("split")?
    } else {
        None
    };
    let num_outputs_attr = if ctx.opset >= 18 {
        a.int_opt("num_outputs")?
    } else {
        None
    };
    if let Some(n) = num_outputs_attr {
        if n < 1 || n as usize != ctx.num_outputs {
            return Err(a.error(
                "num_outputs",
                format!("is {n} but the node has {} outputs", ctx.num_outputs),
            ));
        }
    }
    if ctx.num_outputs == 0 {
        return Err(Error::op(SPLIT, "the node has no outputs"));
    }
    Ok(Box::new(Split {
        axis: a.int("axis", 0)?,
        split_attr,
        num_outputs_attr,
        outputs: ctx.num_outputs,
        opset: ctx.opset,
    }))
}

impl Split {
    /// The piece sizes along the axis of length `dim`, from the split list if any.
    fn sizes(&self, dim: usize, split: Option<&[i64]>) -> Result<Vec<usize>> {
        let n = self.outputs;
        // An empty split input (some exporters write one) counts as absent.
        if let Some(s) = split.filter(|s| !s.is_empty()) {
            if self.num_outputs_attr.is_some() {
                return Err(Error::op(
                    SPLIT,
                    "give either the split input or num_outputs, not both",
                ));
            }
            let sizes = to_dims(SPLIT, s, "split")?;
            if sizes.len() != n {
                return Err(Error::op(
                    SPLIT,
                    format!("split {s:?} has {} entries for {n} outputs", sizes.len()),
                ));
            }
            let total = sizes.iter().try_fold(0usize, |acc, &v| acc.checked_add(v));
            if total != Some(dim) {
                return Err(Error::op(
                    SPLIT,
                    format!("split {s:?} does not add up to the axis length {dim}"),
                ));
            }
            return Ok(sizes);
        }
        if self.num_outputs_attr.is_some() {
            // Opset 18: chunks of ceil(dim / n); the last one may be smaller.
            let chunk = dim.div_ceil(n);
            let before = chunk * (n - 1);
            if before > dim {
                return Err(Error::op(
                    SPLIT,
                    format!("cannot split length {dim} into {n} chunks of {chunk}"),
                ));
            }
            let mut v = vec![chunk; n];
            v[n - 1] = dim - before;
            return Ok(v);
        }
        if !dim.is_multiple_of(n) {
            return Err(Error::op(
                SPLIT,
                format!("axis length {dim} does not split evenly into {n} outputs"),
            ));
        }
        Ok(vec![dim / n; n])
    }
}

impl Operator for Split {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(SPLIT, inputs, 0)?;
        let unknown = vec![Fact::unknown_shape(f.dtype); self.outputs];
        let Some(shape) = &f.shape else {
            return Ok(unknown);
        };
        let axis = norm_axis(SPLIT, self.axis, shape.len())?;
        let split = if self.opset >= 13 {
            match inputs.get(1).filter(|x| x.fact.is_some()) {
                Some(x) => match x.value {
                    Some(v) => Some(int_list(SPLIT, v, "split")?),
                    None => return Ok(unknown),
                },
                None => None,
            }
        } else {
            self.split_attr.clone()
        };
        let sizes = self.sizes(shape[axis], split.as_deref())?;
        Ok(sizes
            .iter()
            .map(|&s| {
                let mut sh = shape.clone();
                sh[axis] = s;
                Fact::new(f.dtype, sh)
            })
            .collect())
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = crate::ops::util::input(SPLIT, inputs, 0)?;
        let shape = x.shape().to_vec();
        let axis = norm_axis(SPLIT, self.axis, shape.len())?;
        let split = if self.opset >= 13 {
            match opt_input(inputs, 1) {
                Some(t) => Some(int_list(SPLIT, t, "split")?),
                None => None,
            }
        } else {
            self.split_attr.clone()
        };
        let sizes = self.sizes(shape[axis], split.as_deref())?;
        split_parts(x, &shape, axis, &sizes, false)
    }
}

/// `x` (of `shape`) cut along `axis` into parts of `sizes`, as bits of its
/// width; `drop_axis` removes the axis from each part's shape (parts of
/// size 1). SplitToSequence uses it.
pub(crate) fn split_parts(
    x: &Tensor,
    shape: &[usize],
    axis: usize,
    sizes: &[usize],
    drop_axis: bool,
) -> Result<Vec<Tensor>> {
    let parts: Vec<WidthVec> = by_width!(x, s => split_bits(s, shape, axis, sizes)?
        .into_iter()
        .map(Bits::vec)
        .collect());
    parts
        .into_iter()
        .zip(sizes)
        .map(|(v, &s)| {
            let mut sh = shape.to_vec();
            sh[axis] = s;
            if drop_axis {
                sh.remove(axis);
            }
            Tensor::from_width(SPLIT, x.dtype(), &sh, v)
        })
        .collect()
}

/// Split on bits: each part's data, in order.
#[inline(never)]
fn split_bits<B: Clone>(
    src: &[B],
    shape: &[usize],
    axis: usize,
    sizes: &[usize],
) -> Result<Vec<Vec<B>>> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let block = shape[axis] * inner;
    let mut outs = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for &s in sizes {
        let mut v = Vec::with_capacity(outer * s * inner);
        for o in 0..outer {
            let b = o * block + start * inner;
            v.extend_from_slice(&src[b..b + s * inner]);
        }
        outs.push(v);
        start += s;
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::ir::attributes::Attribute;
    use crate::tensor::Tensor;

    #[test]
    fn concat_axis_1_and_negative() {
        let a = t(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0]);
        let b = t(&[2, 1], vec![5.0f32, 6.0]);
        let expect = t(&[2, 3], vec![1.0f32, 2.0, 5.0, 3.0, 4.0, 6.0]);
        for axis in [1, -1] {
            let y = run1(
                "Concat",
                13,
                &[("axis", Attribute::Int(axis))],
                &[a.clone(), b.clone()],
            );
            assert_eq!(y, expect);
        }
        let y = run1(
            "Concat",
            11,
            &[("axis", Attribute::Int(0))],
            &[a.clone(), t(&[1, 2], vec![7.0f32, 8.0])],
        );
        assert_eq!(y, t(&[3, 2], vec![1.0f32, 2.0, 3.0, 4.0, 7.0, 8.0]));
    }

    #[test]
    fn concat_strings_bool_and_empty() {
        let a = t(&[1, 2], vec!["a".to_string(), "b".to_string()]);
        let b = t(&[1, 0], Vec::<String>::new());
        let c = t(&[1, 1], vec!["c".to_string()]);
        let y = run1("Concat", 13, &[("axis", Attribute::Int(1))], &[a, b, c]);
        assert_eq!(
            y,
            t(
                &[1, 3],
                vec!["a".to_string(), "b".to_string(), "c".to_string()]
            )
        );
        let y = run1(
            "Concat",
            13,
            &[("axis", Attribute::Int(0))],
            &[
                t(&[0, 2], Vec::<bool>::new()),
                t(&[1, 2], vec![true, false]),
            ],
        );
        assert_eq!(y, t(&[1, 2], vec![true, false]));
        let y = run1(
            "Concat",
            13,
            &[("axis", Attribute::Int(0))],
            &[
                t(&[0, 2], Vec::<bool>::new()),
                t(&[0, 2], Vec::<bool>::new()),
            ],
        );
        assert_eq!(y.shape(), &[0, 2]);
    }

    #[test]
    fn concat_large_matches_naive() {
        // Large enough to split over threads.
        let a = iota(&[64, 300]);
        let b = iota(&[64, 100]);
        let y = run1(
            "Concat",
            13,
            &[("axis", Attribute::Int(1))],
            &[a.clone(), b.clone()],
        );
        let av = a.to_f64_vec().unwrap();
        let bv = b.to_f64_vec().unwrap();
        let yv = y.to_f64_vec().unwrap();
        for r in 0..64 {
            for c in 0..400 {
                let want = if c < 300 {
                    av[r * 300 + c]
                } else {
                    bv[r * 100 + c - 300]
                };
                assert_eq!(yv[r * 400 + c], want);
            }
        }
    }

    #[test]
    fn concat_spans_cross_rows_and_parts() {
        // Two rows of parts of 5, 3 and 4 elements: 24 output elements.
        let (a, b, c): (Vec<u32>, Vec<u32>, Vec<u32>) = (
            (0..10).collect(),
            (100..106).collect(),
            (200..208).collect(),
        );
        let parts = [(&a[..], 5), (&b[..], 3), (&c[..], 4)];
        let mut want = Vec::new();
        for o in 0..2 {
            for (src, block) in &parts {
                want.extend_from_slice(&src[o * block..(o + 1) * block]);
            }
        }
        for start in 0..24 {
            for end in start..=24 {
                let mut dst = vec![0u32; end - start];
                super::copy_span(&mut dst, start, &parts, 12);
                assert_eq!(dst, want[start..end], "span {start}..{end}");
            }
        }
        // A batch-1 channel concat split over three threads.
        let x = iota(&[1, 3, 100, 100]);
        let y = iota(&[1, 5, 100, 100]);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let out = pool.install(|| {
            run1(
                "Concat",
                13,
                &[("axis", Attribute::Int(1))],
                &[x.clone(), y.clone()],
            )
        });
        let mut flat = x.to_f64_vec().unwrap();
        flat.extend(y.to_f64_vec().unwrap());
        assert_eq!(out.shape(), &[1, 8, 100, 100]);
        assert_eq!(out.to_f64_vec().unwrap(), flat);
    }

    #[test]
    fn concat_errors() {
        let a = t(&[2, 2], vec![1.0f32; 4]);
        let msg = fails(
            "Concat",
            13,
            &[("axis", Attribute::Int(0))],
            &[a.clone(), t(&[2, 3], vec![0.0f32; 6])],
        );
        assert!(msg.contains("does not match"), "{msg}");
        let msg = fails("Concat", 13, &[("axis", Attribute::Int(2))], &[a.clone()]);
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails(
            "Concat",
            13,
            &[("axis", Attribute::Int(0))],
            &[a.clone(), t(&[2, 2], vec![1i64; 4])],
        );
        assert!(msg.contains("int64"), "{msg}");
        let msg = fails(
            "Concat",
            13,
            &[("axis", Attribute::Int(0))],
            &[Tensor::scalar(1.0f32)],
        );
        assert!(msg.contains("scalars"), "{msg}");
        let msg = fails("Concat", 13, &[], &[a]);
        assert!(msg.contains("axis"), "{msg}");
    }

    fn split(
        opset: i64,
        attrs: &[(&str, Attribute)],
        inputs: &[Option<Tensor>],
        n: usize,
    ) -> crate::Result<Vec<Tensor>> {
        run_n("Split", opset, attrs, inputs, n)
    }

    #[test]
    fn split_variants() {
        let x = iota(&[2, 6]);
        // Equal split.
        let y = split(11, &[("axis", Attribute::Int(1))], &[Some(x.clone())], 3).unwrap();
        assert_eq!(y[0], t(&[2, 2], vec![0.0f32, 1.0, 6.0, 7.0]));
        assert_eq!(y[2], t(&[2, 2], vec![4.0f32, 5.0, 10.0, 11.0]));
        // Attribute split, negative axis.
        let y = split(
            11,
            &[("axis", Attribute::Int(-1)), ("split", ints(&[1, 5]))],
            &[Some(x.clone())],
            2,
        )
        .unwrap();
        assert_eq!(y[0], t(&[2, 1], vec![0.0f32, 6.0]));
        assert_eq!(y[1].shape(), &[2, 5]);
        // Input split (opset 13), with a zero-size piece.
        let y = split(
            13,
            &[("axis", Attribute::Int(1))],
            &[Some(x.clone()), Some(i64s(&[4, 0, 2]))],
            3,
        )
        .unwrap();
        assert_eq!(y[1].shape(), &[2, 0]);
        assert_eq!(y[2], t(&[2, 2], vec![4.0f32, 5.0, 10.0, 11.0]));
        // num_outputs (opset 18), uneven: 3, 3, 1 over length 7.
        let x7 = t(&[7], (0..7).collect::<Vec<i32>>());
        let y = split(18, &[("num_outputs", Attribute::Int(3))], &[Some(x7)], 3).unwrap();
        assert_eq!(y[0], t(&[3], vec![0i32, 1, 2]));
        assert_eq!(y[2], t(&[1], vec![6i32]));
        // An empty split input means an equal split.
        let y = split(13, &[], &[Some(iota(&[4])), Some(i64s(&[]))], 2).unwrap();
        assert_eq!(y[1], t(&[2], vec![2.0f32, 3.0]));
        // Axis 0 on strings.
        let xs = t(&[2], vec!["x".to_string(), "y".to_string()]);
        let y = split(13, &[], &[Some(xs)], 2).unwrap();
        assert_eq!(y[1], t(&[1], vec!["y".to_string()]));
    }

    #[test]
    fn split_errors() {
        let x = iota(&[2, 5]);
        let e = split(11, &[("axis", Attribute::Int(1))], &[Some(x.clone())], 2).unwrap_err();
        assert!(e.to_string().contains("evenly"), "{e}");
        let e = split(
            13,
            &[("axis", Attribute::Int(1))],
            &[Some(x.clone()), Some(i64s(&[2, 2]))],
            2,
        )
        .unwrap_err();
        assert!(e.to_string().contains("add up"), "{e}");
        let e = split(
            13,
            &[("axis", Attribute::Int(1))],
            &[Some(x.clone()), Some(i64s(&[6, -1]))],
            2,
        )
        .unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
        let e = split(13, &[("axis", Attribute::Int(2))], &[Some(x.clone())], 2).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        let e = split(18, &[("num_outputs", Attribute::Int(3))], &[Some(x)], 2).unwrap_err();
        assert!(e.to_string().contains("num_outputs"), "{e}");
    }
}
