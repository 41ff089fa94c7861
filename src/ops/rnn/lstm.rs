//! `LSTM`: gates i, o, f, c (in that order in W, R and B), optional
//! peepholes P = [i, o, f], `input_forget` (f = 1 − i), activations
//! f (gates), g (cell input) and h (output), defaults Sigmoid, Tanh, Tanh.

use super::driver::matmul_t;
use super::spec::{Cell, CellKind, Recurrent, Scalar, StepCtx};
use crate::error::Result;
use crate::ir::{BuildContext, Operator};

/// The LSTM cell.
#[derive(Debug)]
pub(super) struct Lstm {
    input_forget: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Recurrent::new(ctx, Lstm::from_attrs(ctx)?)?))
}

impl Lstm {
    /// The cell the node's attributes describe.
    pub(super) fn from_attrs(ctx: &BuildContext) -> Result<Lstm> {
        Ok(Lstm {
            input_forget: ctx.attrs.int("input_forget", 0)? != 0,
        })
    }
}

impl Cell for Lstm {
    const OP: &'static str = "LSTM";
    const GATES: usize = 4;
    const ACTS: &'static [&'static str] = &["Sigmoid", "Tanh", "Tanh"];
    const HAS_C: bool = true;

    fn kind(&self) -> CellKind {
        CellKind::Lstm {
            input_forget: self.input_forget,
        }
    }

    fn step<C: Scalar>(
        &self,
        s: &StepCtx<C>,
        xw: &mut [C],
        h: &[C],
        c: &[C],
        h_out: &mut [C],
        c_out: &mut [C],
    ) -> Result<()> {
        let hid = s.hidden;
        let gh = 4 * hid;
        matmul_t(Self::OP, h, (s.batch, hid, gh), s.r, C::one(), xw)?;
        let (f, g, hact) = (s.acts[0], s.acts[1], s.acts[2]);
        let zero = C::zero();
        let peep = |k: usize, j: usize| s.p.map_or(zero, |p| p[k * hid + j]);
        for b in 0..s.batch {
            let pre = &xw[b * gh..(b + 1) * gh];
            for j in 0..hid {
                let gate = |k: usize| pre[k * hid + j] + s.rb[k * hid + j];
                let c_prev = c[b * hid + j];
                let i = f.eval(s.clip(gate(0) + peep(0, j) * c_prev));
                let fg = if self.input_forget {
                    C::one() - i
                } else {
                    f.eval(s.clip(gate(2) + peep(2, j) * c_prev))
                };
                let cand = g.eval(s.clip(gate(3)));
                let c_t = fg * c_prev + i * cand;
                let o = f.eval(s.clip(gate(1) + peep(1, j) * c_t));
                c_out[b * hid + j] = c_t;
                h_out[b * hid + j] = o * hact.eval(c_t);
            }
        }
        Ok(())
    }
}
