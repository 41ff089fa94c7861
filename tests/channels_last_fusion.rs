//! A depthwise Conv read only by a Transpose(0, 2, 3, 1) writes NHWC
//! itself (ConvNeXt's blocks), as does a patch-embedding Conv (kernel =
//! stride, ConvNeXt's and Swin's stems): the fused graph gives the unfused graph's
//! bits, on one thread and on two, over edge sizes (channels past a
//! vector, odd widths, asymmetric pads, strides, two images); the fusion
//! does not fire where the Conv's output has another reader or is a graph
//! output, where the permutation differs, or where the activation is not
//! applied in registers.

mod common;

use common::*;
use model_builder::onnx_protobuf::NodeProto;
use ramify::{Mode, SessionBuilder, Tensor};

fn seq(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.max(1);
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            if i % 31 == 0 {
                -0.0
            } else {
                (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
            }
        })
        .collect()
}

/// A depthwise layer and what follows it.
#[derive(Clone, Copy)]
struct Layer {
    n: i64,
    c: i64,
    h: i64,
    w: i64,
    k: i64,
    stride: i64,
    /// Pads before (top, left); the ends are swapped.
    pads: [i64; 2],
    /// An activation node between the Conv and the Transpose.
    act: Option<&'static str>,
    perm: [i64; 4],
}

fn layer(n: i64, c: i64, h: i64, w: i64, k: i64, stride: i64, pads: [i64; 2]) -> Layer {
    Layer {
        n,
        c,
        h,
        w,
        k,
        stride,
        pads,
        act: None,
        perm: [0, 2, 3, 1],
    }
}

impl Layer {
    fn out(&self) -> [i64; 2] {
        let [pt, pl] = self.pads;
        let o = |i: i64, pad: i64| (i + 2 * pad - self.k) / self.stride + 1;
        [o(self.h, pt), o(self.w, pl)]
    }

    /// The model; `extra` adds nodes reading `c` (the Conv's output) and
    /// graph outputs.
    fn model(&self, extra: &[NodeProto], also_out: &[(&str, &[i64])]) -> Vec<u8> {
        let mut conv = node("Conv", &["x", "w", "b"], &["c"]);
        let [pt, pl] = self.pads;
        conv.attribute.push(int_attr("group", self.c));
        conv.attribute
            .push(ints_attr("kernel_shape", &[self.k, self.k]));
        conv.attribute
            .push(ints_attr("strides", &[self.stride, self.stride]));
        conv.attribute.push(ints_attr("pads", &[pt, pl, pl, pt]));
        let mut nodes = vec![conv];
        let t_in = match self.act {
            Some(a) => {
                nodes.push(node(a, &["c"], &["a"]));
                "a"
            }
            None => "c",
        };
        let mut t = node("Transpose", &[t_in], &["y"]);
        t.attribute.push(ints_attr("perm", &self.perm));
        nodes.push(t);
        nodes.extend(extra.iter().cloned());
        let [oh, ow] = self.out();
        let dims = [self.n, self.c, oh, ow];
        let y: Vec<i64> = self.perm.iter().map(|&a| dims[a as usize]).collect();
        let mut outs = vec![value_info("y", 1, &y)];
        outs.extend(also_out.iter().map(|(name, d)| value_info(name, 1, d)));
        let (c, k) = (self.c as usize, self.k as usize);
        let m = model(
            graph(
                nodes,
                vec![value_info("x", 1, &[self.n, self.c, self.h, self.w])],
                outs,
                vec![
                    initializer("w", &[self.c, 1, self.k, self.k], &seq(c * k * k, 5)),
                    initializer("b", &[self.c], &seq(c, 9)),
                ],
            ),
            13,
        );
        bytes(&m)
    }

    fn input(&self) -> Tensor {
        let d = [self.n, self.c, self.h, self.w].map(|v| v as usize);
        Tensor::from_vec(&d, seq(d.iter().product(), 3)).unwrap()
    }
}

/// Every output's bits and the node count, with or without the fusions,
/// on `cpus` threads.
fn run(model: &[u8], x: &Tensor, fusion: bool, cpus: usize) -> (Vec<Vec<u32>>, usize, bool) {
    let s = SessionBuilder::new()
        .fusion(fusion)
        .mode(Mode::Serial)
        .cpus(cpus)
        .oversubscribe(true)
        .build_from_bytes(model)
        .unwrap();
    let out = s.run([("x", x.clone())]).unwrap();
    let fused = s.graph().nodes.iter().any(|n| n.fusion.channels_last);
    (
        out.iter().map(|(_, t)| f32_bits(t)).collect(),
        s.graph().nodes.len(),
        fused,
    )
}

/// Whether the channel-blocked kernel (which writes NHWC) runs here, for
/// output rows `ow` wide and `taps` taps.
fn blocked_here(ow: i64, taps: i64) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        let avx512 = is_x86_feature_detected!("avx512f");
        let widest = if taps > 9 && avx512 {
            64
        } else if taps > 9 || avx512 {
            16
        } else {
            8
        };
        avx2 && ow <= widest
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (ow, taps);
        false
    }
}

/// Fused and unfused runs give the same bits on 1 and 2 threads; returns
/// whether the fusion fired.
fn check(l: Layer, extra: &[NodeProto], also_out: &[(&str, &[i64])]) -> bool {
    let m = l.model(extra, also_out);
    let x = l.input();
    let (plain, n_plain, _) = run(&m, &x, false, 1);
    let mut fired = None;
    for cpus in [1, 2] {
        let (got, n, f) = run(&m, &x, true, cpus);
        assert_eq!(got, plain, "{cpus} threads");
        assert!(fired.is_none_or(|g| g == f));
        fired = Some(f);
        if f {
            assert_eq!(n + 1 + usize::from(l.act.is_some()), n_plain);
        }
    }
    fired == Some(true)
}

#[test]
fn fused_depthwise_writes_nhwc_with_the_unfused_bits() {
    let cases = [
        // ConvNeXt's 7×7 on 14² and 7² (a vector's worth of channels, and
        // channels past the last vector of 16 and of 8).
        layer(1, 96, 14, 14, 7, 1, [3, 3]),
        layer(1, 21, 7, 7, 7, 1, [3, 3]),
        // Two images whose channels do not fill the last vector (blocks
        // cross the images), odd widths, asymmetric pads.
        layer(2, 19, 9, 13, 5, 1, [2, 1]),
        layer(2, 5, 11, 5, 3, 1, [1, 0]),
        // Strided, and a plane of fewer than 8 pixels.
        layer(1, 34, 15, 15, 3, 2, [1, 1]),
        layer(3, 7, 2, 3, 3, 1, [1, 1]),
        // Enough work to split over two threads.
        layer(1, 384, 14, 14, 7, 1, [3, 3]),
    ];
    for l in cases {
        let [_, ow] = l.out();
        let fired = check(l, &[], &[]);
        assert_eq!(
            fired,
            blocked_here(ow, l.k * l.k),
            "{:?}",
            [l.n, l.c, l.h, l.w, l.k]
        );
    }
    // ConvNeXt's 56² and 28² planes: blocked with AVX-512.
    for l in [
        layer(1, 24, 28, 28, 7, 1, [3, 3]),
        layer(1, 17, 56, 56, 7, 1, [3, 3]),
    ] {
        assert_eq!(check(l, &[], &[]), blocked_here(l.out()[1], 49));
    }
    // Wide planes stay on the per-plane kernel: no fusion.
    assert!(!check(layer(1, 8, 80, 80, 7, 1, [3, 3]), &[], &[]));
}

#[test]
fn activations_in_registers_fuse_others_do_not() {
    let base = layer(1, 20, 7, 7, 7, 1, [3, 3]);
    let relu = Layer {
        act: Some("Relu"),
        ..base
    };
    assert_eq!(check(relu, &[], &[]), blocked_here(7, 49));
    let sigmoid = Layer {
        act: Some("Sigmoid"),
        ..base
    };
    assert!(!check(sigmoid, &[], &[]));
}

#[test]
fn other_readers_outputs_and_perms_keep_the_transpose() {
    let l = layer(1, 20, 7, 7, 7, 1, [3, 3]);
    // The Conv's output read by another node too.
    let relu = node("Relu", &["c"], &["r"]);
    assert!(!check(l, &[relu], &[("r", &[1, 20, 7, 7])]));
    // The Conv's output a graph output.
    assert!(!check(l, &[], &[("c", &[1, 20, 7, 7])]));
    // Other permutations.
    for perm in [[0, 3, 2, 1], [0, 2, 1, 3], [0, 1, 3, 2], [1, 2, 3, 0]] {
        assert!(!check(Layer { perm, ..l }, &[], &[]), "{perm:?}");
    }
}

/// Whether the patch kernel (whose product is position-major) runs here:
/// x86-64 with AVX2 and FMA.
fn patches_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A patch-embedding Conv (`m` outputs, kernel `k` = stride, no pads) on
/// `[n, c, h, w]`, optionally a Relu, then Transpose(0, 2, 3, 1).
fn patch_model(n: i64, c: i64, h: i64, w: i64, m: i64, k: i64, relu: bool) -> Vec<u8> {
    let mut conv = node("Conv", &["x", "w", "b"], &["c"]);
    conv.attribute.push(ints_attr("kernel_shape", &[k, k]));
    conv.attribute.push(ints_attr("strides", &[k, k]));
    let mut nodes = vec![conv];
    if relu {
        nodes.push(node("Relu", &["c"], &["a"]));
    }
    let mut t = node("Transpose", &[if relu { "a" } else { "c" }], &["y"]);
    t.attribute.push(ints_attr("perm", &[0, 2, 3, 1]));
    nodes.push(t);
    let (kk, mm) = ((c * k * k) as usize, m as usize);
    bytes(&model(
        graph(
            nodes,
            vec![value_info("x", 1, &[n, c, h, w])],
            vec![value_info("y", 1, &[n, h / k, w / k, m])],
            vec![
                initializer("w", &[m, c, k, k], &seq(mm * kk, 5)),
                initializer("b", &[m], &seq(mm, 9)),
            ],
        ),
        13,
    ))
}

#[test]
fn fused_patch_embedding_writes_nhwc_with_the_unfused_bits() {
    // ConvNeXt's and Swin's 4×4/4 stem (smaller), ViT's 16×16/16 with an
    // output count off the GEMM's panel width, a 2×2/2 layer over two
    // images whose input rows are not a multiple of the kernel, and a Relu.
    let cases = [
        (1, 3, 32, 32, 96, 4, false),
        (1, 3, 48, 48, 19, 16, false),
        (2, 5, 13, 11, 24, 2, false),
        (1, 3, 32, 32, 40, 4, true),
    ];
    for (n, c, h, w, m, k, relu) in cases {
        let bytes = patch_model(n, c, h, w, m, k, relu);
        let x = {
            let d = [n, c, h, w].map(|v| v as usize);
            Tensor::from_vec(&d, seq(d.iter().product(), 3)).unwrap()
        };
        let (plain, n_plain, _) = run(&bytes, &x, false, 1);
        for cpus in [1, 2] {
            let (got, nodes, fused) = run(&bytes, &x, true, cpus);
            assert_eq!(got, plain, "{:?} on {cpus} threads", (n, c, h, w, m, k));
            assert_eq!(fused, patches_here(), "{:?}", (n, c, h, w, m, k));
            if fused {
                assert_eq!(nodes + 1 + usize::from(relu), n_plain);
            }
        }
    }
}
