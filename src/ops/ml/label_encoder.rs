//! LabelEncoder (ai.onnx.ml opsets 1, 2 and 4): maps each element through a
//! table of keys to values, elements not found to a default. Opset 1 maps
//! strings to their index in `classes_strings` (first occurrence) and int64
//! indices back to strings; opset 2 takes `keys_*`/`values_*` lists (float,
//! int64, string) with `default_*`; opset 4 adds `keys_tensor`,
//! `values_tensor` and `default_tensor` (string, int64, int32, int16, float,
//! double). From opset 2 a repeated key maps to its last value.

use super::label_keys::{is_label_type, keys_of, take, type_error, with_default, Key, OP};
use crate::error::{Error, Result};
use crate::ir::attributes::Attributes;
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, out_len};
use crate::tensor::{DType, Tensor};
use ndarray::Array1;
use std::collections::HashMap;

/// One direction of the mapping: inputs of `key_type` to `values`.
#[derive(Debug)]
struct Table {
    key_type: DType,
    index: HashMap<Key, usize>,
    /// The values, then the default (at `values.len() - 1`).
    values: Tensor,
}

#[derive(Debug)]
struct LabelEncoder {
    /// One table, or (opset 1) one per direction.
    tables: Vec<Table>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let tables = if ctx.opset < 2 {
        classes_tables(ctx.attrs)?
    } else {
        vec![keyed_table(ctx.attrs, ctx.opset)?]
    };
    Ok(Box::new(LabelEncoder { tables }))
}

fn vector<T: crate::tensor::Element>(v: Vec<T>) -> Tensor {
    T::into_tensor(Array1::from_vec(v).into_dyn())
}

fn table(
    key_type: DType,
    keys: &Tensor,
    values: &Tensor,
    default: &Tensor,
    first_wins: bool,
) -> Result<Table> {
    let keys = keys_of(keys)?;
    if keys.len() != values.len() {
        return Err(Error::op(
            OP,
            format!("{} keys but {} values", keys.len(), values.len()),
        ));
    }
    let mut index = HashMap::with_capacity(keys.len());
    for (i, k) in keys.into_iter().enumerate() {
        if first_wins {
            index.entry(k).or_insert(i);
        } else {
            index.insert(k, i);
        }
    }
    Ok(Table {
        key_type,
        index,
        values: with_default(values, default)?,
    })
}

/// Opset 1: strings to their index in `classes_strings`, and back.
fn classes_tables(a: &Attributes) -> Result<Vec<Table>> {
    let classes = a.strings_opt("classes_strings")?.unwrap_or_default();
    let n = classes.len() as i64;
    let names = vector(classes);
    let indices = vector((0..n).collect::<Vec<i64>>());
    let default_int = Tensor::scalar(a.int("default_int64", -1)?);
    let default_string = Tensor::scalar(a.string("default_string", "_Unused")?);
    Ok(vec![
        table(DType::String, &names, &indices, &default_int, true)?,
        table(DType::I64, &indices, &names, &default_string, true)?,
    ])
}

/// The one `<prefix>_*` attribute present among the lists and (opset 4) the
/// tensor, as a tensor.
fn one_of(a: &Attributes, prefix: &str, opset: i64) -> Result<Tensor> {
    let (floats, ints, strings, tensor) = (
        format!("{prefix}_floats"),
        format!("{prefix}_int64s"),
        format!("{prefix}_strings"),
        format!("{prefix}_tensor"),
    );
    let mut found = Vec::new();
    if let Some(v) = a.floats_opt(&floats)? {
        found.push((floats.clone(), vector(v)));
    }
    if let Some(v) = a.ints_opt(&ints)? {
        found.push((ints.clone(), vector(v)));
    }
    if let Some(v) = a.strings_opt(&strings)? {
        found.push((strings.clone(), vector(v)));
    }
    if let Some(t) = a.tensor_opt(&tensor)? {
        if opset < 4 {
            return Err(a.error(
                &tensor,
                format!("not available before opset 4 (model uses {opset})"),
            ));
        }
        if !is_label_type(t.dtype()) {
            return Err(a.error(&tensor, type_error("the tensor", t.dtype()).to_string()));
        }
        found.push((tensor.clone(), t.clone()));
    }
    match found.len() {
        1 => Ok(found.remove(0).1),
        0 => Err(a.error(&format!("{prefix}_*"), "one must be set, found none")),
        _ => Err(a.error(
            &found[1].0,
            format!(
                "only one {prefix}_* attribute may be set, found {:?}",
                found.iter().map(|f| &f.0).collect::<Vec<_>>()
            ),
        )),
    }
}

/// The default for values of type `t`: `default_tensor`, else the
/// `default_*` attribute of that type, else the spec's default.
fn default_for(a: &Attributes, t: DType) -> Result<Tensor> {
    if let Some(d) = a.tensor_opt("default_tensor")? {
        return Ok(d.clone());
    }
    Ok(match t {
        DType::String => Tensor::scalar(a.string("default_string", "_Unused")?),
        DType::I64 => Tensor::scalar(a.int("default_int64", -1)?),
        DType::F32 => Tensor::scalar(a.float("default_float", -0.0)?),
        DType::I32 => Tensor::scalar(-1i32),
        DType::I16 => Tensor::scalar(-1i16),
        DType::F64 => Tensor::scalar(-0.0f64),
        other => return Err(type_error("values", other)),
    })
}

/// Opsets 2 and 4: `keys_*` to `values_*`, misses to the default.
fn keyed_table(a: &Attributes, opset: i64) -> Result<Table> {
    let keys = one_of(a, "keys", opset)?;
    let values = one_of(a, "values", opset)?;
    if opset < 4 && a.has("default_tensor") {
        return Err(a.error(
            "default_tensor",
            format!("not available before opset 4 (model uses {opset})"),
        ));
    }
    let default = default_for(a, values.dtype())?;
    table(keys.dtype(), &keys, &values, &default, false)
}

impl LabelEncoder {
    fn table(&self, t: DType) -> Result<&Table> {
        self.tables
            .iter()
            .find(|tb| tb.key_type == t)
            .ok_or_else(|| {
                let want: Vec<String> = self
                    .tables
                    .iter()
                    .map(|tb| tb.key_type.to_string())
                    .collect();
                Error::op(
                    OP,
                    format!("input must be {}, found {t}", want.join(" or ")),
                )
            })
    }
}

impl Operator for LabelEncoder {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let t = self.table(x.dtype)?;
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: t.values.dtype(),
            shape: x.shape.clone(),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // A hash and a comparison or two per element.
        8 * out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let t = self.table(x.dtype())?;
        let miss = t.values.len() - 1;
        let idx: Vec<usize> = keys_of(x)?
            .iter()
            .map(|k| t.index.get(k).copied().unwrap_or(miss))
            .collect();
        Ok(vec![take(&t.values, &idx, x.shape())?])
    }
}

#[cfg(test)]
#[path = "label_encoder_tests.rs"]
mod tests;
