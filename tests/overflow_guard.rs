//! The int8 overflow guard (seed 001) end to end: a MatMulInteger whose
//! inputs saturate the narrow kernel's i16 pair sums (255 · 127 twice).
//! With the guard, the result is the exact int32 product and the run's
//! report counts the recomputed tiles; with the guard forced off, the
//! saturated sums come out, which is what the guard prevents. The narrow
//! kernel is AVX2's: elsewhere it falls back to the portable one, which
//! never saturates, so this is an x86-64 test.
#![cfg(target_arch = "x86_64")]

mod common;

use common::*;
use ramify::{Int8Kernel, Int8Settings, RunOptions, SessionBuilder, Tensor};

const M: usize = 4;
const K: usize = 64;
const N: usize = 40;

/// `Y = MatMulInteger(A, B)`: A u8 [M, K] an input, B s8 [K, N] constant.
fn matmul_integer() -> Vec<u8> {
    let mut b = onnx_protobuf::TensorProto::new();
    b.name = "b".into();
    b.data_type = 3; // INT8
    b.dims = vec![K as i64, N as i64];
    // Column 0..20 all 127 (saturating with A's 255s); the rest small.
    b.raw_data = (0..K * N)
        .map(|i| if i % N < 20 { 127u8 } else { (i % 5) as u8 })
        .collect();
    let m = model(
        graph(
            vec![node("MatMulInteger", &["a", "b"], &["y"])],
            vec![value_info("a", 2, &[M as i64, K as i64])],
            vec![value_info("y", 6, &[M as i64, N as i64])],
            vec![b],
        ),
        13,
    );
    bytes(&m)
}

fn exact(a: &[u8]) -> Vec<i32> {
    let b = |k: usize, n: usize| {
        if n < 20 {
            127
        } else {
            ((k * N + n) % 5) as i32
        }
    };
    (0..M * N)
        .map(|i| {
            (0..K)
                .map(|k| a[(i / N) * K + k] as i32 * b(k, i % N))
                .sum()
        })
        .collect()
}

#[test]
fn the_guard_recomputes_what_the_narrow_kernel_saturates() {
    if !std::arch::is_x86_feature_detected!("avx2") {
        return;
    }
    let session = SessionBuilder::new()
        .cpus(1)
        .build_from_bytes(&matmul_integer())
        .unwrap();
    // Rows 0 and 2 all 255; rows 1 and 3 small.
    let a: Vec<u8> = (0..M * K)
        .map(|i| {
            if (i / K).is_multiple_of(2) {
                255
            } else {
                (i % 9) as u8
            }
        })
        .collect();
    let want = exact(&a);
    let run = |settings: Int8Settings| {
        let input = Tensor::from_vec(&[M, K], a.clone()).unwrap();
        let (out, report) = session
            .run_with_options([("a", input)], &RunOptions::new().int8(settings))
            .unwrap();
        let y: Vec<i32> = out[0].1.view::<i32>().unwrap().iter().copied().collect();
        (y, report.int8_recomputed)
    };
    let narrow = |guard| Int8Settings {
        kernel: Int8Kernel::Narrow,
        guard,
    };
    let (guarded, recomputed) = run(narrow(true));
    assert_eq!(guarded, want);
    assert!(recomputed >= 1, "the saturated tile was recomputed");
    let (unguarded, none) = run(narrow(false));
    assert_eq!(none, 0);
    assert_ne!(unguarded, want, "without the guard the sums saturate");
    // Row 0, column 0: 32 pair sums each clipped to 32767 instead of 64770.
    assert_eq!(want[0], 255 * 127 * K as i32);
    assert!(unguarded[0] < want[0]);
    // The exact kernels need no guard.
    for kernel in [Int8Kernel::Portable, Int8Kernel::Auto] {
        let (y, _) = run(Int8Settings {
            kernel,
            guard: true,
        });
        assert_eq!(y, want, "{kernel:?}");
    }
    let (_, portable_recomputed) = run(Int8Settings {
        kernel: Int8Kernel::Portable,
        guard: true,
    });
    assert_eq!(portable_recomputed, 0);
}
