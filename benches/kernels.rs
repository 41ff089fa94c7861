//! Criterion benchmarks of the heavy kernels through the public API: Conv
//! 1×1, 3×3 and depthwise, MatMul, and the whole example model, each on one
//! and on two threads (serial mode, so the kernel's own intra-operator split
//! is what is measured).
//!
//! Run with `cargo bench --bench kernels`.

// `criterion_main!` below writes an undocumented `main`.
#![allow(missing_docs)]

/// Tensors start on a cache line, as in the command line and the C
/// library (see `ramify::AlignedAllocator`).
#[global_allocator]
static ALLOCATOR: ramify::AlignedAllocator = ramify::AlignedAllocator;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use model_builder::onnx_protobuf::{AttributeProto, TensorProto};
use model_builder::{bytes, graph, initializer, ints_attr as ints, model, named_node, FLOAT};
use ramify::{Mode, Session, SessionBuilder, Tensor};
use std::hint::black_box;

/// The dims as ONNX writes them.
fn dims64(dims: &[usize]) -> Vec<i64> {
    dims.iter().map(|&d| d as i64).collect()
}

/// A deterministic pseudo-random f32 initializer.
fn weights(name: &str, dims: &[usize]) -> TensorProto {
    let n: usize = dims.iter().product();
    let mut state = 0x2545_f491_u32;
    let data: Vec<f32> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32 - 0.5) * 0.1
        })
        .collect();
    initializer(name, &dims64(dims), &data)
}

/// One-node model `y = op(x, w)` with the given attributes.
fn one_node(
    op: &str,
    x: &[usize],
    w: &[usize],
    y: &[usize],
    attrs: Vec<AttributeProto>,
) -> Vec<u8> {
    let mut node = named_node("", op, &["x", "w"], &["y"]);
    node.attribute = attrs;
    let mut g = graph(
        vec![node],
        vec![model_builder::value_info("x", FLOAT, &dims64(x))],
        vec![model_builder::value_info("y", FLOAT, &dims64(y))],
        vec![weights("w", w)],
    );
    g.name = op.into();
    bytes(&model(g, 17))
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
