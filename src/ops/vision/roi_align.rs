//! RoiAlign (opsets 10 and 16): pools each region of interest of `X`
//! (`[N, C, H, W]`; `rois` `[R, 4]` as `[x1, y1, x2, y2]`, `batch_indices`
//! `[R]`) into `output_height × output_width` bins, averaging (or taking the
//! maximum of) a `sampling_ratio²` grid of bilinear samples per bin.
//! `coordinate_transformation_mode` (opset 16, default `half_pixel`) shifts
//! the region by half a pixel; opset 10 behaves as `output_half_pixel`. The
//! maximum mode takes the maximum of the weighted corner values, as ONNX's
//! reference and ONNX Runtime do.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::quant::{float_tensor, float_values};
use crate::ops::shape::{int_list, numel_of};
use crate::ops::util::{fact, input, out_len, par_rows};
use crate::tensor::{DType, Tensor};

const OP: &str = "RoiAlign";

/// The most samples per bin along one axis (a larger grid is rejected).
const MAX_GRID: i64 = 1 << 10;

#[derive(Debug)]
struct RoiAlign {
    max: bool,
    half_pixel: bool,
    out_h: usize,
    out_w: usize,
    sampling_ratio: i64,
    spatial_scale: f64,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let max = match a.string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(a.error("mode", format!("unsupported value {other:?}"))),
    };
    let half_pixel = if ctx.opset >= 16 {
        match a
            .string("coordinate_transformation_mode", "half_pixel")?
            .as_str()
        {
            "half_pixel" => true,
            "output_half_pixel" => false,
            other => {
                return Err(a.error(
                    "coordinate_transformation_mode",
                    format!("unsupported value {other:?}"),
                ))
            }
        }
    } else {
        false
    };
    let dim = |name: &str| -> Result<usize> {
        let v = a.int(name, 1)?;
        usize::try_from(v)
            .ok()
            .filter(|&d| d > 0)
            .ok_or_else(|| a.error(name, format!("must be positive, found {v}")))
    };
    let sampling_ratio = a.int("sampling_ratio", 0)?;
    if !(0..=MAX_GRID).contains(&sampling_ratio) {
        return Err(a.error(
            "sampling_ratio",
            format!("must be in [0, {MAX_GRID}], found {sampling_ratio}"),
        ));
    }
    Ok(Box::new(RoiAlign {
        max,
        half_pixel,
        out_h: dim("output_height")?,
        out_w: dim("output_width")?,
        sampling_ratio,
        spatial_scale: a.float("spatial_scale", 1.0)? as f64,
    }))
}

/// A region's origin, bin size and samples per bin along each axis.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    y1: f64,
    x1: f64,
    bh: f64,
    bw: f64,
    gh: usize,
    gw: usize,
}

/// One bilinear sample: four element offsets in a plane and their weights.
type Sample = ([usize; 4], [f64; 4]);

/// The bilinear sample at `(y, x)` of an `h × w` plane (zero outside).
fn bilinear(y: f64, x: f64, h: usize, w: usize) -> Sample {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 || h == 0 || w == 0 {
        return ([0; 4], [0.0; 4]);
    }
    let axis = |v: f64, d: usize| -> (usize, usize, f64) {
        let v = v.max(0.0);
        let lo = v as usize;
        if lo >= d - 1 {
            (d - 1, d - 1, 0.0)
        } else {
            (lo, lo + 1, v - lo as f64)
        }
    };
    let (y0, y1, ly) = axis(y, h);
    let (x0, x1, lx) = axis(x, w);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    (
        [y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1],
        [hy * hx, hy * lx, ly * hx, ly * lx],
    )
}

impl RoiAlign {
    fn check(&self, x: &[usize], rois: &[usize], idx: &[usize]) -> Result<Vec<usize>> {
        if x.len() != 4 {
            return Err(Error::op(
                OP,
                format!("X must have shape [N, C, H, W], found {x:?}"),
            ));
        }
        if rois.len() != 2 || rois[1] != 4 || idx.len() != 1 || idx[0] != rois[0] {
            return Err(Error::op(
                OP,
                format!(
                    "rois must have shape [R, 4] and batch_indices [R], found {rois:?} and {idx:?}"
                ),
            ));
        }
        let out = vec![rois[0], x[1], self.out_h, self.out_w];
        numel_of::<f64>(OP, &out)?;
        Ok(out)
    }

    /// Where one region lies and how densely its bins are sampled.
    fn geometry(&self, roi: &[f64]) -> Result<Geometry> {
        let offset = if self.half_pixel { 0.5 } else { 0.0 };
        let s = self.spatial_scale;
        let (x1, y1) = (roi[0] * s - offset, roi[1] * s - offset);
        let (mut rw, mut rh) = (roi[2] * s - offset - x1, roi[3] * s - offset - y1);
        if !self.half_pixel {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bh, bw) = (rh / self.out_h as f64, rw / self.out_w as f64);
        let grid = |extent: f64| -> Result<usize> {
            let g = if self.sampling_ratio > 0 {
                self.sampling_ratio
            } else {
                let c = extent.ceil();
                if c > MAX_GRID as f64 {
                    return Err(Error::op(
                        OP,
                        format!(
                            "a region needs {c} samples per bin and axis, more than {MAX_GRID}"
                        ),
                    ));
                }
                c as i64
            };
            Ok(g.max(0) as usize)
        };
        Ok(Geometry {
            y1,
            x1,
            bh,
            bw,
            gh: grid(bh)?,
            gw: grid(bw)?,
        })
    }

    /// The samples of bin `(ph, pw)` of a region in an `h × w` plane.
    fn bin_samples(
        &self,
        g: &Geometry,
        ph: usize,
        pw: usize,
        h: usize,
        w: usize,
        buf: &mut Vec<Sample>,
    ) {
        buf.clear();
        for iy in 0..g.gh {
            let y = g.y1 + ph as f64 * g.bh + (iy as f64 + 0.5) * g.bh / g.gh as f64;
            for ix in 0..g.gw {
                let x = g.x1 + pw as f64 * g.bw + (ix as f64 + 0.5) * g.bw / g.gw as f64;
                buf.push(bilinear(y, x, h, w));
            }
        }
    }

    fn pool(&self, plane: &[f64], samples: &[Sample]) -> f64 {
        if self.max {
            let vals = samples.iter().map(|(p, w)| {
                (0..4)
                    .map(|k| w[k] * plane[p[k]])
                    .fold(f64::NEG_INFINITY, f64::max)
            });
            vals.reduce(f64::max).unwrap_or(0.0)
        } else {
            let sum: f64 = samples
                .iter()
                .map(|(p, w)| (0..4).map(|k| w[k] * plane[p[k]]).sum::<f64>())
                .sum();
            sum / samples.len().max(1) as f64
        }
    }
}

impl Operator for RoiAlign {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let rois = fact(OP, inputs, 1)?;
        let idx = fact(OP, inputs, 2)?;
        if !x.dtype.is_float() || rois.dtype != x.dtype || idx.dtype != DType::I64 {
            return Err(Error::op(
                OP,
                format!(
                    "X and rois must share a floating-point type and batch_indices be int64, found {}, {} and {}",
                    x.dtype, rois.dtype, idx.dtype
                ),
            ));
        }
        Ok(vec![match (&x.shape, &rois.shape, &idx.shape) {
            (Some(xs), Some(rs), Some(is)) => Fact::new(x.dtype, self.check(xs, rs, is)?),
            _ => Fact::unknown_shape(x.dtype),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let per_bin = if self.sampling_ratio > 0 {
            (self.sampling_ratio * self.sampling_ratio) as u64
        } else {
            4
        };
        out_len(outputs, 0).saturating_mul(per_bin.saturating_mul(8))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let xt = input(OP, inputs, 0)?;
        let rt = input(OP, inputs, 1)?;
        let it = input(OP, inputs, 2)?;
        let shape = self.check(xt.shape(), rt.shape(), it.shape())?;
        let x = float_values(OP, xt)?;
        let rois = float_values(OP, rt)?;
        let (n, c, h, w) = (xt.shape()[0], xt.shape()[1], xt.shape()[2], xt.shape()[3]);
        let batch = int_list(OP, it, "batch_indices")?
            .into_iter()
            .map(|b| {
                usize::try_from(b).ok().filter(|&b| b < n).ok_or_else(|| {
                    Error::op(
                        OP,
                        format!("batch index {b} is out of range for {n} images"),
                    )
                })
            })
            .collect::<Result<Vec<usize>>>()?;
        let plane = h * w;
        let bins = self.out_h * self.out_w;
        let row = c * bins;
        let mut out = vec![0.0f64; shape.iter().product()];
        let geoms = (0..batch.len())
            .map(|r| self.geometry(&rois[r * 4..r * 4 + 4]))
            .collect::<Result<Vec<Geometry>>>()?;
        if row > 0 && plane > 0 {
            par_rows(&mut out, row, |first, chunk| {
                let mut buf = Vec::new();
                for (k, y) in chunk.chunks_mut(row).enumerate() {
                    let r = first + k;
                    for b in 0..bins {
                        self.bin_samples(&geoms[r], b / self.out_w, b % self.out_w, h, w, &mut buf);
                        for ch in 0..c {
                            let base = (batch[r] * c + ch) * plane;
                            y[ch * bins + b] = self.pool(&x[base..base + plane], &buf);
                        }
                    }
                }
            });
        }
        Ok(vec![float_tensor(OP, xt.dtype(), &shape, out)?])
    }
}
