//! Einsum: general tensor contraction by an equation such as `bij,bjk->bik`.
//! Explicit and implicit (`ij,jk`: labels seen once, sorted, after the
//! ellipsis dimensions) outputs, repeated labels (diagonals), `...` with
//! numpy broadcasting. Each output element sums the product of the operands
//! over the index space of the contracted labels, accumulating in f64 for
//! floats (bf16/f16 round once at the end) and wrapping i64/u64 for integers;
//! the work is split over output elements only.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::shape::num::Num;
use crate::ops::util::par_rows;
use crate::tensor::Tensor;
use ndarray::{ArrayD, IxDyn};

const OP: &str = "Einsum";
/// Label ids of ellipsis dimensions start here (letters use their ASCII code).
const ELL: u32 = 256;

/// A parsed operand term: its letters and where `...` sits, if present.
#[derive(Debug, Clone)]
struct Term {
    labels: Vec<u32>,
    ellipsis: Option<usize>,
}

fn parse_term(s: &str) -> Result<Term> {
    let mut labels = Vec::new();
    let mut ellipsis = None;
    let b = s.trim().as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'.' {
            if ellipsis.is_some() || b.get(i..i + 3) != Some(b"...".as_slice()) {
                return Err(Error::op(OP, format!("bad ellipsis in term '{s}'")));
            }
            ellipsis = Some(labels.len());
            i += 3;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            if c == b' ' {
                i += 1;
                continue;
            }
            return Err(Error::op(OP, format!("bad character in term '{s}'")));
        }
        labels.push(c as u32);
        i += 1;
    }
    Ok(Term { labels, ellipsis })
}

/// A parsed equation.
#[derive(Debug, Clone)]
pub(super) struct Equation {
    inputs: Vec<Term>,
    output: Option<Term>,
}

pub(super) fn parse(eq: &str) -> Result<Equation> {
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq, None),
    };
    let inputs = lhs.split(',').map(parse_term).collect::<Result<Vec<_>>>()?;
    let output = rhs.map(parse_term).transpose()?;
    if let Some(o) = &output {
        let mut seen = o.labels.clone();
        crate::order::sort_by(&mut seen, |a, b| a.cmp(b));
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::op(OP, format!("repeated output label in '{eq}'")));
        }
    }
    Ok(Equation { inputs, output })
}

/// The resolved contraction for concrete input shapes.
#[derive(Debug)]
struct Plan {
    out_shape: Vec<usize>,
    /// Per output axis: its extent; per summed label: its extent.
    sum_dims: Vec<usize>,
    /// Per operand: stride per output axis, and per summed label.
    out_strides: Vec<Vec<usize>>,
    sum_strides: Vec<Vec<usize>>,
}

fn plan(eq: &Equation, shapes: &[&[usize]]) -> Result<Plan> {
    if shapes.len() != eq.inputs.len() {
        return Err(Error::op(
            OP,
            format!(
                "equation has {} terms but {} inputs were given",
                eq.inputs.len(),
                shapes.len()
            ),
        ));
    }
    // Expand each term's ellipsis into right-aligned ellipsis labels.
    let mut n_ell = 0usize;
    let mut expanded: Vec<Vec<u32>> = Vec::new();
    for (t, s) in eq.inputs.iter().zip(shapes) {
        let labels = match t.ellipsis {
            None => t.labels.clone(),
            Some(p) => {
                let k = s.len().checked_sub(t.labels.len()).ok_or_else(|| {
                    Error::op(
                        OP,
                        format!("input of shape {s:?} has too few axes for its term"),
                    )
                })?;
                n_ell = n_ell.max(k);
                let mut l = t.labels[..p].to_vec();
                l.extend((0..k).map(|i| ELL + (1000 - k + i) as u32));
                l.extend_from_slice(&t.labels[p..]);
                l
            }
        };
        if labels.len() != s.len() {
            return Err(Error::op(
                OP,
                format!(
                    "term has {} labels but the input has shape {s:?}",
                    labels.len()
                ),
            ));
        }
        expanded.push(labels);
    }
    let ell: Vec<u32> = (0..n_ell)
        .map(|i| ELL + (1000 - n_ell + i) as u32)
        .collect();
    // Label extents, broadcasting size-1 axes.
    let mut size: std::collections::BTreeMap<u32, usize> = Default::default();
    for (labels, s) in expanded.iter().zip(shapes) {
        for (&l, &d) in labels.iter().zip(s.iter()) {
            let e = size.entry(l).or_insert(d);
            if *e == 1 {
                *e = d;
            } else if d != *e && !(d == 1 && l >= ELL) {
                return Err(Error::op(
                    OP,
                    format!(
                        "label '{}' has sizes {} and {d}",
                        char::from_u32(l).unwrap_or('.'),
                        *e
                    ),
                ));
            }
        }
    }
    let out_labels: Vec<u32> = match &eq.output {
        Some(o) => {
            let mut l = o.labels.clone();
            let p = o.ellipsis.unwrap_or(0);
            if o.ellipsis.is_some() {
                l.splice(p..p, ell.iter().copied());
            }
            for x in &l {
                if !size.contains_key(x) {
                    return Err(Error::op(OP, "output label not present in any input"));
                }
            }
            l
        }
        None => {
            let mut count: std::collections::BTreeMap<u32, usize> = Default::default();
            for labels in &expanded {
                for &l in labels.iter().filter(|&&l| l < ELL) {
                    *count.entry(l).or_default() += 1;
                }
            }
            let mut l = ell.clone();
            l.extend(count.iter().filter(|(_, &c)| c == 1).map(|(&k, _)| k));
            l
        }
    };
    let sum_labels: Vec<u32> = size
        .keys()
        .copied()
        .filter(|k| !out_labels.contains(k))
        .collect();
    let stride_of = |labels: &[u32], s: &[usize], l: u32| -> usize {
        let st = crate::ops::shape::strides(s);
        labels
            .iter()
            .zip(s.iter().zip(st))
            .filter(|(&x, (&d, _))| x == l && d != 1)
            .map(|(_, (_, st))| st)
            .sum()
    };
    let out_strides = expanded
        .iter()
        .zip(shapes)
        .map(|(lb, s)| out_labels.iter().map(|&l| stride_of(lb, s, l)).collect())
        .collect();
    let sum_strides = expanded
        .iter()
        .zip(shapes)
        .map(|(lb, s)| sum_labels.iter().map(|&l| stride_of(lb, s, l)).collect())
        .collect();
    Ok(Plan {
        out_shape: out_labels.iter().map(|l| size[l]).collect(),
        sum_dims: sum_labels.iter().map(|l| size[l]).collect(),
        out_strides,
        sum_strides,
    })
}

fn contract<T: Num>(p: &Plan, ops: &[&[T]]) -> Vec<T> {
    let n_out: usize = p.out_shape.iter().product();
    let n_sum: usize = p.sum_dims.iter().product();
    let zero = T::from_acc(T::zero());
    let mut out = vec![zero; n_out];
    let rank = p.out_shape.len();
    par_rows(&mut out, 1, |first, chunk| {
        let mut base = vec![0usize; ops.len()];
        let mut offs = vec![0usize; ops.len()];
        let mut idx = vec![0usize; p.sum_dims.len()];
        for (j, o) in chunk.iter_mut().enumerate() {
            let mut f = first + j;
            base.iter_mut().for_each(|b| *b = 0);
            for d in (0..rank).rev() {
                let i = f % p.out_shape[d];
                f /= p.out_shape[d];
                for (b, st) in base.iter_mut().zip(&p.out_strides) {
                    *b += i * st[d];
                }
            }
            offs.copy_from_slice(&base);
            idx.iter_mut().for_each(|x| *x = 0);
            let mut acc = T::zero();
            for _ in 0..n_sum {
                let mut prod = ops[0][offs[0]].acc();
                for (op, &off) in ops.iter().zip(&offs).skip(1) {
                    prod = T::mul(prod, op[off].acc());
                }
                acc = T::add(acc, prod);
                // Odometer over the summed labels.
                for d in (0..idx.len()).rev() {
                    idx[d] += 1;
                    for (x, st) in offs.iter_mut().zip(&p.sum_strides) {
                        *x += st[d];
                    }
                    if idx[d] < p.sum_dims[d] {
                        break;
                    }
                    for (x, st) in offs.iter_mut().zip(&p.sum_strides) {
                        *x -= st[d] * idx[d];
                    }
                    idx[d] = 0;
                }
            }
            *o = T::from_acc(acc);
        }
    });
    out
}

#[derive(Debug)]
struct Einsum {
    eq: Equation,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let s = ctx
        .attrs
        .string_opt("equation")?
        .ok_or_else(|| Error::op(OP, "missing 'equation' attribute"))?;
    Ok(Box::new(Einsum { eq: parse(&s)? }))
}

fn typed<T: Num>(p: &Plan, ins: &[&Tensor]) -> Result<ArrayD<T>> {
    let data: Vec<std::borrow::Cow<[T]>> = ins
        .iter()
        .map(|t| {
            t.view::<T>()
                .map(|v| std::borrow::Cow::Owned(v.iter().cloned().collect()))
        })
        .collect::<Result<_>>()?;
    let slices: Vec<&[T]> = data.iter().map(|c| c.as_ref()).collect();
    ArrayD::from_shape_vec(IxDyn(&p.out_shape), contract(p, &slices))
        .map_err(|e| Error::op(OP, format!("internal: {e}")))
}

impl Operator for Einsum {
    fn cost_class(&self) -> OpClass {
        OpClass::MatMul
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let facts: Vec<&Fact> = inputs
            .iter()
            .map(|i| i.fact.ok_or_else(|| Error::op(OP, "missing input")))
            .collect::<Result<_>>()?;
        let t = facts
            .first()
            .ok_or_else(|| Error::op(OP, "no inputs"))?
            .dtype;
        if facts.iter().any(|f| f.dtype != t) {
            return Err(Error::op(OP, "all inputs must have the same type"));
        }
        if matches!(t, crate::tensor::DType::Bool | crate::tensor::DType::String) {
            return Err(Error::op(OP, format!("expected numeric inputs, found {t}")));
        }
        let shapes: Option<Vec<&[usize]>> = facts.iter().map(|f| f.shape.as_deref()).collect();
        Ok(vec![match shapes {
            Some(s) => Fact::new(t, plan(&self.eq, &s)?.out_shape),
            None => Fact::unknown_shape(t),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        let shapes: Option<Vec<&[usize]>> = inputs
            .iter()
            .map(|f| f.and_then(|f| f.shape.as_deref()))
            .collect();
        shapes
            .and_then(|s| plan(&self.eq, &s).ok())
            .map(|p| {
                let n: usize =
                    p.out_shape.iter().product::<usize>() * p.sum_dims.iter().product::<usize>();
                (n * inputs.len()) as u64
            })
            .unwrap_or(0)
            .max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let ins: Vec<&Tensor> = inputs
            .iter()
            .map(|t| t.ok_or_else(|| Error::op(OP, "missing input")))
            .collect::<Result<_>>()?;
        let first = ins.first().ok_or_else(|| Error::op(OP, "no inputs"))?;
        if ins.iter().any(|t| t.dtype() != first.dtype()) {
            return Err(Error::op(OP, "all inputs must have the same type"));
        }
        let shapes: Vec<&[usize]> = ins.iter().map(|t| t.shape()).collect();
        let p = plan(&self.eq, &shapes)?;
        Ok(vec![
            crate::numeric_map!(OP, *first, _a => typed(&p, &ins)?)?,
        ])
    }
}
