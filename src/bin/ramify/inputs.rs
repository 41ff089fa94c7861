//! Model inputs for the command line: read from an ONNX test-data folder
//! (`input_0.pb`, `input_1.pb`, …) or made deterministically from the declared shapes.

use anyhow::{bail, Context, Result};
use ramify::{DType, Session, Tensor};
use std::path::Path;

/// The inputs in the model's order, from `dir` or synthesised.
pub fn load(session: &Session, dir: Option<&Path>) -> Result<Vec<(String, Tensor)>> {
    match dir {
        Some(d) => from_dir(session, d),
        None => Ok(session
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, info)| {
                let (dtype, shape) = match &info.declared {
                    Some(d) => (d.dtype, d.concrete_shape(1).unwrap_or_default()),
                    None => (DType::F32, Vec::new()),
                };
                (info.name.clone(), synthesize(dtype, &shape, i as u64))
            })
            .collect()),
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

fn from_dir(session: &Session, dir: &Path) -> Result<Vec<(String, Tensor)>> {
    let mut out = Vec::new();
    for (i, info) in session.inputs().iter().enumerate() {
        let path = dir.join(format!("input_{i}.pb"));
        let t = ramify::onnx::read_tensor_file(&path)
            .with_context(|| format!("reading input {:?}", info.name))?;
        out.push((info.name.clone(), t));
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

/// A deterministic pseudo-random tensor (xorshift), small non-negative
/// integers for integer types.
pub fn synthesize(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ (seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let unit: Vec<f64> = (0..n)
        .map(|_| (next() >> 11) as f64 / (1u64 << 53) as f64)
        .collect();
    let floats: Vec<f32> = unit.iter().map(|&u| u as f32).collect();
    let t = Tensor::from_vec(shape, floats).expect("length matches shape");
    match dtype {
        DType::F32 => t,
        DType::F64 => Tensor::from_vec(shape, unit).expect("length matches shape"),
        DType::Bool => Tensor::from_vec(shape, unit.iter().map(|&u| u < 0.5).collect::<Vec<_>>())
            .expect("length matches shape"),
        DType::String => Tensor::zeros(DType::String, shape),
        // float8 / float4 / 4- and 2-bit inputs: zeros of the right type.
        other if other.is_narrow() => Tensor::zeros(other, shape),
        other => cast(
            &Tensor::from_vec(
                shape,
                unit.iter().map(|&u| (u * 10.0) as i64).collect::<Vec<_>>(),
            )
            .expect("length matches shape"),
            other,
            shape,
        ),
    }
}

fn cast(t: &Tensor, dtype: DType, shape: &[usize]) -> Tensor {
    let v = t.to_f64_vec().unwrap_or_default();
    macro_rules! to {
        ($ty:ty) => {
            Tensor::from_vec(shape, v.iter().map(|&x| x as $ty).collect::<Vec<$ty>>())
                .expect("length matches shape")
        };
    }
    match dtype {
        DType::I8 => to!(i8),
        DType::I16 => to!(i16),
        DType::I32 => to!(i32),
        DType::I64 => to!(i64),
        DType::U8 => to!(u8),
        DType::U16 => to!(u16),
        DType::U32 => to!(u32),
        DType::U64 => to!(u64),
        DType::F16 => Tensor::from_vec(
            shape,
            v.iter()
                .map(|&x| half::f16::from_f64(x))
                .collect::<Vec<_>>(),
        )
        .expect("length matches shape"),
        DType::BF16 => Tensor::from_vec(
            shape,
            v.iter()
                .map(|&x| half::bf16::from_f64(x))
                .collect::<Vec<_>>(),
        )
        .expect("length matches shape"),
        _ => t.clone(),
    }
}
