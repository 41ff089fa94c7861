//! NonMaxSuppression (opsets 10 and 11): per batch and class, greedily keeps
//! the highest-scoring boxes (scores above `score_threshold`), dropping every
//! box whose intersection over union with a kept box exceeds `iou_threshold`,
//! up to `max_output_boxes_per_class`. Boxes are corners `[y1, x1, y2, x2]`
//! (in any order) or, with `center_point_box`, `[x_center, y_center, width,
//! height]`. The output `[k, 3]` (batch, class, box; int64) depends on the
//! data, so its shape is known before running only for constant inputs.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::quant::float_values;
use crate::ops::shape::make;
use crate::ops::util::{fact, input, opt_input};
use crate::tensor::{DType, Tensor};

const OP: &str = "NonMaxSuppression";

#[derive(Debug)]
struct Nms {
    center_point_box: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let c = ctx.attrs.int("center_point_box", 0)?;
    if !(c == 0 || c == 1) {
        return Err(ctx.attrs.error("center_point_box", "must be 0 or 1"));
    }
    Ok(Box::new(Nms {
        center_point_box: c == 1,
    }))
}

/// A box as `(y_min, x_min, y_max, x_max)`.
type Corners = [f64; 4];

fn corners(b: &[f64], center: bool) -> Corners {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        [b[1] - hh, b[0] - hw, b[1] + hh, b[0] + hw]
    } else {
        [
            b[0].min(b[2]),
            b[1].min(b[3]),
            b[0].max(b[2]),
            b[1].max(b[3]),
        ]
    }
}

/// Whether `a` and `b` overlap by more than `threshold` (intersection over union).
fn suppresses(a: &Corners, b: &Corners, threshold: f64) -> bool {
    let ih = a[2].min(b[2]) - a[0].max(b[0]);
    let iw = a[3].min(b[3]) - a[1].max(b[1]);
    if ih <= 0.0 || iw <= 0.0 {
        return false;
    }
    let inter = ih * iw;
    let area_a = (a[2] - a[0]) * (a[3] - a[1]);
    let area_b = (b[2] - b[0]) * (b[3] - b[1]);
    let union = area_a + area_b - inter;
    if area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

/// The single value of an optional scalar input, `None` when absent or empty.
fn scalar(t: Option<&Tensor>, what: &str) -> Result<Option<f64>> {
    let Some(t) = t else { return Ok(None) };
    if t.len() > 1 {
        return Err(Error::op(
            OP,
            format!("{what} must hold one value, found shape {:?}", t.shape()),
        ));
    }
    Ok(t.to_f64_vec()?.first().copied())
}

impl Nms {
    fn check(&self, boxes: &[usize], scores: &[usize]) -> Result<(usize, usize, usize)> {
        if boxes.len() != 3 || boxes[2] != 4 {
            return Err(Error::op(
                OP,
                format!("boxes must have shape [batch, boxes, 4], found {boxes:?}"),
            ));
        }
        if scores.len() != 3 || scores[0] != boxes[0] || scores[2] != boxes[1] {
            return Err(Error::op(
                OP,
                format!(
                    "scores of shape {scores:?} do not match boxes of shape {boxes:?}: expected [{}, classes, {}]",
                    boxes[0], boxes[1]
                ),
            ));
        }
        Ok((boxes[0], scores[1], boxes[1]))
    }

    fn select(&self, inputs: &[Option<&Tensor>]) -> Result<Tensor> {
        let bt = input(OP, inputs, 0)?;
        let st = input(OP, inputs, 1)?;
        let (batches, classes, n) = self.check(bt.shape(), st.shape())?;
        let boxes = float_values(OP, bt)?;
        let scores = float_values(OP, st)?;
        let max_out = match opt_input(inputs, 2) {
            Some(t) if !matches!(t.dtype(), DType::I64 | DType::I32) => {
                return Err(Error::op(
                    OP,
                    format!(
                        "max_output_boxes_per_class must be int64, found {}",
                        t.dtype()
                    ),
                ))
            }
            t => scalar(t, "max_output_boxes_per_class")?
                .unwrap_or(0.0)
                .max(0.0) as usize,
        };
        let iou = scalar(opt_input(inputs, 3), "iou_threshold")?.unwrap_or(0.0);
        let min_score = scalar(opt_input(inputs, 4), "score_threshold")?;
        let mut out: Vec<i64> = Vec::new();
        let mut order: Vec<usize> = Vec::with_capacity(n);
        let mut kept: Vec<Corners> = Vec::new();
        for b in 0..batches {
            let bx: Vec<Corners> = (0..n)
                .map(|i| {
                    corners(
                        &boxes[(b * n + i) * 4..(b * n + i + 1) * 4],
                        self.center_point_box,
                    )
                })
                .collect();
            for c in 0..classes {
                let sc = &scores[(b * classes + c) * n..(b * classes + c + 1) * n];
                order.clear();
                order.extend((0..n).filter(|&i| min_score.is_none_or(|m| sc[i] > m)));
                // Highest score first; equal scores keep the lower index first.
                crate::order::sort_indices(&mut order, &|i, j| {
                    sc[j].total_cmp(&sc[i]).then(i.cmp(&j))
                });
                kept.clear();
                for &i in &order {
                    if kept.len() >= max_out {
                        break;
                    }
                    if kept.iter().all(|k| !suppresses(&bx[i], k, iou)) {
                        kept.push(bx[i]);
                        out.extend([b as i64, c as i64, i as i64]);
                    }
                }
            }
        }
        make(OP, &[out.len() / 3, 3], out)
    }
}

impl Operator for Nms {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let b = fact(OP, inputs, 0)?;
        let s = fact(OP, inputs, 1)?;
        if !b.dtype.is_float() || !s.dtype.is_float() {
            return Err(Error::op(
                OP,
                format!(
                    "boxes and scores must be floating point, found {} and {}",
                    b.dtype, s.dtype
                ),
            ));
        }
        if let (Some(bs), Some(ss)) = (&b.shape, &s.shape) {
            self.check(bs, ss)?;
        }
        let values: Vec<Option<&Tensor>> = inputs.iter().map(|i| i.value).collect();
        let all_known = inputs
            .iter()
            .zip(&values)
            .all(|(i, v)| i.fact.is_none() || v.is_some());
        Ok(vec![if all_known {
            Fact::of(&self.select(&values)?)
        } else {
            Fact::unknown_shape(DType::I64)
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        // Sorting the scores, then comparing each box with the kept ones.
        let s = inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|f| f.len())
            .unwrap_or(0) as u64;
        let n = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.shape.as_ref())
            .and_then(|s| s.get(1).copied())
            .unwrap_or(1) as u64;
        s.saturating_mul(16 + 2 * (64 - n.leading_zeros() as u64))
            .max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![self.select(inputs)?])
    }
}
