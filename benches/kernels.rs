//! Criterion benchmarks of the heavy kernels through the public API: Conv
//! 1×1, 3×3 and depthwise, MatMul, and the whole example model, each on one
//! and on two threads (serial mode, so the kernel's own intra-operator split
//! is what is measured).
//!
//! Run with `cargo bench --bench kernels`.

// `criterion_main!` below writes an undocumented `main`.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use onnx_protobuf::{
    tensor_shape_proto::{dimension::Value as DimValue, Dimension},
    type_proto::{Tensor as TypeTensor, Value as TypeValue},
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use ramify::{Mode, Session, SessionBuilder, Tensor};
use std::hint::black_box;

fn value_info(name: &str, dims: &[usize]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for &d in dims {
        let mut dim = Dimension::new();
        dim.value = Some(DimValue::DimValue(d as i64));
        shape.dim.push(dim);
    }
    let mut tt = TypeTensor::new();
    tt.elem_type = 1;
    tt.shape = Some(shape).into();
    let mut tp = TypeProto::new();
    tp.value = Some(TypeValue::TensorType(tt));
    let mut vi = ValueInfoProto::new();
    vi.name = name.into();
    vi.type_ = Some(tp).into();
    vi
}

/// A deterministic pseudo-random f32 initializer.
fn weights(name: &str, dims: &[usize]) -> TensorProto {
    let n: usize = dims.iter().product();
    let mut state = 0x2545_f491_u32;
    let data = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32 - 0.5) * 0.1
        })
        .collect();
    let mut t = TensorProto::new();
    t.name = name.into();
    t.data_type = 1;
    t.dims = dims.iter().map(|&d| d as i64).collect();
    t.float_data = data;
    t
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.into();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::INTS.into();
    a.ints = v.to_vec();
    a
}

/// One-node model `y = op(x, w)` with the given attributes.
fn one_node(
    op: &str,
    x: &[usize],
    w: &[usize],
    y: &[usize],
    attrs: Vec<AttributeProto>,
) -> Vec<u8> {
    let mut node = NodeProto::new();
    node.op_type = op.into();
    node.input = vec!["x".into(), "w".into()];
    node.output = vec!["y".into()];
    node.attribute = attrs;
    let mut g = GraphProto::new();
    g.name = op.into();
    g.node.push(node);
    g.initializer.push(weights("w", w));
    g.input.push(value_info("x", x));
    g.output.push(value_info("y", y));
    let mut m = ModelProto::new();
    m.ir_version = 8;
    let mut opset = OperatorSetIdProto::new();
    opset.version = 17;
    m.opset_import.push(opset);
    m.graph = Some(g).into();
    m.write_to_bytes().expect("serialize")
}

fn session(bytes: &[u8], threads: usize) -> Session {
    SessionBuilder::new()
        .mode(Mode::Serial)
        .cpus(threads)
        .build_from_bytes(bytes)
        .expect("session")
}

fn input(dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    Tensor::from_vec(dims, (0..n).map(|i| (i % 17) as f32 * 0.05).collect()).expect("input")
}

fn kernels(c: &mut Criterion) {
    let conv = |k: i64, group: i64| {
        let p = k / 2;
        vec![
            ints("kernel_shape", &[k, k]),
            ints("pads", &[p, p, p, p]),
            {
                let mut a = AttributeProto::new();
                a.name = "group".into();
                a.type_ = onnx_protobuf::attribute_proto::AttributeType::INT.into();
                a.i = group;
                a
            },
        ]
    };
    let cases: Vec<(&str, Vec<u8>, Vec<usize>)> = vec![
        (
            "conv1x1_256x28x28",
            one_node(
                "Conv",
                &[1, 256, 28, 28],
                &[256, 256, 1, 1],
                &[1, 256, 28, 28],
                conv(1, 1),
            ),
            vec![1, 256, 28, 28],
        ),
        (
            "conv3x3_64x56x56",
            one_node(
                "Conv",
                &[1, 64, 56, 56],
                &[64, 64, 3, 3],
                &[1, 64, 56, 56],
                conv(3, 1),
            ),
            vec![1, 64, 56, 56],
        ),
        (
            "depthwise3x3_128x56x56",
            one_node(
                "Conv",
                &[1, 128, 56, 56],
                &[128, 1, 3, 3],
                &[1, 128, 56, 56],
                conv(3, 128),
            ),
            vec![1, 128, 56, 56],
        ),
        (
            "matmul_256x512x512",
            one_node("MatMul", &[256, 512], &[512, 512], &[256, 512], vec![]),
            vec![256, 512],
        ),
    ];
    let model = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/models/inception_mini.onnx"
    ))
    .expect("example model");
    let mut group = c.benchmark_group("kernels");
    group.sample_size(20);
    for threads in [1usize, 2] {
        for (name, bytes, dims) in &cases {
            let s = session(bytes, threads);
            let x = input(dims);
            group.bench_with_input(BenchmarkId::new(*name, threads), &threads, |b, _| {
                b.iter(|| black_box(s.run([("x", x.clone())]).expect("run")))
            });
        }
        let s = session(&model, threads);
        let x = input(&[1, 3, 96, 96]);
        group.bench_with_input(
            BenchmarkId::new("inception_mini", threads),
            &threads,
            |b, _| b.iter(|| black_box(s.run([("input", x.clone())]).expect("run"))),
        );
    }
    group.finish();
}

criterion_group!(benches, kernels);
criterion_main!(benches);
