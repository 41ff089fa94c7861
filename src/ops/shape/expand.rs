//! Expand (numpy broadcasting to a given shape) and Tile (repetition).

use super::move_tensor;
use super::{int_list, linear_map, movement_flops, numel, strides, to_dims};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{broadcast_shapes, fact, input};
use crate::ops::Registrar;
use crate::tensor::Tensor;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Expand", 8, build_expand);
    r.add("Tile", 6, build_tile);
}

/// The constant value of input `i` as integers: `Ok(None)` when not constant.
fn const_ints(op: &str, inputs: &[InferInput], i: usize, what: &str) -> Result<Option<Vec<i64>>> {
    fact(op, inputs, i)?;
    inputs[i].value.map(|v| int_list(op, v, what)).transpose()
}

#[derive(Debug)]
struct Expand;

const EXPAND: &str = "Expand";

fn build_expand(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Expand))
}

fn expand_shape(input: &[usize], spec: &[i64]) -> Result<Vec<usize>> {
    let target = to_dims(EXPAND, spec, "shape")?;
    let out = broadcast_shapes(EXPAND, input, &target)?;
    numel(EXPAND, &out)?;
    Ok(out)
}

impl Operator for Expand {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(EXPAND, inputs, 0)?;
        let spec = const_ints(EXPAND, inputs, 1, "shape")?;
        Ok(vec![match (&f.shape, spec) {
            (Some(s), Some(spec)) => Fact::new(f.dtype, expand_shape(s, &spec)?),
            _ => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(EXPAND, inputs, 0)?;
        let spec = int_list(EXPAND, input(EXPAND, inputs, 1)?, "shape")?;
        let s = x.shape();
        let out = expand_shape(s, &spec)?;
        let st = strides(s);
        let lead = out.len() - s.len();
        let maps: Vec<Vec<usize>> = out
            .iter()
            .enumerate()
            .map(|(d, &len)| {
                if d < lead || s[d - lead] == 1 {
                    vec![0; len]
                } else {
                    linear_map(len, 0, st[d - lead] as isize)
                }
            })
            .collect();
        Ok(vec![move_tensor(EXPAND, x, &out, &maps)?])
    }
}

#[derive(Debug)]
struct Tile;

const TILE: &str = "Tile";

fn build_tile(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Tile))
}

fn tile_shape(input: &[usize], repeats: &[i64]) -> Result<Vec<usize>> {
    if repeats.len() != input.len() {
        return Err(Error::op(
            TILE,
            format!(
                "repeats {repeats:?} should have one value per input dimension ({})",
                input.len()
            ),
        ));
    }
    let r = to_dims(TILE, repeats, "repeats")?;
    let out = input
        .iter()
        .zip(&r)
        .map(|(&n, &k)| {
            n.checked_mul(k)
                .ok_or_else(|| Error::op(TILE, "output too large"))
        })
        .collect::<Result<Vec<_>>>()?;
    numel(TILE, &out)?;
    Ok(out)
}

impl Operator for Tile {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(TILE, inputs, 0)?;
        let reps = const_ints(TILE, inputs, 1, "repeats")?;
        Ok(vec![match (&f.shape, reps) {
            (Some(s), Some(r)) => Fact::new(f.dtype, tile_shape(s, &r)?),
            _ => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(TILE, inputs, 0)?;
        let reps = int_list(TILE, input(TILE, inputs, 1)?, "repeats")?;
        let s = x.shape();
        let out = tile_shape(s, &reps)?;
        let st = strides(s);
        // View the output as [r0, n0, r1, n1, ...]: the repeat index reads offset 0.
        let mut maps = Vec::with_capacity(2 * s.len());
        for d in 0..s.len() {
            maps.push(vec![0; reps[d] as usize]);
            maps.push(linear_map(s[d], 0, st[d] as isize));
        }
        Ok(vec![move_tensor(TILE, x, &out, &maps)?])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::tensor::Tensor;

    #[test]
    fn expand_cases() {
        let x = t(&[3, 1], vec![1.0f32, 2.0, 3.0]);
        let y = run1("Expand", 13, &[], &[x.clone(), i64s(&[2, 1, 6])]);
        assert_eq!(y.shape(), &[2, 3, 6]);
        let yv = y.to_f64_vec().unwrap();
        for (i, v) in yv.iter().enumerate() {
            assert_eq!(*v, ((i / 6) % 3 + 1) as f64);
        }
        // Shape smaller than the input: the input dimension wins.
        let y = run1("Expand", 13, &[], &[x.clone(), i64s(&[1, 1])]);
        assert_eq!(y, x);
        let y = run1("Expand", 13, &[], &[x.clone(), i64s(&[3, 4])]);
        assert_eq!(y.shape(), &[3, 4]);
        // Scalar to a shape; zero-size.
        let y = run1("Expand", 13, &[], &[Tensor::scalar(true), i64s(&[2, 2])]);
        assert_eq!(y, t(&[2, 2], vec![true; 4]));
        let y = run1("Expand", 13, &[], &[x.clone(), i64s(&[0, 3, 2])]);
        assert_eq!(y.shape(), &[0, 3, 2]);
        let y = run1(
            "Expand",
            13,
            &[],
            &[t(&[1], vec!["s".to_string()]), i64s(&[3])],
        );
        assert_eq!(y, t(&[3], vec!["s".to_string(); 3]));
    }

    #[test]
    fn expand_errors() {
        let x = t(&[3, 2], vec![0.0f32; 6]);
        let msg = fails("Expand", 13, &[], &[x.clone(), i64s(&[4, 2])]);
        assert!(msg.contains("broadcast"), "{msg}");
        let msg = fails("Expand", 13, &[], &[x.clone(), i64s(&[-1, 2])]);
        assert!(msg.contains("negative"), "{msg}");
        let msg = fails("Expand", 13, &[], &[x, f32s(&[3.0])]);
        assert!(msg.contains("integer"), "{msg}");
    }

    #[test]
    fn tile_cases() {
        let x = t(&[2, 2], vec![0i32, 1, 2, 3]);
        let y = run1("Tile", 13, &[], &[x.clone(), i64s(&[2, 2])]);
        assert_eq!(
            y,
            t(
                &[4, 4],
                vec![0i32, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3]
            )
        );
        let y = run1("Tile", 6, &[], &[x.clone(), i64s(&[1, 3])]);
        assert_eq!(y, t(&[2, 6], vec![0i32, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3]));
        let y = run1("Tile", 13, &[], &[x.clone(), i64s(&[0, 3])]);
        assert_eq!(y.shape(), &[0, 6]);
        let y = run1("Tile", 13, &[], &[Tensor::scalar(1u8), i64s(&[])]);
        assert_eq!(y, Tensor::scalar(1u8));
        let msg = fails("Tile", 13, &[], &[x.clone(), i64s(&[2])]);
        assert!(msg.contains("one value per"), "{msg}");
        let msg = fails("Tile", 13, &[], &[x, i64s(&[-1, 1])]);
        assert!(msg.contains("negative"), "{msg}");
    }
}
