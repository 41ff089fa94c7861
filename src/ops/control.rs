//! Control flow with subgraphs: If, Loop and Scan. Each holds its bodies as
//! [`Subgraph`](crate::ir::Subgraph) values built by the loader and runs them
//! through that trait; the outer-scope values a body reads arrive as the
//! node's trailing implicit inputs.

use super::Registrar;

mod if_op;
mod loop_op;
mod scan;
mod scan8;
mod tensors;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("If", 1, if_op::build);
    r.add("Loop", 1, loop_op::build);
    // Opset 8's batched form, with sequence_lens, until opset 9 replaced it.
    r.add("Scan", 8, |ctx| {
        if ctx.opset < 9 {
            scan8::build(ctx)
        } else {
            scan::build(ctx)
        }
    });
}
