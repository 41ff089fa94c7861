//! Model inputs for the command line: read from an ONNX test-data folder
//! (`input_0.pb`, `input_1.pb`, …) or made deterministically from the declared shapes.

use anyhow::{bail, Context, Result};
use ramify::tensor::budget;
use ramify::{DType, Session, Tensor, Value, ValueKind};
use std::path::Path;
use std::sync::Arc;

/// The inputs in the model's order, from `dir` or synthesised.
pub fn load(session: &Session, dir: Option<&Path>) -> Result<Vec<(String, Tensor)>> {
    match dir {
        Some(d) => from_dir(session, d),
        None => session
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, info)| {
                let (dtype, shape) = match &info.declared {
                    Some(d) => (d.dtype, d.concrete_shape(1).unwrap_or_default()),
                    None => (DType::F32, Vec::new()),
                };
                let t = synthesize(&info.name, dtype, &shape, i as u64, session.memory_limit())?;
                Ok((info.name.clone(), t))
            })
            .collect(),
    }
}

/// The reference input folder shipped with a model, if any:
/// `<model folder>/test_data_set_0` or `<model without extension>/test_data_set_0`.
pub fn beside(model: &Path) -> Option<std::path::PathBuf> {
    let candidates = [
        model.parent().map(|p| p.join("test_data_set_0")),
        Some(model.with_extension("").join("test_data_set_0")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("input_0.pb").exists())
}

/// The inputs in the model's order as values: from `dir`, where a sequence
/// or optional input is read as the SequenceProto or OptionalProto ONNX's
/// test data sets store, or synthesised (tensors only).
pub fn load_values(session: &Session, dir: Option<&Path>) -> Result<Vec<(String, Value)>> {
    let Some(dir) = dir else {
        if let Some(info) = session.inputs().iter().find(|i| {
            i.declared
                .as_ref()
                .is_some_and(|d| d.kind != ValueKind::Tensor)
        }) {
            bail!(
                "input {:?} ({}) is not a tensor: give it in --input-dir",
                info.name,
                info.declared
                    .as_ref()
                    .map_or(String::new(), |d| d.to_string())
            );
        }
        return Ok(load(session, None)?
            .into_iter()
            .map(|(n, t)| (n, Value::from(t)))
            .collect());
    };
    values_from_dir(session, dir)
}

/// The inputs in the model's order as values, read from `dir`: a tensor
/// from its TensorProto, a sequence or optional from the SequenceProto or
/// OptionalProto ONNX's test data sets store.
fn values_from_dir(session: &Session, dir: &Path) -> Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for (i, info) in session.inputs().iter().enumerate() {
        let path = dir.join(format!("input_{i}.pb"));
        let (kind, dtype) = info
            .declared
            .as_ref()
            .map_or((ValueKind::Tensor, DType::F32), |d| (d.kind, d.dtype));
        let v = match kind {
            ValueKind::Tensor => ramify::onnx::read_tensor_file(&path).map(Value::from),
            kind => ramify::onnx::read_value_file(&path, kind, dtype),
        }
        .with_context(|| format!("reading input {:?}", info.name))?;
        out.push((info.name.clone(), v));
    }
    let extra = dir.join(format!("input_{}.pb", out.len()));
    if extra.exists() {
        bail!(
            "{} exists, but the model has only {} input(s)",
            extra.display(),
            out.len()
        );
    }
    Ok(out)
}

/// The inputs in the model's order as tensors, read from `dir` (see
/// [`values_from_dir`]); an input declared a sequence or optional fails.
fn from_dir(session: &Session, dir: &Path) -> Result<Vec<(String, Tensor)>> {
    values_from_dir(session, dir)?
        .into_iter()
        .map(|(name, v)| {
            let t = v
                .into_tensor(&format!("input {name:?}"))
                .with_context(|| format!("reading input {name:?}"))?;
            // The value was just read: its tensor is not shared.
            let t = Arc::try_unwrap(t).unwrap_or_else(|t| (*t).clone());
            Ok((name, t))
        })
        .collect()
}

/// A deterministic pseudo-random tensor (xorshift): floats in [0, 1), small
/// non-negative integers for integer types, zeros for strings and the narrow
/// types. Its size is checked against `memory_limit` before anything is
/// allocated, so a model declaring a huge input fails cleanly.
pub fn synthesize(
    name: &str,
    dtype: DType,
    shape: &[usize],
    seed: u64,
    memory_limit: usize,
) -> Result<Tensor> {
    budget::with_limit(memory_limit, || {
        budget::check(&format!("input {name:?}"), dtype, shape)
    })?;
    let n: usize = shape.iter().product();
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ (seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let units = (0..n).map(move |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    });
    // Integer types take small non-negative integers: ⌊10·u⌋.
    let ints = units.clone().map(|u| (u * 10.0) as i64 as f64);
    macro_rules! make {
        ($values:expr, $ty:ty, $conv:expr) => {
            Tensor::from_vec(shape, $values.map($conv).collect::<Vec<$ty>>())?
        };
    }
    Ok(match dtype {
        DType::F32 => make!(units, f32, |u| u as f32),
        DType::F64 => make!(units, f64, |u| u),
        DType::Bool => make!(units, bool, |u| u < 0.5),
        DType::F16 => make!(ints, half::f16, half::f16::from_f64),
        DType::BF16 => make!(ints, half::bf16, half::bf16::from_f64),
        DType::I8 => make!(ints, i8, |x| x as i8),
        DType::I16 => make!(ints, i16, |x| x as i16),
        DType::I32 => make!(ints, i32, |x| x as i32),
        DType::I64 => make!(ints, i64, |x| x as i64),
        DType::U8 => make!(ints, u8, |x| x as u8),
        DType::U16 => make!(ints, u16, |x| x as u16),
        DType::U32 => make!(ints, u32, |x| x as u32),
        DType::U64 => make!(ints, u64, |x| x as u64),
        // Strings, float8 / float4 and 4- and 2-bit inputs: zeros of the type.
        other => Tensor::zeros(other, shape),
    })
}
