//! Convolutions: `Conv` (im2col, direct 1×1 or Winograd 3×3 GEMMs on the
//! shared GEMM engine, a direct kernel for depthwise convolution, fused
//! activation) and `ConvTranspose` (GEMM then col2im scatter), over any
//! number of spatial dimensions, with the sliding-window geometry shared
//! with the pools.

use super::gemm::engine::GemmFloat;
use super::gemm::fused::Activation;
use super::gemm::simd::multiversion;
use super::gemm::{contiguous, from_f32_vec, to_f32_vec};
use super::Registrar;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

mod adopted;
mod ahead;
mod choice;
mod conv_op;
mod depthwise;
mod direct;
pub(crate) mod geom;
mod grouped;
mod im2col;
#[cfg(target_arch = "x86_64")]
mod im2col_columns;
mod implicit;
mod lines;
mod panels;
mod patches;
mod phases;
mod pointwise;
#[cfg(test)]
mod random_layer;
#[cfg(target_arch = "x86_64")]
pub(crate) mod regs;
mod tap_kernel;
#[cfg(test)]
mod tests;
mod transpose;
mod winograd;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Conv", 1, conv_op::build);
    r.add("ConvTranspose", 1, transpose::build);
}

/// Checks that X, W and the optional B share one floating-point type.
fn check_types(op: &str, x: DType, w: DType, b: Option<DType>) -> Result<()> {
    if !x.is_float() {
        return Err(Error::op(
            op,
            format!("expected a floating-point input X, found {x}"),
        ));
    }
    if w != x {
        return Err(Error::op(op, format!("W has type {w}, X has type {x}")));
    }
    if let Some(b) = b {
        if b != x {
            return Err(Error::op(op, format!("B has type {b}, X has type {x}")));
        }
    }
    Ok(())
}

/// Reads the `group` attribute (≥ 1).
fn parse_group(attrs: &crate::ir::attributes::Attributes) -> Result<usize> {
    let g = attrs.int("group", 1)?;
    usize::try_from(g)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| attrs.error("group", format!("must be ≥ 1, found {g}")))
}

/// Checks that the optional bias has shape `[m]`.
fn check_bias(op: &str, b: Option<&[usize]>, m: usize) -> Result<()> {
    match b {
        Some(s) if s != [m] => Err(Error::op(
            op,
            format!("B must have shape [{m}] (one value per output channel), found {s:?}"),
        )),
        _ => Ok(()),
    }
}

/// Wraps a result vector as a tensor of shape `shape`.
fn wrap<T: crate::tensor::Element>(op: &str, shape: &[usize], v: Vec<T>) -> Result<Tensor> {
    Tensor::from_vec(shape, v).map_err(|e| Error::op(op, format!("result shape: {e}")))
}

/// A convolution kernel generic over the GEMM float types.
trait FloatKernel {
    /// Computes the row-major output from row-major X, W, optional B and
    /// optional Z (an addend of Y's shape: a fused residual Add).
    fn compute<T: GemmFloat>(
        &self,
        x: &[T],
        w: &[T],
        b: Option<&[T]>,
        z: Option<&[T]>,
    ) -> Result<Vec<T>>;
}

/// Runs `k` on f32/f64 data directly and on f16/bf16 data through f32,
/// returning a tensor of X's type and shape `shape`; `z`, when given, must
/// have that shape.
fn run_float<K: FloatKernel>(
    op: &str,
    k: &K,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    z: Option<&Tensor>,
    shape: &[usize],
) -> Result<Tensor> {
    check_inputs(op, x, w, b, z, shape)?;
    match (x, w) {
        (Tensor::F32(xa), Tensor::F32(wa)) => run_typed(op, k, xa, wa, b, z, shape),
        (Tensor::F64(xa), Tensor::F64(wa)) => run_typed(op, k, xa, wa, b, z, shape),
        _ => {
            let xs = to_f32_vec(op, x)?;
            let ws = to_f32_vec(op, w)?;
            let bs = b.map(|b| to_f32_vec(op, b)).transpose()?;
            let zs = z.map(|z| to_f32_vec(op, z)).transpose()?;
            let y = k.compute(&xs, &ws, bs.as_deref(), zs.as_deref())?;
            from_f32_vec(op, x, shape, y)
        }
    }
}

multiversion! {
    /// `row[i] = (row[i] + b) + z[i]`: the bias (if any), then the
    /// residual, in one pass.
    fn add_bias_and_residual<T: GemmFloat>(row: &mut [T], b: Option<T>, z: &[T]) {
        match b {
            Some(b) => {
                for (v, &r) in row.iter_mut().zip(z) {
                    *v = (*v + b) + r;
                }
            }
            None => {
                for (v, &r) in row.iter_mut().zip(z) {
                    *v = *v + r;
                }
            }
        }
    }
}

/// Checks the types of X, W and B, and that the fused residual `z` (if
/// any) has X's type and the output's `shape`.
fn check_inputs(
    op: &str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    z: Option<&Tensor>,
    shape: &[usize],
) -> Result<()> {
    check_types(op, x.dtype(), w.dtype(), b.map(|b| b.dtype()))?;
    if let Some(z) = z {
        if z.dtype() != x.dtype() || z.shape() != shape {
            return Err(Error::op(
                op,
                format!(
                    "the fused residual is {} {:?}, expected {} {shape:?} like the output",
                    z.dtype(),
                    z.shape(),
                    x.dtype()
                ),
            ));
        }
    }
    Ok(())
}

/// The output of `shape` computed by `compute` straight into `y` (of its
/// length) when X and W are f32: `Ok(false)`, with nothing written, for
/// other types or another length (the caller then runs [`run_float`]).
#[allow(clippy::too_many_arguments)]
fn run_f32_into(
    op: &str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    z: Option<&Tensor>,
    shape: &[usize],
    y: &mut [f32],
    compute: impl FnOnce(&[f32], &[f32], Option<&[f32]>, Option<&[f32]>, &mut [f32]) -> Result<()>,
) -> Result<bool> {
    let (Tensor::F32(xa), Tensor::F32(wa)) = (x, w) else {
        return Ok(false);
    };
    if shape.iter().product::<usize>() != y.len() {
        return Ok(false);
    }
    check_inputs(op, x, w, b, z, shape)?;
    let bb = b.and_then(|b| b.array::<f32>()).map(contiguous);
    let zz = z.and_then(|z| z.array::<f32>()).map(contiguous);
    compute(
        &contiguous(xa),
        &contiguous(wa),
        bb.as_deref(),
        zz.as_deref(),
        y,
    )?;
    Ok(true)
}

/// [`run_float`] on data already of a GEMM type `T`.
fn run_typed<K: FloatKernel, T: GemmFloat + crate::tensor::Element>(
    op: &str,
    k: &K,
    xa: &ndarray::ArrayD<T>,
    wa: &ndarray::ArrayD<T>,
    b: Option<&Tensor>,
    z: Option<&Tensor>,
    shape: &[usize],
) -> Result<Tensor> {
    let bb = b.and_then(|b| b.array::<T>()).map(contiguous);
    let zz = z.and_then(|z| z.array::<T>()).map(contiguous);
    let y = k.compute(
        &contiguous(xa),
        &contiguous(wa),
        bb.as_deref(),
        zz.as_deref(),
    )?;
    wrap(op, shape, y)
}

/// Adds the bias `b` (if any) to an output row, then the matching row `z`
/// of a fused residual (if any), then applies the fused activation (if
/// any): the order of the unfused Conv → Add → activation.
fn finish_row<T: GemmFloat>(row: &mut [T], b: Option<T>, z: Option<&[T]>, act: Option<Activation>) {
    if let Some(z) = z {
        add_bias_and_residual(row, b, z);
        if let Some(a) = act {
            a.apply(row);
        }
        return;
    }
    match (b, act) {
        (Some(b), Some(a)) => a.apply_biased(row, b),
        (None, Some(a)) => a.apply(row),
        (Some(b), None) => {
            for v in row.iter_mut() {
                *v = *v + b;
            }
        }
        (None, None) => {}
    }
}
