//! The numpy-broadcasting engine behind every multi-input elementwise
//! operator. Operand shapes are collapsed against the output into as few
//! dimensions as possible; the innermost one is walked with plain slice
//! iterators (each operand either contiguous or a repeated scalar), the outer
//! ones with an odometer advanced once per inner row. The output is split over
//! the current rayon pool in contiguous element ranges, so results do not
//! depend on the thread count.

use crate::error::{Error, Result};
use crate::ops::unary::kernel::{array_from, contiguous};
use crate::ops::util::{broadcast_all, par_rows};
use ndarray::ArrayD;

/// How `N` operands map onto a broadcast output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan<const N: usize> {
    /// The full output shape.
    pub out_shape: Vec<usize>,
    /// Number of output elements.
    pub len: usize,
    /// Collapsed dimensions, outermost first; never empty.
    dims: Vec<usize>,
    /// Per collapsed dimension, each operand's element stride (0: broadcast).
    strides: Vec<[usize; N]>,
}

impl<const N: usize> Plan<N> {
    /// Plans the broadcast of `shapes`; an error if they do not broadcast or
    /// the output would be too large to address.
    pub fn new(op: &str, shapes: [&[usize]; N]) -> Result<Plan<N>> {
        let out = broadcast_all(op, &shapes)?;
        let len = out.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let len = len
            .ok_or_else(|| Error::op(op, format!("broadcast output shape {out:?} is too large")))?;
        let r = out.len();
        let mut full = vec![[0usize; N]; r];
        for (k, s) in shapes.iter().enumerate() {
            let pad = r - s.len();
            let mut acc = 1usize;
            for i in (pad..r).rev() {
                let d = s[i - pad];
                full[i][k] = if d == 1 { 0 } else { acc };
                acc = acc.saturating_mul(d);
            }
        }
        let mut dims: Vec<usize> = Vec::new();
        let mut strides: Vec<[usize; N]> = Vec::new();
        for (i, &d) in out.iter().enumerate() {
            if d == 1 {
                continue;
            }
            if let (Some(ld), Some(ls)) = (dims.last_mut(), strides.last_mut()) {
                if (0..N).all(|k| ls[k] == full[i][k] * d) {
                    *ld *= d;
                    *ls = full[i];
                    continue;
                }
            }
            dims.push(d);
            strides.push(full[i]);
        }
        if dims.is_empty() {
            dims.push(1);
            strides.push([0; N]);
        }
        Ok(Plan {
            out_shape: out,
            len,
            dims,
            strides,
        })
    }

    /// The stride (0 or 1) of each operand along the innermost dimension.
    fn inner_steps(&self) -> [usize; N] {
        let mut s = self.strides[self.strides.len() - 1];
        for v in s.iter_mut() {
            *v = (*v).min(1);
        }
        s
    }

    /// Fills `out` (the whole output) by calling `kernel(segment, offsets)`
    /// for runs of consecutive output elements that lie in one inner row;
    /// `offsets` are each operand's index of the run's first element.
    fn drive<O: Send>(&self, out: &mut [O], kernel: impl Fn(&mut [O], [usize; N]) + Sync) {
        self.drive_dyn(out, &kernel)
    }

    /// [`Plan::drive`] with the kernel behind a `dyn` reference, so the
    /// odometer below is compiled once per output type rather than once
    /// per operator and type (the call per inner row costs nothing next
    /// to the row). Never inlined, so no caller makes its own copy.
    #[inline(never)]
    fn drive_dyn<O: Send>(&self, out: &mut [O], kernel: &(dyn Fn(&mut [O], [usize; N]) + Sync)) {
        let inner = self.dims[self.dims.len() - 1];
        let outer = &self.dims[..self.dims.len() - 1];
        let steps = self.inner_steps();
        par_rows(out, 1, |first, chunk| {
            // Position of `first`: row index over the outer dims, column in the row.
            let mut row = first / inner;
            let mut col = first % inner;
            let mut idx = vec![0usize; outer.len()];
            let mut off = [0usize; N];
            for i in (0..outer.len()).rev() {
                idx[i] = row % outer[i];
                row /= outer[i];
                for (o, s) in off.iter_mut().zip(self.strides[i]) {
                    *o += idx[i] * s;
                }
            }
            let mut rest = chunk;
            while !rest.is_empty() {
                let n = (inner - col).min(rest.len());
                let (seg, tail) = rest.split_at_mut(n);
                let mut start = off;
                for (s, st) in start.iter_mut().zip(steps) {
                    *s += col * st;
                }
                kernel(seg, start);
                rest = tail;
                col = 0;
                // Advance the odometer by one row.
                for i in (0..outer.len()).rev() {
                    idx[i] += 1;
                    for (o, s) in off.iter_mut().zip(self.strides[i]) {
                        *o += s;
                    }
                    if idx[i] < outer[i] {
                        break;
                    }
                    for (o, s) in off.iter_mut().zip(self.strides[i]) {
                        *o -= outer[i] * s;
                    }
                    idx[i] = 0;
                }
            }
        });
    }
}

/// Binds `$it` to an iterator over `$len` elements of `$s` from `$off`:
/// the slice itself when `$step` is 1, the repeated element when it is 0.
macro_rules! operand {
    ($s:expr, $off:expr, $step:expr, $len:expr, |$it:ident| $body:expr) => {
        if $step == 0 {
            let $it = std::iter::repeat(&$s[$off]).take($len);
            $body
        } else {
            let $it = $s[$off..$off + $len].iter();
            $body
        }
    };
}

/// True when the inner loops over operands of type `A` get a copy per
/// operand layout (contiguous or repeated scalar), which the compiler
/// vectorizes: the float types models compute in. The others (integers,
/// mostly small shape arithmetic, bool and bfloat16) share one strided
/// loop, which keeps the library small: a binary operator is compiled once
/// per element type.
fn vectorized<A: 'static>() -> bool {
    use std::any::TypeId;
    let t = TypeId::of::<A>();
    t == TypeId::of::<f32>() || t == TypeId::of::<half::f16>()
}

/// `f(a, b)` elementwise with numpy broadcasting.
pub(crate) fn zip2<A, B, O>(
    op: &str,
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    f: impl Fn(&A, &B) -> O + Sync,
) -> Result<ArrayD<O>>
where
    A: Clone + Sync + 'static,
    B: Clone + Sync,
    O: Clone + Default + Send + 'static,
{
    let plan = Plan::new(op, [a.shape(), b.shape()])?;
    let (sa, sb) = (contiguous(a), contiguous(b));
    // Every element is written below.
    let mut out = crate::tensor::recycle::take_or_default::<O>(plan.len);
    if plan.len > 0 {
        let steps = plan.inner_steps();
        if vectorized::<A>() {
            plan.drive(&mut out, |seg, [oa, ob]| {
                let n = seg.len();
                operand!(sa, oa, steps[0], n, |ia| operand!(
                    sb,
                    ob,
                    steps[1],
                    n,
                    |ib| {
                        for ((o, x), y) in seg.iter_mut().zip(ia).zip(ib) {
                            *o = f(x, y);
                        }
                    }
                ))
            });
        } else {
            // One loop for every operand layout: a quarter of the code.
            let [da, db] = steps;
            plan.drive(&mut out, |seg, [oa, ob]| {
                for (i, o) in seg.iter_mut().enumerate() {
                    *o = f(&sa[oa + i * da], &sb[ob + i * db]);
                }
            });
        }
    }
    array_from(op, &plan.out_shape, out)
}

/// `f(a, b, c)` elementwise with numpy broadcasting (Where), on the
/// operands' row-major elements and shapes; gives the output's shape and
/// elements. On slices, so Where can run it once per element width.
pub(crate) fn zip3<A, B, C, O>(
    op: &str,
    shapes: [&[usize]; 3],
    sa: &[A],
    sb: &[B],
    sc: &[C],
    f: impl Fn(&A, &B, &C) -> O + Sync,
) -> Result<(Vec<usize>, Vec<O>)>
where
    A: Sync,
    B: Sync,
    C: Sync,
    O: Clone + Default + Send,
{
    let plan = Plan::new(op, shapes)?;
    let mut out = vec![O::default(); plan.len];
    if plan.len > 0 {
        let st = plan.inner_steps();
        plan.drive(&mut out, |seg, [oa, ob, oc]| {
            let n = seg.len();
            operand!(sa, oa, st[0], n, |ia| operand!(sb, ob, st[1], n, |ib| {
                operand!(sc, oc, st[2], n, |ic| {
                    for (((o, x), y), z) in seg.iter_mut().zip(ia).zip(ib).zip(ic) {
                        *o = f(x, y, z);
                    }
                })
            }))
        });
    }
    Ok((plan.out_shape, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    /// Naive reference: index arithmetic per element.
    fn naive(a: &ArrayD<i64>, b: &ArrayD<i64>) -> ArrayD<i64> {
        let out = broadcast_all("t", &[a.shape(), b.shape()]).unwrap();
        ArrayD::from_shape_fn(IxDyn(&out), |ix| {
            let pick = |t: &ArrayD<i64>| {
                let pad = out.len() - t.ndim();
                let i: Vec<usize> = (0..t.ndim())
                    .map(|d| if t.shape()[d] == 1 { 0 } else { ix[d + pad] })
                    .collect();
                t[IxDyn(&i)]
            };
            pick(a) * 1000 + pick(b)
        })
    }

    fn arr(shape: &[usize], base: i64) -> ArrayD<i64> {
        let mut n = base;
        ArrayD::from_shape_fn(IxDyn(shape), |_| {
            n += 1;
            n
        })
    }

    #[test]
    fn matches_naive_for_many_shape_pairs() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[2, 3], &[2, 3]),
            (&[2, 3], &[]),
            (&[], &[4]),
            (&[2, 3, 4], &[4]),
            (&[2, 3, 4], &[3, 1]),
            (&[2, 1, 4], &[1, 3, 1]),
            (&[5, 1], &[1, 7]),
            (&[1, 3, 1, 2], &[4, 1, 5, 1]),
            (&[2, 3, 4, 5], &[3, 1, 1]),
            (&[1, 1], &[1]),
            (&[3, 1, 1], &[1]),
            (&[0, 3], &[3]),
        ];
        for pool in [1, 3] {
            let p = rayon::ThreadPoolBuilder::new()
                .num_threads(pool)
                .build()
                .unwrap();
            for (sa, sb) in cases {
                let a = arr(sa, 0);
                let b = arr(sb, 100);
                let got = p.install(|| zip2("t", &a, &b, |x, y| x * 1000 + y).unwrap());
                assert_eq!(got, naive(&a, &b), "{sa:?} x {sb:?}");
                let got = p.install(|| zip2("t", &b, &a, |x, y| y * 1000 + x).unwrap());
                assert_eq!(got, naive(&a, &b), "{sb:?} x {sa:?}");
                // f32 takes the vectorized loops, i64 the strided one.
                let (fa, fb) = (a.mapv(|v| v as f32), b.mapv(|v| v as f32));
                let got = p.install(|| zip2("t", &fa, &fb, |x, y| x * 1000.0 + y).unwrap());
                assert_eq!(got, naive(&a, &b).mapv(|v| v as f32), "f32 {sa:?} x {sb:?}");
            }
        }
    }

    #[test]
    fn large_broadcasts_split_across_threads_identically() {
        let a = arr(&[64, 33, 20], 0);
        let b = arr(&[33, 1], 7);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let many = rayon::ThreadPoolBuilder::new()
            .num_threads(5)
            .build()
            .unwrap();
        let r1 = one.install(|| zip2("t", &a, &b, |x, y| x * 1000 + y).unwrap());
        let r5 = many.install(|| zip2("t", &a, &b, |x, y| x * 1000 + y).unwrap());
        assert_eq!(r1, r5);
        assert_eq!(r1, naive(&a, &b));
        let s = arr(&[], 3);
        let big = arr(&[40_000], 0);
        let r = many.install(|| zip2("t", &big, &s, |x, y| x * 1000 + y).unwrap());
        assert_eq!(r, naive(&big, &s));
    }

    #[test]
    fn three_way() {
        let c = ArrayD::from_shape_fn(IxDyn(&[2, 1, 3]), |ix| (ix[0] + ix[2]) % 2 == 0);
        let x = arr(&[4, 1], 0);
        let y = arr(&[3], 50);
        let (shape, got) = zip3(
            "t",
            [c.shape(), x.shape(), y.shape()],
            &contiguous(&c),
            &contiguous(&x),
            &contiguous(&y),
            |&c, &x, &y| if c { x } else { y },
        )
        .unwrap();
        assert_eq!(shape, &[2, 4, 3]);
        let got = ArrayD::from_shape_vec(IxDyn(&shape), got).unwrap();
        for i in 0..2 {
            for j in 0..4 {
                for k in 0..3 {
                    let want = if (i + k) % 2 == 0 { x[[j, 0]] } else { y[[k]] };
                    assert_eq!(got[[i, j, k]], want);
                }
            }
        }
    }

    #[test]
    fn collapses_dimensions() {
        let p = Plan::<2>::new("t", [&[2, 3, 4, 5], &[4, 5]]).unwrap();
        assert_eq!(p.dims, vec![6, 20]);
        assert_eq!(p.strides, vec![[20, 0], [1, 1]]);
        let p = Plan::<2>::new("t", [&[8, 16, 7, 7], &[16, 1, 1]]).unwrap();
        assert_eq!(p.dims, vec![8, 16, 49]);
        let p = Plan::<2>::new("t", [&[3, 4], &[3, 4]]).unwrap();
        assert_eq!(p.dims, vec![12]);
    }

    #[test]
    fn errors() {
        let a = arr(&[2, 3], 0);
        let b = arr(&[4], 0);
        assert!(zip2("t", &a, &b, |x, y| x + y).is_err());
        let huge = [1usize << 40, 1];
        let huge2 = [1, 1usize << 40];
        assert!(Plan::<2>::new("t", [&huge, &huge2]).is_err());
    }
}
