//! Sliding-window geometry shared by Conv, ConvTranspose and the pools: the
//! `kernel_shape`/`strides`/`dilations`/`pads`/`auto_pad` attributes and the
//! output size and padding they give for an input.

use crate::error::{Error, Result};
use crate::ir::attributes::Attributes;

/// The `auto_pad` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AutoPad {
    /// Explicit `pads` (default 0).
    NotSet,
    /// Output `ceil(in / stride)`, extra padding at the end.
    SameUpper,
    /// Output `ceil(in / stride)`, extra padding at the start.
    SameLower,
    /// No padding.
    Valid,
}

impl AutoPad {
    /// Reads `auto_pad` (default NOTSET).
    pub(crate) fn parse(attrs: &Attributes) -> Result<AutoPad> {
        Ok(match attrs.string("auto_pad", "NOTSET")?.as_str() {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => {
                return Err(attrs.error(
                    "auto_pad",
                    format!("expected NOTSET, SAME_UPPER, SAME_LOWER or VALID, found {other:?}"),
                ))
            }
        })
    }
}

/// The window attributes as written on the node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WindowAttrs {
    /// `kernel_shape`, if given.
    pub kernel: Option<Vec<usize>>,
    /// `strides`, if given.
    pub strides: Option<Vec<usize>>,
    /// `dilations`, if given.
    pub dilations: Option<Vec<usize>>,
    /// `pads` (all begins, then all ends), if given.
    pub pads: Option<Vec<usize>>,
    /// `auto_pad`.
    pub auto_pad: AutoPad,
}

/// The largest kernel extent, stride, dilation or pad accepted: far beyond
/// any real model, and small enough that window arithmetic on them (products
/// of two, sums of a few) cannot overflow.
pub(crate) const MAX_WINDOW_VALUE: i64 = 1 << 31;

/// Reads the integer list `name` (if given), each value in `min..=MAX_WINDOW_VALUE`.
fn bounded(attrs: &Attributes, name: &str, min: i64) -> Result<Option<Vec<usize>>> {
    match attrs.ints_opt(name)? {
        None => Ok(None),
        Some(v) => v
            .iter()
            .map(|&x| {
                if (min..=MAX_WINDOW_VALUE).contains(&x) {
                    Ok(x as usize)
                } else {
                    Err(attrs.error(
                        name,
                        format!("values must be in {min}..={MAX_WINDOW_VALUE}, found {v:?}"),
                    ))
                }
            })
            .collect::<Result<Vec<_>>>()
            .map(Some),
    }
}

impl WindowAttrs {
    /// Reads and checks the window attributes (`dilations` only when
    /// `with_dilations`, for pools whose opset predates them).
    pub(crate) fn parse(attrs: &Attributes, with_dilations: bool) -> Result<WindowAttrs> {
        Ok(WindowAttrs {
            kernel: bounded(attrs, "kernel_shape", 1)?,
            strides: bounded(attrs, "strides", 1)?,
            dilations: if with_dilations {
                bounded(attrs, "dilations", 1)?
            } else {
                None
            },
            pads: bounded(attrs, "pads", 0)?,
            auto_pad: AutoPad::parse(attrs)?,
        })
    }

    /// Resolves the window for an input with spatial dims `input` and a
    /// kernel of dims `kernel` (from W, or `kernel_shape` for pools).
    pub(crate) fn resolve(
        &self,
        op: &str,
        input: &[usize],
        kernel: &[usize],
        ceil_mode: bool,
    ) -> Result<Window> {
        let r = input.len();
        let check = |name: &str, v: &Option<Vec<usize>>, len: usize| -> Result<()> {
            match v {
                Some(v) if v.len() != len => Err(Error::op(
                    op,
                    format!(
                        "{name} has {} values, expected {len} for {r} spatial dimensions",
                        v.len()
                    ),
                )),
                _ => Ok(()),
            }
        };
        if kernel.len() != r {
            return Err(Error::op(
                op,
                format!(
                    "kernel has {} dimensions, input has {r} spatial dimensions",
                    kernel.len()
                ),
            ));
        }
        check("strides", &self.strides, r)?;
        check("dilations", &self.dilations, r)?;
        check("pads", &self.pads, 2 * r)?;
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; r]);
        let dilations = self.dilations.clone().unwrap_or_else(|| vec![1; r]);
        let mut w = Window {
            input: input.to_vec(),
            kernel: kernel.to_vec(),
            strides,
            dilations,
            pad_begin: vec![0; r],
            pad_end: vec![0; r],
            output: vec![0; r],
        };
        let overflow = || Error::op(op, "window sizes overflow");
        for i in 0..r {
            if kernel[i] == 0 {
                return Err(Error::op(op, format!("kernel dimension {i} is 0")));
            }
            let (s, inp) = (w.strides[i], input[i]);
            let dk = (kernel[i] - 1)
                .checked_mul(w.dilations[i])
                .and_then(|v| v.checked_add(1))
                .ok_or_else(overflow)?;
            match self.auto_pad {
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let out = inp.div_ceil(s);
                    let need = out
                        .saturating_sub(1)
                        .checked_mul(s)
                        .and_then(|v| v.checked_add(dk))
                        .ok_or_else(overflow)?;
                    let total = need.saturating_sub(inp);
                    let small = total / 2;
                    let (b, e) = if self.auto_pad == AutoPad::SameUpper {
                        (small, total - small)
                    } else {
                        (total - small, small)
                    };
                    w.pad_begin[i] = b;
                    w.pad_end[i] = e;
                    w.output[i] = out;
                }
                AutoPad::NotSet | AutoPad::Valid => {
                    let (b, e) = match (&self.pads, self.auto_pad) {
                        (Some(p), AutoPad::NotSet) => (p[i], p[i + r]),
                        _ => (0, 0),
                    };
                    let padded = inp
                        .checked_add(b)
                        .and_then(|v| v.checked_add(e))
                        .ok_or_else(overflow)?;
                    if padded < dk {
                        return Err(Error::op(
                            op,
                            format!(
                                "window of extent {dk} (kernel {kernel:?}, dilations {:?}) is larger than the padded input {padded} along spatial axis {i} (input {input:?})",
                                w.dilations
                            ),
                        ));
                    }
                    let span = padded - dk;
                    let mut out = if ceil_mode {
                        span.div_ceil(s)
                    } else {
                        span / s
                    } + 1;
                    // The last window must start inside the input or its leading padding.
                    if ceil_mode && (out - 1) * s >= inp + b {
                        out -= 1;
                    }
                    w.pad_begin[i] = b;
                    w.pad_end[i] = e;
                    w.output[i] = out;
                }
            }
        }
        Ok(w)
    }
}

/// A resolved window over one input's spatial dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    /// Input spatial dims.
    pub input: Vec<usize>,
    /// Kernel dims.
    pub kernel: Vec<usize>,
    /// Strides.
    pub strides: Vec<usize>,
    /// Dilations.
    pub dilations: Vec<usize>,
    /// Padding before each dim.
    pub pad_begin: Vec<usize>,
    /// Padding after each dim.
    pub pad_end: Vec<usize>,
    /// Output spatial dims.
    pub output: Vec<usize>,
}

impl Window {
    /// Number of spatial dimensions.
    pub(crate) fn rank(&self) -> usize {
        self.input.len()
    }

    /// Elements in one input plane.
    pub(crate) fn in_len(&self) -> usize {
        self.input.iter().product()
    }

    /// Elements in one output plane.
    pub(crate) fn out_len(&self) -> usize {
        self.output.iter().product()
    }

    /// Elements in the kernel.
    pub(crate) fn kernel_len(&self) -> usize {
        self.kernel.iter().product()
    }

    /// Whether the window is one window over the whole unpadded input (a
    /// global pool in disguise, like ResNet's final 7×7 AveragePool).
    pub(crate) fn is_whole_input(&self) -> bool {
        self.output.iter().all(|&o| o == 1)
            && self.kernel == self.input
            && self.dilations.iter().all(|&d| d == 1)
            && self.pad_begin.iter().chain(&self.pad_end).all(|&p| p == 0)
    }

    /// For kernel offset `k` along dim `d`: the output range `[lo, hi)` whose
    /// input coordinate `o·stride + k·dilation − pad_begin` lies inside the
    /// input, and that coordinate's offset `k·dilation − pad_begin`.
    pub(crate) fn valid_range(&self, d: usize, k: usize) -> (usize, usize, isize) {
        let off = (k * self.dilations[d]) as isize - self.pad_begin[d] as isize;
        let s = self.strides[d] as isize;
        let inp = self.input[d] as isize;
        let out = self.output[d] as isize;
        // o·s + off ≥ 0  ⇔  o ≥ ceil(−off / s)
        let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
        // o·s + off < inp  ⇔  o < ceil((inp − off) / s)
        let hi = if inp - off <= 0 {
            0
        } else {
            (inp - off + s - 1) / s
        };
        let lo = lo.clamp(0, out);
        let hi = hi.clamp(lo, out);
        (lo as usize, hi as usize, off)
    }
}
