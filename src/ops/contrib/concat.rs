//! QLinearConcat: concatenates quantized tensors along `axis`, each input
//! `(X_i, X_i_scale, X_i_zero_point)` requantized to the output's
//! `(Y_scale, Y_zero_point)` through onnxruntime's identity lookup table
//! (copied as is where its scale and zero point equal the output's).

use super::byte_map::map_bytes;
use super::lookup::{byte_table, table};
use super::{range8, scalar_scale, scalar_zp};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::util::{axis, fact, input, out_len};
use crate::tensor::{DType, Tensor};

const OP: &str = "QLinearConcat";

#[derive(Debug)]
struct QLinearConcat {
    axis: i64,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let axis = ctx.attrs.int_req("axis")?;
    Ok(Box::new(QLinearConcat { axis }))
}

/// The output shape of concatenating `shapes` along `axis`.
fn concat_shape(axis_attr: i64, shapes: &[&[usize]]) -> Result<(usize, Vec<usize>)> {
    let first = shapes
        .first()
        .ok_or_else(|| Error::op(OP, "no tensor to concatenate"))?;
    let ax = axis(OP, axis_attr, first.len())?;
    if first.is_empty() {
        return Err(Error::op(OP, "cannot concatenate scalars"));
    }
    let mut out = first.to_vec();
    out[ax] = 0;
    for s in shapes {
        let same = s.len() == first.len()
            && s.iter()
                .zip(first.iter())
                .enumerate()
                .all(|(d, (a, b))| d == ax || a == b);
        if !same {
            return Err(Error::op(
                OP,
                format!("shapes {first:?} and {s:?} differ off axis {ax}"),
            ));
        }
        out[ax] += s[ax];
    }
    Ok((ax, out))
}

fn check_count(n: usize) -> Result<usize> {
    if n < 5 || !(n - 2).is_multiple_of(3) {
        return Err(Error::op(
            OP,
            format!("expects 2 + 3·k inputs (k ≥ 1), found {n}"),
        ));
    }
    Ok((n - 2) / 3)
}

impl Operator for QLinearConcat {
    fn cost_class(&self) -> OpClass {
        OpClass::Other
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let k = check_count(inputs.len())?;
        let t = fact(OP, inputs, 1)?.dtype;
        super::check8(OP, "Y_zero_point", t)?;
        let mut shapes = Vec::with_capacity(k);
        for i in 0..k {
            let f = fact(OP, inputs, 2 + 3 * i)?;
            if f.dtype != t {
                return Err(Error::op(
                    OP,
                    format!("input {} is {}, expected {t}", 2 + 3 * i, f.dtype),
                ));
            }
            shapes.push(f.shape.as_deref());
        }
        let shape = match shapes.iter().copied().collect::<Option<Vec<_>>>() {
            Some(s) => Some(concat_shape(self.axis, &s)?.1),
            None => None,
        };
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: t,
            shape,
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let k = check_count(inputs.len())?;
        let yz_t = input(OP, inputs, 1)?;
        let t = yz_t.dtype();
        let range = range8(OP, t)?;
        let sy = scalar_scale(OP, inputs, 0, "Y_scale")?;
        let zy = scalar_zp(OP, inputs, 1, t, "Y_zero_point")?;
        let xs: Vec<&Tensor> = (0..k)
            .map(|i| input(OP, inputs, 2 + 3 * i))
            .collect::<Result<_>>()?;
        for (i, x) in xs.iter().enumerate() {
            if x.dtype() != t {
                return Err(Error::op(
                    OP,
                    format!("input {} is {}, expected {t}", 2 + 3 * i, x.dtype()),
                ));
            }
        }
        let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape()).collect();
        let (ax, out_shape) = concat_shape(self.axis, &shapes)?;
        let outer: usize = out_shape[..ax].iter().product();
        let inner: usize = out_shape[ax + 1..].iter().product();
        let out_pitch = out_shape[ax] * inner;
        // The inputs' blocks tile every output row: a recycled buffer needs
        // no zero-fill.
        let mut out = crate::tensor::recycle::take_or_default::<u8>(outer * out_pitch);
        let mut offset = 0;
        for (i, x) in xs.iter().enumerate() {
            let sx = scalar_scale(OP, inputs, 3 + 3 * i, "X_scale")?;
            let zx = scalar_zp(OP, inputs, 4 + 3 * i, t, "X_zero_point")?;
            let bytes = x.standard_bytes().unwrap_or_default();
            // Raw byte → raw byte, or the identity where nothing changes.
            let map = (sx != sy || zx != zy)
                .then(|| byte_table(t, &table(t, (sx, zx), (sy, zy), range, |f| f)));
            let pitch = x.shape()[ax] * inner;
            if pitch > 0 {
                for (o, chunk) in bytes.chunks(pitch).enumerate() {
                    let dst = &mut out[o * out_pitch + offset..][..pitch];
                    match &map {
                        None => dst.copy_from_slice(chunk),
                        Some(m) => map_bytes(m, chunk, dst),
                    }
                }
            }
            offset += pitch;
        }
        Ok(vec![Tensor::from_bytes(&out_shape, out, t == DType::I8)?])
    }
}
