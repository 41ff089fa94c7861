//! Signal-processing operators: the discrete Fourier transform (DFT), the
//! short-time Fourier transform (STFT), the Hann, Hamming and Blackman
//! windows, and the mel filter bank (MelWeightMatrix). Transforms run in f64
//! through [`fft`] (radix-2, or Bluestein's algorithm for other lengths).

use super::quant::float_tensor;
use super::shape::make;
use super::Registrar;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

mod dft;
mod fft;
mod mel;
mod stft;
#[cfg(test)]
mod tests;
mod window;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("BlackmanWindow", 17, window::build_blackman);
    r.add("DFT", 17, dft::build);
    r.add("HammingWindow", 17, window::build_hamming);
    r.add("HannWindow", 17, window::build_hann);
    r.add("MelWeightMatrix", 17, mel::build);
    r.add("STFT", 17, stft::build);
}

/// The element type named by the `output_datatype` attribute (default
/// float): any numeric type.
fn output_datatype(ctx: &crate::ir::BuildContext) -> Result<DType> {
    let a = ctx.attrs;
    let code = a.int("output_datatype", 1)?;
    i32::try_from(code)
        .ok()
        .filter(|c| (1..=13).contains(c) || *c == 16)
        .and_then(|c| DType::from_onnx_code(c).ok())
        .filter(|d| !matches!(d, DType::Bool | DType::String))
        .ok_or_else(|| a.error("output_datatype", format!("unsupported type code {code}")))
}

/// A tensor of numeric type `t` from f64 values (integers truncate toward
/// zero, as numpy's `astype` does).
fn numeric_tensor(op: &str, t: DType, shape: &[usize], v: Vec<f64>) -> Result<Tensor> {
    fn ints<T: crate::tensor::Element>(
        op: &str,
        shape: &[usize],
        v: Vec<f64>,
        f: fn(f64) -> T,
    ) -> Result<Tensor> {
        make(op, shape, v.into_iter().map(f).collect())
    }
    match t {
        DType::I8 => ints(op, shape, v, |x| x as i8),
        DType::I16 => ints(op, shape, v, |x| x as i16),
        DType::I32 => ints(op, shape, v, |x| x as i32),
        DType::I64 => ints(op, shape, v, |x| x as i64),
        DType::U8 => ints(op, shape, v, |x| x as u8),
        DType::U16 => ints(op, shape, v, |x| x as u16),
        DType::U32 => ints(op, shape, v, |x| x as u32),
        DType::U64 => ints(op, shape, v, |x| x as u64),
        other if other.is_float() => float_tensor(op, other, shape, v),
        other => Err(Error::op(op, format!("cannot produce {other} output"))),
    }
}

/// The single value of an integer scalar input (`what` names it in errors).
fn int_input(op: &str, t: &Tensor, what: &str) -> Result<i64> {
    super::shape::int_scalar(op, t, what)
}
