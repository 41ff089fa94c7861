//! Pad: grows (or, with negative pads, crops) each axis, filling the new
//! positions with a constant, the edge value, a reflection, or a wrap-around.
//! Pads are an attribute before opset 11 and an input afterwards; opset 18
//! adds the `axes` input and opset 19 the `wrap` mode.

use super::num::{num_dispatch, Num};
use super::offset_copy;
use super::{int_list, movement_flops, norm_axes, strides, PAD};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, opt_input};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, same_width, Bits};
use crate::tensor::Tensor;
use ndarray::{ArrayD, IxDyn};

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Pad", 2, build);
}

const OP: &str = "Pad";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

#[derive(Debug)]
struct Pad {
    mode: Mode,
    /// Before opset 11: pads and the fill value from attributes.
    attrs: Option<(Vec<i64>, f32)>,
}

fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let mode = match a.string("mode", "constant")?.as_str() {
        "constant" => Mode::Constant,
        "reflect" => Mode::Reflect,
        "edge" => Mode::Edge,
        "wrap" if ctx.opset >= 19 => Mode::Wrap,
        other => {
            return Err(a.error(
                "mode",
                format!("unsupported value {other:?} at opset {}", ctx.opset),
            ))
        }
    };
    let attrs = if ctx.opset < 11 {
        let pads = a
            .ints_opt("pads")?
            .ok_or_else(|| a.error("pads", "required but missing"))?;
        Some((pads, a.float("value", 0.0)?))
    } else {
        None
    };
    Ok(Box::new(Pad { mode, attrs }))
}

/// Per-axis (begin, end) pads for `rank` from the pads list and optional axes.
fn full_pads(rank: usize, pads: &[i64], axes: Option<&[i64]>) -> Result<Vec<(i64, i64)>> {
    let axes: Vec<usize> = match axes {
        Some(a) => norm_axes(OP, a, rank)?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(Error::op(
            OP,
            format!(
                "pads {pads:?} should have {} values for {} axes",
                2 * axes.len(),
                axes.len()
            ),
        ));
    }
    let mut out = vec![(0, 0); rank];
    for (k, &ax) in axes.iter().enumerate() {
        out[ax] = (pads[k], pads[k + axes.len()]);
    }
    Ok(out)
}

fn out_shape(shape: &[usize], pads: &[(i64, i64)]) -> Result<Vec<usize>> {
    shape
        .iter()
        .zip(pads)
        .map(|(&n, &(b, e))| {
            let len = (n as i64).checked_add(b).and_then(|v| v.checked_add(e));
            match len {
                Some(l) if l >= 0 => Ok(l as usize),
                _ => Err(Error::op(
                    OP,
                    format!("pads ({b}, {e}) on a dimension of {n} give a negative size"),
                )),
            }
        })
        .collect()
}

impl Pad {
    /// Offset map of one dimension.
    fn map(&self, n: usize, stride: usize, begin: i64, len: usize) -> Result<Vec<usize>> {
        let ni = n as i64;
        (0..len as i64)
            .map(|o| {
                let i = o - begin;
                if (0..ni).contains(&i) {
                    return Ok(i as usize * stride);
                }
                if self.mode == Mode::Constant {
                    return Ok(PAD);
                }
                if n == 0 {
                    return Err(Error::op(
                        OP,
                        format!("cannot pad an empty dimension in {:?} mode", self.mode),
                    ));
                }
                let j = match self.mode {
                    Mode::Edge => i.clamp(0, ni - 1),
                    Mode::Wrap => i.rem_euclid(ni),
                    _ if n == 1 => 0,
                    _ => {
                        let period = 2 * (ni - 1);
                        let m = i.rem_euclid(period);
                        if m >= ni {
                            period - m
                        } else {
                            m
                        }
                    }
                };
                Ok(j as usize * stride)
            })
            .collect()
    }

    /// Pads and axes, from attributes or input values (`None` if not constant).
    fn pads<'a>(
        &self,
        rank: usize,
        value: impl Fn(usize) -> Option<Option<&'a Tensor>>,
    ) -> Result<Option<Vec<(i64, i64)>>> {
        if let Some((p, _)) = &self.attrs {
            return full_pads(rank, p, None).map(Some);
        }
        let pads = match value(1) {
            None => return Err(Error::op(OP, "required input pads is missing")),
            Some(None) => return Ok(None),
            Some(Some(t)) => int_list(OP, t, "pads")?,
        };
        let axes = match value(3) {
            None => None,
            Some(None) => return Ok(None),
            Some(Some(t)) => Some(int_list(OP, t, "axes")?),
        };
        full_pads(rank, &pads, axes.as_deref()).map(Some)
    }
}

impl Pad {
    /// The output shape and offset maps of padding `shape` by `pads`.
    fn maps(&self, shape: &[usize], pads: &[(i64, i64)]) -> Result<(Vec<usize>, Vec<Vec<usize>>)> {
        let out = out_shape(shape, pads)?;
        let st = strides(shape);
        let maps = (0..shape.len())
            .map(|d| self.map(shape[d], st[d], pads[d].0, out[d]))
            .collect::<Result<Vec<_>>>()?;
        Ok((out, maps))
    }
}

/// The attribute's pad value as a scalar of `a`'s type: the only code
/// compiled per element type for the opset < 11 form.
fn attr_fill<T: Num>(_a: &ArrayD<T>, v: f32) -> Result<Tensor> {
    Ok(T::into_tensor(ArrayD::from_elem(
        IxDyn(&[]),
        T::from_f64(v as f64),
    )))
}

/// Pad with the value of input 2 (opset 11 on; zero when absent or empty),
/// compiled once per element width.
fn pad_input_value(
    pad: &Pad,
    x: &Tensor,
    pads: &[(i64, i64)],
    value: Option<&Tensor>,
) -> Result<Tensor> {
    let value = match value {
        Some(t) if t.dtype() != x.dtype() => {
            return Err(Error::op(
                OP,
                format!("constant_value is {}, data is {}", t.dtype(), x.dtype()),
            ))
        }
        Some(t) if t.len() > 1 => {
            return Err(Error::op(
                OP,
                format!("constant_value must be one value, found {}", t.len()),
            ))
        }
        Some(t) if t.len() == 1 => Some(t.width()),
        _ => None,
    };
    let (out, maps) = pad.maps(x.shape(), pads)?;
    let v = by_width!(x, s => {
        let fill = value
            .as_ref()
            .and_then(|w| same_width(s, w))
            .and_then(|f| f.first().cloned())
            .unwrap_or_default();
        Bits::vec(offset_copy(OP, s, &maps, Some(&fill))?)
    });
    Tensor::from_width(OP, x.dtype(), &out, v)
}

impl Operator for Pad {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(OP, inputs, 0)?;
        if let Some(c) = inputs.get(2).and_then(|x| x.fact) {
            if c.dtype != f.dtype {
                return Err(Error::op(
                    OP,
                    format!("constant_value is {}, data is {}", c.dtype, f.dtype),
                ));
            }
        }
        let Some(shape) = &f.shape else {
            return Ok(vec![Fact::unknown_shape(f.dtype)]);
        };
        let pads = self.pads(shape.len(), |i| {
            inputs.get(i).and_then(|x| x.fact.map(|_| x.value))
        })?;
        Ok(vec![match pads {
            Some(p) => Fact::new(f.dtype, out_shape(shape, &p)?),
            None => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let pads = self
            .pads(x.shape().len(), |i| opt_input(inputs, i).map(Some))?
            .ok_or_else(|| Error::op(OP, "internal error: pads unknown at run time"))?;
        let out = match &self.attrs {
            Some((_, v)) => {
                let fill = num_dispatch!(OP, x, a => attr_fill(a, *v))?;
                pad_input_value(self, x, &pads, Some(&fill))?
            }
            None => pad_input_value(self, x, &pads, opt_input(inputs, 2))?,
        };
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::ir::attributes::Attribute;
    use crate::tensor::Tensor;

    /// numpy-style reference for one axis.
    fn naive_1d(x: &[i64], b: i64, e: i64, mode: &str, c: i64) -> Vec<i64> {
        let n = x.len() as i64;
        (0..n + b + e)
            .map(|o| {
                let i = o - b;
                if (0..n).contains(&i) {
                    return x[i as usize];
                }
                match mode {
                    "constant" => c,
                    "edge" => x[i.clamp(0, n - 1) as usize],
                    "wrap" => x[i.rem_euclid(n) as usize],
                    _ => {
                        // Repeated reflection, step by step.
                        let mut j = i;
                        while !(0..n).contains(&j) {
                            if j < 0 {
                                j = -j;
                            }
                            if j >= n {
                                j = 2 * (n - 1) - j;
                            }
                        }
                        x[j as usize]
                    }
                }
            })
            .collect()
    }

    #[test]
    fn pad_modes_1d_against_naive() {
        let xs = [1i64, 2, 3, 4];
        let x = t(&[4], xs.to_vec());
        for mode in ["constant", "reflect", "edge", "wrap"] {
            for (b, e) in [(0, 0), (2, 1), (3, 3), (7, 9), (-1, 2), (2, -3), (-2, -2)] {
                let y = run1(
                    "Pad",
                    19,
                    &[("mode", s(mode))],
                    &[x.clone(), i64s(&[b, e]), Tensor::scalar(-7i64)],
                );
                assert_eq!(
                    y.to_i64_vec().unwrap(),
                    naive_1d(&xs, b, e, mode, -7),
                    "{mode} {b} {e}"
                );
            }
        }
    }

    #[test]
    fn pad_2d_spec_examples() {
        let x = t(&[3, 2], vec![1.0f32, 1.2, 2.3, 3.4, 4.5, 5.7]);
        let pads = i64s(&[0, 2, 0, 0]);
        let y = run1(
            "Pad",
            11,
            &[("mode", s("constant"))],
            &[x.clone(), pads.clone(), Tensor::scalar(0.0f32)],
        );
        assert_eq!(
            y,
            t(
                &[3, 4],
                vec![0.0f32, 0.0, 1.0, 1.2, 0.0, 0.0, 2.3, 3.4, 0.0, 0.0, 4.5, 5.7]
            )
        );
        let y = run1(
            "Pad",
            11,
            &[("mode", s("reflect"))],
            &[x.clone(), pads.clone()],
        );
        assert_eq!(
            y,
            t(
                &[3, 4],
                vec![1.0f32, 1.2, 1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7, 4.5, 5.7]
            )
        );
        let y = run1(
            "Pad",
            11,
            &[("mode", s("edge"))],
            &[x.clone(), pads.clone()],
        );
        assert_eq!(
            y,
            t(
                &[3, 4],
                vec![1.0f32, 1.0, 1.0, 1.2, 2.3, 2.3, 2.3, 3.4, 4.5, 4.5, 4.5, 5.7]
            )
        );
        // Opset 2 attributes, with the fill value.
        let y = run1(
            "Pad",
            2,
            &[
                ("pads", ints(&[1, 0, 0, 1])),
                ("value", Attribute::Float(9.0)),
            ],
            &[x.clone()],
        );
        assert_eq!(
            y,
            t(
                &[4, 3],
                vec![9.0f32, 9.0, 9.0, 1.0, 1.2, 9.0, 2.3, 3.4, 9.0, 4.5, 5.7, 9.0]
            )
        );
        // Opset 18 axes (negative), and absent constant value.
        let ins = vec![
            Some(x.clone()),
            Some(i64s(&[1, 1])),
            None,
            Some(i64s(&[-1])),
        ];
        let y = run("Pad", 18, &[], &ins).unwrap().remove(0);
        assert_eq!(
            y,
            t(
                &[3, 4],
                vec![0.0f32, 1.0, 1.2, 0.0, 0.0, 2.3, 3.4, 0.0, 0.0, 4.5, 5.7, 0.0]
            )
        );
    }

    #[test]
    fn pad_other_types_and_empty() {
        let x = t(&[2], vec!["a".to_string(), "b".to_string()]);
        let y = run1(
            "Pad",
            13,
            &[],
            &[x.clone(), i64s(&[1, 0]), Tensor::scalar("z".to_string())],
        );
        assert_eq!(
            y,
            t(
                &[3],
                vec!["z".to_string(), "a".to_string(), "b".to_string()]
            )
        );
        let y = run1(
            "Pad",
            13,
            &[("mode", s("edge"))],
            &[t(&[1, 1], vec![true]), i64s(&[0, 1, 0, 1])],
        );
        assert_eq!(y, t(&[1, 3], vec![true; 3]));
        // Constant padding of an empty tensor.
        let y = run1(
            "Pad",
            13,
            &[],
            &[
                t(&[0, 2], Vec::<f64>::new()),
                i64s(&[1, 0, 0, 0]),
                Tensor::scalar(5.0f64),
            ],
        );
        assert_eq!(y, t(&[1, 2], vec![5.0f64, 5.0]));
        // Scalar input, no pads.
        let y = run1("Pad", 13, &[], &[Tensor::scalar(3i32), i64s(&[])]);
        assert_eq!(y, Tensor::scalar(3i32));
    }

    #[test]
    fn pad_errors() {
        let x = t(&[2], vec![1.0f32, 2.0]);
        let msg = fails("Pad", 13, &[], &[x.clone(), i64s(&[1])]);
        assert!(msg.contains("should have 2"), "{msg}");
        let msg = fails("Pad", 13, &[], &[x.clone(), i64s(&[-2, -1])]);
        assert!(msg.contains("negative size"), "{msg}");
        let msg = fails(
            "Pad",
            13,
            &[("mode", s("wrap"))],
            &[x.clone(), i64s(&[1, 1])],
        );
        assert!(msg.contains("wrap"), "{msg}");
        let msg = fails(
            "Pad",
            19,
            &[("mode", s("reflect"))],
            &[t(&[0], Vec::<f32>::new()), i64s(&[1, 1])],
        );
        assert!(msg.contains("empty"), "{msg}");
        let msg = fails(
            "Pad",
            13,
            &[],
            &[x.clone(), i64s(&[1, 1]), Tensor::scalar(1i32)],
        );
        assert!(msg.contains("constant_value"), "{msg}");
        let msg = fails(
            "Pad",
            18,
            &[],
            &[x.clone(), i64s(&[1, 1]), Tensor::scalar(1.0f32), i64s(&[1])],
        );
        assert!(msg.contains("out of range"), "{msg}");
        let msg = fails("Pad", 2, &[], &[x]);
        assert!(msg.contains("pads"), "{msg}");
    }
}
