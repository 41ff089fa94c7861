//! RandomUniform and RandomNormal, with the output's shape from the `shape`
//! attribute, and RandomUniformLike and RandomNormalLike, with the shape of
//! their input (and its type when `dtype` is absent).

use super::rng::Seed;
use super::{real_dtype, real_tensor};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::util::{fact, input, out_len};
use crate::tensor::{DType, Tensor};

/// The distribution drawn from.
#[derive(Debug, Clone, Copy)]
enum Dist {
    /// Uniform on [low, high).
    Uniform { low: f64, high: f64 },
    /// Normal with this mean and standard deviation.
    Normal { mean: f64, scale: f64 },
}

/// Where the output's shape (and type) come from.
#[derive(Debug)]
enum Like {
    /// The `shape` attribute and the `dtype` attribute (default float).
    Attr(Vec<usize>, DType),
    /// Input 0's shape; `dtype` if given, else input 0's type.
    Input(Option<DType>),
}

#[derive(Debug)]
struct Generate {
    name: &'static str,
    dist: Dist,
    like: Like,
    seed: Seed,
}

fn dist(ctx: &BuildContext, normal: bool) -> Result<Dist> {
    let a = ctx.attrs;
    let (p, q) = if normal {
        ("mean", "scale")
    } else {
        ("low", "high")
    };
    let (x, y) = (a.float(p, 0.0)? as f64, a.float(q, 1.0)? as f64);
    for (name, v) in [(p, x), (q, y)] {
        if !v.is_finite() {
            return Err(a.error(name, format!("{v} is not finite")));
        }
    }
    if normal {
        if y < 0.0 {
            return Err(a.error("scale", format!("{y} is negative")));
        }
        Ok(Dist::Normal { mean: x, scale: y })
    } else {
        if x > y {
            return Err(a.error("low", format!("{x} is above high {y}")));
        }
        Ok(Dist::Uniform { low: x, high: y })
    }
}

fn build(
    ctx: &BuildContext,
    name: &'static str,
    normal: bool,
    like: bool,
) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let like = if like {
        let dtype = match a.int_opt("dtype")? {
            Some(code) => Some(real_dtype(a, "dtype", code, ctx.opset)?),
            None => None,
        };
        Like::Input(dtype)
    } else {
        let dims = a
            .ints_opt("shape")?
            .ok_or_else(|| a.error("shape", "is required"))?;
        let shape = dims
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| a.error("shape", format!("{dims:?} has a negative dimension")))?;
        Like::Attr(
            shape,
            real_dtype(a, "dtype", a.int("dtype", 1)?, ctx.opset)?,
        )
    };
    Ok(Box::new(Generate {
        name,
        dist: dist(ctx, normal)?,
        like,
        seed: Seed::from_float_attr(a)?,
    }))
}

pub(super) fn build_uniform(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, "RandomUniform", false, false)
}

pub(super) fn build_uniform_like(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, "RandomUniformLike", false, true)
}

pub(super) fn build_normal(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, "RandomNormal", true, false)
}

pub(super) fn build_normal_like(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build(ctx, "RandomNormalLike", true, true)
}

impl Generate {
    /// The output type for an input of type `input` (the `Like` forms).
    fn like_dtype(&self, given: Option<DType>, input: DType) -> Result<DType> {
        match given {
            Some(d) => Ok(d),
            None if matches!(input, DType::F32 | DType::F64 | DType::F16 | DType::BF16) => {
                Ok(input)
            }
            None => Err(Error::op(
                self.name,
                format!("without a dtype attribute the output takes the input's type, and {input} is not a floating-point type"),
            )),
        }
    }
}

impl Operator for Generate {
    fn is_random(&self) -> bool {
        true
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        Ok(vec![match &self.like {
            Like::Attr(shape, dtype) => Fact::new(*dtype, shape.clone()),
            Like::Input(given) => {
                let f = fact(self.name, inputs, 0)?;
                Fact {
                    kind: crate::ir::Kind::Tensor,
                    dtype: self.like_dtype(*given, f.dtype)?,
                    shape: f.shape.clone(),
                }
            }
        }])
    }

    /// A few operations per uniform value; a normal one costs a log, a
    /// square root and a sine or cosine on top.
    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let per = match self.dist {
            Dist::Uniform { .. } => 4,
            Dist::Normal { .. } => 24,
        };
        out_len(outputs, 0).saturating_mul(per).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (shape, dtype) = match &self.like {
            Like::Attr(shape, dtype) => (shape.as_slice(), *dtype),
            Like::Input(given) => {
                let x = input(self.name, inputs, 0)?;
                (x.shape(), self.like_dtype(*given, x.dtype())?)
            }
        };
        let mut rng = self.seed.rng();
        let out = match self.dist {
            Dist::Uniform { low, high } => {
                let below = (low < high).then_some((high, low));
                real_tensor(self.name, dtype, shape, below, &mut || {
                    low + rng.uniform() * (high - low)
                })?
            }
            Dist::Normal { mean, scale } => {
                real_tensor(self.name, dtype, shape, None, &mut || {
                    mean + scale * rng.normal()
                })?
            }
        };
        Ok(vec![out])
    }
}
