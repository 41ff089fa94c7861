//! Recurrent operators: `RNN`, `GRU` and `LSTM` (opset 7 semantics, `layout`
//! from opset 14, f16/bf16 from opset 22), built from one shared driver
//! (attributes, input checks, time loop with `sequence_lens`, layouts) and
//! one cell per operator.

use super::Registrar;

mod activation;
mod driver;
mod fast;
#[cfg(test)]
mod fast_tests;
mod gates;
mod gru;
mod int8;
mod lstm;
mod pack;
mod pack_int8;
mod quantized;
mod simple;
mod spec;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("RNN", 7, simple::build);
    r.add("GRU", 7, gru::build);
    r.add("LSTM", 7, lstm::build);
    r.add_in(super::MS_DOMAIN, "DynamicQuantizeLSTM", 1, quantized::build);
}
