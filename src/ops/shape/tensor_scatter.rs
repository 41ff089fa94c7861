//! TensorScatter (opset 24): the functional form of a KV-cache update. The
//! output is `past_cache` with, for every batch entry `b` (and every index of
//! the axes between the batch axis and the sequence `axis`), the `update`
//! rows written along `axis` from position `write_indices[b]` (0 when the
//! input is absent). In `linear` mode the rows must fit before the end of
//! the cache; in `circular` mode positions wrap modulo the cache length.
//! Every element type is supported.

use super::{movement_flops, norm_axis};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, opt_fact, opt_input};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, same_width, Bits, WidthVec};
use crate::tensor::{DType, Tensor};

pub(super) fn register(r: &mut impl Registrar) {
    r.add("TensorScatter", 24, build);
}

const OP: &str = "TensorScatter";

#[derive(Debug)]
struct TensorScatter {
    circular: bool,
    axis: i64,
}

fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let circular = match a.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => {
            return Err(a.error(
                "mode",
                format!("must be \"linear\" or \"circular\", found {other:?}"),
            ))
        }
    };
    Ok(Box::new(TensorScatter {
        circular,
        axis: a.int("axis", -2)?,
    }))
}

impl TensorScatter {
    /// Checks the shapes; returns the normalized sequence axis.
    fn check(&self, cache: &[usize], update: &[usize]) -> Result<usize> {
        let axis = norm_axis(OP, self.axis, cache.len())?;
        if axis == 0 {
            return Err(Error::op(
                OP,
                "axis must not be 0 (the batch axis) but names the batch axis",
            ));
        }
        let fits = update.len() == cache.len()
            && cache
                .iter()
                .zip(update)
                .enumerate()
                .all(|(i, (&c, &u))| if i == axis { u <= c } else { u == c });
        if !fits {
            return Err(Error::op(
                OP,
                format!(
                    "update shape {update:?} must equal past_cache shape {cache:?} except \
                     along axis {axis}, where it may not be longer"
                ),
            ));
        }
        Ok(axis)
    }

    /// The scatter on one width's elements (`cache` and `update` in
    /// row-major order): a copy of the cache with the update written in.
    fn scatter<B: Bits>(
        &self,
        cache: &[B],
        update: Option<&[B]>,
        shape: &[usize],
        len: usize,
        writes: &[i64],
        axis: usize,
    ) -> Result<WidthVec> {
        let update = update.ok_or_else(|| Error::op(OP, "update and past_cache differ in type"))?;
        let mut out = cache.to_vec();
        self.scatter_bits(&mut out, update, shape, len, writes, axis)?;
        Ok(B::vec(out))
    }

    /// The scatter on bits (one loop per width): writes the `len` update
    /// rows of each batch entry into `out`, the cache of `shape`.
    #[inline(never)]
    fn scatter_bits<B: Clone>(
        &self,
        out: &mut [B],
        src: &[B],
        shape: &[usize],
        len: usize,
        writes: &[i64],
        axis: usize,
    ) -> Result<()> {
        let max = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let per_batch: usize = shape[1..axis].iter().product();
        let outer: usize = shape[..axis].iter().product();
        if len == 0 || inner == 0 {
            return Ok(());
        }
        for p in 0..outer {
            let start = writes[p / per_batch];
            // Circular positions are reduced first, so no sum can overflow.
            let first = if self.circular {
                start.rem_euclid(max as i64) as usize
            } else {
                match usize::try_from(start) {
                    Ok(v) if v <= max - len => v,
                    _ => {
                        return Err(Error::op(
                            OP,
                            format!(
                                "write index {start} + {len} update rows do not fit a cache \
                                 of {max} along axis {axis} (linear mode)"
                            ),
                        ))
                    }
                }
            };
            for s in 0..len {
                let pos = (first + s) % max;
                let dst = (p * max + pos) * inner;
                let from = (p * len + s) * inner;
                out[dst..dst + inner].clone_from_slice(&src[from..from + inner]);
            }
        }
        Ok(())
    }
}

/// The write index of every batch entry.
fn write_indices(t: Option<&Tensor>, batch: usize) -> Result<Vec<i64>> {
    let Some(t) = t else {
        return Ok(vec![0; batch]);
    };
    if t.dtype() != DType::I64 || t.shape() != [batch] {
        return Err(Error::op(
            OP,
            format!(
                "write_indices must be int64 of shape [{batch}] (one per batch entry), found {} {:?}",
                t.dtype(),
                t.shape()
            ),
        ));
    }
    t.to_i64_vec()
}

impl Operator for TensorScatter {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let cache = fact(OP, inputs, 0)?;
        let update = fact(OP, inputs, 1)?;
        if update.dtype != cache.dtype {
            return Err(Error::op(
                OP,
                format!("update is {}, past_cache is {}", update.dtype, cache.dtype),
            ));
        }
        if let Some(w) = opt_fact(inputs, 2) {
            if w.dtype != DType::I64 {
                return Err(Error::op(
                    OP,
                    format!("write_indices must be int64, found {}", w.dtype),
                ));
            }
        }
        if let (Some(c), Some(u)) = (&cache.shape, &update.shape) {
            self.check(c, u)?;
        }
        Ok(vec![cache.clone()])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let cache = input(OP, inputs, 0)?;
        let update = input(OP, inputs, 1)?;
        let axis = self.check(cache.shape(), update.shape())?;
        let writes = write_indices(opt_input(inputs, 2), cache.shape()[0])?;
        if update.dtype() != cache.dtype() {
            return Err(Error::op(
                OP,
                format!(
                    "update is {}, past_cache is {}",
                    update.dtype(),
                    cache.dtype()
                ),
            ));
        }
        // Only moves elements: once per width, not per element type.
        let (shape, len) = (cache.shape(), update.shape()[axis]);
        let wu = update.width();
        let v = by_width!(cache, c => {
            self.scatter(c, same_width(c, &wu), shape, len, &writes, axis)?
        });
        Ok(vec![Tensor::from_width(OP, cache.dtype(), shape, v)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::error::{Error, Result};
    use crate::ir::attributes::Attribute;
    use crate::ops::testutil::{build_op, infer_and_run, int, string};
    use crate::tensor::Tensor;
    use ndarray::{ArrayD, Dimension, IxDyn};

    fn run(
        cache: &Tensor,
        update: &Tensor,
        writes: Option<&[i64]>,
        mode: &str,
        axis: Option<i64>,
    ) -> Result<Tensor> {
        let mut attrs = vec![("mode", string(mode))];
        if let Some(a) = axis {
            attrs.push(("axis", int(a)));
        }
        let attrs: Vec<(&str, Attribute)> = attrs;
        let op = build_op("TensorScatter", 24, &attrs, &[], 3, 1)?;
        let w = writes.map(|w| Tensor::from_vec(&[w.len()], w.to_vec()).unwrap());
        Ok(infer_and_run(op.as_ref(), &[Some(cache), Some(update), w.as_ref()])?.remove(0))
    }

    /// The spec's pseudocode, on f32 arrays.
    fn naive(
        cache: &ArrayD<f32>,
        update: &ArrayD<f32>,
        writes: &[i64],
        circular: bool,
        axis: usize,
    ) -> ArrayD<f32> {
        let mut out = cache.clone();
        let max = cache.shape()[axis] as i64;
        for (idx, &v) in update.indexed_iter() {
            let mut at: Vec<usize> = idx.as_array_view().to_vec();
            let mut pos = writes[at[0]] + at[axis] as i64;
            if circular {
                pos = pos.rem_euclid(max);
            }
            at[axis] = pos as usize;
            out[IxDyn(&at)] = v;
        }
        out
    }

    #[test]
    fn matches_the_pseudocode() {
        let cache = ArrayD::from_shape_fn(IxDyn(&[2, 3, 5, 2]), |i| {
            (i[0] * 1000 + i[1] * 100 + i[2] * 10 + i[3]) as f32
        });
        let update = ArrayD::from_shape_fn(IxDyn(&[2, 3, 3, 2]), |i| {
            -((i[0] * 1000 + i[1] * 100 + i[2] * 10 + i[3]) as f32) - 1.0
        });
        for (writes, circular) in [
            ([0i64, 2], false),
            ([1, 0], false),
            ([4, 3], true),
            ([7, -1], true),
        ] {
            let mode = if circular { "circular" } else { "linear" };
            let got = run(
                &Tensor::F32(cache.clone()),
                &Tensor::F32(update.clone()),
                Some(&writes),
                mode,
                None,
            )
            .unwrap();
            assert_eq!(
                got,
                Tensor::F32(naive(&cache, &update, &writes, circular, 2)),
                "{writes:?} {mode}"
            );
        }
        // Axis 1 of a 3-D cache, indices absent (zero), last axis explicit.
        let c3 = ArrayD::from_shape_fn(IxDyn(&[2, 4, 3]), |i| (i[1] * 3 + i[2]) as f32);
        let u3 = ArrayD::from_shape_fn(IxDyn(&[2, 2, 3]), |_| 9.0);
        let got = run(
            &Tensor::F32(c3.clone()),
            &Tensor::F32(u3.clone()),
            None,
            "linear",
            Some(1),
        )
        .unwrap();
        assert_eq!(got, Tensor::F32(naive(&c3, &u3, &[0, 0], false, 1)));
        let u_last = ArrayD::from_shape_fn(IxDyn(&[2, 4, 1]), |_| 7.0);
        let got = run(
            &Tensor::F32(c3.clone()),
            &Tensor::F32(u_last.clone()),
            Some(&[2, 0]),
            "linear",
            Some(-1),
        )
        .unwrap();
        assert_eq!(got, Tensor::F32(naive(&c3, &u_last, &[2, 0], false, 2)));
    }

    #[test]
    fn other_types_and_empty_updates() {
        let cache =
            Tensor::from_vec(&[1, 3], vec!["a".to_string(), "b".into(), "c".into()]).unwrap();
        let update = Tensor::from_vec(&[1, 1], vec!["z".to_string()]).unwrap();
        let got = run(&cache, &update, Some(&[1]), "linear", Some(1)).unwrap();
        assert_eq!(
            got,
            Tensor::from_vec(&[1, 3], vec!["a".to_string(), "z".into(), "c".into()]).unwrap()
        );
        let cache = Tensor::from_vec(&[2, 2, 1], vec![1i8, 2, 3, 4]).unwrap();
        let empty = Tensor::from_vec(&[2, 0, 1], Vec::<i8>::new()).unwrap();
        assert_eq!(
            run(&cache, &empty, Some(&[5, 9]), "linear", None).unwrap(),
            cache
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let cache = Tensor::from_vec(&[2, 4, 2], vec![0.0f32; 16]).unwrap();
        let upd = Tensor::from_vec(&[2, 2, 2], vec![1.0f32; 8]).unwrap();
        // Linear writes past the end, negative linear indices.
        assert!(matches!(
            run(&cache, &upd, Some(&[3, 0]), "linear", None),
            Err(Error::Op { .. })
        ));
        assert!(run(&cache, &upd, Some(&[-1, 0]), "linear", None).is_err());
        assert!(run(&cache, &upd, Some(&[i64::MAX, 0]), "linear", None).is_err());
        assert!(run(&cache, &upd, Some(&[i64::MIN, 0]), "linear", None).is_err());
        // Circular indices of any size wrap (i64::MAX = 3 mod 4).
        let far = run(&cache, &upd, Some(&[i64::MAX, i64::MIN]), "circular", None).unwrap();
        let near = run(&cache, &upd, Some(&[3, 0]), "circular", None).unwrap();
        assert_eq!(far, near);
        // Wrong number of indices, axis 0, mismatched shapes and types.
        assert!(run(&cache, &upd, Some(&[0]), "linear", None).is_err());
        assert!(run(&cache, &upd, None, "linear", Some(0)).is_err());
        assert!(run(&cache, &upd, None, "linear", Some(3)).is_err());
        let long = Tensor::from_vec(&[2, 5, 2], vec![1.0f32; 20]).unwrap();
        assert!(run(&cache, &long, None, "linear", None).is_err());
        let other = Tensor::from_vec(&[2, 2, 1], vec![1.0f32; 4]).unwrap();
        assert!(run(&cache, &other, None, "linear", None).is_err());
        let ints = Tensor::from_vec(&[2, 2, 2], vec![1i32; 8]).unwrap();
        assert!(run(&cache, &ints, None, "linear", None).is_err());
        assert!(matches!(
            build_op("TensorScatter", 24, &[("mode", string("ring"))], &[], 3, 1),
            Err(Error::Attribute { .. })
        ));
    }
}
