//! Slice: strided sub-ranges along chosen axes, with negative steps and the
//! spec's clamping of out-of-range starts and ends. Starts, ends and axes are
//! attributes before opset 10 and inputs (with steps) from opset 10.

use super::move_tensor;
use super::{int_list, movement_flops, norm_axes, strides};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, opt_input};
use crate::ops::Registrar;
use crate::tensor::Tensor;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Slice", 1, build);
}

const OP: &str = "Slice";

#[derive(Debug)]
struct Slice {
    /// Before opset 10: (starts, ends, axes) from attributes.
    attrs: Option<AttrParams>,
}

fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let attrs = if ctx.opset < 10 {
        let a = ctx.attrs;
        let starts = a
            .ints_opt("starts")?
            .ok_or_else(|| a.error("starts", "required but missing"))?;
        let ends = a
            .ints_opt("ends")?
            .ok_or_else(|| a.error("ends", "required but missing"))?;
        Some((starts, ends, a.ints_opt("axes")?))
    } else {
        None
    };
    Ok(Box::new(Slice { attrs }))
}

/// The resolved slice: output shape and the per-dimension offset maps.
fn plan(
    shape: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<(Vec<usize>, Vec<Vec<usize>>)> {
    let rank = shape.len();
    if starts.len() != ends.len() {
        return Err(Error::op(
            OP,
            format!("starts {starts:?} and ends {ends:?} differ in length"),
        ));
    }
    let axes = match axes {
        Some(a) => {
            if a.len() != starts.len() {
                return Err(Error::op(
                    OP,
                    format!("axes {a:?} and starts {starts:?} differ in length"),
                ));
            }
            norm_axes(OP, a, rank)?
        }
        None => {
            if starts.len() > rank {
                return Err(Error::op(
                    OP,
                    format!("{} starts for rank {rank}", starts.len()),
                ));
            }
            (0..starts.len()).collect()
        }
    };
    if let Some(s) = steps {
        if s.len() != starts.len() {
            return Err(Error::op(
                OP,
                format!("steps {s:?} and starts {starts:?} differ in length"),
            ));
        }
    }
    // Per dimension: (start, step, count); untouched dimensions are (0, 1, dim).
    let mut spec: Vec<(i64, i64, usize)> = shape.iter().map(|&d| (0, 1, d)).collect();
    for (k, &ax) in axes.iter().enumerate() {
        let dim = shape[ax] as i64;
        let step = steps.map_or(1, |s| s[k]);
        if step == 0 {
            return Err(Error::op(OP, format!("step for axis {ax} is 0")));
        }
        let mut start = starts[k];
        let mut end = ends[k];
        if start < 0 {
            start = start.saturating_add(dim);
        }
        if end < 0 {
            end = end.saturating_add(dim);
        }
        let count = if dim == 0 {
            0
        } else if step > 0 {
            start = start.clamp(0, dim);
            end = end.clamp(0, dim);
            if end > start {
                // ceil((end - start) / step), without overflow.
                (end - start - 1) / step + 1
            } else {
                0
            }
        } else {
            start = start.clamp(0, dim - 1);
            end = end.clamp(-1, dim - 1);
            if start > end {
                (start - end - 1) / step.saturating_neg().max(1) + 1
            } else {
                0
            }
        };
        spec[ax] = (start, step, count as usize);
    }
    let st = strides(shape);
    let out_shape: Vec<usize> = spec.iter().map(|s| s.2).collect();
    let maps = spec
        .iter()
        .zip(&st)
        .map(|(&(start, step, count), &stride)| {
            (0..count as i64)
                .map(|i| ((start + i * step) as usize) * stride)
                .collect()
        })
        .collect();
    Ok((out_shape, maps))
}

impl Slice {
    /// Starts, ends, axes and steps, from attributes or input values (`None` if unknown).
    fn params<'a>(
        &self,
        value: impl Fn(usize) -> Option<Option<&'a Tensor>>,
    ) -> Result<Option<SliceParams>> {
        if let Some((s, e, a)) = &self.attrs {
            return Ok(Some((s.clone(), e.clone(), a.clone(), None)));
        }
        let mut vals: Vec<Option<Vec<i64>>> = Vec::new();
        for (i, what) in [(1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")] {
            match value(i) {
                // Absent optional input.
                None => {
                    if i < 3 {
                        return Err(Error::op(OP, format!("required input {what} is missing")));
                    }
                    vals.push(None)
                }
                Some(None) => return Ok(None),
                Some(Some(t)) => vals.push(Some(int_list(OP, t, what)?)),
            }
        }
        let mut it = vals.into_iter();
        let s = it.next().flatten().unwrap_or_default();
        let e = it.next().flatten().unwrap_or_default();
        Ok(Some((s, e, it.next().flatten(), it.next().flatten())))
    }
}

/// Starts, ends and optional axes from the attributes (opset < 10).
type AttrParams = (Vec<i64>, Vec<i64>, Option<Vec<i64>>);

/// Starts, ends, optional axes and optional steps.
type SliceParams = (Vec<i64>, Vec<i64>, Option<Vec<i64>>, Option<Vec<i64>>);

impl Operator for Slice {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(OP, inputs, 0)?;
        let params = self.params(|i| inputs.get(i).and_then(|x| x.fact.map(|_| x.value)))?;
        let (Some(shape), Some((s, e, a, st))) = (&f.shape, params) else {
            return Ok(vec![Fact::unknown_shape(f.dtype)]);
        };
        let (out, _) = plan(shape, &s, &e, a.as_deref(), st.as_deref())?;
        Ok(vec![Fact::new(f.dtype, out)])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let (s, e, a, st) = self
            .params(|i| opt_input(inputs, i).map(Some))?
            .ok_or_else(|| Error::op(OP, "internal error: parameters unknown at run time"))?;
        let (out, maps) = plan(x.shape(), &s, &e, a.as_deref(), st.as_deref())?;
        Ok(vec![move_tensor(OP, x, &out, &maps)?])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::tensor::Tensor;

    /// Naive 1-D slice per the spec, for checking.
    fn naive(dim: i64, start: i64, end: i64, step: i64) -> Vec<i64> {
        let mut s = if start < 0 { start + dim } else { start };
        let mut e = if end < 0 { end + dim } else { end };
        let mut v = Vec::new();
        if step > 0 {
            s = s.clamp(0, dim);
            e = e.clamp(0, dim);
            let mut i = s;
            while i < e {
                v.push(i);
                i += step;
            }
        } else {
            s = s.clamp(0, dim - 1);
            e = e.clamp(-1, dim - 1);
            let mut i = s;
            while i > e {
                v.push(i);
                i += step;
            }
        }
        v
    }

    fn slice10(
        x: &Tensor,
        s: &[i64],
        e: &[i64],
        a: Option<&[i64]>,
        st: Option<&[i64]>,
    ) -> crate::Result<Tensor> {
        let ins = vec![
            Some(x.clone()),
            Some(i64s(s)),
            Some(i64s(e)),
            a.map(i64s),
            st.map(i64s),
        ];
        Ok(run("Slice", 13, &[], &ins)?.remove(0))
    }

    #[test]
    fn slice_1d_against_naive() {
        let x = t(&[7], (0..7i64).collect::<Vec<_>>());
        let vals = [
            -100i64,
            -8,
            -7,
            -3,
            -1,
            0,
            1,
            3,
            6,
            7,
            8,
            100,
            i64::MAX,
            i64::MIN,
        ];
        for &s in &vals {
            for &e in &vals {
                for step in [1i64, 2, 3, -1, -2, -5, i64::MIN] {
                    let y = slice10(&x, &[s], &[e], None, Some(&[step])).unwrap();
                    let want = naive(7, s, e, step);
                    assert_eq!(y.to_i64_vec().unwrap(), want, "s={s} e={e} step={step}");
                }
            }
        }
    }

    #[test]
    fn slice_2d_axes_and_steps() {
        let x = iota(&[3, 4]);
        // Reverse both axes given as negative axes.
        let y = slice10(
            &x,
            &[-1, -1],
            &[i64::MIN, i64::MIN],
            Some(&[-1, -2]),
            Some(&[-1, -1]),
        )
        .unwrap();
        assert_eq!(
            y,
            t(
                &[3, 4],
                vec![11.0f32, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
            )
        );
        let y = slice10(&x, &[1, 0], &[3, 4], Some(&[0, 1]), Some(&[1, 2])).unwrap();
        assert_eq!(y, t(&[2, 2], vec![4.0f32, 6.0, 8.0, 10.0]));
        // Empty result.
        let y = slice10(&x, &[2], &[1], Some(&[1]), None).unwrap();
        assert_eq!(y.shape(), &[3, 0]);
        // i32 parameters.
        let ins = vec![
            Some(x.clone()),
            Some(t(&[1], vec![1i32])),
            Some(t(&[1], vec![2i32])),
        ];
        let y = run("Slice", 13, &[], &ins).unwrap().remove(0);
        assert_eq!(y, t(&[1, 4], vec![4.0f32, 5.0, 6.0, 7.0]));
    }

    #[test]
    fn slice_opset1_attributes_and_strings() {
        let x = t(
            &[2, 3],
            ["a", "b", "c", "d", "e", "f"].map(String::from).to_vec(),
        );
        let y = run1(
            "Slice",
            1,
            &[("starts", ints(&[0, 1])), ("ends", ints(&[1, 1000]))],
            &[x.clone()],
        );
        assert_eq!(y, t(&[1, 2], ["b", "c"].map(String::from).to_vec()));
        let y = run1(
            "Slice",
            1,
            &[
                ("starts", ints(&[-2])),
                ("ends", ints(&[-1])),
                ("axes", ints(&[1])),
            ],
            &[x],
        );
        assert_eq!(y, t(&[2, 1], ["b", "e"].map(String::from).to_vec()));
    }

    /// Slices of 4-D inputs with unit, whole and partly read dimensions
    /// (merged into longer runs by `offset_copy`) against per-axis naive
    /// indices, for elements of 1, 2, 4 and 8 bytes and strings.
    #[test]
    fn slice_merged_runs_against_naive() {
        type Case<'a> = (&'a [usize], &'a [i64], &'a [i64], &'a [i64], &'a [i64]);
        let cases: [Case; 8] = [
            (&[2, 5, 6, 3], &[1], &[4], &[1], &[1]),
            (&[2, 5, 6, 3], &[-2], &[100], &[2], &[1]),
            (&[1, 7, 7, 4], &[3, 0], &[7, 7], &[1, 2], &[1, 2]),
            (&[3, 1, 4, 5], &[0, 1], &[1, 3], &[0, 2], &[1, 1]),
            (&[3, 4, 5, 2], &[2, 4], &[0, 0], &[1, 2], &[-1, -2]),
            (
                &[2, 3, 4, 5],
                &[1, 2, 3, 4],
                &[2, 3, 4, 5],
                &[0, 1, 2, 3],
                &[1, 1, 1, 1],
            ),
            (&[4, 1, 1, 9], &[1], &[3], &[0], &[1]),
            (&[2, 3, 4, 5], &[0], &[5], &[3], &[1]),
        ];
        for (shape, st, en, ax, sp) in cases {
            let n: usize = shape.iter().product();
            // Per axis, the indices read.
            let mut sel: Vec<Vec<i64>> = shape.iter().map(|&d| (0..d as i64).collect()).collect();
            for k in 0..ax.len() {
                let a = ax[k] as usize;
                sel[a] = naive(shape[a] as i64, st[k], en[k], sp[k]);
            }
            let out: Vec<usize> = sel.iter().map(|v| v.len()).collect();
            let strides = super::super::strides(shape);
            let mut want = Vec::new();
            let mut idx = vec![0usize; 4];
            for _ in 0..out.iter().product::<usize>() {
                want.push(
                    (0..4)
                        .map(|d| sel[d][idx[d]] as usize * strides[d])
                        .sum::<usize>(),
                );
                super::super::increment(&mut idx, &out);
            }
            let go = |x: Tensor| {
                let y = slice10(&x, st, en, Some(ax), Some(sp)).unwrap();
                assert_eq!(y.shape(), &out[..], "{shape:?} {st:?}");
                y
            };
            let w: Vec<i64> = want.iter().map(|&v| v as i64).collect();
            let y = go(t(shape, (0..n as i64).collect::<Vec<_>>()));
            assert_eq!(
                y.to_i64_vec().unwrap(),
                w,
                "{shape:?} {st:?} {en:?} {ax:?} {sp:?}"
            );
            let y = go(t(shape, (0..n).map(|v| v as f32).collect::<Vec<_>>()));
            let wf: Vec<f64> = want.iter().map(|&v| v as f64).collect();
            assert_eq!(y.to_f64_vec().unwrap(), wf);
            let y = go(t(shape, (0..n).map(|v| v as i16).collect::<Vec<_>>()));
            assert_eq!(y.to_i64_vec().unwrap(), w);
            let y = go(t(shape, (0..n).map(|v| v as u8).collect::<Vec<_>>()));
            let w8: Vec<i64> = want.iter().map(|&v| (v as u8) as i64).collect();
            assert_eq!(y.to_i64_vec().unwrap(), w8);
            let y = go(t(shape, (0..n).map(|v| v.to_string()).collect::<Vec<_>>()));
            let ws: Vec<String> = want.iter().map(|v| v.to_string()).collect();
            assert_eq!(y, t(&out, ws));
        }
    }

    #[test]
    fn slice_empty_and_zero_dims() {
        let x = t(&[0, 3], Vec::<f64>::new());
        let y = slice10(&x, &[0, 1], &[5, 3], None, Some(&[-1, 1])).unwrap();
        assert_eq!(y.shape(), &[0, 2]);
    }

    #[test]
    fn slice_errors() {
        let x = iota(&[3, 4]);
        assert!(slice10(&x, &[0], &[1], None, Some(&[0]))
            .unwrap_err()
            .to_string()
            .contains("step"));
        assert!(slice10(&x, &[0], &[1], Some(&[2]), None)
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert!(slice10(&x, &[0, 0], &[1], None, None)
            .unwrap_err()
            .to_string()
            .contains("length"));
        assert!(slice10(&x, &[0, 0], &[1, 1], Some(&[1, -1]), None)
            .unwrap_err()
            .to_string()
            .contains("repeated"));
        let msg = fails("Slice", 13, &[], &[x.clone(), f32s(&[0.0]), i64s(&[1])]);
        assert!(msg.contains("integer"), "{msg}");
        let msg = fails("Slice", 9, &[("ends", ints(&[1]))], &[x]);
        assert!(msg.contains("starts"), "{msg}");
    }
}
