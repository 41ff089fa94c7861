//! The ReduceX operators. Axes are an attribute before opset 13 (ReduceSum)
//! or 18 (the others) and an optional input afterwards, together with
//! `noop_with_empty_axes`. Reducing over an empty set gives the identity of
//! the reduction (0, 1, -inf, +inf; NaN for the mean). With
//! `noop_with_empty_axes` and no axes, each element is "reduced" alone, so
//! e.g. ReduceSumSquare squares and ReduceL1 takes absolute values, as the
//! ONNX reference implementation does.

use super::{fold, kept_offset, par_outputs, split_dims};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::shape::num::{num_dispatch, Num};
use crate::ops::shape::{data, int_list, make, make_array, norm_axes, numel_of};
use crate::ops::util::{fact, input, opt_input};
use crate::ops::Registrar;
use crate::tensor::{DType, Tensor};
use ndarray::ArrayD;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

const KINDS: [(&str, Kind); 10] = [
    ("ReduceSum", Kind::Sum),
    ("ReduceMean", Kind::Mean),
    ("ReduceMax", Kind::Max),
    ("ReduceMin", Kind::Min),
    ("ReduceProd", Kind::Prod),
    ("ReduceL1", Kind::L1),
    ("ReduceL2", Kind::L2),
    ("ReduceLogSum", Kind::LogSum),
    ("ReduceLogSumExp", Kind::LogSumExp),
    ("ReduceSumSquare", Kind::SumSquare),
];

pub(super) fn register(r: &mut impl Registrar) {
    r.add("ReduceSum", 1, |c| build(c, Kind::Sum));
    r.add("ReduceMean", 1, |c| build(c, Kind::Mean));
    r.add("ReduceMax", 1, |c| build(c, Kind::Max));
    r.add("ReduceMin", 1, |c| build(c, Kind::Min));
    r.add("ReduceProd", 1, |c| build(c, Kind::Prod));
    r.add("ReduceL1", 1, |c| build(c, Kind::L1));
    r.add("ReduceL2", 1, |c| build(c, Kind::L2));
    r.add("ReduceLogSum", 1, |c| build(c, Kind::LogSum));
    r.add("ReduceLogSumExp", 1, |c| build(c, Kind::LogSumExp));
    r.add("ReduceSumSquare", 1, |c| build(c, Kind::SumSquare));
}

#[derive(Debug)]
struct Reduce {
    name: &'static str,
    kind: Kind,
    keepdims: bool,
    /// Axes come from input 1 (opset 13 for ReduceSum, 18 for the others).
    axes_input: bool,
    /// Axes from the attribute (older opsets).
    axes_attr: Option<Vec<i64>>,
    noop_with_empty_axes: bool,
}

fn build(ctx: &BuildContext, kind: Kind) -> Result<Box<dyn Operator>> {
    let name = KINDS
        .iter()
        .find(|(_, k)| *k == kind)
        .map(|(n, _)| *n)
        .unwrap_or("Reduce");
    let since = if kind == Kind::Sum { 13 } else { 18 };
    let axes_input = ctx.opset >= since;
    let a = ctx.attrs;
    Ok(Box::new(Reduce {
        name,
        kind,
        keepdims: a.int("keepdims", 1)? != 0,
        axes_input,
        axes_attr: if axes_input {
            None
        } else {
            a.ints_opt("axes")?
        },
        noop_with_empty_axes: axes_input && a.int("noop_with_empty_axes", 0)? != 0,
    }))
}

impl Reduce {
    /// The reduced-dimension mask for `rank` from the given axes list.
    fn mask(&self, rank: usize, axes: Option<&[i64]>) -> Result<Vec<bool>> {
        match axes {
            Some(a) if !a.is_empty() => {
                let list = norm_axes(self.name, a, rank)?;
                Ok((0..rank).map(|d| list.contains(&d)).collect())
            }
            _ if self.noop_with_empty_axes => Ok(vec![false; rank]),
            _ => Ok(vec![true; rank]),
        }
    }

    fn out_shape(&self, shape: &[usize], mask: &[bool]) -> Vec<usize> {
        shape
            .iter()
            .zip(mask)
            .filter_map(|(&d, &m)| match (m, self.keepdims) {
                (false, _) => Some(d),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect()
    }

    /// Axes from the attribute or input 1: `Ok(None)` when not constant.
    fn axes(&self, value: Option<Option<&Tensor>>) -> Result<Option<Option<Vec<i64>>>> {
        if !self.axes_input {
            return Ok(Some(self.axes_attr.clone()));
        }
        match value {
            None => Ok(Some(None)),
            Some(None) => Ok(None),
            Some(Some(t)) => Ok(Some(Some(int_list(self.name, t, "axes")?))),
        }
    }

    fn check_type(&self, dtype: DType) -> Result<()> {
        let ok = match dtype {
            DType::String => false,
            DType::Bool => matches!(self.kind, Kind::Max | Kind::Min),
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(Error::op(
                self.name,
                format!("unsupported element type {dtype}"),
            ))
        }
    }
}

/// One output's value from the reduced elements.
///
/// f32 and f16 (the types of models' hot reductions) get one fold loop per
/// reduction with its operation inlined. The other types fold through a
/// `dyn FnMut`, so each compiles three loops (one per accumulator type)
/// instead of one per reduction: a smaller library, for types whose
/// reductions are mostly small shape arithmetic.
fn reduce_one<T: Num>(
    kind: Kind,
    src: &[T],
    base: usize,
    red: &[(usize, usize)],
    count: usize,
) -> T {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    let inline = t == TypeId::of::<f32>() || t == TypeId::of::<half::f16>();
    // Folds with `$f`, inlined or through a trait object (see above).
    macro_rules! fold_with {
        ($init:expr, $acc:ty, $f:expr) => {{
            let mut f = $f;
            if inline {
                fold(src, base, red, $init, &mut f)
            } else {
                fold(
                    src,
                    base,
                    red,
                    $init,
                    &mut f as &mut dyn FnMut($acc, T) -> $acc,
                )
            }
        }};
    }
    let f_sum = |acc: T::Acc, v: T| T::add(acc, v.acc());
    match kind {
        Kind::Sum => T::from_acc(fold_with!(T::zero(), T::Acc, f_sum)),
        Kind::Mean => {
            let s = fold_with!(T::zero(), T::Acc, f_sum);
            T::from_acc(T::div_count(s, count))
        }
        Kind::Prod => T::from_acc(fold_with!(T::one(), T::Acc, |a, v: T| {
            T::mul(a, v.acc())
        })),
        Kind::Max => fold_with!(T::lowest(), T, |a, v| T::max_nan(a, v)),
        Kind::Min => fold_with!(T::highest(), T, |a, v| T::min_nan(a, v)),
        Kind::L1 => T::from_acc(fold_with!(T::zero(), T::Acc, |a, v: T| {
            T::add(a, T::abs(v.acc()))
        })),
        Kind::SumSquare => T::from_acc(fold_with!(T::zero(), T::Acc, |a, v: T| {
            T::add(a, T::mul(v.acc(), v.acc()))
        })),
        Kind::L2 => {
            let s = fold_with!(T::zero(), T::Acc, |a, v: T| {
                T::add(a, T::mul(v.acc(), v.acc()))
            });
            T::from_f64(T::acc_f64(s).sqrt())
        }
        Kind::LogSum => {
            let s = fold_with!(T::zero(), T::Acc, f_sum);
            T::from_f64(T::acc_f64(s).ln())
        }
        Kind::LogSumExp => {
            let mx = fold_with!(f64::NEG_INFINITY, f64, |a: f64, v: T| {
                let x = v.to_f64();
                if x.is_nan() || a.is_nan() {
                    f64::NAN
                } else {
                    a.max(x)
                }
            });
            let shift = if mx.is_finite() { mx } else { 0.0 };
            let s = fold_with!(0.0f64, f64, |a: f64, v: T| a + (v.to_f64() - shift).exp());
            T::from_f64(s.ln() + shift)
        }
    }
}

fn reduce_typed<T: Num>(
    kind: Kind,
    a: &ArrayD<T>,
    mask: &[bool],
    out_shape: &[usize],
    name: &str,
) -> Result<Tensor> {
    let src = data(a);
    let (kept, red) = split_dims(a.shape(), mask);
    let count: usize = a
        .shape()
        .iter()
        .zip(mask)
        .filter(|(_, &m)| m)
        .map(|(&d, _)| d)
        .product();
    let n = numel_of::<T>(name, out_shape)?;
    let mut out = vec![T::from_acc(T::zero()); n];
    if count == 0 {
        // Reduction over an empty set: the identity of the reduction.
        let v = match kind {
            Kind::Sum | Kind::L1 | Kind::L2 | Kind::SumSquare => T::from_acc(T::zero()),
            Kind::Prod => T::from_acc(T::one()),
            Kind::Mean => T::from_acc(T::div_count(T::zero(), 0)),
            Kind::Max | Kind::LogSum | Kind::LogSumExp => T::lowest(),
            Kind::Min => T::highest(),
        };
        out.iter_mut().for_each(|o| *o = v);
    } else if n > 0 {
        par_outputs(&mut out, count, |first, chunk| {
            for (i, o) in chunk.iter_mut().enumerate() {
                let base = kept_offset(first + i, &kept);
                *o = reduce_one(kind, &src, base, &red, count);
            }
        });
    }
    Ok(T::into_tensor(make_array(name, out_shape, out)?))
}

fn reduce_bool(
    kind: Kind,
    a: &ArrayD<bool>,
    mask: &[bool],
    out_shape: &[usize],
    name: &str,
) -> Result<Tensor> {
    let src = data(a);
    let (kept, red) = split_dims(a.shape(), mask);
    let any = kind == Kind::Max;
    let count: usize = a
        .shape()
        .iter()
        .zip(mask)
        .filter(|(_, &m)| m)
        .map(|(&d, _)| d)
        .product();
    let n = numel_of::<bool>(name, out_shape)?;
    let mut out = vec![!any; n];
    if count > 0 {
        for (i, o) in out.iter_mut().enumerate() {
            let base = kept_offset(i, &kept);
            *o = fold(&src, base, &red, !any, &mut |acc, v| {
                if any {
                    acc || v
                } else {
                    acc && v
                }
            });
        }
    }
    make(name, out_shape, out)
}

impl Operator for Reduce {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name, inputs, 0)?;
        self.check_type(f.dtype)?;
        let value = inputs.get(1).and_then(|x| x.fact.map(|_| x.value));
        let (Some(shape), Some(axes)) = (&f.shape, self.axes(value)?) else {
            return Ok(vec![Fact::unknown_shape(f.dtype)]);
        };
        let mask = self.mask(shape.len(), axes.as_deref())?;
        Ok(vec![Fact::new(f.dtype, self.out_shape(shape, &mask))])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let n = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64;
        let out = crate::ops::util::out_len(outputs, 0);
        let per = if self.kind == Kind::LogSumExp { 2 } else { 1 };
        (n * per).max(out)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.name, inputs, 0)?;
        self.check_type(x.dtype())?;
        let axes = self
            .axes(opt_input(inputs, 1).map(Some))?
            .ok_or_else(|| Error::op(self.name, "internal error: axes unknown at run time"))?;
        let mask = self.mask(x.shape().len(), axes.as_deref())?;
        let out_shape = self.out_shape(x.shape(), &mask);
        let out = match x {
            Tensor::Bool(a) => reduce_bool(self.kind, a, &mask, &out_shape, self.name)?,
            other => {
                num_dispatch!(self.name, other, a => reduce_typed(self.kind, a, &mask, &out_shape, self.name))?
            }
        };
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use crate::ir::attributes::Attribute;
    use crate::ops::shape::test_util::*;
    use crate::tensor::Tensor;
    use half::f16;

    /// Naive reduction of a [2, 3, 4] tensor over a set of axes with keepdims.
    fn naive(x: &[f64], axes: &[usize], op: &str) -> Vec<f64> {
        let s = [2usize, 3, 4];
        let os: Vec<usize> = (0..3)
            .map(|d| if axes.contains(&d) { 1 } else { s[d] })
            .collect();
        let n: usize = os.iter().product();
        let mut groups = vec![Vec::new(); n];
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    let idx = [i, j, k];
                    let o: Vec<usize> = (0..3)
                        .map(|d| if axes.contains(&d) { 0 } else { idx[d] })
                        .collect();
                    groups[(o[0] * os[1] + o[1]) * os[2] + o[2]].push(x[(i * 3 + j) * 4 + k]);
                }
            }
        }
        groups
            .iter()
            .map(|g| match op {
                "ReduceSum" => g.iter().sum(),
                "ReduceMean" => g.iter().sum::<f64>() / g.len() as f64,
                "ReduceMax" => g.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                "ReduceMin" => g.iter().cloned().fold(f64::INFINITY, f64::min),
                "ReduceProd" => g.iter().product(),
                "ReduceL1" => g.iter().map(|v| v.abs()).sum(),
                "ReduceL2" => g.iter().map(|v| v * v).sum::<f64>().sqrt(),
                "ReduceLogSum" => g.iter().sum::<f64>().ln(),
                "ReduceLogSumExp" => g.iter().map(|v| v.exp()).sum::<f64>().ln(),
                "ReduceSumSquare" => g.iter().map(|v| v * v).sum(),
                _ => unreachable!(),
            })
            .collect()
    }

    const OPS: [&str; 10] = [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ];

    #[test]
    fn all_ops_all_axes_against_naive() {
        let xv: Vec<f64> = (0..24)
            .map(|v| (v as f64 * 0.37 - 3.0).sin() + 1.5)
            .collect();
        let x = t(&[2, 3, 4], xv.clone());
        let sets: [&[i64]; 6] = [&[0], &[1], &[-1], &[0, 2], &[2, 0, 1], &[]];
        for op in OPS {
            for axes in sets {
                let norm: Vec<usize> = if axes.is_empty() {
                    vec![0, 1, 2]
                } else {
                    axes.iter().map(|&a| ((a + 3) % 3) as usize).collect()
                };
                let want = naive(&xv, &norm, op);
                // Attribute form (opset 13 / 11) and input form (opset 18).
                let old = if op == "ReduceSum" { 11 } else { 13 };
                let y_attr = if axes.is_empty() {
                    run1(op, old, &[], &[x.clone()])
                } else {
                    run1(op, old, &[("axes", ints(axes))], &[x.clone()])
                };
                let ins = vec![
                    Some(x.clone()),
                    if axes.is_empty() {
                        None
                    } else {
                        Some(i64s(axes))
                    },
                ];
                let y_in = run(op, 18, &[], &ins).unwrap().remove(0);
                assert_eq!(y_attr, y_in, "{op} {axes:?}");
                let got = y_in.to_f64_vec().unwrap();
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                        "{op} {axes:?}: {got:?} vs {want:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn keepdims_and_shapes() {
        let x = iota(&[2, 3, 4]);
        let y = run1(
            "ReduceSum",
            13,
            &[("keepdims", Attribute::Int(0))],
            &[x.clone(), i64s(&[1])],
        );
        assert_eq!(y.shape(), &[2, 4]);
        let y = run1(
            "ReduceMean",
            13,
            &[("keepdims", Attribute::Int(0))],
            &[x.clone()],
        );
        assert_eq!(y, Tensor::scalar(11.5f32));
        let y = run1("ReduceMax", 18, &[], &[x.clone()]);
        assert_eq!(y, t(&[1, 1, 1], vec![23.0f32]));
        // Rank 0 input.
        let y = run1("ReduceSum", 13, &[], &[Tensor::scalar(4.0f32)]);
        assert_eq!(y, Tensor::scalar(4.0f32));
        // Empty axes input counts as absent.
        let y = run1("ReduceSum", 13, &[], &[x.clone(), i64s(&[])]);
        assert_eq!(y, t(&[1, 1, 1], vec![276.0f32]));
    }

    #[test]
    fn noop_with_empty_axes() {
        let x = t(&[2], vec![-2.0f32, 3.0]);
        let noop = [("noop_with_empty_axes", Attribute::Int(1))];
        assert_eq!(run1("ReduceSum", 13, &noop, &[x.clone()]), x);
        assert_eq!(run1("ReduceSum", 13, &noop, &[x.clone(), i64s(&[])]), x);
        assert_eq!(run1("ReduceMax", 18, &noop, &[x.clone()]), x);
        assert_eq!(
            run1("ReduceSumSquare", 18, &noop, &[x.clone()]),
            t(&[2], vec![4.0f32, 9.0])
        );
        assert_eq!(
            run1("ReduceL1", 18, &noop, &[x.clone()]),
            t(&[2], vec![2.0f32, 3.0])
        );
        // The attribute does not exist before the axes became an input.
        assert_eq!(
            run1("ReduceMax", 13, &noop, &[x.clone()]),
            t(&[1], vec![3.0f32])
        );
    }

    #[test]
    fn empty_set_reductions() {
        let x = t(&[2, 0, 3], Vec::<f32>::new());
        let cases = [
            ("ReduceSum", 0.0f32),
            ("ReduceProd", 1.0),
            ("ReduceMax", f32::NEG_INFINITY),
            ("ReduceMin", f32::INFINITY),
            ("ReduceL2", 0.0),
            ("ReduceLogSumExp", f32::NEG_INFINITY),
            ("ReduceLogSum", f32::NEG_INFINITY),
        ];
        for (op, v) in cases {
            let y = run1(op, 18, &[], &[x.clone(), i64s(&[1])]);
            assert_eq!(y, t(&[2, 1, 3], vec![v; 6]), "{op}");
        }
        let y = run1("ReduceMean", 18, &[], &[x.clone(), i64s(&[1])]);
        assert!(y.to_f64_vec().unwrap().iter().all(|v| v.is_nan()));
        // Reducing a non-empty axis of an empty tensor gives an empty output.
        let y = run1("ReduceSum", 18, &[], &[x.clone(), i64s(&[2])]);
        assert_eq!(y.shape(), &[2, 0, 1]);
        let y = run1("ReduceMax", 18, &[], &[t(&[0], Vec::<i32>::new())]);
        assert_eq!(y, t(&[1], vec![i32::MIN]));
    }

    #[test]
    fn integer_f16_and_bool_types() {
        let x = t(&[2, 2], vec![100i8, 100, -3, 4]);
        // Integer sums wrap like the type.
        assert_eq!(
            run1("ReduceSum", 13, &[], &[x.clone(), i64s(&[1])]),
            t(&[2, 1], vec![-56i8, 1])
        );
        assert_eq!(
            run1(
                "ReduceMean",
                13,
                &[("axes", ints(&[1]))],
                &[t(&[1, 2], vec![-3i32, 4])]
            ),
            t(&[1, 1], vec![0i32])
        );
        assert_eq!(
            run1("ReduceL2", 13, &[], &[t(&[2], vec![3u16, 4])]),
            t(&[1], vec![5u16])
        );
        let h = t(
            &[3],
            vec![
                f16::from_f32(1000.0),
                f16::from_f32(0.5),
                f16::from_f32(0.25),
            ],
        );
        // Accumulated in f64, rounded once.
        assert_eq!(
            run1("ReduceSum", 13, &[], &[h]),
            t(&[1], vec![f16::from_f32(1000.75)])
        );
        let b = t(&[2, 2], vec![true, false, false, false]);
        assert_eq!(
            run1("ReduceMax", 20, &[], &[b.clone(), i64s(&[1])]),
            t(&[2, 1], vec![true, false])
        );
        assert_eq!(
            run1("ReduceMin", 20, &[], &[b.clone(), i64s(&[0])]),
            t(&[1, 2], vec![false, false])
        );
        let msg = fails("ReduceSum", 13, &[], &[b]);
        assert!(msg.contains("unsupported"), "{msg}");
        // NaN propagates through max.
        assert!(run1("ReduceMax", 13, &[], &[f32s(&[1.0, f32::NAN, 3.0])])
            .to_f64_vec()
            .unwrap()[0]
            .is_nan());
    }

    #[test]
    fn large_reduction_is_thread_independent() {
        // run1 compares 1 and 3 threads bit for bit.
        let xv: Vec<f32> = (0..200_000)
            .map(|v| ((v * 7919) % 1000) as f32 * 0.001)
            .collect();
        let x = t(&[400, 500], xv.clone());
        let y = run1("ReduceSum", 11, &[("axes", ints(&[1]))], &[x.clone()]);
        let got = y.to_f64_vec().unwrap();
        for r in [0usize, 199, 399] {
            let want: f64 = xv[r * 500..(r + 1) * 500].iter().map(|&v| v as f64).sum();
            assert!((got[r] - want).abs() < 1e-3, "{} vs {want}", got[r]);
        }
        let y = run1("ReduceLogSumExp", 18, &[], &[x, i64s(&[0])]);
        assert_eq!(y.shape(), &[1, 500]);
    }

    #[test]
    fn reduce_errors() {
        let x = iota(&[2, 3]);
        let msg = fails("ReduceSum", 13, &[], &[x.clone(), i64s(&[2])]);
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails("ReduceMean", 13, &[("axes", ints(&[-3]))], &[x.clone()]);
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails("ReduceMean", 18, &[], &[x.clone(), i64s(&[0, -2])]);
        assert!(msg.contains("repeated"), "{msg}");
        let msg = fails("ReduceMean", 18, &[], &[t(&[1], vec!["a".to_string()])]);
        assert!(msg.contains("unsupported"), "{msg}");
        let msg = fails("ReduceSum", 13, &[], &[x, f32s(&[0.0])]);
        assert!(msg.contains("integer"), "{msg}");
    }
}
