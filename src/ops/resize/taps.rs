//! Per-axis sampling plans for Resize: the coordinate transformation from an
//! output index to an input coordinate, and the taps (input index, weight)
//! that each interpolation mode reads there. Resizing is separable, so the
//! n-dimensional result is the product of the per-axis taps.

use crate::error::{Error, Result};

/// Interpolation mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// How an output index maps to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// How nearest mode rounds a coordinate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Rounding {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Opset 10 and Upsample: truncate when upsampling, ceil when downsampling.
    Simple,
}

/// Everything the taps of one axis depend on besides the axis itself.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sampler {
    pub mode: Mode,
    pub coord: Coord,
    pub rounding: Rounding,
    pub cubic_a: f64,
    pub exclude_outside: bool,
    pub antialias: bool,
}

/// One axis: input length, output length, scale, and the roi (start, end).
#[derive(Debug, Clone, Copy)]
pub(super) struct Axis {
    pub input: usize,
    pub output: usize,
    pub scale: f64,
    pub roi: (f64, f64),
}

/// The taps of each output index along one axis; `None` where the output
/// takes the extrapolation value (tf_crop_and_resize outside the image).
pub(super) type AxisTaps = Vec<Option<Vec<(usize, f64)>>>;

impl Sampler {
    /// The input coordinate of output index `o`.
    pub fn coordinate(&self, o: usize, ax: &Axis) -> f64 {
        let x = o as f64;
        let (s, m, n) = (ax.scale, ax.output as f64, ax.input as f64);
        match self.coord {
            Coord::HalfPixel => (x + 0.5) / s - 0.5,
            Coord::HalfPixelSymmetric => {
                let adjustment = m / (s * n);
                let center = n / 2.0;
                let offset = center * (1.0 - adjustment);
                offset + (x + 0.5) / s - 0.5
            }
            Coord::PytorchHalfPixel => {
                if ax.output > 1 {
                    (x + 0.5) / s - 0.5
                } else {
                    0.0
                }
            }
            Coord::AlignCorners => {
                // The resized length is scale · input, not the rounded output
                // length (as ONNX's reference computes it).
                if ax.output > 1 {
                    x * (n - 1.0) / (s * n - 1.0)
                } else {
                    0.0
                }
            }
            Coord::Asymmetric => x / s,
            Coord::TfHalfPixelForNn => (x + 0.5) / s,
            Coord::TfCropAndResize => {
                let (a, b) = ax.roi;
                if ax.output > 1 {
                    a * (n - 1.0) + x * (b - a) * (n - 1.0) / (m - 1.0)
                } else {
                    0.5 * (a + b) * (n - 1.0)
                }
            }
        }
    }

    fn nearest(&self, x: f64, ax: &Axis) -> f64 {
        match self.rounding {
            Rounding::RoundPreferFloor => {
                if x - x.floor() == 0.5 {
                    x.floor()
                } else {
                    x.round()
                }
            }
            Rounding::RoundPreferCeil => {
                if x - x.floor() == 0.5 {
                    x.ceil()
                } else {
                    x.round()
                }
            }
            Rounding::Floor => x.floor(),
            Rounding::Ceil => x.ceil(),
            Rounding::Simple => {
                if ax.scale < 1.0 {
                    x.ceil()
                } else {
                    x.trunc()
                }
            }
        }
    }

    /// The interpolation kernel at distance `d` (in input pixels, scaled).
    fn kernel(&self, d: f64) -> f64 {
        let d = d.abs();
        match self.mode {
            Mode::Linear => (1.0 - d).max(0.0),
            _ => {
                let a = self.cubic_a;
                if d <= 1.0 {
                    ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
                } else if d < 2.0 {
                    ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
                } else {
                    0.0
                }
            }
        }
    }

    /// The taps of every output index of one axis.
    pub fn taps(&self, ax: &Axis) -> Result<AxisTaps> {
        if ax.input == 0 {
            if ax.output == 0 {
                return Ok(Vec::new());
            }
            return Err(Error::op(
                "Resize",
                format!("cannot resize an empty axis to length {}", ax.output),
            ));
        }
        let last = (ax.input - 1) as f64;
        let clamp = |i: f64| i.clamp(0.0, last) as usize;
        (0..ax.output)
            .map(|o| {
                let x = self.coordinate(o, ax);
                if self.coord == Coord::TfCropAndResize && !(0.0..=last).contains(&x) {
                    return Ok(None);
                }
                if !x.is_finite() {
                    return Err(Error::op(
                        "Resize",
                        format!("input coordinate {x} is not finite"),
                    ));
                }
                if self.mode == Mode::Nearest {
                    return Ok(Some(vec![(clamp(self.nearest(x, ax)), 1.0)]));
                }
                let base = x.floor();
                let t = x - base;
                let support = if self.mode == Mode::Linear { 1.0 } else { 2.0 };
                // Antialiasing widens the kernel by 1/scale when downsampling.
                let s = if self.antialias {
                    ax.scale.min(1.0)
                } else {
                    1.0
                };
                let lo = (t - support / s).ceil() as i64;
                let hi = (t + support / s).floor() as i64;
                let mut taps: Vec<(i64, f64)> = (lo..=hi)
                    .map(|j| (base as i64 + j, self.kernel((j as f64 - t) * s)))
                    .collect();
                let n = ax.input as i64;
                if self.exclude_outside {
                    for tap in taps.iter_mut() {
                        if tap.0 < 0 || tap.0 >= n {
                            tap.1 = 0.0;
                        }
                    }
                }
                if self.antialias || self.exclude_outside {
                    let sum: f64 = taps.iter().map(|t| t.1).sum();
                    if sum != 0.0 {
                        taps.iter_mut().for_each(|t| t.1 /= sum);
                    }
                }
                let mut out: Vec<(usize, f64)> = taps
                    .into_iter()
                    .filter(|t| t.1 != 0.0)
                    .map(|(i, w)| (clamp(i as f64), w))
                    .collect();
                if out.is_empty() {
                    out.push((clamp(x.round()), 0.0));
                }
                Ok(Some(out))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(mode: Mode, coord: Coord) -> Sampler {
        Sampler {
            mode,
            coord,
            rounding: Rounding::RoundPreferFloor,
            cubic_a: -0.75,
            exclude_outside: false,
            antialias: false,
        }
    }

    fn axis(input: usize, output: usize) -> Axis {
        Axis {
            input,
            output,
            scale: output as f64 / input as f64,
            roi: (0.0, 1.0),
        }
    }

    #[test]
    fn coordinates() {
        let ax = axis(4, 8);
        let s = |c| sampler(Mode::Linear, c).coordinate(3, &ax);
        assert_eq!(s(Coord::HalfPixel), 1.25);
        assert_eq!(s(Coord::PytorchHalfPixel), 1.25);
        assert_eq!(s(Coord::Asymmetric), 1.5);
        assert_eq!(s(Coord::AlignCorners), 3.0 * 3.0 / 7.0);
        // With a scale that does not give a whole length, align_corners uses
        // scale · input (2.4 here), not the rounded output length 2.
        let frac = Axis {
            scale: 0.6,
            ..axis(4, 2)
        };
        let c = sampler(Mode::Linear, Coord::AlignCorners).coordinate(1, &frac);
        assert!((c - 3.0 / 1.4).abs() < 1e-12, "{c}");
        assert_eq!(s(Coord::TfHalfPixelForNn), 1.75);
        assert_eq!(s(Coord::HalfPixelSymmetric), 1.25);
        let one = axis(4, 1);
        assert_eq!(
            sampler(Mode::Linear, Coord::PytorchHalfPixel).coordinate(0, &one),
            0.0
        );
        assert_eq!(
            sampler(Mode::Linear, Coord::AlignCorners).coordinate(0, &one),
            0.0
        );
        let crop = Axis {
            roi: (0.2, 0.6),
            ..axis(5, 1)
        };
        assert!(
            (sampler(Mode::Linear, Coord::TfCropAndResize).coordinate(0, &crop) - 1.6).abs()
                < 1e-12
        );
        // half_pixel_symmetric differs from half_pixel when the size was rounded.
        let odd = Axis {
            input: 5,
            output: 3,
            scale: 0.7,
            roi: (0.0, 1.0),
        };
        let hp = sampler(Mode::Linear, Coord::HalfPixel).coordinate(0, &odd);
        let hps = sampler(Mode::Linear, Coord::HalfPixelSymmetric).coordinate(0, &odd);
        assert!((hps - hp - 2.5 * (1.0 - 3.0 / 3.5)).abs() < 1e-12);
    }

    #[test]
    fn nearest_rounding() {
        let ax = axis(4, 8);
        let mut s = sampler(Mode::Nearest, Coord::Asymmetric);
        let idx = |s: &Sampler| -> Vec<usize> {
            s.taps(&ax)
                .unwrap()
                .iter()
                .map(|t| t.as_ref().unwrap()[0].0)
                .collect()
        };
        assert_eq!(idx(&s), vec![0, 0, 1, 1, 2, 2, 3, 3]);
        s.rounding = Rounding::RoundPreferCeil;
        assert_eq!(idx(&s), vec![0, 1, 1, 2, 2, 3, 3, 3]);
        s.rounding = Rounding::Ceil;
        assert_eq!(idx(&s), vec![0, 1, 1, 2, 2, 3, 3, 3]);
        s.rounding = Rounding::Floor;
        assert_eq!(idx(&s), vec![0, 0, 1, 1, 2, 2, 3, 3]);
    }

    #[test]
    fn cubic_weights_sum_to_one_and_interpolate() {
        let s = sampler(Mode::Cubic, Coord::Asymmetric);
        let t = s.taps(&axis(8, 16)).unwrap();
        for taps in t.iter().flatten() {
            let sum: f64 = taps.iter().map(|x| x.1).sum();
            assert!((sum - 1.0).abs() < 1e-12);
        }
        // Integer coordinates pick one pixel.
        assert_eq!(t[4].as_ref().unwrap(), &vec![(2, 1.0)]);
    }

    #[test]
    fn antialias_widens_linear() {
        let mut s = sampler(Mode::Linear, Coord::HalfPixel);
        s.antialias = true;
        let t = s.taps(&axis(8, 2)).unwrap();
        // Scale 1/4: the triangle spans 4 pixels each side of x = 1.5.
        let taps = t[0].as_ref().unwrap();
        let sum: f64 = taps.iter().map(|x| x.1).sum();
        assert!((sum - 1.0).abs() < 1e-12);
        assert!(taps.len() >= 4, "{taps:?}");
    }
}
