//! The channel-blocked kernel against a direct sum with the same rounding
//! (bias, then one fused multiply-add per tap in kernel row-major order,
//! padding taps adding w·0): bit for bit, on both vector widths, into
//! planes and (for activations applied in registers) into NHWC.

use super::Blocked;
use crate::ir::attributes::Attributes;
use crate::ops::conv::conv_op::{plan, ConvPlan};
use crate::ops::conv::geom::WindowAttrs;
use crate::ops::gemm::fused::Activation;

/// A depthwise layer: `n` images of `c` channels `h × w`, `mg` outputs per
/// channel, a `k` kernel, `stride` and the pads before (top, left).
struct Layer {
    n: usize,
    c: usize,
    mg: usize,
    h: usize,
    w: usize,
    k: [usize; 2],
    stride: usize,
    pads: [usize; 2],
}

impl Layer {
    fn plan(&self) -> ConvPlan {
        let mut window = WindowAttrs::parse(&Attributes::default(), true).unwrap();
        window.strides = Some(vec![self.stride; 2]);
        // Ends differ from the beginnings: asymmetric padding.
        let [pt, pl] = self.pads;
        window.pads = Some(vec![pt, pl, pl, pt]);
        let m = self.c * self.mg;
        let x = [self.n, self.c, self.h, self.w];
        plan(&window, self.c, &x, &[m, 1, self.k[0], self.k[1]], None).unwrap()
    }
}

/// Deterministic values in [-1, 1), some exactly zero and negative zero
/// (the depthwise kernels' tests share them).
pub(in crate::ops::conv::depthwise) fn values(len: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.max(1);
    (0..len)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            match i % 29 {
                0 => 0.0,
                1 => -0.0,
                _ => (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0,
            }
        })
        .collect()
}

/// Output planes `first..first + rows` summed directly.
fn direct(
    p: &ConvPlan,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    act: Option<Activation>,
    first: usize,
    rows: usize,
) -> Vec<f32> {
    let win = &p.win;
    let (h, wd) = (win.input[0] as isize, win.input[1] as isize);
    let (oh, ow) = (win.output[0], win.output[1]);
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let mut out = Vec::new();
    for row in first..first + rows {
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
                // max(0, acc): −0 and NaN stay.
                let relu = act == Some(Activation::Relu);
                out.push(if relu && acc < 0.0 { 0.0 } else { acc });
            }
        }
    }
    // Any other activation on each whole plane.
    if let Some(a) = act.filter(|&a| a != Activation::Relu) {
        for o in out.chunks_exact_mut(oh * ow) {
            a.apply(o);
        }
    }
    out
}

/// Runs `layer` on both widths, whole and from a plane in the middle of
/// a block (as a parallel task starts), against [`direct`].
fn check(layer: Layer, act: Option<Activation>) {
    if !crate::ops::gemm::simd::has_avx2_fma() {
        return;
    }
    let p = layer.plan();
    let Some(wide) = Blocked::new(&p) else {
        panic!("the blocked kernel takes {:?}", p.win.output);
    };
    let plane = p.win.output[0] * p.win.output[1];
    let rows = layer.n * p.m;
    let x = values(layer.n * layer.c * layer.h * layer.w, 7);
    let w = values(p.m * layer.k[0] * layer.k[1], 11);
    let b = values(p.m, 13);
    let wt = super::transpose_weights(p.m, layer.k[0] * layer.k[1], &w);
    for k in [wide, wide.narrow()] {
        for first in [0, rows / 2, rows - 1] {
            let want = direct(&p, &x, &w, &b, act, first, rows - first);
            let mut got = vec![f32::NAN; want.len()];
            let mut scratch = vec![f32::NAN; k.scratch_len()];
            k.run(first, &mut got, &x, &wt, Some(&b), act, &mut scratch);
            let same = got
                .iter()
                .zip(&want)
                .all(|(g, e)| g.to_bits() == e.to_bits());
            assert!(same, "{:?} first {first} plane {plane}", k);
            if Blocked::takes_pixels(act) {
                check_pixels(&k, &p, first, &want, (&x, &wt, &b), act);
            }
        }
    }
}

/// [`Blocked::run_pixels`] from plane `first` on: the whole output in
/// NHWC order, planes `first ..` holding `want` (their planes, NCHW) with
/// the same bits, the earlier ones untouched.
fn check_pixels(
    k: &Blocked,
    p: &ConvPlan,
    first: usize,
    want: &[f32],
    (x, wt, b): (&[f32], &[f32], &[f32]),
    act: Option<Activation>,
) {
    let plane = p.win.output[0] * p.win.output[1];
    let total = p.n * p.m * plane;
    let mut got = vec![f32::NAN; total];
    let mut scratch = vec![f32::NAN; k.scratch_len()];
    let rows = want.len() / plane;
    // SAFETY: `got` holds the whole output, and nothing else borrows it.
    unsafe {
        k.run_pixels(
            first,
            rows,
            got.as_mut_ptr(),
            x,
            wt,
            Some(b),
            act,
            &mut scratch,
        )
    };
    for row in 0..p.n * p.m {
        let (ni, oc) = (row / p.m, row % p.m);
        for px in 0..plane {
            let g = got[(ni * plane + px) * p.m + oc];
            if row < first {
                assert!(g.is_nan(), "{k:?} first {first}: plane {row} written");
            } else {
                let e = want[(row - first) * plane + px];
                assert_eq!(
                    g.to_bits(),
                    e.to_bits(),
                    "{k:?} first {first} plane {row} pixel {px}"
                );
            }
        }
    }
}

#[test]
fn blocked_matches_direct_sums() {
    let (relu, swish) = (Some(Activation::Relu), Some(Activation::HardSwish));
    let (clip, sigmoid) = (
        Some(Activation::Clip(-0.25, 0.5)),
        Some(Activation::Sigmoid),
    );
    let l = |n, c, mg, h, w, k, stride, pads| Layer {
        n,
        c,
        mg,
        h,
        w,
        k,
        stride,
        pads,
    };
    // MobileNet v3's small planes: 5×5 and 3×3, strides 1 and 2, with 1-3
    // channels past the last block of 16 (and of 8).
    check(l(1, 35, 1, 7, 7, [5, 5], 1, [2, 2]), None);
    check(l(1, 40, 1, 7, 7, [5, 5], 1, [2, 2]), swish);
    check(l(1, 33, 1, 14, 14, [5, 5], 1, [2, 2]), clip);
    check(l(3, 16, 1, 7, 7, [3, 3], 1, [1, 1]), sigmoid);
    check(l(1, 34, 1, 8, 8, [3, 3], 1, [1, 1]), relu);
    check(l(1, 17, 1, 28, 28, [3, 3], 2, [1, 1]), None);
    check(l(1, 19, 1, 14, 14, [5, 5], 2, [2, 2]), relu);
    // ConvNeXt's 7×7 kernels.
    check(l(1, 9, 1, 7, 7, [7, 7], 1, [3, 3]), None);
    // Odd widths, uneven pads, a non-square kernel, two images and a
    // channel multiplier.
    check(l(2, 5, 2, 9, 13, [3, 5], 2, [0, 2]), swish);
    check(l(1, 3, 1, 11, 5, [3, 3], 1, [1, 0]), None);
    // Planes of fewer than 8 pixels (copied lane by lane) and of one.
    check(l(2, 7, 1, 2, 3, [3, 3], 1, [1, 1]), swish);
    check(l(1, 4, 3, 1, 1, [1, 1], 1, [0, 0]), None);
    // Wide planes for many taps (AVX-512 only): ConvNeXt's 7×7 on 56×56
    // and 28×28, MobileNet v3's 5×5 at stride 2 from 56×56, the widest
    // taken (64) and an odd width.
    if crate::ops::gemm::simd::has_avx512() {
        check(l(1, 17, 1, 56, 56, [7, 7], 1, [3, 3]), None);
        check(l(1, 18, 1, 28, 28, [7, 7], 1, [3, 3]), relu);
        check(l(1, 19, 1, 56, 56, [5, 5], 2, [2, 2]), swish);
        check(l(1, 3, 1, 21, 64, [5, 5], 1, [2, 2]), clip);
        check(l(1, 5, 1, 33, 37, [7, 7], 1, [3, 3]), sigmoid);
        // Unpadded stride 2 whose taps never read the last input row and
        // column (the 16-column layout change skips them), 16 channels
        // and 2 more.
        check(l(1, 18, 1, 34, 38, [5, 5], 2, [0, 0]), relu);
    }
}

/// The scratch may start anywhere: the kernel moves its start to a cache
/// line, and the results keep their bits at every offset.
#[test]
fn scratch_alignment_changes_no_bit() {
    if !crate::ops::gemm::simd::has_avx2_fma() {
        return;
    }
    let layer = Layer {
        n: 1,
        c: 20,
        mg: 1,
        h: 14,
        w: 14,
        k: [7, 7],
        stride: 1,
        pads: [3, 3],
    };
    let p = layer.plan();
    let k = Blocked::new(&p).expect("a 14×14 plane is blocked");
    let rows = p.m;
    let x = values(layer.c * layer.h * layer.w, 3);
    let w = values(p.m * 49, 5);
    let b = values(p.m, 9);
    let wt = super::transpose_weights(p.m, 49, &w);
    let want = direct(&p, &x, &w, &b, None, 0, rows);
    let mut backing = vec![f32::NAN; k.scratch_len() + 16];
    for offset in 0..16 {
        let scratch = &mut backing[offset..offset + k.scratch_len()];
        let mut got = vec![f32::NAN; want.len()];
        k.run(0, &mut got, &x, &wt, Some(&b), None, scratch);
        let same = got
            .iter()
            .zip(&want)
            .all(|(g, e)| g.to_bits() == e.to_bits());
        assert!(same, "scratch offset {offset}");
    }
}

/// Wide rows stay on the per-plane kernel.
#[test]
fn wide_rows_stay_per_plane() {
    let l = Layer {
        n: 1,
        c: 8,
        mg: 1,
        h: 56,
        w: 56,
        k: [3, 3],
        stride: 1,
        pads: [1, 1],
    };
    assert!(Blocked::new(&l.plan()).is_none());
    // Many taps: blocked up to 64 wide with AVX-512, per plane past it.
    let many = |w| Layer {
        w,
        k: [7, 7],
        pads: [3, 3],
        ..l
    };
    let avx512 = crate::ops::gemm::simd::has_avx512();
    assert_eq!(Blocked::new(&many(64).plan()).is_some(), avx512);
    assert!(Blocked::new(&many(65).plan()).is_none());
}
