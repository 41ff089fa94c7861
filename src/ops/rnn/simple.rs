//! `RNN`: the plain recurrent cell `H_t = f(X_t·Wᵀ + H_{t-1}·Rᵀ + Wb + Rb)`
//! (default f = Tanh).

use super::driver::matmul_t;
use super::spec::{Cell, CellKind, Recurrent, Scalar, StepCtx};
use crate::error::Result;
use crate::ir::{BuildContext, Operator};

/// The simple recurrent cell.
#[derive(Debug)]
pub(super) struct Simple;

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Recurrent::new(ctx, Simple)?))
}

impl Cell for Simple {
    const OP: &'static str = "RNN";
    const GATES: usize = 1;
    const ACTS: &'static [&'static str] = &["Tanh"];
    const HAS_C: bool = false;

    fn kind(&self) -> CellKind {
        CellKind::Simple
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
        let hid = s.hidden;
        matmul_t(Self::OP, h, (s.batch, hid, hid), s.r, C::one(), xw)?;
        let f = s.acts[0];
        for (row, out) in xw.chunks(hid.max(1)).zip(h_out.chunks_mut(hid.max(1))) {
            for ((o, &v), &rb) in out.iter_mut().zip(row).zip(s.rb) {
                *o = f.eval(s.clip(v + rb));
            }
        }
        Ok(())
    }
}
