//! 1×1 convolution (stride 1, unpadded) on AVX2 machines, f32: per image
//! and group `Y = W·X`, with X read where it lies (channel rows of the
//! plane's positions) and W packed once into panels of 6 output channels.
//!
//! A register block holds 6 output channels × 16 consecutive positions in
//! 12 accumulators: per input channel it loads two vectors of X, broadcasts
//! 6 weights and does 12 fused multiply-adds (a row's last 8 or fewer
//! positions take a block of one vector, and the last panel, when the
//! channels are not a multiple of 6, a block of only its rows). X is packed a strip of positions
//! at a time, in chunks that stay in L2, and each panel of W runs over a
//! whole chunk. Bias, residual and Relu or
//! Clip are applied in registers before the one store, so no pass over Y
//! follows (other activations run over each stored block). The `gemm`
//! crate packed both operands on every call and left the epilogue to a
//! second pass; on the small-K layers of ResNet and ShuffleNet that cost
//! as much as the products.
//!
//! Each output sums its input channels in order from zero, then adds bias
//! and residual, whichever block and thread computes it; blocks at the
//! right edge are pulled back over outputs already computed (the same
//! bits) rather than running past the edge.

use super::conv_op::ConvPlan;
use super::implicit::PackCache;
use crate::ops::gemm::engine::{par_for, GemmFloat, SendPtr};
use crate::ops::gemm::fused::Activation;

/// Output channels per panel.
const MR: usize = 6;
/// Positions per register block (two vectors of 8).
const NR: usize = 16;
/// Floats of packed X strips one chunk holds (192 KiB: within L2).
const CHUNK_FLOATS: usize = 48 * 1024;
/// Positions one task covers at least: below this, the split costs more
/// than it saves.
const MIN_TASK_POSITIONS: usize = 4 * NR;

/// Whether `p` (already known to be a pointwise layer) suits this kernel on
/// this CPU: enough positions for a whole block.
pub(super) fn suits(p: &ConvPlan) -> bool {
    p.win.out_len() >= NR && p.mg() >= 1 && p.cg() >= 1 && super::implicit::cpu_has_kernel()
}

/// Rows of panel `i` of a group of `mg` output channels: 6, or fewer for
/// the last panel. (Pulling that panel back over rows already computed, as
/// the strips are, cost 12 % more products on layers of 16 or 32
/// channels.)
fn panel_rows(i: usize, mg: usize) -> usize {
    MR.min(mg - i * MR)
}

/// Packs W (`[m, cg]`, f32) into panels: per group, per panel, per input
/// channel, the panel's 6 weights (zero past the last row).
fn pack(p: &ConvPlan, w: &[f32]) -> Vec<f32> {
    let (mg, cg) = (p.mg(), p.cg());
    let panels = mg.div_ceil(MR);
    let mut data = Vec::with_capacity(p.group * panels * cg * MR);
    for g in 0..p.group {
        for i in 0..panels {
            let (r0, rows) = (g * mg + i * MR, panel_rows(i, mg));
            for k in 0..cg {
                data.extend((0..MR).map(|r| if r < rows { w[(r0 + r) * cg + k] } else { 0.0 }));
            }
        }
    }
    data
}

/// Runs the layer on this kernel when `p` [`suits`] it and `T` is f32;
/// returns whether it did. `cache` keeps the packed weights when
/// `cacheable` (W constant).
#[allow(clippy::too_many_arguments)]
pub(super) fn try_pointwise<T: 'static>(
    p: &ConvPlan,
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    z: Option<&[T]>,
    act: Option<Activation>,
    y: &mut [T],
    cache: &PackCache,
    cacheable: bool,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use super::direct::{as_f32, as_f32_mut};
        if !suits(p) {
            return false;
        }
        let (Some(x), Some(w), Some(y)) = (as_f32(x), as_f32(w), as_f32_mut(y)) else {
            return false;
        };
        let (b, z) = (b.and_then(as_f32), z.and_then(as_f32));
        cache.with(
            cacheable,
            || pack(p, w),
            |packed| pointwise(p, x, packed, b, z, act, y),
        );
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (p, x, w, b, z, act, y, cache, cacheable);
        false
    }
}

/// The whole layer: tasks over (image, group, range of position blocks,
/// range of panels), each writing outputs no other task writes.
#[cfg(target_arch = "x86_64")]
fn pointwise(
    p: &ConvPlan,
    x: &[f32],
    packed: &[f32],
    b: Option<&[f32]>,
    z: Option<&[f32]>,
    act: Option<Activation>,
    y: &mut [f32],
) {
    let (mg, cg, n) = (p.mg(), p.cg(), p.win.out_len());
    let (strips, panels) = (n.div_ceil(NR), mg.div_ceil(MR));
    assert!(x.len() >= p.n * p.c * n && y.len() >= p.n * p.m * n);
    assert!(packed.len() >= p.group * panels * cg * MR);
    assert!(b.is_none_or(|b| b.len() >= p.m) && z.is_none_or(|z| z.len() >= y.len()));
    // Split the strips (then the panels) so each thread gets a few tasks;
    // the last two strips overlap, so they stay together.
    let want = 4 * rayon::current_num_threads();
    let images = p.n * p.group;
    let per_image = want.div_ceil(images).max(1);
    let strip_tasks = per_image.min((n / MIN_TASK_POSITIONS).max(1)).min(strips);
    let panel_tasks = per_image
        .div_ceil(strip_tasks)
        .min(panels.div_ceil(2))
        .max(1);
    let (strips_per, panels_per) = (strips.div_ceil(strip_tasks), panels.div_ceil(panel_tasks));
    let (strip_tasks, panel_tasks) = (strips.div_ceil(strips_per), panels.div_ceil(panels_per));
    let epi = Epilogue::of(act);
    let yp = SendPtr(y.as_mut_ptr());
    par_for(images * strip_tasks * panel_tasks, |t| {
        let (img, rest) = (
            t / (strip_tasks * panel_tasks),
            t % (strip_tasks * panel_tasks),
        );
        let (st, pt) = (rest / panel_tasks, rest % panel_tasks);
        let (ni, g) = (img / p.group, img % p.group);
        let strip_range = task_range(st * strips_per, strips_per, strips);
        let panel_range = pt * panels_per..((pt + 1) * panels_per).min(panels);
        let x0 = (ni * p.c + g * cg) * n;
        let y0 = (ni * p.m + g * mg) * n;
        // Strips are packed in chunks that stay in L2; each panel of W then
        // runs over the whole chunk while it sits in L1.
        let chunk = (CHUNK_FLOATS / (cg * NR)).max(1);
        f32::with_scratch(cg * NR * chunk.min(strip_range.len()), |packed_x| {
            let mut first = strip_range.start;
            while first < strip_range.end {
                let count = chunk.min(strip_range.end - first);
                let strips_here = first..first + count;
                pack_strips(&x[x0..x0 + cg * n], n, strips_here.clone(), packed_x);
                for i in panel_range.clone() {
                    let (r, rows) = (i * MR, panel_rows(i, mg));
                    let w = &packed[((g * panels) + i) * cg * MR..][..cg * MR];
                    let oc = g * mg + r;
                    let bias = b.map(|b| &b[oc..oc + rows]);
                    for (s, strip) in strips_here.clone().zip(packed_x.chunks_exact(cg * NR)) {
                        let (j, wide) = strip_at(s, n);
                        let at = y0 + r * n + j;
                        let resid = z.map(|z| z[at..].as_ptr());
                        // SAFETY: the CPU has AVX2 and FMA (suits checked
                        // it); the strip holds cg rows of `wide`, the
                        // block's `rows` rows × `wide` columns lie inside Y
                        // (and Z), and no other task writes them (the ranges
                        // split strips and panels disjointly).
                        let (xs, ys) = (strip.as_ptr(), yp.offset(at).0);
                        let args = (xs, n, cg, w, bias, resid, ys, &epi);
                        unsafe { dispatch(rows, wide == NR, args) };
                    }
                }
                first += count;
            }
        });
    });
}

/// Copies the columns of `strips` from the `x.len() / n` channel rows of
/// `x` into `packed`, one strip after another, each channel-major (16 or 8
/// columns per channel). Made contiguous because, read in place, each input
/// channel was a new page for the TLB and the prefetchers; the copies have
/// fixed widths so that they compile to vector moves (with the width a
/// runtime value each was a call to `memmove`, a quarter of the time of
/// the layers with few output channels).
fn pack_strips(x: &[f32], n: usize, strips: std::ops::Range<usize>, packed: &mut [f32]) {
    let cg = x.len() / n;
    for (s, strip) in strips.zip(packed.chunks_exact_mut(cg * NR)) {
        let (j, wide) = strip_at(s, n);
        let rows = x.chunks_exact(n).map(|row| &row[j..]);
        if wide == NR {
            for (dst, row) in strip.chunks_exact_mut(NR).zip(rows) {
                dst.copy_from_slice(&row[..NR]);
            }
        } else {
            for (dst, row) in strip[..cg * (NR / 2)].chunks_exact_mut(NR / 2).zip(rows) {
                dst.copy_from_slice(&row[..NR / 2]);
            }
        }
    }
}

/// First column and width of strip `s` of `n` columns: whole strips of 16,
/// then the rest as a strip of 16 or of 8 pulled back to end at column n.
fn strip_at(s: usize, n: usize) -> (usize, usize) {
    if s < n / NR {
        (s * NR, NR)
    } else if n % NR > NR / 2 {
        (n - NR, NR)
    } else {
        (n - NR / 2, NR / 2)
    }
}

/// Items `start .. start + per` of `total`, clipped; the last item, which
/// overlaps the one before it, always joins that one's range.
fn task_range(start: usize, per: usize, total: usize) -> std::ops::Range<usize> {
    if start >= total || (start > 0 && start + 1 == total) {
        return 0..0;
    }
    let end = (start + per).min(total);
    if end + 1 == total {
        start..total
    } else {
        start..end
    }
}

/// The activation applied in registers, or after each block's store.
enum Epilogue {
    None,
    Relu,
    Clip(f32, f32),
    Other(Activation),
}

impl Epilogue {
    fn of(act: Option<Activation>) -> Epilogue {
        match act {
            None => Epilogue::None,
            Some(Activation::Relu) => Epilogue::Relu,
            Some(Activation::Clip(lo, hi)) => Epilogue::Clip(lo, hi),
            Some(a) => Epilogue::Other(a),
        }
    }
}

/// The arguments of [`block`].
#[cfg(target_arch = "x86_64")]
type BlockArgs<'a> = (
    *const f32,
    usize,
    usize,
    &'a [f32],
    Option<&'a [f32]>,
    Option<*const f32>,
    *mut f32,
    &'a Epilogue,
);

/// Runs the [`block`] of `rows` rows (1 to 6) and two vectors of columns
/// (`wide`) or one.
///
/// # Safety
/// As for [`block`] with R = `rows` and V = 2 or 1.
#[cfg(target_arch = "x86_64")]
unsafe fn dispatch(rows: usize, wide: bool, a: BlockArgs) {
    macro_rules! rows {
        ($($r:literal)*) => {
            match (rows, wide) {
                $(($r, true) => block::<2, $r>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7),
                ($r, false) => block::<1, $r>(a.0, a.1, a.2, a.3, a.4, a.5, a.6, a.7),)*
                _ => unreachable!("a panel has 1 to {MR} rows"),
            }
        };
    }
    rows!(1 2 3 4 5 6)
}

/// One block: `y[r·n + j] = act(Σ_k w[k·6 + r]·x[k·8V + j] + bias[r] +
/// z[r·n + j])` for R rows r and 8·V columns j.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `x` must hold `k` rows of 8·V, `w`
/// `k` groups of 6, `bias` (if any) R values, and `y` (and `z`) R rows of
/// pitch `n` with 8·V writable (readable) columns each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const V: usize, const R: usize>(
    x: *const f32,
    n: usize,
    k: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    z: Option<*const f32>,
    y: *mut f32,
    epi: &Epilogue,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); V]; R];
    let wp = w.as_ptr();
    for kk in 0..k {
        let xr = x.add(kk * 8 * V);
        let mut xv = [_mm256_setzero_ps(); V];
        for (h, v) in xv.iter_mut().enumerate() {
            *v = _mm256_loadu_ps(xr.add(8 * h));
        }
        for (r, a) in acc.iter_mut().enumerate() {
            let wv = _mm256_broadcast_ss(&*wp.add(kk * MR + r));
            for (h, v) in a.iter_mut().enumerate() {
                *v = _mm256_fmadd_ps(wv, xv[h], *v);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (h, &v) in a.iter().enumerate() {
            let mut v = v;
            if let Some(b) = bias {
                v = _mm256_add_ps(v, _mm256_set1_ps(b[r]));
            }
            if let Some(z) = z {
                v = _mm256_add_ps(v, _mm256_loadu_ps(z.add(r * n + 8 * h)));
            }
            // max/min with the bound first keep NaN, as the definitions do.
            match *epi {
                Epilogue::Relu => v = _mm256_max_ps(_mm256_setzero_ps(), v),
                Epilogue::Clip(lo, hi) => {
                    v = _mm256_max_ps(_mm256_set1_ps(lo), v);
                    v = _mm256_min_ps(_mm256_set1_ps(hi), v);
                }
                Epilogue::None | Epilogue::Other(_) => {}
            }
            _mm256_storeu_ps(y.add(r * n + 8 * h), v);
        }
        if let Epilogue::Other(a) = *epi {
            a.apply(std::slice::from_raw_parts_mut(y.add(r * n), 8 * V));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::conv_op::plan;
    use super::super::geom::WindowAttrs;
    use super::*;
    use crate::ops::gemm::testutil::rand_vec;

    /// On a CPU with the kernel it takes the layer (with residual and Relu)
    /// and matches the `gemm` crate's path to rounding, whatever the rows
    /// of the last panel; the strip helpers cover each column once.
    #[test]
    fn takes_suitable_layers_and_matches_the_gemm_path() {
        let window = WindowAttrs::parse(&crate::attributes::Attributes::default(), true).unwrap();
        for m in [1, 4, 6, 16, 20, 23] {
            let (xs, ws) = ([2, 12, 5, 11], [m, 12, 1, 1]);
            let p = plan(&window, 1, &xs, &ws, Some(&[m])).unwrap();
            let x = rand_vec(xs.iter().product(), 1);
            let w = rand_vec(ws.iter().product(), 2);
            let b = rand_vec(m, 3);
            let len = p.out_shape.iter().product();
            let z = rand_vec(len, 4);
            let act = Some(Activation::Relu);
            let mut want = vec![0f32; len];
            super::super::conv_op::pointwise_gemm(&p, &x, &w, Some(&b), Some(&z), act, &mut want);
            let mut got = vec![f32::NAN; len];
            let cache = PackCache::default();
            let args = (&p, &x[..], &w[..], Some(&b[..]), Some(&z[..]), act);
            let run = |y: &mut [f32]| {
                let (p, x, w, b, z, act) = args;
                try_pointwise(p, x, w, b, z, act, y, &cache, true)
            };
            let took = run(&mut got);
            assert_eq!(took, super::super::implicit::cpu_has_kernel());
            if took {
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "m {m}: {g} vs {w}");
                }
                let mut again = vec![f32::NAN; len];
                run(&mut again);
                assert_eq!(got, again, "the kept packed weights give the same sums");
            }
        }
        for n in [16, 23, 24, 25, 49, 57, 100] {
            let mut seen = vec![0; n];
            for s in 0..n.div_ceil(NR) {
                let (j, wide) = strip_at(s, n);
                assert!(j + wide <= n);
                seen[j..j + wide].iter_mut().for_each(|v| *v += 1);
            }
            assert!(seen.iter().all(|&v| v >= 1), "{n}: {seen:?}");
        }
        // The last item always shares a task with the one before it.
        for total in 2..12 {
            for per in 1..5 {
                let ranges: Vec<_> = (0..total)
                    .step_by(per)
                    .map(|s| task_range(s, per, total))
                    .collect();
                assert_eq!(ranges.iter().map(|r| r.len()).sum::<usize>(), total);
                assert!(ranges
                    .iter()
                    .any(|r| r.contains(&(total - 2)) && r.contains(&(total - 1))));
            }
        }
    }
}
