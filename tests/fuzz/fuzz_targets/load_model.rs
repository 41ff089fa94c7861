//! Arbitrary bytes as an ONNX model: load it and, if it loads, run it once on
//! small inputs synthesised from the declared input types and shapes
//! (symbolic dimensions = 1; skipped above 1 MiB of input). Errors are fine;
//! panics, aborts, hangs and running out of memory are the bugs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(session) = ramify_fuzz::builder().build_from_bytes(data) else {
        return;
    };
    let Some(inputs) = ramify_fuzz::synth_inputs(&session) else {
        return;
    };
    let _ = session.run(inputs);
});
