//! Test helpers shared by the operator tests of every family: building and running a node
//! through the registry (checking its inferred facts against the actual
//! outputs), seeded random data, tolerance checks and fixed-size thread pools.

use crate::error::Result;
use crate::ir::attributes::{Attribute, Attributes};
use crate::ir::{Activation, BuildContext, Fact, Fusion, InferInput, Operator};
use crate::ops::{build, DEFAULT_DOMAIN};
use crate::tensor::Tensor;
use std::collections::BTreeMap;

/// An int attribute.
pub(crate) fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}
/// An ints attribute.
pub(crate) fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}
/// A float attribute.
pub(crate) fn float(v: f32) -> Attribute {
    Attribute::Float(v)
}
/// A string attribute.
pub(crate) fn string(v: &str) -> Attribute {
    Attribute::String(v.as_bytes().to_vec())
}
/// A strings attribute.
pub(crate) fn strings(v: &[&str]) -> Attribute {
    Attribute::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect())
}

/// Builds `op` at `opset` with attributes and constant inputs.
pub(crate) fn build_op(
    op: &str,
    opset: i64,
    attrs: &[(&str, Attribute)],
    consts: &[Option<&Tensor>],
    num_inputs: usize,
    num_outputs: usize,
) -> Result<Box<dyn Operator>> {
    build_fused(
        op,
        opset,
        attrs,
        &Fusion::NONE,
        consts,
        num_inputs,
        num_outputs,
    )
}

/// The fusion of activation `a` alone.
pub(crate) fn activation(a: Activation) -> Fusion {
    Fusion {
        activation: Some(a),
        ..Fusion::NONE
    }
}

/// Builds `op` as a fusion pass leaves it: with `fusion`.
pub(crate) fn build_fused(
    op: &str,
    opset: i64,
    attrs: &[(&str, Attribute)],
    fusion: &Fusion,
    consts: &[Option<&Tensor>],
    num_inputs: usize,
    num_outputs: usize,
) -> Result<Box<dyn Operator>> {
    let arity = (num_inputs, num_outputs);
    build_in(DEFAULT_DOMAIN, op, opset, attrs, fusion, consts, arity)
}

/// Builds `op` of `domain`: the one place a test node's [`BuildContext`] is
/// made; `arity` is (inputs, outputs).
pub(crate) fn build_in(
    domain: &str,
    op: &str,
    opset: i64,
    attrs: &[(&str, Attribute)],
    fusion: &Fusion,
    consts: &[Option<&Tensor>],
    (num_inputs, num_outputs): (usize, usize),
) -> Result<Box<dyn Operator>> {
    let map: BTreeMap<String, Attribute> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let attrs = Attributes::new("test_node", op, map);
    let ctx = BuildContext {
        attrs: &attrs,
        opset,
        consts,
        num_inputs,
        num_outputs,
        fusion,
    };
    build(domain, op, &ctx)
}

/// Infers, runs, and checks the outputs against the inferred facts.
pub(crate) fn infer_and_run(op: &dyn Operator, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let facts: Vec<Option<Fact>> = inputs.iter().map(|t| t.map(Fact::of)).collect();
    let infer_in: Vec<InferInput> = facts
        .iter()
        .map(|f| InferInput {
            fact: f.as_ref(),
            value: None,
        })
        .collect();
    let inferred = op.infer(&infer_in)?;
    let out = op.run(inputs)?;
    for (o, f) in out.iter().zip(&inferred) {
        assert_eq!(o.dtype(), f.dtype, "inferred type");
        if let Some(s) = &f.shape {
            assert_eq!(o.shape(), s.as_slice(), "inferred shape");
        }
    }
    let in_facts: Vec<Option<&Fact>> = facts.iter().map(|f| f.as_ref()).collect();
    let out_facts: Vec<Fact> = out.iter().map(Fact::of).collect();
    if out.first().is_some_and(|t| !t.is_empty()) {
        assert!(op.flops(&in_facts, &out_facts) > 0, "flops must not be 0");
    }
    Ok(out)
}

/// Builds (no constants) and runs `op`, checking inference.
pub(crate) fn run(
    op: &str,
    opset: i64,
    attrs: &[(&str, Attribute)],
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    run_fused(op, opset, attrs, &Fusion::NONE, inputs)
}

/// Builds `op` with `fusion` (no constants) and runs it, checking inference.
pub(crate) fn run_fused(
    op: &str,
    opset: i64,
    attrs: &[(&str, Attribute)],
    fusion: &Fusion,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let built = build_fused(op, opset, attrs, fusion, &[], inputs.len(), 1)?;
    infer_and_run(built.as_ref(), inputs)
}

/// A xorshift32 generator of pseudo-random u32 from `seed` (nonzero).
pub(crate) fn xorshift32(seed: u32) -> impl FnMut() -> u32 {
    let mut s = seed.max(1);
    move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s
    }
}

/// `n` pseudo-random values in [-1, 1) from `seed` (xorshift).
pub(crate) fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A random f32 tensor.
pub(crate) fn rand_tensor(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape, rand_vec(n, seed)).unwrap()
}

/// Asserts `|got - want| <= atol + rtol·|want|` elementwise.
pub(crate) fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= atol + rtol * w.abs() || (g.is_nan() && w.is_nan());
        assert!(ok, "element {i}: got {g}, want {w}");
    }
}

/// Asserts a tensor's values are close to `want`.
pub(crate) fn assert_tensor_close(t: &Tensor, want: &[f64], rtol: f64, atol: f64) {
    assert_close(&t.to_f64_vec().unwrap(), want, rtol, atol);
}

/// Runs `f` on a rayon pool of `threads` threads.
pub(crate) fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// The bit patterns of a float tensor's values.
pub(crate) fn bits(t: &Tensor) -> Vec<u64> {
    match t {
        Tensor::F32(a) => a.iter().map(|v| v.to_bits() as u64).collect(),
        Tensor::F64(a) => a.iter().map(|v| v.to_bits()).collect(),
        other => other
            .to_i64_vec()
            .unwrap()
            .into_iter()
            .map(|v| v as u64)
            .collect(),
    }
}
