//! CenterCropPad (opset 18): crops or zero-pads the chosen axes (`axes`,
//! default all) to the sizes in the `shape` input, keeping the content
//! centred. An odd crop keeps the extra element on the right (the window
//! starts at ⌊(n−s)/2⌋), an odd pad puts the extra zero on the right.
//! Every element type moves through the same offset-copy engine; padding
//! is the type's zero (false, the empty string).

use super::{int_list, movement_flops, norm_axes, numel, strides, PAD};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{const_value, fact, input};
use crate::ops::Registrar;
use crate::tensor::Tensor;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("CenterCropPad", 18, build);
}

const OP: &str = "CenterCropPad";

#[derive(Debug)]
struct CenterCropPad {
    axes: Option<Vec<i64>>,
}

fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(CenterCropPad {
        axes: ctx.attrs.ints_opt("axes")?,
    }))
}

impl CenterCropPad {
    /// The output shape for input `shape` and the `shape` input's values.
    fn out_shape(&self, shape: &[usize], target: &Tensor) -> Result<Vec<usize>> {
        let rank = shape.len();
        let axes = match &self.axes {
            Some(a) => norm_axes(OP, a, rank)?,
            None => (0..rank).collect(),
        };
        let sizes = int_list(OP, target, "shape")?;
        if sizes.len() != axes.len() {
            return Err(Error::op(
                OP,
                format!(
                    "shape has {} values but {} axes are cropped or padded",
                    sizes.len(),
                    axes.len()
                ),
            ));
        }
        let mut out = shape.to_vec();
        for (&a, &s) in axes.iter().zip(&sizes) {
            out[a] = usize::try_from(s)
                .map_err(|_| Error::op(OP, format!("shape has a negative size {s}: {sizes:?}")))?;
        }
        numel(OP, &out)?;
        Ok(out)
    }
}

/// Per output index of one axis, the input offset (index × stride), or
/// [`PAD`] where the output lies outside the input.
fn axis_map(n: usize, s: usize, stride: usize) -> Vec<usize> {
    if s <= n {
        let start = (n - s) / 2;
        (0..s).map(|j| (j + start) * stride).collect()
    } else {
        let start = (s - n) / 2;
        (0..s)
            .map(|j| {
                if j >= start && j - start < n {
                    (j - start) * stride
                } else {
                    PAD
                }
            })
            .collect()
    }
}

fn crop_pad(x: &Tensor, out: &[usize]) -> Result<Tensor> {
    let shape = x.shape();
    let st = strides(shape);
    let maps: Vec<Vec<usize>> = (0..shape.len())
        .map(|d| axis_map(shape[d], out[d], st[d]))
        .collect();
    super::move_tensor_or_zero(OP, x, out, &maps)
}

impl Operator for CenterCropPad {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let s = fact(OP, inputs, 1)?;
        if !matches!(
            s.dtype,
            crate::tensor::DType::I32 | crate::tensor::DType::I64
        ) {
            return Err(Error::op(
                OP,
                format!("shape must be int32 or int64, found {}", s.dtype),
            ));
        }
        Ok(vec![match (&x.shape, const_value(inputs, 1)) {
            (Some(shape), Some(target)) => Fact::new(x.dtype, self.out_shape(shape, target)?),
            _ => Fact::unknown_shape(x.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let out = self.out_shape(x.shape(), input(OP, inputs, 1)?)?;
        Ok(vec![crop_pad(x, &out)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::ir::attributes::Attribute;
    use crate::ops::testutil::{build_op, infer_and_run, ints};
    use crate::tensor::Tensor;
    use ndarray::{ArrayD, IxDyn};

    fn run(x: &Tensor, shape: &[i64], axes: Option<&[i64]>) -> crate::error::Result<Tensor> {
        let attrs: Vec<(&str, Attribute)> = axes.map(|a| ("axes", ints(a))).into_iter().collect();
        let op = build_op("CenterCropPad", 18, &attrs, &[], 2, 1)?;
        let s = Tensor::from_vec(&[shape.len()], shape.to_vec())?;
        Ok(infer_and_run(op.as_ref(), &[Some(x), Some(&s)])?.remove(0))
    }

    /// The reference definition: out[j] = x[j − pad_start + crop_start]
    /// per axis, zero outside.
    fn naive(x: &ArrayD<f32>, out: &[usize]) -> ArrayD<f32> {
        let shape = x.shape().to_vec();
        ArrayD::from_shape_fn(IxDyn(out), |idx| {
            let mut src = Vec::new();
            for d in 0..shape.len() {
                let (n, s) = (shape[d] as i64, out[d] as i64);
                let shift = if s <= n { (n - s) / 2 } else { -((s - n) / 2) };
                let i = idx[d] as i64 + shift;
                if i < 0 || i >= n {
                    return 0.0;
                }
                src.push(i as usize);
            }
            x[IxDyn(&src)]
        })
    }

    #[test]
    fn crops_and_pads_against_naive() {
        let shape = [5usize, 4, 3];
        let x = ArrayD::from_shape_fn(IxDyn(&shape), |i| (i[0] * 100 + i[1] * 10 + i[2]) as f32);
        for target in [
            [5, 4, 3],
            [2, 4, 3],
            [3, 1, 3],
            [8, 7, 2],
            [6, 2, 6],
            [0, 4, 3],
        ] {
            let t: Vec<i64> = target.iter().map(|&v| v as i64).collect();
            let y = run(&Tensor::F32(x.clone()), &t, None).unwrap();
            let want = naive(&x, &target);
            assert_eq!(y, Tensor::F32(want), "target {target:?}");
        }
    }

    #[test]
    fn odd_differences_favour_the_right() {
        let x = Tensor::from_vec(&[4], vec![1i32, 2, 3, 4]).unwrap();
        // Crop 4 → 1: window starts at 1 (shifted left of centre).
        assert_eq!(
            run(&x, &[1], None).unwrap(),
            Tensor::from_vec(&[1], vec![2i32]).unwrap()
        );
        // Pad 4 → 7: one zero left, two right.
        assert_eq!(
            run(&x, &[7], None).unwrap(),
            Tensor::from_vec(&[7], vec![0i32, 1, 2, 3, 4, 0, 0]).unwrap()
        );
    }

    #[test]
    fn axes_subset_negative_axes_and_other_types() {
        let x = Tensor::from_vec(&[2, 3], vec![true, false, true, false, true, false]).unwrap();
        let y = run(&x, &[5], Some(&[-1])).unwrap();
        assert_eq!(y.shape(), &[2, 5]);
        assert_eq!(
            y,
            Tensor::from_vec(
                &[2, 5],
                vec![false, true, false, true, false, false, false, true, false, false]
            )
            .unwrap()
        );
        let s: Vec<String> = ["a", "b", "c"].iter().map(|v| v.to_string()).collect();
        let x = Tensor::from_vec(&[3], s).unwrap();
        let y = run(&x, &[4], None).unwrap();
        assert_eq!(
            y,
            Tensor::from_vec(
                &[4],
                vec!["a".to_string(), "b".into(), "c".into(), String::new()]
            )
            .unwrap()
        );
        // An empty input padded is all zeros; a scalar with no axes is kept.
        let e = Tensor::from_vec(&[0, 2], Vec::<f32>::new()).unwrap();
        assert_eq!(
            run(&e, &[3, 2], None).unwrap(),
            Tensor::from_vec(&[3, 2], vec![0.0f32; 6]).unwrap()
        );
        let sc = Tensor::scalar(4.0f32);
        assert_eq!(run(&sc, &[], None).unwrap(), sc);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_vec(&[2, 3], vec![0.0f32; 6]).unwrap();
        assert!(matches!(run(&x, &[2], None), Err(Error::Op { .. })));
        assert!(matches!(run(&x, &[2, -1], None), Err(Error::Op { .. })));
        assert!(matches!(run(&x, &[2], Some(&[2])), Err(Error::Op { .. })));
        assert!(matches!(
            run(&x, &[2, 2], Some(&[1, -1])),
            Err(Error::Op { .. })
        ));
        assert!(run(&x, &[i64::MAX, i64::MAX], None).is_err());
        // A float shape is refused.
        let op = build_op("CenterCropPad", 18, &[], &[], 2, 1).unwrap();
        let s = Tensor::from_vec(&[2], vec![1.0f32, 1.0]).unwrap();
        assert!(infer_and_run(op.as_ref(), &[Some(&x), Some(&s)]).is_err());
        assert!(infer_and_run(op.as_ref(), &[Some(&x), None]).is_err());
    }
}
