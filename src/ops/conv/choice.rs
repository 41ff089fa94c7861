//! Which kernel a Conv runs: [`choose`] asks, once per input shape, the
//! same questions the kernels' entry points used to ask on every run (the
//! layer's sizes, the data type, the CPU's features), in the order of
//! preference; the node keeps the answer per shape in [`Choices`], and the
//! run executes exactly the chosen kernel.

use super::conv_op::{is_pointwise, ConvPlan};
use super::tap_kernel::Isa;
use super::{direct, grouped, im2col, implicit, patches, pointwise, winograd};
use std::sync::RwLock;

/// The kernel a Conv call runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Algorithm {
    /// No input channels or no taps: the output is the bias alone.
    BiasOnly,
    /// One input channel per group: the direct depthwise kernel.
    Depthwise,
    /// 1×1, stride 1, unpadded, on the panel GEMM (f32).
    Pointwise,
    /// 1×1, stride 1, unpadded, on a small plane: Yᵀ tiles over output
    /// channels (f32, AVX-512).
    PointwiseColumns,
    /// 1×1, stride 1, unpadded, on the GEMM engine.
    PointwiseGemm,
    /// Kernel equal to the stride (a patch embedding), on the packed-weights
    /// GEMM (f32, x86-64).
    Patches,
    /// Few input channels, on the direct kernel of this instruction set
    /// (f32, x86-64).
    Direct(Isa),
    /// Grouped 2-D layers of several input channels per group, on the
    /// direct grouped kernel of this instruction set (f32, x86-64).
    Grouped(Isa),
    /// 3×3 stride 1 with enough channels and tiles, by Winograd.
    Winograd(winograd::Algo),
    /// The implicit-GEMM kernel's layers on small output planes: im2col,
    /// then the pointwise columns kernel (f32, x86-64 with AVX-512).
    Im2colColumns,
    /// 2-D stride 1, on the implicit-GEMM kernel (f32, x86-64 with AVX2).
    Implicit,
    /// Everything else: im2col and a GEMM per group, on the panel GEMM
    /// (with W packed for it) where `panels`, else on the GEMM engine.
    Im2col {
        /// Whether the products run on the panel GEMM.
        panels: bool,
    },
}

/// The kernel for plan `p`, with the data computed in f32 (`f32`) or f64.
/// The first that takes the layer, in this order: the bias alone,
/// depthwise, 1×1 (panel GEMM, else the engine), patches, direct, grouped
/// (after Winograd on groups of many channels), Winograd (unless the implicit-GEMM kernel is preferred, whatever the
/// type), implicit GEMM (or, on the small planes where its blocks run
/// mostly empty, im2col on the columns kernel), im2col.
pub(super) fn choose(p: &ConvPlan, f32: bool) -> Algorithm {
    let win = &p.win;
    if p.cg() == 0 || win.kernel_len() == 0 {
        Algorithm::BiasOnly
    } else if p.cg() == 1 && p.group > 1 {
        Algorithm::Depthwise
    } else if is_pointwise(win) {
        if f32 && pointwise::columns::suits(p) {
            Algorithm::PointwiseColumns
        } else if f32 && pointwise::suits(p) {
            Algorithm::Pointwise
        } else {
            Algorithm::PointwiseGemm
        }
    } else if f32 && patches::takes(p) {
        Algorithm::Patches
    } else if let Some(isa) = direct::isa(p).filter(|_| f32) {
        Algorithm::Direct(isa)
    } else if let Some(isa) = grouped::isa(p)
        .filter(|_| f32 && (grouped::before_winograd(p) || winograd::choose(p).is_none()))
    {
        Algorithm::Grouped(isa)
    } else if let Some(algo) = winograd::choose(p)
        .filter(|_| !implicit::preferred(p))
        .filter(|&algo| !(f32 && f2_gives_way(p, algo)))
    {
        Algorithm::Winograd(algo)
    } else if f32 && implicit::suits(p) && implicit::cpu_has_kernel() {
        if im2col_columns_suits(p) {
            Algorithm::Im2colColumns
        } else {
            Algorithm::Implicit
        }
    } else {
        Algorithm::Im2col {
            panels: im2col::takes_panels(p, f32),
        }
    }
}

/// Fewest input channels per group for which F(2×2, 3×3) keeps a layer
/// that im2col on the columns kernel could take. Its transformed weights
/// are 16/9 of W, re-read from outside L2 at every run of a whole model,
/// and its transforms weigh more against thin products. Inside SqueezeNet
/// (per-node trace, one thread, Sapphire Rapids-class Xeon) 64 -> 256 on
/// 13×13 took 0.53-0.57 ms on F(2×2) against 0.45 on the columns kernel;
/// inside Inception v1, 96 -> 208 and 112 -> 224 on 13×13 0.77 -> 0.67
/// and 0.88 -> 0.81. Alone, with W in cache, F(2×2) won those layers, and
/// it wins inside ResNet-50 at 256 channels (256 -> 256 on 14×14: 1.7 ms
/// against 2.5).
const F2_MIN_CHANNELS_BESIDE_COLUMNS: usize = 128;

/// Whether Winograd's `algo` gives `p` (computed in f32) to im2col on the
/// columns kernel: F(2×2, 3×3) with fewer than [`F2_MIN_CHANNELS_BESIDE_COLUMNS`] input
/// channels per group, on a layer that kernel takes.
fn f2_gives_way(p: &ConvPlan, algo: winograd::Algo) -> bool {
    algo == winograd::Algo::F2x2
        && p.cg() < F2_MIN_CHANNELS_BESIDE_COLUMNS
        && implicit::suits(p)
        && implicit::cpu_has_kernel()
        && im2col_columns_suits(p)
}

/// Whether im2col on the columns kernel takes `p` (x86-64 only).
fn im2col_columns_suits(p: &ConvPlan) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::im2col_columns::suits(p)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = p;
        false
    }
}

/// Most shapes a node remembers its choice for (a model with dynamic
/// shapes sees a few; past that the oldest choice is dropped and made
/// again when its shape comes back).
const MAX_CHOICES: usize = 8;

/// What a choice depends on besides the node's attributes and the CPU.
#[derive(Debug)]
struct Key {
    /// Whether the data is computed in f32 (else f64).
    f32: bool,
    x: Vec<usize>,
    w: Vec<usize>,
}

/// The kernels a node chose, per input shape, newest first.
#[derive(Debug, Default)]
pub(super) struct Choices(RwLock<Vec<(Key, Algorithm)>>);

impl Choices {
    /// The kernel chosen for X of shape `x` and W of shape `w` computed in
    /// f32 (`f32`) or f64: the one chosen before, else `choose()`, kept.
    pub(super) fn get(
        &self,
        x: &[usize],
        w: &[usize],
        f32: bool,
        choose: impl FnOnce() -> Algorithm,
    ) -> Algorithm {
        let same = |k: &Key| k.f32 == f32 && k.x == x && k.w == w;
        {
            // A poisoned lock only means a run panicked; the list is intact.
            let held = self.0.read().unwrap_or_else(|e| e.into_inner());
            if let Some((_, algo)) = held.iter().find(|(k, _)| same(k)) {
                return *algo;
            }
        }
        let algo = choose();
        let mut held = self.0.write().unwrap_or_else(|e| e.into_inner());
        if !held.iter().any(|(k, _)| same(k)) {
            held.truncate(MAX_CHOICES - 1);
            let key = Key {
                f32,
                x: x.to_vec(),
                w: w.to_vec(),
            };
            held.insert(0, (key, algo));
        }
        algo
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::attributes::Attributes;
    use crate::ops::conv::conv_op::plan;
    use crate::ops::conv::geom::WindowAttrs;

    /// A layer: X's shape, W's shape, groups, strides and pads (all four
    /// sides alike).
    fn layer(x: [usize; 4], w: [usize; 4], group: usize, stride: usize, pad: usize) -> ConvPlan {
        let mut window = WindowAttrs::parse(&Attributes::default(), true).unwrap();
        window.strides = Some(vec![stride; 2]);
        window.pads = Some(vec![pad; 4]);
        plan(&window, group, &x, &w, None).unwrap()
    }

    /// Representative layers take the kernel they took before the choice
    /// was made up front. On x86-64 the cases whose answer depends on the
    /// CPU are written for AVX-512 (with AVX2 and FMA), where every kernel
    /// exists, and skipped on a CPU without it.
    #[test]
    fn chooses_the_expected_kernel() {
        use Algorithm::*;
        let one_by_one = layer([1, 64, 56, 56], [256, 64, 1, 1], 1, 1, 0);
        let depthwise = layer([1, 32, 112, 112], [32, 1, 3, 3], 32, 1, 1);
        let wide_3x3 = layer([1, 64, 56, 56], [64, 64, 3, 3], 1, 1, 1);
        let small_3x3 = layer([1, 128, 12, 12], [128, 128, 3, 3], 1, 1, 1);
        let small_thin_3x3 = layer([1, 64, 13, 13], [256, 64, 3, 3], 1, 1, 1);
        let narrow_3x3 = layer([1, 32, 56, 56], [32, 32, 3, 3], 1, 1, 1);
        let stem = layer([1, 3, 224, 224], [64, 3, 7, 7], 1, 2, 3);
        let stride_2 = layer([1, 64, 56, 56], [128, 64, 3, 3], 1, 2, 1);
        let patch = layer([1, 3, 224, 224], [768, 3, 16, 16], 1, 16, 0);
        let grouped = layer([1, 64, 28, 28], [64, 16, 3, 3], 4, 1, 1);
        let grouped_wide = layer([1, 256, 28, 28], [256, 128, 3, 3], 2, 1, 1);
        let grouped_s2 = layer([1, 256, 56, 56], [256, 8, 3, 3], 32, 2, 1);
        let no_channels = layer([1, 0, 5, 5], [8, 0, 3, 3], 1, 1, 1);
        // Whatever the CPU.
        assert_eq!(choose(&depthwise, true), Depthwise);
        assert_eq!(choose(&depthwise, false), Depthwise);
        assert_eq!(choose(&no_channels, true), BiasOnly);
        assert_eq!(choose(&one_by_one, false), PointwiseGemm);
        assert_eq!(choose(&wide_3x3, true), Winograd(winograd::Algo::F4x4));
        assert_eq!(choose(&small_3x3, true), Winograd(winograd::Algo::F2x2));
        // Grouped layers are never the implicit kernel's; groups of many
        // channels stay on Winograd.
        assert_eq!(choose(&grouped, false), Winograd(winograd::Algo::F4x4));
        assert_eq!(choose(&grouped_wide, true), Winograd(winograd::Algo::F4x4));
        #[cfg(target_arch = "x86_64")]
        {
            use crate::ops::gemm::simd::{has_avx2_fma, has_avx512};
            if !(has_avx512() && has_avx2_fma()) {
                eprintln!("skipped: the other cases assume AVX-512 and AVX2 with FMA");
                return;
            }
            assert_eq!(choose(&one_by_one, true), Pointwise);
            // Few output channels: the implicit kernel, even where
            // Winograd applies; f64 gives way to it as well, then takes
            // im2col on the engine.
            assert_eq!(choose(&narrow_3x3, true), Implicit);
            assert_eq!(choose(&narrow_3x3, false), Im2col { panels: false });
            assert_eq!(choose(&stem, true), Direct(Isa::Avx512));
            assert_eq!(choose(&stem, false), Im2col { panels: false });
            assert_eq!(choose(&stride_2, true), Im2col { panels: true });
            assert_eq!(choose(&patch, true), Patches);
            assert_eq!(choose(&patch, false), Im2col { panels: false });
            assert_eq!(choose(&grouped, true), Grouped(Isa::Avx512));
            assert_eq!(choose(&grouped_s2, true), Grouped(Isa::Avx512));
            assert_eq!(choose(&grouped_s2, false), Im2col { panels: false });
            // F(2×2) gives thin layers to the columns kernel, not f64 ones.
            assert_eq!(choose(&small_thin_3x3, true), Im2colColumns);
            assert_eq!(
                choose(&small_thin_3x3, false),
                Winograd(winograd::Algo::F2x2)
            );
        }
        // No implicit, direct or patch kernel here: Winograd keeps the
        // narrow layer, im2col the rest (on the panel GEMM where NEON runs).
        #[cfg(target_arch = "aarch64")]
        {
            let panels = crate::ops::conv::panels::available();
            let one = if panels { Pointwise } else { PointwiseGemm };
            assert_eq!(choose(&one_by_one, true), one);
            assert_eq!(choose(&narrow_3x3, true), Winograd(winograd::Algo::F4x4));
            assert_eq!(choose(&stem, true), Im2col { panels });
            assert_eq!(choose(&stride_2, true), Im2col { panels });
            assert_eq!(choose(&patch, true), Im2col { panels });
            assert_eq!(choose(&patch, false), Im2col { panels: false });
            assert_eq!(choose(&grouped, true), Winograd(winograd::Algo::F4x4));
            assert_eq!(choose(&grouped_s2, true), Im2col { panels });
            assert_eq!(
                choose(&small_thin_3x3, true),
                Winograd(winograd::Algo::F2x2)
            );
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            let _ = (
                narrow_3x3,
                stem,
                stride_2,
                patch,
                grouped_s2,
                small_thin_3x3,
            );
            eprintln!("skipped: the other cases assume x86-64 or aarch64");
        }
    }

    /// A choice is made once per shape and type, then read back.
    #[test]
    fn remembers_each_shape() {
        let choices = Choices::default();
        let (x, w) = ([1, 8, 5, 5], [8, 8, 3, 3]);
        let first = choices.get(&x, &w, true, || Algorithm::Implicit);
        assert_eq!(first, Algorithm::Implicit);
        let again = choices.get(&x, &w, true, || unreachable!("chosen already"));
        assert_eq!(again, Algorithm::Implicit);
        let f64 = choices.get(&x, &w, false, || Algorithm::PointwiseGemm);
        assert_eq!(f64, Algorithm::PointwiseGemm);
        for i in 0..MAX_CHOICES {
            choices.get(&[1, 8, 6 + i, 6], &w, true, || Algorithm::BiasOnly);
        }
        let held = choices.0.read().unwrap();
        assert_eq!(held.len(), MAX_CHOICES);
    }
}
