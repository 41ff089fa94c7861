//! Pooling: `MaxPool` (with the optional argmax `Indices` output),
//! `AveragePool`, `LpPool` over 1-, 2- and 3-D (any N-D) windows with pads,
//! `auto_pad`, strides, dilations and `ceil_mode` from the geometry shared
//! with Conv; the global pools (`GlobalAveragePool`, `GlobalMaxPool`,
//! `GlobalLpPool`) as contiguous per-plane reductions; and `MaxUnpool`.

use super::conv::geom::{Window, WindowAttrs};
use super::gemm::{checked_product, contiguous, from_f32_vec, to_f32_vec};
use super::util::{fact, input};
use super::Registrar;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::tensor::{DType, Element, Tensor};

mod avg_rows;
mod global;
mod kernels;
mod max2d;
mod max_s2;
mod max_same;
mod rows;
#[cfg(test)]
mod tests;
mod unpool;

use rows::Rows;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("MaxPool", 1, |c| build(c, Kind::Max));
    r.add("AveragePool", 1, |c| build(c, Kind::Avg));
    r.add("LpPool", 1, |c| build(c, Kind::Lp));
    r.add("GlobalAveragePool", 1, global::build_avg);
    r.add("GlobalMaxPool", 1, global::build_max);
    r.add("GlobalLpPool", 1, global::build_lp);
    r.add("MaxUnpool", 9, unpool::build);
}

/// Which windowed pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Max,
    Avg,
    Lp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Max => "MaxPool",
            Kind::Avg => "AveragePool",
            Kind::Lp => "LpPool",
        }
    }
}

/// Reads LpPool's `p`: a float before opset 2, an int from then on.
fn parse_p(ctx: &BuildContext) -> Result<f64> {
    let p = if ctx.opset < 2 {
        ctx.attrs.float("p", 2.0)? as f64
    } else {
        ctx.attrs.int("p", 2)? as f64
    };
    if !(p.is_finite() && p > 0.0) {
        return Err(ctx.attrs.error("p", format!("must be > 0, found {p}")));
    }
    Ok(p)
}

/// A built MaxPool, AveragePool or LpPool node.
#[derive(Debug)]
struct Pool {
    kind: Kind,
    window: WindowAttrs,
    ceil_mode: bool,
    count_include_pad: bool,
    col_major: bool,
    p: f64,
    indices: bool,
}

fn build(ctx: &BuildContext, kind: Kind) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let dilations = match kind {
        Kind::Max => ctx.opset >= 10,
        Kind::Avg => ctx.opset >= 19,
        Kind::Lp => ctx.opset >= 18,
    };
    let window = WindowAttrs::parse(a, dilations)?;
    if window.kernel.is_none() {
        return Err(a.error("kernel_shape", "required but missing"));
    }
    let flag = |name: &str| -> Result<bool> {
        match a.int(name, 0)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(a.error(name, format!("must be 0 or 1, found {v}"))),
        }
    };
    let indices = kind == Kind::Max && ctx.num_outputs >= 2;
    if kind != Kind::Max && ctx.num_outputs > 1 {
        return Err(Error::op(kind.name(), "has one output"));
    }
    Ok(Box::new(Pool {
        kind,
        window,
        ceil_mode: flag("ceil_mode")?,
        count_include_pad: kind == Kind::Avg && flag("count_include_pad")?,
        col_major: kind == Kind::Max && flag("storage_order")?,
        p: if kind == Kind::Lp { parse_p(ctx)? } else { 2.0 },
        indices,
    }))
}

/// Checks X's rank and resolves the window and output shape (shape
/// inference stops here: the kernels' walk, [`Rows`], is built only to run,
/// after the output has been checked against the memory budget).
fn plan(
    op: &str,
    window: &WindowAttrs,
    ceil_mode: bool,
    x: &[usize],
) -> Result<(Window, Vec<usize>)> {
    if x.len() < 3 {
        return Err(Error::op(
            op,
            format!("X must have rank ≥ 3 (N, C, spatial...), found shape {x:?}"),
        ));
    }
    let kernel = window.kernel.as_deref().unwrap_or(&[]);
    let win = window.resolve(op, &x[2..], kernel, ceil_mode)?;
    let mut out = x[..2].to_vec();
    out.extend_from_slice(&win.output);
    checked_product(op, &out)?;
    Ok((win, out))
}

impl Pool {
    fn check_type(&self, t: DType) -> Result<()> {
        let ok = t.is_float() || (self.kind == Kind::Max && matches!(t, DType::I8 | DType::U8));
        if ok {
            Ok(())
        } else {
            Err(Error::op(
                self.kind.name(),
                format!("unsupported input type {t}"),
            ))
        }
    }

    /// Runs the float kernel on a contiguous slice.
    fn float<T: num_traits::Float + kernels::MaxElem + Element>(
        &self,
        rows: &Rows,
        x: &[T],
        out: &[usize],
    ) -> Result<Vec<Tensor>> {
        let len = checked_product(self.kind.name(), out)?;
        if rows.win.is_whole_input() && !self.indices {
            // One window per plane: a plain reduction of each plane.
            let y = match self.kind {
                Kind::Avg => global::plane_averages(x, len),
                Kind::Max => global::plane_maxima(x, len),
                Kind::Lp => global::plane_norms(x, len, self.p),
            };
            return Ok(vec![wrap(self.kind.name(), out, y)?]);
        }
        if self.kind == Kind::Max {
            return self.max(rows, x, out);
        }
        // The kernels write every element: a recycled buffer needs no zero-fill.
        let mut y = crate::tensor::recycle::take_or_default::<T>(len);
        if self.kind == Kind::Avg {
            if rows.win.rank() > 0 {
                avg_rows::average(rows, x, &mut y, self.count_include_pad);
            } else {
                kernels::average(rows, x, &mut y, self.count_include_pad);
            }
        } else {
            kernels::lp(rows, x, &mut y, self.p);
        }
        Ok(vec![wrap(self.kind.name(), out, y)?])
    }

    fn max<T: kernels::MaxElem + Element>(
        &self,
        rows: &Rows,
        x: &[T],
        out: &[usize],
    ) -> Result<Vec<Tensor>> {
        let len = checked_product(self.kind.name(), out)?;
        let mut y = T::buffer(len);
        if self.indices {
            let mut idx = vec![0i64; len];
            kernels::max_with_indices(rows, x, &mut y, &mut idx, self.col_major);
            Ok(vec![
                wrap(self.kind.name(), out, y)?,
                wrap(self.kind.name(), out, idx)?,
            ])
        } else {
            if max_same::try_max_same(&rows.win, x, &mut y) {
                // A size-keeping 2-D window, over whole planes.
            } else if max_s2::try_max_s2(&rows.win, x, &mut y) {
                // A 3×3 window at stride 2, f32 on AVX-512.
            } else if rows.win.rank() == 2 {
                max2d::max_2d(&rows.win, x, &mut y);
            } else {
                kernels::max(rows, x, &mut y);
            }
            Ok(vec![wrap(self.kind.name(), out, y)?])
        }
    }
}

/// Wraps row-major data as a tensor.
fn wrap<T: Element>(op: &str, shape: &[usize], v: Vec<T>) -> Result<Tensor> {
    Tensor::from_vec(shape, v).map_err(|e| Error::op(op, format!("result shape: {e}")))
}

impl Operator for Pool {
    fn cost_class(&self) -> OpClass {
        OpClass::Window
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let op = self.kind.name();
        let x = fact(op, inputs, 0)?;
        self.check_type(x.dtype)?;
        let mut facts = match &x.shape {
            Some(s) => {
                let (_, out) = plan(op, &self.window, self.ceil_mode, s)?;
                vec![Fact::new(x.dtype, out)]
            }
            None => vec![Fact::unknown_shape(x.dtype)],
        };
        if self.indices {
            let mut f = facts[0].clone();
            f.dtype = DType::I64;
            facts.push(f);
        }
        Ok(facts)
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let out = outputs.first().and_then(|f| f.len()).unwrap_or(0) as u64;
        let k = self.window.kernel.as_ref().map_or(1, |k| {
            k.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
        });
        out.saturating_mul(k).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.kind.name();
        let x = input(op, inputs, 0)?;
        self.check_type(x.dtype())?;
        let (win, out) = plan(op, &self.window, self.ceil_mode, x.shape())?;
        let rows = Rows::new(&win);
        match x {
            Tensor::F32(a) => self.float(&rows, &contiguous(a), &out),
            Tensor::F64(a) => self.float(&rows, &contiguous(a), &out),
            Tensor::I8(a) => self.max(&rows, &contiguous(a), &out),
            Tensor::U8(a) => self.max(&rows, &contiguous(a), &out),
            Tensor::F16(_) | Tensor::BF16(_) => {
                // Computed through f32 (exact for max).
                let xs = to_f32_vec(op, x)?;
                let mut r = self.float(&rows, &xs, &out)?;
                let y = r.remove(0).into_array::<f32>()?;
                let y = from_f32_vec(op, x, &out, y.into_raw_vec_and_offset().0)?;
                r.insert(0, y);
                Ok(r)
            }
            other => Err(Error::op(
                op,
                format!("unsupported input type {}", other.dtype()),
            )),
        }
    }
}
