//! Operators that pass data through or describe it: Identity, Dropout (in
//! inference mode; its training mode draws a mask through the random
//! family), Shape and Size.

use super::movement_flops;
use super::num::Num;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator, Value};
use crate::ops::util::{fact, input, opt_input};
use crate::ops::Registrar;
use crate::tensor::{DType, Tensor};
use ndarray::ArrayD;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Identity", 1, build_identity);
    r.add("Dropout", 7, build_dropout);
    r.add("Shape", 1, build_shape);
    r.add("Size", 1, build_size);
}

#[derive(Debug)]
struct Identity;

fn build_identity(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Identity))
}

impl Operator for Identity {
    fn is_view_of_input(&self, _later_inputs: bool, _data: Option<&Fact>) -> bool {
        true
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        Ok(vec![fact("Identity", inputs, 0)?.clone()])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![input("Identity", inputs, 0)?.clone()])
    }

    /// Identity passes a value of any kind (a sequence, an optional) on
    /// as it is, sharing the tensors instead of copying them.
    fn uses_values(&self) -> bool {
        true
    }

    fn run_values(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        match inputs.first().copied().flatten() {
            Some(v) => Ok(vec![v.clone()]),
            None => Err(Error::op("Identity", "input 0 is missing")),
        }
    }
}

const DROPOUT: &str = "Dropout";

#[derive(Debug)]
struct Dropout {
    opset: i64,
    /// Whether the node asks for the mask output.
    mask: bool,
    /// Whether the node may run in training mode (a `training_mode` input
    /// that is not the constant false): its output is then random.
    may_train: bool,
    /// The generator's seed for training mode.
    seed: crate::ops::random::rng::Seed,
}

fn build_dropout(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    if ctx.opset < 12 {
        let ratio = ctx.attrs.float("ratio", 0.5)?;
        if !(0.0..1.0).contains(&ratio) {
            return Err(ctx
                .attrs
                .error("ratio", format!("{ratio} is not in [0, 1)")));
        }
    }
    let constant_false = |i: usize| {
        matches!(ctx.consts.get(i).copied().flatten(),
            Some(Tensor::Bool(a)) if a.iter().all(|&b| !b))
    };
    let zero_ratio = matches!(
        ctx.consts.get(1).copied().flatten().map(Tensor::to_f64_vec),
        Some(Ok(v)) if v == [0.0]
    );
    Ok(Box::new(Dropout {
        opset: ctx.opset,
        mask: ctx.num_outputs > 1,
        may_train: ctx.opset >= 12 && ctx.num_inputs > 2 && !constant_false(2) && !zero_ratio,
        seed: crate::ops::random::rng::Seed::from_int_attr(ctx.attrs)?,
    }))
}

fn ones_like<T: Num>(a: &ArrayD<T>) -> ArrayD<T> {
    ArrayD::from_elem(a.raw_dim(), T::from_f64(1.0))
}

impl Dropout {
    fn mask_type(&self, x: DType) -> DType {
        if self.opset >= 10 {
            DType::Bool
        } else {
            x
        }
    }
}

impl Operator for Dropout {
    /// Without ratio and training_mode inputs Dropout is in inference mode,
    /// where its output is its input.
    fn is_view_of_input(&self, later_inputs: bool, _data: Option<&Fact>) -> bool {
        !later_inputs
    }

    fn is_random(&self) -> bool {
        self.may_train
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(DROPOUT, inputs, 0)?;
        if !f.dtype.is_float() {
            return Err(Error::op(
                DROPOUT,
                format!("expected a floating-point input, found {}", f.dtype),
            ));
        }
        let mut out = vec![f.clone()];
        if self.mask {
            out.push(Fact {
                kind: crate::ir::Kind::Tensor,
                dtype: self.mask_type(f.dtype),
                shape: f.shape.clone(),
            });
        }
        Ok(out)
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(DROPOUT, inputs, 0)?;
        crate::ops::util::require_float(DROPOUT, x)?;
        if self.opset >= 12 {
            let ratio = match opt_input(inputs, 1) {
                Some(r) => {
                    let v = r.to_f64_vec()?;
                    match v.as_slice() {
                        [v] if (0.0..1.0).contains(v) => *v,
                        _ => {
                            return Err(Error::op(
                                DROPOUT,
                                format!("ratio must be one value in [0, 1), found {v:?}"),
                            ))
                        }
                    }
                }
                None => 0.5,
            };
            if let Some(t) = opt_input(inputs, 2) {
                let training = match t {
                    Tensor::Bool(a) if a.len() == 1 => a.iter().any(|&b| b),
                    other => {
                        return Err(Error::op(
                            DROPOUT,
                            format!("training_mode must be one bool, found {other}"),
                        ))
                    }
                };
                if training && ratio > 0.0 {
                    if !cfg!(feature = "ops-random") {
                        return Err(Error::UnsupportedFeature {
                            op: DROPOUT.to_string(),
                            feature: "training mode with a nonzero ratio (a random mask \
                                      drawn by the ops-random family, which this build \
                                      leaves out)"
                                .to_string(),
                        });
                    }
                    let (y, m) =
                        crate::ops::random::dropout_train(x, ratio, &self.seed, self.mask)?;
                    return Ok(std::iter::once(y).chain(m).collect());
                }
            }
        }
        let mut out = vec![x.clone()];
        if self.mask {
            let m = if self.opset >= 10 {
                Tensor::Bool(ArrayD::from_elem(x.shape(), true))
            } else {
                crate::float_map!(DROPOUT, x, a => ones_like(a))?
            };
            out.push(m);
        }
        Ok(out)
    }
}

#[derive(Debug)]
struct ShapeOp {
    start: i64,
    end: Option<i64>,
}

fn build_shape(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let (start, end) = if ctx.opset >= 15 {
        (ctx.attrs.int("start", 0)?, ctx.attrs.int_opt("end")?)
    } else {
        (0, None)
    };
    Ok(Box::new(ShapeOp { start, end }))
}

impl ShapeOp {
    fn range(&self, rank: usize) -> (usize, usize) {
        let r = rank as i64;
        let clamp = |v: i64| {
            let v = if v < 0 { v.saturating_add(r) } else { v };
            v.clamp(0, r) as usize
        };
        let s = clamp(self.start);
        let e = clamp(self.end.unwrap_or(r));
        (s, e.max(s))
    }
}

impl Operator for ShapeOp {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact("Shape", inputs, 0)?;
        Ok(vec![match &f.shape {
            Some(s) => {
                let (a, b) = self.range(s.len());
                Fact::new(DType::I64, vec![b - a])
            }
            None => Fact::unknown_shape(DType::I64),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let s = input("Shape", inputs, 0)?.shape();
        let (a, b) = self.range(s.len());
        let v: Vec<i64> = s[a..b].iter().map(|&d| d as i64).collect();
        Ok(vec![Tensor::I64(
            ArrayD::from_shape_vec(vec![v.len()], v)
                .map_err(|e| Error::op("Shape", e.to_string()))?,
        )])
    }

    fn fold_from_facts(&self, inputs: &[InferInput]) -> Option<Vec<Tensor>> {
        let s = inputs.first()?.fact?.shape.as_ref()?;
        let (a, b) = self.range(s.len());
        let v: Vec<i64> = s[a..b].iter().map(|&d| d as i64).collect();
        Some(vec![Tensor::from_vec(&[v.len()], v).ok()?])
    }
}

#[derive(Debug)]
struct Size;

fn build_size(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Size))
}

impl Operator for Size {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        fact("Size", inputs, 0)?;
        Ok(vec![Fact::new(DType::I64, vec![])])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        1
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let n = input("Size", inputs, 0)?.len();
        Ok(vec![Tensor::scalar(n as i64)])
    }

    fn fold_from_facts(&self, inputs: &[InferInput]) -> Option<Vec<Tensor>> {
        let n = inputs.first()?.fact?.len()?;
        Some(vec![Tensor::scalar(n as i64)])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::ir::attributes::Attribute;
    use crate::tensor::Tensor;
    use half::f16;

    #[test]
    fn identity_all_types() {
        let x = t(&[2], vec!["p".to_string(), "q".to_string()]);
        assert_eq!(run1("Identity", 16, &[], &[x.clone()]), x);
        let e = t(&[0, 4], Vec::<u8>::new());
        assert_eq!(run1("Identity", 1, &[], &[e.clone()]), e);
    }

    #[test]
    fn dropout_inference() {
        let x = t(&[2, 2], vec![f16::from_f32(1.5); 4]);
        // Opset 7: mask of the input type, all ones.
        let y = run_n(
            "Dropout",
            7,
            &[("ratio", Attribute::Float(0.3))],
            &[Some(x.clone())],
            2,
        )
        .unwrap();
        assert_eq!(y[0], x);
        assert_eq!(y[1], t(&[2, 2], vec![f16::from_f32(1.0); 4]));
        // Opset 10: bool mask.
        let y = run_n("Dropout", 10, &[], &[Some(x.clone())], 2).unwrap();
        assert_eq!(y[1], t(&[2, 2], vec![true; 4]));
        // Opset 12 with ratio and training_mode false.
        let y = run_n(
            "Dropout",
            13,
            &[("seed", Attribute::Int(3))],
            &[
                Some(x.clone()),
                Some(Tensor::scalar(0.2f32)),
                Some(Tensor::scalar(false)),
            ],
            2,
        )
        .unwrap();
        assert_eq!(y[0], x);
        assert_eq!(y[1], t(&[2, 2], vec![true; 4]));
        // Single output.
        let y = run1("Dropout", 13, &[], &[x.clone()]);
        assert_eq!(y, x);
        // Training mode with ratio 0 is the identity.
        let y = run1(
            "Dropout",
            13,
            &[],
            &[x.clone(), Tensor::scalar(0.0f32), Tensor::scalar(true)],
        );
        assert_eq!(y, x);
    }

    #[test]
    fn dropout_errors() {
        let x = t(&[2], vec![1.0f32, 2.0]);
        let msg = fails(
            "Dropout",
            13,
            &[],
            &[x.clone(), Tensor::scalar(0.5f32), Tensor::scalar(1.0f32)],
        );
        // (Training mode itself is tested with the random family.)
        assert!(msg.contains("training_mode must be one bool"), "{msg}");
        let msg = fails("Dropout", 13, &[], &[x.clone(), Tensor::scalar(1.5f32)]);
        assert!(msg.contains("ratio"), "{msg}");
        let msg = fails("Dropout", 7, &[("ratio", Attribute::Float(2.0))], &[x]);
        assert!(msg.contains("ratio"), "{msg}");
        let msg = fails("Dropout", 13, &[], &[t(&[1], vec![1i32])]);
        assert!(msg.contains("floating"), "{msg}");
    }

    #[test]
    fn shape_and_size() {
        let x = iota(&[2, 3, 4]);
        assert_eq!(run1("Shape", 13, &[], &[x.clone()]), i64s(&[2, 3, 4]));
        type Case<'a> = (&'a [(&'a str, Attribute)], &'a [i64]);
        let cases: [Case; 6] = [
            (&[("start", Attribute::Int(1))], &[3, 4]),
            (&[("end", Attribute::Int(-1))], &[2, 3]),
            (
                &[("start", Attribute::Int(-10)), ("end", Attribute::Int(10))],
                &[2, 3, 4],
            ),
            (
                &[("start", Attribute::Int(2)), ("end", Attribute::Int(1))],
                &[],
            ),
            (&[("start", Attribute::Int(-1))], &[4]),
            (&[("start", Attribute::Int(3))], &[]),
        ];
        for (attrs, want) in cases {
            assert_eq!(
                run1("Shape", 15, attrs, &[x.clone()]),
                i64s(want),
                "{attrs:?}"
            );
        }
        // start/end are ignored before opset 15.
        assert_eq!(
            run1("Shape", 13, &[("start", Attribute::Int(1))], &[x.clone()]),
            i64s(&[2, 3, 4])
        );
        assert_eq!(run1("Shape", 15, &[], &[Tensor::scalar(1u8)]), i64s(&[]));
        assert_eq!(run1("Size", 13, &[], &[x]), Tensor::scalar(24i64));
        assert_eq!(
            run1("Size", 13, &[], &[t(&[3, 0], Vec::<bool>::new())]),
            Tensor::scalar(0i64)
        );
    }
}
