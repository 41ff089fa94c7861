//! Test data for one Conv call: X, W, a bias and a residual of random
//! values (fixed seeds), with the node's weight caches, lent as the
//! kernels' [`ConvArgs`].

use super::conv_op::{ConvArgs, ConvPlan, Weights};
use crate::ir::Activation;
use crate::ops::testutil::rand_vec;

/// The operands of one call of plan `p`.
pub(super) struct RandomLayer {
    pub x: Vec<f32>,
    pub w: Vec<f32>,
    pub b: Vec<f32>,
    /// A residual laid out like Y.
    pub z: Vec<f32>,
    weights: Weights,
}

impl RandomLayer {
    /// Operands for `p` with X of shape `xs` and W of shape `ws`.
    pub fn new(p: &ConvPlan, xs: &[usize], ws: &[usize]) -> RandomLayer {
        RandomLayer {
            x: rand_vec(xs.iter().product(), 1),
            w: rand_vec(ws.iter().product(), 2),
            b: rand_vec(p.m, 3),
            z: rand_vec(p.out_shape.iter().product(), 4),
            weights: Weights::new(true),
        }
    }

    /// The call of `p` with the bias and the residual where asked, and
    /// activation `act`.
    pub fn args<'a>(
        &'a self,
        p: &'a ConvPlan,
        bias: bool,
        resid: bool,
        act: Option<Activation>,
    ) -> ConvArgs<'a, f32> {
        ConvArgs {
            p,
            x: &self.x,
            w: &self.w,
            b: bias.then_some(&self.b[..]),
            z: resid.then_some(&self.z[..]),
            act,
            weights: &self.weights,
        }
    }
}
