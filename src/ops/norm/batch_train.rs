//! `BatchNormalization` with `training_mode=1` (opsets 14 and 15): X is
//! normalized with the statistics of the batch itself, per channel over
//! every axis but axis 1 (the population variance, as `ReduceVar`),
//!
//! ```text
//! current_mean = ReduceMean(X, all but axis 1)
//! current_var  = ReduceVar(X, all but axis 1)
//! Y = (X − current_mean) / sqrt(current_var + ε) · scale + B
//! running_mean = input_mean · momentum + current_mean · (1 − momentum)
//! running_var  = input_var  · momentum + current_var  · (1 − momentum)
//! ```
//!
//! with the optional outputs `running_mean` and `running_var` (of
//! input_mean's type). This is deterministic: nothing is sampled. Statistics
//! are accumulated in f64 in a fixed order (two passes: mean, then the
//! squared deviations), one channel per task, and every value is rounded
//! once to its output type.

use super::{check_float, epsilon, param};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, FusionKind, InferInput, OpClass, Operator};
use crate::ops::gemm::fused::Activation;
use crate::ops::parallel::{par_chunks, par_collect};
use crate::ops::quant::float_tensor;
use crate::ops::util::{fact, input, out_len, takes_weighted_activation};
use crate::tensor::Tensor;

const OP: &str = "BatchNormalization";

/// A BatchNormalization node in training mode.
#[derive(Debug)]
struct BatchNormTrain {
    eps: f64,
    momentum: f64,
    outputs: usize,
    /// An activation a load-time fusion attached (applied to Y).
    act: Option<Activation>,
}

/// Builds the training-mode operator (the caller checked `training_mode`).
pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    if ctx.opset < 14 {
        return Err(a.error(
            "training_mode",
            format!(
                "exists from opset 14 on; the model imports opset {}",
                ctx.opset
            ),
        ));
    }
    if ctx.num_outputs > 3 {
        return Err(Error::op(
            OP,
            format!(
                "has {} outputs; training mode has at most 3 (Y, running_mean, running_var)",
                ctx.num_outputs
            ),
        ));
    }
    let momentum = a.float("momentum", 0.9)?;
    if !momentum.is_finite() {
        return Err(a.error("momentum", format!("must be finite, found {momentum}")));
    }
    Ok(Box::new(BatchNormTrain {
        eps: epsilon(a, 1e-5)?,
        momentum: momentum as f64,
        outputs: ctx.num_outputs.max(1),
        act: ctx.fusion.activation,
    }))
}

/// Channels, and elements per channel of one sample (the spatial size).
fn layout(x: &[usize]) -> Result<(usize, usize)> {
    if x.len() < 2 {
        return Err(Error::op(
            OP,
            format!("X must have rank ≥ 2 (N, C, spatial...), found shape {x:?}"),
        ));
    }
    Ok((x[1], x[2..].iter().product()))
}

/// The per-channel mean and population variance of row-major `x` of
/// `n` samples × `c` channels × `s` positions.
fn batch_stats(x: &[f64], n: usize, c: usize, s: usize) -> (Vec<f64>, Vec<f64>) {
    par_collect(c, 1, |ch| {
        let count = (n * s) as f64;
        let planes = || (0..n).map(move |b| &x[(b * c + ch) * s..(b * c + ch + 1) * s]);
        let mean = planes().flatten().sum::<f64>() / count;
        let var = planes()
            .flatten()
            .map(|v| (v - mean) * (v - mean))
            .sum::<f64>()
            / count;
        (mean, var)
    })
    .into_iter()
    .unzip()
}

impl Operator for BatchNormTrain {
    /// An activation, with a float32 constant scale.
    fn accepts_fusion(&self, kind: FusionKind, inputs: &[InferInput]) -> bool {
        takes_weighted_activation(kind, self.act, inputs)
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Window
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        check_float(OP, x)?;
        let mut params = Vec::new();
        for i in 1..5 {
            let p = fact(OP, inputs, i)?;
            check_float(OP, p)?;
            params.push(p);
        }
        if let Some(s) = &x.shape {
            let (c, _) = layout(s)?;
            for p in &params {
                if let Some(len) = p.len() {
                    if len != c {
                        return Err(Error::op(
                            OP,
                            format!("X {s:?} has {c} channels but a parameter has {len} elements"),
                        ));
                    }
                }
            }
        }
        let mut out = vec![x.clone()];
        // running_mean has input_mean's type, running_var input_var's.
        out.extend(params[2..].iter().map(|p| (*p).clone()));
        out.truncate(self.outputs);
        Ok(out)
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        // Mean, deviations, normalization: about 6 operations per element.
        out_len(outputs, 0).saturating_mul(6).max(1)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        if !x.dtype().is_float() {
            return Err(Error::op(
                OP,
                format!("expected a floating-point input, found {}", x.dtype()),
            ));
        }
        let shape = x.shape().to_vec();
        let (c, s) = layout(&shape)?;
        let names = ["scale", "B", "input_mean", "input_var"];
        let mut p = Vec::with_capacity(4);
        for (i, name) in names.iter().enumerate() {
            let v = param(OP, name, input(OP, inputs, i + 1)?)?;
            if v.len() != c {
                return Err(Error::op(
                    OP,
                    format!(
                        "X {shape:?} has {c} channels but {name} has {} elements",
                        v.len()
                    ),
                ));
            }
            p.push(v);
        }
        let n = shape[0];
        let xv = x.to_f64_vec()?;
        let (mean, var) = batch_stats(&xv, n, c, s);
        let a: Vec<f64> = (0..c)
            .map(|i| p[0][i] / (var[i] + self.eps).sqrt())
            .collect();
        let mut y = xv;
        if s > 0 {
            par_chunks(&mut y, s, |row, plane| {
                let ch = row % c;
                for v in plane.iter_mut() {
                    *v = (*v - mean[ch]) * a[ch] + p[1][ch];
                }
                if let Some(act) = self.act {
                    act.eval_all(plane);
                }
            });
        }
        let mut out = vec![float_tensor(OP, x.dtype(), &shape, y)?];
        let m = self.momentum;
        for (k, (running, current)) in [(&p[2], &mean), (&p[3], &var)].into_iter().enumerate() {
            if out.len() == self.outputs {
                break;
            }
            let v = running
                .iter()
                .zip(current)
                .map(|(r, cur)| r * m + cur * (1.0 - m))
                .collect();
            let like = input(OP, inputs, 3 + k)?.dtype();
            out.push(float_tensor(OP, like, &[c], v)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::attributes::Attribute;
    use crate::ir::{Activation, Fusion};
    use crate::ops::testutil::{activation, build_fused, float, infer_and_run, int, rand_vec};
    use crate::tensor::Tensor;

    fn run(
        x: &Tensor,
        params: [&Tensor; 4],
        attrs: &[(&str, Attribute)],
        outputs: usize,
        opset: i64,
    ) -> crate::error::Result<Vec<Tensor>> {
        run_fused(x, params, attrs, &Fusion::NONE, outputs, opset)
    }

    fn run_fused(
        x: &Tensor,
        params: [&Tensor; 4],
        attrs: &[(&str, Attribute)],
        fusion: &Fusion,
        outputs: usize,
        opset: i64,
    ) -> crate::error::Result<Vec<Tensor>> {
        let mut a = vec![("training_mode", int(1))];
        a.extend(attrs.iter().cloned());
        let op = build_fused("BatchNormalization", opset, &a, fusion, &[], 5, outputs)?;
        let mut ins = vec![Some(x)];
        ins.extend(params.iter().map(|t| Some(*t)));
        infer_and_run(op.as_ref(), &ins)
    }

    fn v(t: &Tensor) -> Vec<f64> {
        t.to_f64_vec().unwrap()
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= 1e-5 + 1e-5 * y.abs(), "{i}: {x} vs {y}");
        }
    }

    #[test]
    fn batch_statistics_against_naive() {
        let (n, c, h, w) = (3, 4, 2, 5);
        let xs: Vec<f32> = rand_vec(n * c * h * w, 3)
            .iter()
            .map(|v| v * 4.0 + 1.0)
            .collect();
        let x = Tensor::from_vec(&[n, c, h, w], xs.clone()).unwrap();
        let p = |seed| Tensor::from_vec(&[c], rand_vec(c, seed)).unwrap();
        let var_in = Tensor::from_vec(&[c], vec![0.5f32, 1.0, 2.0, 3.0]).unwrap();
        let (scale, bias, mean_in) = (p(5), p(6), p(7));
        let (eps, mom) = (0.01f64, 0.8f64);
        let out = run(
            &x,
            [&scale, &bias, &mean_in, &var_in],
            &[
                ("epsilon", float(eps as f32)),
                ("momentum", float(mom as f32)),
            ],
            3,
            15,
        )
        .unwrap();
        assert_eq!(out.len(), 3);
        let (mut want_y, mut want_m, mut want_v) = (vec![0.0; xs.len()], vec![], vec![]);
        let eps = eps as f32 as f64;
        let mom = mom as f32 as f64;
        for ch in 0..c {
            let vals: Vec<(usize, f64)> = (0..xs.len())
                .filter(|i| (i / (h * w)) % c == ch)
                .map(|i| (i, xs[i] as f64))
                .collect();
            let cnt = vals.len() as f64;
            let mean = vals.iter().map(|p| p.1).sum::<f64>() / cnt;
            let var = vals.iter().map(|p| (p.1 - mean).powi(2)).sum::<f64>() / cnt;
            for &(i, xv) in &vals {
                want_y[i] = (xv - mean) / (var + eps).sqrt() * v(&scale)[ch] + v(&bias)[ch];
            }
            want_m.push(v(&mean_in)[ch] * mom + mean * (1.0 - mom));
            want_v.push(v(&var_in)[ch] * mom + var * (1.0 - mom));
        }
        close(&v(&out[0]), &want_y);
        close(&v(&out[1]), &want_m);
        close(&v(&out[2]), &want_v);
        // A fused activation applies to Y.
        let relu = run_fused(
            &x,
            [&scale, &bias, &mean_in, &var_in],
            &[("epsilon", float(0.01)), ("momentum", float(0.8))],
            &activation(Activation::Relu),
            1,
            15,
        )
        .unwrap();
        let want_relu: Vec<f64> = want_y.iter().map(|v| v.max(0.0)).collect();
        close(&v(&relu[0]), &want_relu);
        // With one output only Y; a 2-D X (no spatial axes) works too.
        let y1 = run(&x, [&scale, &bias, &mean_in, &var_in], &[], 1, 14).unwrap();
        assert_eq!(y1.len(), 1);
        let x2 =
            Tensor::from_vec(&[2, 4], vec![1.0f32, 2.0, 3.0, 4.0, 3.0, 4.0, 1.0, 2.0]).unwrap();
        let y2 = run(
            &x2,
            [&scale, &bias, &mean_in, &var_in],
            &[("epsilon", float(0.0))],
            3,
            15,
        )
        .unwrap();
        // Each channel holds {a, b}: normalized to ∓1.
        let s = v(&scale);
        let b = v(&bias);
        let want: Vec<f64> = (0..8)
            .map(|i| {
                let sign = if i < 4 { -1.0 } else { 1.0 };
                let sign = if i % 4 >= 2 { -sign } else { sign };
                sign * s[i % 4] + b[i % 4]
            })
            .collect();
        close(&v(&y2[0]), &want);
    }

    #[test]
    fn mixed_parameter_types_keep_their_own_types() {
        let x = Tensor::from_vec(&[2, 1, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let one = Tensor::from_vec(&[1], vec![1.0f64]).unwrap();
        let zero = Tensor::from_vec(&[1], vec![half::f16::ZERO]).unwrap();
        let out = run(&x, [&one, &one, &zero, &zero], &[], 3, 15).unwrap();
        assert_eq!(out[0].dtype(), crate::tensor::DType::F32);
        assert_eq!(out[1].dtype(), crate::tensor::DType::F16);
        // mean 2.5, var 1.25; running = 0·0.9 + stat·0.1.
        close(&v(&out[1]), &[0.25]);
        close(&v(&out[2]), &[0.125]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_vec(&[2, 2], vec![1.0f32; 4]).unwrap();
        let p2 = Tensor::from_vec(&[2], vec![1.0f32; 2]).unwrap();
        let p3 = Tensor::from_vec(&[3], vec![1.0f32; 3]).unwrap();
        assert!(run(&x, [&p2, &p2, &p2, &p3], &[], 3, 15).is_err());
        let x1 = Tensor::from_vec(&[2], vec![1.0f32; 2]).unwrap();
        assert!(run(&x1, [&p2, &p2, &p2, &p2], &[], 3, 15).is_err());
        let xi = Tensor::from_vec(&[2, 2], vec![1i32; 4]).unwrap();
        assert!(run(&xi, [&p2, &p2, &p2, &p2], &[], 3, 15).is_err());
        assert!(run(&x, [&p2, &p2, &p2, &p2], &[], 4, 15).is_err());
        assert!(run(
            &x,
            [&p2, &p2, &p2, &p2],
            &[("momentum", float(f32::NAN))],
            3,
            15
        )
        .is_err());
        // training_mode does not exist before opset 14.
        assert!(run(&x, [&p2, &p2, &p2, &p2], &[], 1, 9).is_err());
    }
}
