//! Col2Im: rearranges column blocks `[N, C·∏block, L]` back into an image
//! `[N, C, *image_shape]`, summing overlapping contributions (the inverse
//! layout of im2col), with `dilations`, `pads` and `strides` per spatial axis.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::quant::float_tensor;
use crate::ops::util::{const_value, fact, input};
use crate::tensor::Tensor;

const OP: &str = "Col2Im";

#[derive(Debug)]
struct Col2Im {
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Col2Im {
        dilations: ctx.attrs.ints_opt("dilations")?,
        pads: ctx.attrs.ints_opt("pads")?,
        strides: ctx.attrs.ints_opt("strides")?,
    }))
}

/// The checked geometry of one call.
struct Geom {
    n: usize,
    c: usize,
    image: Vec<usize>,
    block: Vec<usize>,
    dil: Vec<usize>,
    pad: Vec<usize>,
    stride: Vec<usize>,
    /// Block positions per spatial axis.
    grid: Vec<usize>,
}

fn positive(name: &str, v: &[i64], zero_ok: bool) -> Result<Vec<usize>> {
    v.iter()
        .map(|&x| match usize::try_from(x) {
            Ok(u) if zero_ok || u > 0 => Ok(u),
            _ => Err(Error::op(OP, format!("{name} has invalid value {x}"))),
        })
        .collect()
}

impl Col2Im {
    fn geom(&self, x: &[usize], image: &[i64], block: &[i64]) -> Result<Geom> {
        let d = image.len();
        if d == 0 || block.len() != d {
            return Err(Error::op(
                OP,
                format!("image_shape {image:?} and block_shape {block:?} must be non-empty and of equal length"),
            ));
        }
        if x.len() != 3 {
            return Err(Error::op(
                OP,
                format!("input must be [N, C·∏block, L], has shape {x:?}"),
            ));
        }
        let image = positive("image_shape", image, false)?;
        let block = positive("block_shape", block, false)?;
        let ones = vec![1i64; d];
        let dil = positive(
            "dilations",
            self.dilations.as_deref().unwrap_or(&ones),
            false,
        )?;
        let stride = positive("strides", self.strides.as_deref().unwrap_or(&ones), false)?;
        let zeros = vec![0i64; 2 * d];
        let pad = positive("pads", self.pads.as_deref().unwrap_or(&zeros), true)?;
        if dil.len() != d || stride.len() != d || pad.len() != 2 * d {
            return Err(Error::op(
                OP,
                "dilations, strides and pads must match the spatial rank",
            ));
        }
        let mut grid = Vec::with_capacity(d);
        for i in 0..d {
            let span = dil[i]
                .checked_mul(block[i] - 1)
                .and_then(|s| s.checked_add(1))
                .ok_or_else(|| Error::op(OP, "block too large"))?;
            let padded = image[i] + pad[i] + pad[d + i];
            if padded < span {
                return Err(Error::op(
                    OP,
                    format!("block does not fit the padded image on axis {i}"),
                ));
            }
            grid.push((padded - span) / stride[i] + 1);
        }
        let kprod = crate::ops::gemm::checked_product(OP, &block)?;
        let l: usize = crate::ops::gemm::checked_product(OP, &grid)?;
        if !x[1].is_multiple_of(kprod) || x[2] != l {
            return Err(Error::op(
                OP,
                format!("input shape {x:?} does not match {kprod} block elements and {l} block positions"),
            ));
        }
        crate::ops::gemm::checked_product(
            OP,
            &[
                x[0],
                x[1] / kprod,
                crate::ops::gemm::checked_product(OP, &image)?,
            ],
        )?;
        Ok(Geom {
            n: x[0],
            c: x[1] / kprod,
            image,
            block,
            dil,
            pad,
            stride,
            grid,
        })
    }
}

/// Sums the column blocks into the image (f64).
fn col2im(g: &Geom, x: &[f64]) -> Vec<f64> {
    let d = g.image.len();
    let k: usize = g.block.iter().product();
    let l: usize = g.grid.iter().product();
    let img: usize = g.image.iter().product();
    let mut out = vec![0.0; g.n * g.c * img];
    let mut kidx = vec![0usize; d];
    let mut lidx = vec![0usize; d];
    for nc in 0..g.n * g.c {
        let src = &x[nc * k * l..(nc + 1) * k * l];
        let dst = &mut out[nc * img..(nc + 1) * img];
        for ki in 0..k {
            unravel(ki, &g.block, &mut kidx);
            for li in 0..l {
                unravel(li, &g.grid, &mut lidx);
                let mut at = 0usize;
                let mut inside = true;
                for i in 0..d {
                    let p =
                        (lidx[i] * g.stride[i] + kidx[i] * g.dil[i]) as isize - g.pad[i] as isize;
                    if p < 0 || p as usize >= g.image[i] {
                        inside = false;
                        break;
                    }
                    at = at * g.image[i] + p as usize;
                }
                if inside {
                    dst[at] += src[ki * l + li];
                }
            }
        }
    }
    out
}

/// The multi-index of flat index `i` in `dims` (row-major).
fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for (o, &d) in out.iter_mut().zip(dims).rev() {
        *o = i % d;
        i /= d;
    }
}

fn ints(t: &Tensor) -> Result<Vec<i64>> {
    if t.shape().len() != 1 {
        return Err(Error::op(
            OP,
            format!("image_shape and block_shape must be 1-D, found {t}"),
        ));
    }
    t.to_i64_vec()
}

impl Operator for Col2Im {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        if !x.dtype.is_float() {
            return Err(Error::op(
                OP,
                format!("expected a float input, found {}", x.dtype),
            ));
        }
        fact(OP, inputs, 1)?;
        fact(OP, inputs, 2)?;
        if let (Some(s), Some(im), Some(bl)) =
            (&x.shape, const_value(inputs, 1), const_value(inputs, 2))
        {
            let g = self.geom(s, &ints(im)?, &ints(bl)?)?;
            let mut shape = vec![g.n, g.c];
            shape.extend(&g.image);
            return Ok(vec![Fact::new(x.dtype, shape)]);
        }
        Ok(vec![Fact::unknown_shape(x.dtype)])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        if !x.dtype().is_float() {
            return Err(Error::op(
                OP,
                format!("expected a float input, found {}", x.dtype()),
            ));
        }
        let g = self.geom(
            x.shape(),
            &ints(input(OP, inputs, 1)?)?,
            &ints(input(OP, inputs, 2)?)?,
        )?;
        let out = col2im(&g, &x.to_f64_vec()?);
        let mut shape = vec![g.n, g.c];
        shape.extend(&g.image);
        Ok(vec![float_tensor(OP, x.dtype(), &shape, out)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::{ints, run};
    use crate::tensor::Tensor;

    fn shape(v: &[i64]) -> Tensor {
        Tensor::from_vec(&[v.len()], v.to_vec()).unwrap()
    }

    #[test]
    fn spec_example_non_overlapping_blocks() {
        // ONNX example: [1, 5, 5] columns of 1×5 blocks into a 5×5 image.
        let x =
            Tensor::from_vec(&[1, 5, 5], (1..=25).map(|v| v as f32).collect::<Vec<_>>()).unwrap();
        let y = run(
            "Col2Im",
            18,
            &[],
            &[Some(&x), Some(&shape(&[5, 5])), Some(&shape(&[1, 5]))],
        )
        .unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 5, 5]);
        let want: Vec<f64> = (0..25).map(|i| (1 + (i % 5) * 5 + i / 5) as f64).collect();
        assert_eq!(y[0].to_f64_vec().unwrap(), want);
    }

    #[test]
    fn overlapping_blocks_sum_with_padding() {
        // 1-D-like: image 1×4, block 1×2, stride 1, pads 1 on the width: 5 positions.
        let x = Tensor::from_vec(
            &[1, 2, 5],
            vec![1f32, 2., 3., 4., 5., 10., 20., 30., 40., 50.],
        )
        .unwrap();
        let attrs = [("pads", ints(&[0, 1, 0, 1]))];
        let y = run(
            "Col2Im",
            18,
            &attrs,
            &[Some(&x), Some(&shape(&[1, 4])), Some(&shape(&[1, 2]))],
        )
        .unwrap();
        // Pixel p gets block element 0 from position p+1 and element 1 from position p.
        assert_eq!(
            y[0].to_f64_vec().unwrap(),
            [2. + 10., 3. + 20., 4. + 30., 5. + 40.]
        );
        let bad = Tensor::from_vec(&[1, 2, 4], vec![0f32; 8]).unwrap();
        let e = run(
            "Col2Im",
            18,
            &attrs,
            &[Some(&bad), Some(&shape(&[1, 4])), Some(&shape(&[1, 2]))],
        );
        assert!(e.unwrap_err().to_string().contains("block positions"));
    }
}
