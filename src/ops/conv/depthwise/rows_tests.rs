//! The AVX-512 rows kernel against the phase-split path it replaces and a
//! direct sum with the same rounding (bias, then one fused multiply-add
//! per tap in kernel row-major order, padding taps adding w·0, then the
//! residual and the activation): bit for bit, and the same bits on 1 and 2
//! threads.

use super::blocked::tests::values;
use super::rows::Rows;
use crate::ir::attributes::Attributes;
use crate::ops::conv::conv_op::{add_residual, plan, ConvPlan};
use crate::ops::conv::geom::WindowAttrs;
use crate::ops::gemm::fused::Activation;
use crate::ops::testutil::with_threads;

/// A depthwise layer: `n` images of `c` channels `h × w`, `mg` outputs per
/// channel, a `k` kernel, strides and pads (top, left, bottom, right).
#[derive(Debug, Clone, Copy)]
pub(super) struct Layer {
    n: usize,
    c: usize,
    mg: usize,
    h: usize,
    w: usize,
    k: [usize; 2],
    stride: [usize; 2],
    pads: [usize; 4],
}

impl Layer {
    pub(super) fn plan(&self) -> ConvPlan {
        let mut window = WindowAttrs::parse(&Attributes::default(), true).unwrap();
        window.strides = Some(self.stride.to_vec());
        let [pt, pl, pb, pr] = self.pads;
        window.pads = Some(vec![pt, pl, pb, pr]);
        let m = self.c * self.mg;
        let x = [self.n, self.c, self.h, self.w];
        plan(&window, self.c, &x, &[m, 1, self.k[0], self.k[1]], None).unwrap()
    }
}

/// The layer summed directly, output by output (also the reference of
/// the phase path's AVX-512 tests).
pub(super) fn direct(
    p: &ConvPlan,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    z: Option<&[f32]>,
    act: Option<Activation>,
) -> Vec<f32> {
    let win = &p.win;
    let (h, wd) = (win.input[0] as isize, win.input[1] as isize);
    let (oh, ow) = (win.output[0], win.output[1]);
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let mut out = Vec::new();
    for row in 0..p.n * p.m {
        let (ni, oc) = (row / p.m, row % p.m);
        let plane = &x[(ni * p.c + oc / p.mg()) * (h * wd) as usize..];
        for oy in 0..oh {
            for ox in 0..ow {
                let mut acc = b[oc];
                for ky in 0..kh {
                    for kx in 0..kw {
                        let iy = (oy * win.strides[0] + ky) as isize - win.pad_begin[0] as isize;
                        let ix = (ox * win.strides[1] + kx) as isize - win.pad_begin[1] as isize;
                        let inside = (0..h).contains(&iy) && (0..wd).contains(&ix);
                        let v = if inside {
                            plane[(iy * wd + ix) as usize]
                        } else {
                            0.0
                        };
                        acc = w[oc * kh * kw + ky * kw + kx].mul_add(v, acc);
                    }
                }
                if let Some(z) = z {
                    acc += z[out.len()];
                }
                out.push(act.map_or(acc, |a| a.eval(acc)));
            }
        }
    }
    out
}

/// Runs `layer` on the rows kernel (1 and 2 threads) against the phase
/// path and [`direct`], with and without a residual.
fn check(layer: Layer, act: Option<Activation>) {
    if !crate::ops::gemm::simd::has_avx512() {
        return;
    }
    let p = layer.plan();
    let k = Rows::new(&p).unwrap_or_else(|| panic!("the rows kernel takes {layer:?}"));
    let len = p.n * p.m * p.win.out_len();
    let x = values(layer.n * layer.c * layer.h * layer.w, 7);
    let w = values(p.m * layer.k[0] * layer.k[1], 11);
    let b = values(p.m, 13);
    let zs = values(len, 17);
    for z in [None, Some(&zs[..])] {
        let want = direct(&p, &x, &w, &b, z, act);
        // The phase path: the activation waits for the residual.
        let mut old = vec![f32::NAN; len];
        let inner = if z.is_some() { None } else { act };
        super::depthwise_2d(&p, &x, &w, Some(&b), inner, &mut old);
        add_residual(&mut old, z, act);
        let run = |threads| {
            with_threads(threads, || {
                let mut got = vec![f32::NAN; len];
                k.run(&x, &w, Some(&b), z, act, &mut got);
                got
            })
        };
        let (one, two) = (run(1), run(2));
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let what = format!("{layer:?} {act:?} residual {}", z.is_some());
        assert_eq!(bits(&one), bits(&want), "direct: {what}");
        assert_eq!(bits(&one), bits(&old), "phase path: {what}");
        assert_eq!(bits(&one), bits(&two), "threads: {what}");
    }
}

pub(super) fn l(
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    s: usize,
    pads: [usize; 4],
) -> Layer {
    Layer {
        n,
        c,
        mg: 1,
        h,
        w,
        k: [k, k],
        stride: [s, s],
        pads,
    }
}

#[test]
fn mobilenet_and_convnext_shapes() {
    let (relu, swish) = (Some(Activation::Relu), Some(Activation::HardSwish));
    // MobileNet v3: 3×3 at 112² (s1 and s2), 5×5 s2 at 56², 5×5 s1 at 28².
    check(l(1, 2, 112, 112, 3, 1, [1, 1, 1, 1]), relu);
    check(l(1, 3, 112, 112, 3, 2, [1, 1, 1, 1]), relu);
    check(l(1, 2, 56, 56, 5, 2, [2, 2, 2, 2]), swish);
    check(l(1, 3, 28, 28, 5, 1, [2, 2, 2, 2]), swish);
    // ConvNeXt's 7×7 at 56² and 28².
    check(l(1, 2, 56, 56, 7, 1, [3, 3, 3, 3]), None);
    check(l(2, 2, 28, 28, 7, 1, [3, 3, 3, 3]), None);
}

/// The epilogues the tests run: none, those applied in registers (Relu,
/// Clip, hard-swish) and two applied after the stores.
const ACTS: [Option<Activation>; 6] = [
    None,
    Some(Activation::Relu),
    Some(Activation::Clip(-0.25, 0.5)),
    Some(Activation::HardSwish),
    Some(Activation::Sigmoid),
    Some(Activation::LeakyRelu(0.1)),
];

#[test]
fn widths_pads_and_activations() {
    let acts = ACTS;
    // Output widths 17 to 130, odd heights, asymmetric pads (some past the
    // kernel's reach), strides 1 and 2, kernels 3, 5 and 7.
    let cases = [
        l(1, 2, 9, 17, 3, 1, [1, 1, 1, 1]),
        l(2, 3, 7, 31, 5, 1, [0, 2, 3, 1]),
        l(1, 2, 11, 47, 7, 1, [3, 0, 0, 3]),
        l(1, 1, 5, 65, 3, 1, [2, 4, 0, 0]),
        l(1, 2, 13, 100, 5, 1, [2, 2, 2, 2]),
        l(1, 1, 3, 130, 7, 1, [3, 3, 3, 3]),
        l(1, 2, 9, 35, 3, 2, [1, 1, 1, 1]),
        l(2, 2, 15, 66, 5, 2, [2, 1, 0, 2]),
        l(1, 1, 17, 95, 7, 2, [3, 3, 3, 3]),
        l(1, 2, 7, 130, 3, 2, [0, 0, 1, 1]),
        l(1, 1, 21, 259, 5, 2, [2, 2, 2, 2]),
    ];
    for (i, layer) in cases.into_iter().enumerate() {
        check(layer, acts[i % acts.len()]);
    }
}

#[test]
fn other_shapes() {
    let swish = Some(Activation::HardSwish);
    // A channel multiplier, a non-square kernel, mixed strides, a kernel
    // taller than the input, and a vertical stride of 3.
    let mut m = l(2, 3, 10, 40, 3, 1, [1, 1, 1, 1]);
    m.mg = 2;
    check(m, swish);
    let mut wide = l(1, 2, 9, 50, 3, 1, [1, 2, 1, 2]);
    wide.k = [3, 5];
    wide.stride = [2, 1];
    check(wide, None);
    let mut tall = l(1, 2, 2, 40, 5, 1, [2, 2, 2, 2]);
    tall.k = [5, 1];
    tall.stride = [3, 2];
    check(tall, Some(Activation::Relu));
}

/// Narrow planes stay on the other kernels.
#[test]
fn narrow_planes_are_left_alone() {
    let p = l(1, 4, 16, 16, 3, 1, [1, 1, 1, 1]).plan();
    assert!(Rows::new(&p).is_none());
    let dilated = {
        let mut window = WindowAttrs::parse(&Attributes::default(), true).unwrap();
        window.dilations = Some(vec![2, 2]);
        plan(&window, 2, &[1, 2, 40, 40], &[2, 1, 3, 3], None).unwrap()
    };
    assert!(Rows::new(&dilated).is_none());
}

/// (images, h, w, [kh, kw], vertical stride, pads).
type Case = (usize, usize, usize, [usize; 2], usize, [usize; 4]);

/// Stride 2 on the loop that splits the input rows into halves: output
/// widths around the vector width, every kernel width 1 to 7 (with
/// heights 1 to 7), pads from none to past the kernel's reach, vertical
/// strides 1 and 2 (and 3, which stays on the in-place loop), odd heights,
/// two images and a channel multiplier, every activation.
#[test]
fn stride_two_split_rows() {
    let acts = ACTS;
    // (images, h, w, [kh, kw], vertical stride, pads): output widths 17,
    // 32, 33, 48, 49, 64, 65 and more; MobileNet v3's 56 (4 of the 5
    // vectors of each half split).
    let cases: [Case; 15] = [
        (1, 9, 33, [3, 3], 2, [1, 1, 1, 1]),
        (1, 7, 63, [3, 3], 2, [1, 1, 1, 1]),
        (2, 13, 65, [3, 3], 2, [1, 1, 1, 1]),
        (1, 11, 95, [5, 5], 2, [2, 2, 2, 2]),
        (1, 8, 97, [5, 5], 2, [2, 2, 2, 2]),
        (1, 9, 128, [7, 7], 2, [3, 3, 3, 3]),
        (1, 5, 129, [1, 1], 2, [0, 0, 0, 0]),
        (1, 6, 40, [4, 4], 2, [1, 1, 2, 2]),
        (1, 7, 50, [2, 6], 2, [0, 2, 1, 3]),
        (1, 9, 50, [3, 3], 2, [0, 0, 1, 1]),
        (1, 5, 50, [3, 3], 2, [2, 5, 2, 5]),
        (1, 9, 70, [3, 5], 1, [1, 2, 1, 2]),
        (2, 12, 66, [5, 3], 1, [2, 1, 2, 1]),
        (1, 13, 45, [3, 3], 3, [1, 1, 1, 1]),
        (1, 11, 112, [3, 3], 2, [1, 1, 1, 1]),
    ];
    for (i, (n, h, w, k, sh, pads)) in cases.into_iter().enumerate() {
        let layer = Layer {
            n,
            c: 2,
            mg: 1 + i % 2,
            h,
            w,
            k,
            stride: [sh, 2],
            pads,
        };
        check(layer, acts[i % acts.len()]);
    }
}
