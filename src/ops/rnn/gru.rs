//! `GRU`: gates z, r, h (in that order in W, R and B), activations f
//! (update and reset gates) and g (hidden gate), defaults Sigmoid and Tanh;
//! `linear_before_reset` applies the reset gate after the recurrence
//! product instead of before it.

use super::driver::matmul_t;
use super::spec::{Cell, CellKind, Recurrent, Scalar, StepCtx};
use crate::error::Result;
use crate::ir::{BuildContext, Operator};

/// The GRU cell.
#[derive(Debug)]
pub(super) struct Gru {
    linear_before_reset: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Recurrent::new(
        ctx,
        Gru {
            linear_before_reset: ctx.attrs.int("linear_before_reset", 0)? != 0,
        },
    )?))
}

impl Cell for Gru {
    const OP: &'static str = "GRU";
    const GATES: usize = 3;
    const ACTS: &'static [&'static str] = &["Sigmoid", "Tanh"];
    const HAS_C: bool = false;

    fn kind(&self) -> CellKind {
        CellKind::Gru {
            linear_before_reset: self.linear_before_reset,
        }
    }

    fn step<C: Scalar>(
        &self,
        s: &StepCtx<C>,
        xw: &mut [C],
        h: &[C],
        _c: &[C],
        h_out: &mut [C],
        _c_out: &mut [C],
    ) -> Result<()> {
        let (hid, b) = (s.hidden, s.batch);
        let gh = 3 * hid;
        let (f, g) = (s.acts[0], s.acts[1]);
        // h·Rᵀ for all three gates (the hidden gate's part is replaced below
        // when the reset gate applies before the product).
        let mut hr = vec![C::zero(); b * gh];
        matmul_t(Self::OP, h, (b, hid, gh), s.r, C::zero(), &mut hr)?;
        let mut z = vec![C::zero(); b * hid];
        let mut r = vec![C::zero(); b * hid];
        for bi in 0..b {
            for j in 0..hid {
                let at = |k: usize| bi * gh + k * hid + j;
                z[bi * hid + j] = f.eval(s.clip(xw[at(0)] + hr[at(0)] + s.rb[j]));
                r[bi * hid + j] = f.eval(s.clip(xw[at(1)] + hr[at(1)] + s.rb[hid + j]));
            }
        }
        let mut hh = vec![C::zero(); b * hid];
        if self.linear_before_reset {
            for bi in 0..b {
                for j in 0..hid {
                    let rec = hr[bi * gh + 2 * hid + j] + s.rb[2 * hid + j];
                    hh[bi * hid + j] = r[bi * hid + j] * rec;
                }
            }
        } else {
            let rh: Vec<C> = r.iter().zip(h).map(|(&r, &h)| r * h).collect();
            matmul_t(
                Self::OP,
                &rh,
                (b, hid, hid),
                &s.r[2 * hid * hid..],
                C::zero(),
                &mut hh,
            )?;
            for bi in 0..b {
                for j in 0..hid {
                    hh[bi * hid + j] = hh[bi * hid + j] + s.rb[2 * hid + j];
                }
            }
        }
        for bi in 0..b {
            for j in 0..hid {
                let k = bi * hid + j;
                let cand = g.eval(s.clip(xw[bi * gh + 2 * hid + j] + hh[k]));
                h_out[k] = (C::one() - z[k]) * cand + z[k] * h[k];
            }
        }
        Ok(())
    }
}
