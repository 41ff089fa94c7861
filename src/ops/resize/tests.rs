//! Resize / Upsample tests: hand-computed cases from the ONNX operator
//! documentation, and a naive reference that follows the ONNX reference
//! algorithm (one axis at a time, neighbours from an edge-padded line,
//! coefficient ratio in (0, 1]) compared over many attribute combinations.

#![allow(clippy::cloned_ref_to_slice_refs)]

use crate::ir::attributes::Attribute;
use crate::ops::shape::test_util::*;
use crate::tensor::Tensor;
use half::f16;

fn resize(
    attrs: &[(&str, Attribute)],
    x: &Tensor,
    roi: Option<&[f32]>,
    scales: Option<&[f32]>,
    sizes: Option<&[i64]>,
    opset: i64,
) -> crate::Result<Tensor> {
    let ins = vec![
        Some(x.clone()),
        roi.map(f32s),
        scales.map(f32s),
        sizes.map(i64s),
    ];
    Ok(run("Resize", opset, attrs, &ins)?.remove(0))
}

fn x22() -> Tensor {
    t(&[1, 1, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0])
}

#[test]
fn upsample_nearest_half_pixel() {
    let y = resize(&[], &x22(), None, Some(&[1.0, 1.0, 2.0, 3.0]), None, 13).unwrap();
    let want = [
        1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4,
    ];
    assert_eq!(
        y,
        t(&[1, 1, 4, 6], want.iter().map(|&v| v as f32).collect())
    );
}

#[test]
fn linear_examples() {
    let lin = [("mode", s("linear"))];
    let y = resize(&lin, &x22(), None, Some(&[1.0, 1.0, 2.0, 2.0]), None, 13).unwrap();
    let want = [
        1.0f32, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0,
    ];
    assert_eq!(y, t(&[1, 1, 4, 4], want.to_vec()));
    let ac = [
        ("mode", s("linear")),
        ("coordinate_transformation_mode", s("align_corners")),
    ];
    let y = resize(
        &ac,
        &x22(),
        Some(&[]),
        Some(&[1.0, 1.0, 2.0, 2.0]),
        None,
        11,
    )
    .unwrap();
    let third = 1.0f64 / 3.0;
    let want: Vec<f64> = (0..16)
        .map(|p| {
            let (i, j) = ((p / 4) as f64 * third, (p % 4) as f64 * third);
            1.0 + 2.0 * i + j
        })
        .collect();
    assert_close(
        &y,
        &t(&[1, 1, 4, 4], want.iter().map(|&v| v as f32).collect()),
        1e-6,
    );
    // Downsampling by 0.6.
    let x = t(
        &[1, 1, 2, 4],
        vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
    );
    let y = resize(&lin, &x, None, Some(&[1.0, 1.0, 0.6, 0.6]), None, 13).unwrap();
    assert_close(&y, &t(&[1, 1, 1, 2], vec![2.6666667f32, 4.3333335]), 1e-6);
    // align_corners divides by scale · length (2.4), not the output length 2,
    // as ONNX's reference and its test_resize_downsample_scales_linear_align_corners.
    let y = resize(&ac, &x, None, Some(&[1.0, 1.0, 0.6, 0.6]), None, 13).unwrap();
    assert_close(&y, &t(&[1, 1, 1, 2], vec![1.0f32, 3.142857]), 1e-6);
}

#[test]
fn tf_crop_and_resize() {
    let x = t(
        &[1, 1, 4, 4],
        (1..=16).map(|v| v as f32).collect::<Vec<_>>(),
    );
    let attrs = [
        ("mode", s("linear")),
        ("coordinate_transformation_mode", s("tf_crop_and_resize")),
    ];
    let y = resize(
        &attrs,
        &x,
        Some(&[0.0, 0.0, 0.4, 0.6, 1.0, 1.0, 0.6, 0.8]),
        None,
        Some(&[1, 1, 3, 3]),
        13,
    )
    .unwrap();
    // Bilinear interpolation of a linear function is exact: 4y + x + 1.
    let want: Vec<f32> = (0..9)
        .map(|p| {
            let (yy, xx) = (1.2 + 0.3 * (p / 3) as f64, 1.8 + 0.3 * (p % 3) as f64);
            (4.0 * yy + xx + 1.0) as f32
        })
        .collect();
    assert_close(&y, &t(&[1, 1, 3, 3], want), 1e-5);
    let mut attrs = attrs.to_vec();
    attrs.push(("extrapolation_value", Attribute::Float(10.0)));
    let y = resize(
        &attrs,
        &x,
        Some(&[0.0, 0.0, 0.4, 0.6, 1.0, 1.0, 1.2, 1.7]),
        None,
        Some(&[1, 1, 3, 3]),
        13,
    )
    .unwrap();
    assert_close(
        &y,
        &t(
            &[1, 1, 3, 3],
            vec![7.6f32, 10.0, 10.0, 12.4, 10.0, 10.0, 10.0, 10.0, 10.0],
        ),
        1e-5,
    );
    // Nearest mode extrapolates too; opset 18 roi follows the axes.
    let near = [
        ("coordinate_transformation_mode", s("tf_crop_and_resize")),
        ("extrapolation_value", Attribute::Float(-1.0)),
        ("axes", ints(&[3])),
    ];
    let y = resize(&near, &x, Some(&[0.5, 1.5]), None, Some(&[3]), 18).unwrap();
    assert_eq!(y.shape(), &[1, 1, 4, 3]);
    let row: Vec<f64> = y.to_f64_vec().unwrap()[..3].to_vec();
    // x = 1.5, 3.0, 4.5 -> pixel 1 (round half to floor), 3, outside.
    assert_eq!(row, vec![2.0, 4.0, -1.0]);
}

#[test]
fn sizes_axes_and_aspect_ratio() {
    let x = x22();
    let y = resize(&[], &x, None, None, Some(&[7, 8]), 19).unwrap_err();
    assert!(y.to_string().contains("sizes"), "{y}");
    let axes = ("axes", ints(&[2, -1]));
    let y = resize(&[axes.clone()], &x, None, None, Some(&[7, 8]), 19).unwrap();
    assert_eq!(y.shape(), &[1, 1, 7, 8]);
    let y = resize(
        &[axes.clone(), ("keep_aspect_ratio_policy", s("not_larger"))],
        &x,
        None,
        None,
        Some(&[7, 8]),
        18,
    )
    .unwrap();
    assert_eq!(y.shape(), &[1, 1, 7, 7]);
    let y = resize(
        &[axes.clone(), ("keep_aspect_ratio_policy", s("not_smaller"))],
        &x,
        None,
        None,
        Some(&[7, 8]),
        18,
    )
    .unwrap();
    assert_eq!(y.shape(), &[1, 1, 8, 8]);
    // Spec example: not_larger to 7x8 over a 2x2 image gives scale 3.5.
    let y = resize(
        &[axes.clone(), ("keep_aspect_ratio_policy", s("not_larger"))],
        &x,
        None,
        None,
        Some(&[7, 8]),
        18,
    )
    .unwrap();
    let first: Vec<f64> = y.to_f64_vec().unwrap()[..7].to_vec();
    assert_eq!(first, vec![1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    // Scales with axes.
    let y = resize(&[("axes", ints(&[3]))], &x, None, Some(&[2.0]), None, 18).unwrap();
    assert_eq!(
        y,
        t(
            &[1, 1, 2, 4],
            vec![1.0f32, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]
        )
    );
}

#[test]
fn opset10_upsample_and_types() {
    // Resize-10 / Upsample: asymmetric, nearest truncates when upsampling...
    let x = t(&[1, 3], vec![1u8, 2, 3]);
    let ins = vec![Some(x.clone()), Some(f32s(&[1.0, 2.0]))];
    let y = run("Resize", 10, &[], &ins).unwrap().remove(0);
    assert_eq!(y, t(&[1, 6], vec![1u8, 1, 2, 2, 3, 3]));
    let y = run("Upsample", 9, &[], &ins).unwrap().remove(0);
    assert_eq!(y, t(&[1, 6], vec![1u8, 1, 2, 2, 3, 3]));
    let y = run1(
        "Upsample",
        7,
        &[("scales", Attribute::Floats(vec![1.0, 2.0]))],
        &[x.clone()],
    );
    assert_eq!(y, t(&[1, 6], vec![1u8, 1, 2, 2, 3, 3]));
    // ...and rounds up when downsampling.
    let x6 = t(&[6], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = run("Resize", 10, &[], &[Some(x6), Some(f32s(&[0.5]))])
        .unwrap()
        .remove(0);
    // x = 0, 2, 4 -> ceil -> 0, 2, 4
    assert_eq!(y, t(&[3], vec![1.0f32, 3.0, 5.0]));
    let x5 = t(&[5], vec![1.0f32, 2.0, 3.0, 4.0, 5.0]);
    let y = run("Resize", 10, &[], &[Some(x5), Some(f32s(&[0.4]))])
        .unwrap()
        .remove(0);
    // x = 0, 2.5 -> 0, 3
    assert_eq!(y, t(&[2], vec![1.0f32, 4.0]));
    // Linear Upsample (asymmetric).
    let y = run1(
        "Upsample",
        7,
        &[
            ("mode", s("linear")),
            ("scales", Attribute::Floats(vec![1.0, 2.0])),
        ],
        &[t(&[1, 2], vec![1.0f32, 3.0])],
    );
    assert_eq!(y, t(&[1, 4], vec![1.0f32, 2.0, 3.0, 3.0]));
    // Strings and bools move through nearest mode.
    let st = t(&[2], vec!["a".to_string(), "b".to_string()]);
    let y = run1(
        "Upsample",
        7,
        &[("scales", Attribute::Floats(vec![2.0]))],
        &[st],
    );
    assert_eq!(y, t(&[4], ["a", "a", "b", "b"].map(String::from).to_vec()));
    // f16 linear.
    let h = t(&[2], vec![f16::from_f32(0.0), f16::from_f32(1.0)]);
    let y = resize(&[("mode", s("linear"))], &h, None, Some(&[2.0]), None, 13).unwrap();
    assert_eq!(
        y,
        t(&[4], [0.0f32, 0.25, 0.75, 1.0].map(f16::from_f32).to_vec())
    );
    // Integers truncate after interpolation.
    let y = resize(
        &[("mode", s("linear"))],
        &t(&[2], vec![0i32, 3]),
        None,
        Some(&[2.0]),
        None,
        13,
    )
    .unwrap();
    assert_eq!(y, t(&[4], vec![0i32, 0, 2, 3]));
}

#[test]
fn resize_errors() {
    let x = x22();
    let e = resize(&[], &x, None, Some(&[1.0, 1.0, 2.0]), None, 13).unwrap_err();
    assert!(e.to_string().contains("3 scales for 4 axes"), "{e}");
    let e = resize(
        &[],
        &x,
        None,
        Some(&[1.0, 1.0, 2.0, 2.0]),
        Some(&[1, 1, 4, 4]),
        13,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not both"), "{e}");
    let e = resize(&[], &x, None, None, None, 13).unwrap_err();
    assert!(e.to_string().contains("required"), "{e}");
    let e = resize(&[], &x, None, Some(&[1.0, 1.0, 0.0, 2.0]), None, 13).unwrap_err();
    assert!(e.to_string().contains("invalid scale"), "{e}");
    let e = resize(&[], &x, None, None, Some(&[1, 1, -4, 4]), 13).unwrap_err();
    assert!(e.to_string().contains("negative"), "{e}");
    let e = resize(&[("mode", s("area"))], &x, None, Some(&[1.0; 4]), None, 13).unwrap_err();
    assert!(e.to_string().contains("mode"), "{e}");
    let e = resize(
        &[("coordinate_transformation_mode", s("half_pixel_symmetric"))],
        &x,
        None,
        Some(&[1.0; 4]),
        None,
        18,
    )
    .unwrap_err();
    assert!(e.to_string().contains("half_pixel_symmetric"), "{e}");
    let e = resize(
        &[("coordinate_transformation_mode", s("tf_crop_and_resize"))],
        &x,
        None,
        Some(&[1.0; 4]),
        None,
        13,
    )
    .unwrap_err();
    assert!(e.to_string().contains("roi"), "{e}");
    let e = resize(&[], &x, None, Some(&[1.0, 1.0, 1e20, 1.0]), None, 13).unwrap_err();
    assert!(e.to_string().contains("too large"), "{e}");
    let e = resize(
        &[("mode", s("linear"))],
        &t(&[2], vec![true, false]),
        None,
        Some(&[2.0]),
        None,
        13,
    )
    .unwrap_err();
    assert!(e.to_string().contains("numeric"), "{e}");
    let msg = fails(
        "Upsample",
        9,
        &[],
        &[x.clone(), f32s(&[1.0, 1.0, 0.5, 1.0])],
    );
    assert!(msg.contains("invalid scale"), "{msg}");
    let e = resize(
        &[],
        &t(&[0, 2], Vec::<f32>::new()),
        None,
        None,
        Some(&[3, 2]),
        13,
    )
    .unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}

// ---- Naive reference, following the ONNX reference implementation. ----

struct Cfg<'a> {
    mode: &'a str,
    coord: &'a str,
    nearest: &'a str,
    a: f64,
    exclude: bool,
    antialias: bool,
}

fn coordinate(cfg: &Cfg, o: usize, scale: f64, n: usize, m: usize) -> f64 {
    let (x, nf, mf) = (o as f64, n as f64, m as f64);
    match cfg.coord {
        "half_pixel" => (x + 0.5) / scale - 0.5,
        "pytorch_half_pixel" => {
            if m > 1 {
                (x + 0.5) / scale - 0.5
            } else {
                0.0
            }
        }
        "align_corners" => {
            if m == 1 {
                0.0
            } else {
                // ONNX's reference: the resized length is scale · n.
                x * (nf - 1.0) / (scale * nf - 1.0)
            }
        }
        "asymmetric" => x / scale,
        "half_pixel_symmetric" => {
            let adj = mf / (scale * nf);
            nf / 2.0 * (1.0 - adj) + (x + 0.5) / scale - 0.5
        }
        _ => unreachable!(),
    }
}

fn coeffs(cfg: &Cfg, ratio: f64, scale: f64) -> Vec<f64> {
    match cfg.mode {
        "nearest" => {
            if ratio == ratio.trunc() {
                return vec![0.0, 1.0];
            }
            let up = match cfg.nearest {
                "round_prefer_floor" => ratio > 0.5,
                "round_prefer_ceil" => ratio >= 0.5,
                "floor" => false,
                _ => true,
            };
            if up {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }
        "linear" if cfg.antialias => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as i64 + 1;
            let footprint = 2 - 2 * start;
            let c: Vec<f64> = (start..start + footprint)
                .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                .collect();
            let sum: f64 = c.iter().sum();
            c.iter().map(|v| v / sum).collect()
        }
        "linear" => vec![1.0 - ratio, ratio],
        _ => {
            let a = cfg.a;
            let k = |x: f64| {
                let x = x.abs();
                if x <= 1.0 {
                    (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
                } else if x < 2.0 {
                    a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
                } else {
                    0.0
                }
            };
            if cfg.antialias {
                let s = scale.min(1.0);
                let i_start = (-2.0 / s).floor() as i64 + 1;
                let i_end = 2 - i_start;
                let c: Vec<f64> = (i_start..i_end)
                    .map(|i| k(s * (i as f64 - ratio)))
                    .collect();
                let sum: f64 = c.iter().sum();
                c.iter().map(|v| v / sum).collect()
            } else {
                vec![k(ratio + 1.0), k(ratio), k(1.0 - ratio), k(2.0 - ratio)]
            }
        }
    }
}

/// One-dimensional interpolation of `line` at output index `o`.
fn interp_1d(cfg: &Cfg, line: &[f64], o: usize, scale: f64, m: usize) -> f64 {
    let n = line.len();
    let x = coordinate(cfg, o, scale, n, m);
    let ratio = if x == x.floor() { 1.0 } else { x - x.floor() };
    let mut c = coeffs(cfg, ratio, scale);
    let k = c.len();
    // The k indexes nearest to x, preferring smaller ones, over an edge-padded line.
    let pad = k.div_ceil(2) as i64;
    let mut cand: Vec<i64> = (-pad..n as i64 + pad).collect();
    cand.sort_by(|&p, &q| {
        let (dp, dq) = ((x - p as f64).abs(), (x - q as f64).abs());
        dp.partial_cmp(&dq).unwrap().then(p.cmp(&q))
    });
    let mut idx: Vec<i64> = cand[..k].to_vec();
    idx.sort();
    if cfg.exclude {
        for (i, &j) in idx.iter().enumerate() {
            if j < 0 || j >= n as i64 {
                c[i] = 0.0;
            }
        }
        let sum: f64 = c.iter().sum();
        c.iter_mut().for_each(|v| *v /= sum);
    }
    idx.iter()
        .zip(&c)
        .map(|(&j, &w)| w * line[j.clamp(0, n as i64 - 1) as usize])
        .sum()
}

/// n-D interpolation, outermost axis last (as the reference recursion does).
fn interp_nd(
    cfg: &Cfg,
    data: &[f64],
    shape: &[usize],
    out: &[usize],
    scales: &[f64],
    o: &[usize],
) -> f64 {
    if shape.len() == 1 {
        return interp_1d(cfg, data, o[0], scales[0], out[0]);
    }
    let inner: usize = shape[1..].iter().product();
    let line: Vec<f64> = (0..shape[0])
        .map(|i| {
            interp_nd(
                cfg,
                &data[i * inner..(i + 1) * inner],
                &shape[1..],
                &out[1..],
                &scales[1..],
                &o[1..],
            )
        })
        .collect();
    interp_1d(cfg, &line, o[0], scales[0], out[0])
}

fn naive(cfg: &Cfg, data: &[f64], shape: &[usize], out: &[usize], scales: &[f64]) -> Vec<f64> {
    let n: usize = out.iter().product();
    (0..n)
        .map(|flat| {
            let o = crate::ops::shape::unravel(flat, out);
            interp_nd(cfg, data, shape, out, scales, &o)
        })
        .collect()
}

#[test]
fn matches_naive_reference() {
    let shape = [2usize, 5, 6];
    let data: Vec<f64> = (0..60).map(|v| ((v * 37) % 23) as f64 - 7.5).collect();
    let x = t(&shape, data.clone());
    let scale_sets: [[f32; 3]; 4] = [
        [1.0, 2.0, 1.5],
        [1.0, 0.6, 0.5],
        [2.0, 1.0, 0.8],
        [1.0, 3.0, 0.34],
    ];
    let coords = [
        "half_pixel",
        "pytorch_half_pixel",
        "align_corners",
        "asymmetric",
        "half_pixel_symmetric",
    ];
    let mut checked = 0;
    for mode in ["nearest", "linear", "cubic"] {
        let nearests: &[&str] = if mode == "nearest" {
            &["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
        } else {
            &["round_prefer_floor"]
        };
        let flags: &[(bool, bool)] = match mode {
            "cubic" => &[(false, false), (true, false), (false, true), (true, true)],
            "linear" => &[(false, false), (false, true)],
            _ => &[(false, false)],
        };
        for coord in coords {
            for &nearest in nearests {
                for &(exclude, antialias) in flags {
                    for a in [-0.75, -0.5] {
                        if mode != "cubic" && a != -0.75 {
                            continue;
                        }
                        for sc in &scale_sets {
                            let cfg = Cfg {
                                mode,
                                coord,
                                nearest,
                                a,
                                exclude,
                                antialias,
                            };
                            let attrs = vec![
                                ("mode", s(mode)),
                                ("coordinate_transformation_mode", s(coord)),
                                ("nearest_mode", s(nearest)),
                                ("cubic_coeff_a", Attribute::Float(a as f32)),
                                ("exclude_outside", Attribute::Int(exclude as i64)),
                                ("antialias", Attribute::Int(antialias as i64)),
                            ];
                            let y = resize(&attrs, &x, None, Some(sc), None, 19).unwrap();
                            let scales: Vec<f64> = sc.iter().map(|&v| v as f64).collect();
                            let want = naive(&cfg, &data, &shape, y.shape(), &scales);
                            let got = y.to_f64_vec().unwrap();
                            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                                assert!(
                                    (g - w).abs() <= 1e-9 * (1.0 + w.abs()),
                                    "{mode} {coord} {nearest} excl={exclude} aa={antialias} a={a} {sc:?} at {i}: {g} vs {w}"
                                );
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 100);
}

#[test]
fn large_linear_is_thread_independent() {
    // run() compares 1 and 3 threads bit for bit.
    let x = iota(&[1, 3, 64, 64]);
    let y = resize(
        &[("mode", s("linear"))],
        &x,
        None,
        None,
        Some(&[1, 3, 100, 90]),
        13,
    )
    .unwrap();
    assert_eq!(y.shape(), &[1, 3, 100, 90]);
    let y = resize(
        &[("mode", s("cubic"))],
        &x,
        None,
        Some(&[1.0, 1.0, 0.5, 0.5]),
        None,
        13,
    )
    .unwrap();
    assert_eq!(y.shape(), &[1, 3, 32, 32]);
}
