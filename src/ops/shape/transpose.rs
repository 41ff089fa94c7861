//! Transpose, DepthToSpace and SpaceToDepth: pure permutations of elements,
//! each expressed as offset maps for [`offset_copy`](super::offset_copy),
//! except a Transpose that moves the innermost axis, which runs the tiled
//! kernel of [`tiled`](super::tiled).

use super::move_tensor;
use super::tiled::transpose_tiled;
use super::{linear_map, movement_flops, numel, strides};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input};
use crate::ops::Registrar;
use crate::tensor::widths::{by_width, Bits};
use crate::tensor::Tensor;

pub(super) fn register(r: &mut impl Registrar) {
    r.add("Transpose", 1, build_transpose);
    r.add("DepthToSpace", 1, build_d2s);
    r.add("SpaceToDepth", 1, build_s2d);
}

/// [`transpose_tiled`] of `a`'s elements as bits of their width.
fn permute_tiled(
    x: &Tensor,
    out_shape: &[usize],
    shape: &[usize],
    perm: &[usize],
) -> Result<Tensor> {
    let v = by_width!(x, bits => {
        // Every element is written: a recycled buffer needs no zero-fill.
        let mut out = crate::tensor::recycle::take_or_default(bits.len());
        transpose_tiled(bits, shape, perm, &mut out);
        Bits::vec(out)
    });
    Tensor::from_width("Transpose", x.dtype(), out_shape, v)
}

#[derive(Debug)]
struct Transpose {
    perm: Option<Vec<i64>>,
}

fn build_transpose(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Transpose {
        perm: ctx.attrs.ints_opt("perm")?,
    }))
}

impl Transpose {
    fn perm(&self, rank: usize) -> Result<Vec<usize>> {
        match &self.perm {
            None => Ok((0..rank).rev().collect()),
            Some(p) => {
                let mut seen = vec![false; rank];
                let mut out = Vec::with_capacity(rank);
                for &v in p {
                    let ok = usize::try_from(v).ok().filter(|&u| u < rank && !seen[u]);
                    match ok {
                        Some(u) => {
                            seen[u] = true;
                            out.push(u);
                        }
                        None => {
                            return Err(Error::op(
                                "Transpose",
                                format!("perm {p:?} is not a permutation of 0..{rank}"),
                            ))
                        }
                    }
                }
                if out.len() != rank {
                    return Err(Error::op(
                        "Transpose",
                        format!("perm {p:?} is not a permutation of 0..{rank}"),
                    ));
                }
                Ok(out)
            }
        }
    }
}

/// Whether transposing `shape` by `perm` keeps every element where it is
/// (it moves only axes of length 1): a reshape.
fn keeps_order(shape: &[usize], perm: &[usize]) -> bool {
    merge_axes(shape, perm).1.len() <= 1
}

impl Operator for Transpose {
    fn is_view_of_input(&self, _later_inputs: bool, data: Option<&Fact>) -> bool {
        data.and_then(|f| f.shape.as_deref())
            .is_some_and(|s| self.perm(s.len()).is_ok_and(|p| keeps_order(s, &p)))
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact("Transpose", inputs, 0)?;
        Ok(vec![match &f.shape {
            Some(s) => {
                let p = self.perm(s.len())?;
                Fact::new(f.dtype, p.iter().map(|&i| s[i]).collect())
            }
            None => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input("Transpose", inputs, 0)?;
        let s = x.shape();
        let p = self.perm(s.len())?;
        let out_shape: Vec<usize> = p.iter().map(|&i| s[i]).collect();
        if keeps_order(s, &p) {
            // Only axes of length 1 move: the same elements in order.
            return Ok(vec![super::reshape::reshape_tensor(
                "Transpose",
                x,
                &out_shape,
            )?]);
        }
        // The same permutation on fewer, longer axes: whole runs of
        // contiguous elements are then copied at once.
        let (s, p) = merge_axes(s, &p);
        if p.last().is_some_and(|&a| a + 1 != p.len()) {
            // The input's innermost axis moves: tiles of the swapped axes.
            return Ok(vec![permute_tiled(x, &out_shape, &s, &p)?]);
        }
        let st = strides(&s);
        let maps: Vec<Vec<usize>> = p
            .iter()
            .map(|&i| linear_map(s[i], 0, st[i] as isize))
            .collect();
        Ok(vec![move_tensor("Transpose", x, &out_shape, &maps)?])
    }
}

/// The smallest equivalent of transposing `shape` by `perm`: axes of length
/// 1 are dropped (they move no data), and input axes that stay adjacent and
/// in order in the output are merged into one. Returns the merged input
/// shape and permutation; the output keeps the same row-major order.
fn merge_axes(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    // Rank of each kept input axis among the kept ones.
    let mut rank = vec![usize::MAX; shape.len()];
    let mut kept = 0;
    for (a, &len) in shape.iter().enumerate() {
        if len != 1 {
            rank[a] = kept;
            kept += 1;
        }
    }
    // Runs of kept axes, in output order, as (first, last) kept ranks.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for r in perm.iter().map(|&a| rank[a]).filter(|&r| r != usize::MAX) {
        match runs.last_mut() {
            Some((_, last)) if r == *last + 1 => *last = r,
            _ => runs.push((r, r)),
        }
    }
    let lens: Vec<usize> = shape.iter().copied().filter(|&l| l != 1).collect();
    // The merged input axes are the runs sorted by their first kept axis.
    let mut order: Vec<usize> = (0..runs.len()).collect();
    crate::order::sort_indices(&mut order, &|a, b| runs[a].0.cmp(&runs[b].0));
    let merged: Vec<usize> = order
        .iter()
        .map(|&i| lens[runs[i].0..=runs[i].1].iter().product())
        .collect();
    let mut new_perm = vec![0; runs.len()];
    for (input_axis, &run) in order.iter().enumerate() {
        new_perm[run] = input_axis;
    }
    (merged, new_perm)
}

/// DepthToSpace (`to_space`) or SpaceToDepth.
#[derive(Debug)]
struct Blocks {
    to_space: bool,
    block: usize,
    /// Column-row-depth channel order (CRD) instead of DCR (DepthToSpace
    /// from opset 11, SpaceToDepth from opset 28).
    crd: bool,
}

fn build_d2s(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build_blocks(ctx, true)
}

fn build_s2d(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    build_blocks(ctx, false)
}

fn build_blocks(ctx: &BuildContext, to_space: bool) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let b = a.int_req("blocksize")?;
    let block = usize::try_from(b)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| a.error("blocksize", format!("must be positive, found {b}")))?;
    let crd = if (to_space && ctx.opset >= 11) || ctx.opset >= 28 {
        match a.string("mode", "DCR")?.as_str() {
            "DCR" => false,
            "CRD" => true,
            other => return Err(a.error("mode", format!("must be DCR or CRD, found {other:?}"))),
        }
    } else {
        false
    };
    Ok(Box::new(Blocks {
        to_space,
        block,
        crd,
    }))
}

impl Blocks {
    fn name(&self) -> &'static str {
        if self.to_space {
            "DepthToSpace"
        } else {
            "SpaceToDepth"
        }
    }

    /// Output shape and offset maps (over a 6-D view of the output).
    fn plan(&self, s: &[usize]) -> Result<(Vec<usize>, Vec<Vec<usize>>)> {
        let op = self.name();
        let &[n, c, h, w] = s else {
            return Err(Error::op(
                op,
                format!("expected a 4-D input, found shape {s:?}"),
            ));
        };
        let b = self.block;
        let bb = b
            .checked_mul(b)
            .ok_or_else(|| Error::op(op, "blocksize too large"))?;
        let hw = h * w;
        if self.to_space {
            if c % bb != 0 {
                return Err(Error::op(
                    op,
                    format!("channels {c} are not a multiple of blocksize² = {bb}"),
                ));
            }
            let cc = c / bb;
            let out = vec![n, cc, numel(op, &[h, b])?, numel(op, &[w, b])?];
            // Offsets of the input's channel parts (c', b1, b2).
            let (s_c, s_b1, s_b2) = if self.crd {
                (bb * hw, b * hw, hw)
            } else {
                (hw, b * cc * hw, cc * hw)
            };
            // Output order: N, C', H, b1, W, b2.
            let maps = vec![
                linear_map(n, 0, (c * hw) as isize),
                linear_map(cc, 0, s_c as isize),
                linear_map(h, 0, w as isize),
                linear_map(b, 0, s_b1 as isize),
                linear_map(w, 0, 1),
                linear_map(b, 0, s_b2 as isize),
            ];
            Ok((out, maps))
        } else {
            if h % b != 0 || w % b != 0 {
                return Err(Error::op(
                    op,
                    format!("height {h} and width {w} must be multiples of blocksize {b}"),
                ));
            }
            let (ho, wo) = (h / b, w / b);
            let out = vec![n, numel(op, &[c, bb])?, ho, wo];
            // Output order: N, b1, b2, C, H', W' (DCR) or N, C, b1, b2, H', W' (CRD).
            let (block_rows, block_cols, channels) = (
                linear_map(b, 0, w as isize),
                linear_map(b, 0, 1),
                linear_map(c, 0, hw as isize),
            );
            let middle = if self.crd {
                [channels, block_rows, block_cols]
            } else {
                [block_rows, block_cols, channels]
            };
            let mut maps = vec![linear_map(n, 0, (c * hw) as isize)];
            maps.extend(middle);
            maps.push(linear_map(ho, 0, (b * w) as isize));
            maps.push(linear_map(wo, 0, b as isize));
            Ok((out, maps))
        }
    }
}

impl Operator for Blocks {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name(), inputs, 0)?;
        Ok(vec![match &f.shape {
            Some(s) => Fact::new(f.dtype, self.plan(s)?.0),
            None => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        movement_flops(inputs, outputs)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.name(), inputs, 0)?;
        let (out, maps) = self.plan(x.shape())?;
        Ok(vec![move_tensor(self.name(), x, &out, &maps)?])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cloned_ref_to_slice_refs)]
    use super::super::test_util::*;
    use crate::ir::attributes::Attribute;
    use crate::tensor::Tensor;

    /// A Transpose is a view of its input exactly when it moves only axes
    /// of length 1 (and only when the input's shape is known); its copy
    /// then equals the naive transpose.
    #[test]
    fn transposes_of_unit_axes_are_views() {
        use crate::ir::{Fact, Operator};
        use crate::DType;
        let op = |perm: &[i64]| super::Transpose {
            perm: Some(perm.to_vec()),
        };
        let fact = |s: &[usize]| Fact::new(DType::F32, s.to_vec());
        let view = |perm: &[i64], s: &[usize]| op(perm).is_view_of_input(false, Some(&fact(s)));
        assert!(view(&[1, 0, 2], &[1, 64, 256]));
        assert!(view(&[3, 1, 2, 0, 4], &[1, 64, 1, 1, 256]));
        assert!(view(&[0, 1], &[4, 5]));
        assert!(!view(&[1, 0, 2], &[2, 64, 256]));
        assert!(!view(&[0, 2, 1], &[1, 64, 256]));
        assert!(!op(&[1, 0, 2]).is_view_of_input(false, None));
        assert!(!view(&[0, 0, 1], &[1, 1, 4]), "not a permutation");
        let s = [1usize, 3, 1, 4];
        let x = iota(&s);
        let y = run1(
            "Transpose",
            13,
            &[("perm", Attribute::Ints(vec![2, 1, 0, 3]))],
            &[x.clone()],
        );
        let want = naive_transpose(&x.to_f64_vec().unwrap(), &s, &[2, 1, 0, 3]);
        assert_eq!(y.shape(), &[1, 3, 1, 4]);
        assert_eq!(y.to_f64_vec().unwrap(), want);
    }

    /// Naive transpose through multi-indices.
    fn naive_transpose(x: &[f64], s: &[usize], p: &[usize]) -> Vec<f64> {
        let os: Vec<usize> = p.iter().map(|&i| s[i]).collect();
        let n: usize = s.iter().product();
        let mut out = vec![0.0; n];
        for (flat, o) in out.iter_mut().enumerate() {
            let mut rem = flat;
            let mut oi = vec![0; s.len()];
            for d in (0..s.len()).rev() {
                oi[d] = rem % os[d];
                rem /= os[d];
            }
            let mut ii = vec![0; s.len()];
            for d in 0..s.len() {
                ii[p[d]] = oi[d];
            }
            let mut off = 0;
            for d in 0..s.len() {
                off = off * s[d] + ii[d];
            }
            *o = x[off];
        }
        out
    }

    #[test]
    fn transpose_all_perms_3d() {
        let s = [2usize, 3, 4];
        let x = iota(&s);
        let xv = x.to_f64_vec().unwrap();
        for p in [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ] {
            let pi: Vec<i64> = p.iter().map(|&v| v as i64).collect();
            let y = run1("Transpose", 13, &[("perm", ints(&pi))], &[x.clone()]);
            assert_eq!(
                y.to_f64_vec().unwrap(),
                naive_transpose(&xv, &s, &p),
                "{p:?}"
            );
        }
        // Default: reversed axes.
        let y = run1("Transpose", 13, &[], &[x.clone()]);
        assert_eq!(y.shape(), &[4, 3, 2]);
        assert_eq!(
            y.to_f64_vec().unwrap(),
            naive_transpose(&xv, &s, &[2, 1, 0])
        );
    }

    #[test]
    fn transpose_large_and_other_types() {
        let s = [8usize, 64, 70];
        let x = iota(&s);
        let y = run1("Transpose", 13, &[("perm", ints(&[2, 0, 1]))], &[x.clone()]);
        assert_eq!(
            y.to_f64_vec().unwrap(),
            naive_transpose(&x.to_f64_vec().unwrap(), &s, &[2, 0, 1])
        );
        let st = t(&[2, 2], ["a", "b", "c", "d"].map(String::from).to_vec());
        let y = run1("Transpose", 13, &[], &[st]);
        assert_eq!(
            y,
            t(&[2, 2], ["a", "c", "b", "d"].map(String::from).to_vec())
        );
        assert_eq!(
            run1("Transpose", 13, &[], &[Tensor::scalar(true)]),
            Tensor::scalar(true)
        );
        let e = t(&[0, 3], Vec::<i16>::new());
        assert_eq!(run1("Transpose", 13, &[], &[e]).shape(), &[3, 0]);
    }

    #[test]
    fn axes_merge_into_runs_without_unit_axes() {
        // ShuffleNet's channel shuffle: the last two axes move together.
        assert_eq!(
            super::merge_axes(&[1, 4, 28, 56, 56], &[0, 2, 1, 3, 4]),
            (vec![4, 28, 3136], vec![1, 0, 2])
        );
        // A unit axis between two others no longer separates them.
        assert_eq!(
            super::merge_axes(&[4, 1, 5], &[1, 0, 2]),
            (vec![20], vec![0])
        );
        assert_eq!(
            super::merge_axes(&[2, 3, 4, 5], &[3, 0, 1, 2]),
            (vec![24, 5], vec![1, 0])
        );
        assert_eq!(super::merge_axes(&[1, 1], &[1, 0]), (vec![], vec![]));
    }

    #[test]
    fn transpose_with_unit_and_merged_axes_4d_5d() {
        for (s, p) in [
            (vec![1usize, 4, 6, 5, 7], vec![0usize, 2, 1, 3, 4]),
            (vec![3, 1, 4, 5], vec![2, 3, 1, 0]),
            (vec![2, 3, 1, 4, 5], vec![4, 2, 0, 1, 3]),
            (vec![2, 3, 4, 5], vec![0, 3, 1, 2]),
            (vec![1, 1, 1], vec![2, 0, 1]),
        ] {
            let x = iota(&s);
            let pi: Vec<i64> = p.iter().map(|&v| v as i64).collect();
            let y = run1("Transpose", 13, &[("perm", ints(&pi))], &[x.clone()]);
            let want: Vec<usize> = p.iter().map(|&i| s[i]).collect();
            assert_eq!(y.shape(), &want[..], "{s:?} {p:?}");
            assert_eq!(
                y.to_f64_vec().unwrap(),
                naive_transpose(&x.to_f64_vec().unwrap(), &s, &p),
                "{s:?} {p:?}"
            );
        }
    }

    /// The tiled path (the innermost axis moves), at sizes around and
    /// beyond a tile's side, with unit, odd and empty axes, for elements of
    /// 1, 2, 4 and 8 bytes and strings, against the naive transpose; `run1`
    /// also checks 1 against 3 threads.
    #[test]
    fn transpose_tiled_all_widths_against_naive() {
        let cases: [(&[usize], &[usize]); 11] = [
            (&[1, 96, 56, 56], &[0, 2, 3, 1]),
            (&[1, 56, 56, 96], &[0, 3, 1, 2]),
            (&[17, 33], &[1, 0]),
            (&[65, 1], &[1, 0]),
            (&[3, 70, 9], &[2, 1, 0]),
            (&[2, 5, 7, 3], &[3, 1, 0, 2]),
            (&[4, 9, 1, 11, 2], &[4, 0, 3, 2, 1]),
            (&[2, 3, 5, 7], &[3, 2, 1, 0]),
            (&[130, 8, 3], &[1, 2, 0]),
            (&[0, 5, 3], &[0, 2, 1]),
            (&[4, 0], &[1, 0]),
        ];
        for (sh, p) in cases {
            let n: usize = sh.iter().product();
            let idx: Vec<f64> = (0..n).map(|v| v as f64).collect();
            let want = naive_transpose(&idx, sh, p);
            let pi: Vec<i64> = p.iter().map(|&v| v as i64).collect();
            let attrs = [("perm", ints(&pi))];
            let shape: Vec<usize> = p.iter().map(|&i| sh[i]).collect();
            let go = |x: Tensor| {
                let y = run1("Transpose", 13, &attrs, &[x]);
                assert_eq!(y.shape(), &shape[..], "{sh:?} {p:?}");
                y
            };
            let y = go(t(sh, (0..n as i64).collect::<Vec<_>>()));
            assert_eq!(y.to_f64_vec().unwrap(), want, "{sh:?} {p:?}");
            let y = go(t(sh, (0..n).map(|v| v as f32).collect::<Vec<_>>()));
            assert_eq!(y.to_f64_vec().unwrap(), want, "{sh:?} {p:?}");
            let y = go(t(sh, (0..n).map(|v| v as u16).collect::<Vec<_>>()));
            let w16: Vec<f64> = want.iter().map(|&v| (v as usize as u16) as f64).collect();
            assert_eq!(y.to_f64_vec().unwrap(), w16, "{sh:?} {p:?}");
            let y = go(t(sh, (0..n).map(|v| v as u8).collect::<Vec<_>>()));
            let w8: Vec<f64> = want.iter().map(|&v| (v as usize as u8) as f64).collect();
            assert_eq!(y.to_f64_vec().unwrap(), w8, "{sh:?} {p:?}");
            let y = go(t(sh, (0..n).map(|v| v.to_string()).collect::<Vec<_>>()));
            let ws: Vec<String> = want.iter().map(|v| v.to_string()).collect();
            assert_eq!(y, t(&shape, ws), "{sh:?} {p:?}");
        }
    }

    #[test]
    fn transpose_errors() {
        let x = iota(&[2, 3]);
        for p in [&[0i64, 0][..], &[0, 2], &[0], &[0, 1, 2], &[-1, 0]] {
            let msg = fails("Transpose", 13, &[("perm", ints(p))], &[x.clone()]);
            assert!(msg.contains("permutation"), "{msg}");
        }
    }

    #[test]
    fn depth_to_space_modes() {
        // Spec example: N=1, C=8, H=2, W=3, blocksize 2.
        let x = iota(&[1, 8, 2, 3]);
        let dcr = run1(
            "DepthToSpace",
            13,
            &[("blocksize", Attribute::Int(2)), ("mode", s("DCR"))],
            &[x.clone()],
        );
        let want_dcr: Vec<f64> = vec![
            0., 12., 1., 13., 2., 14., 24., 36., 25., 37., 26., 38., 3., 15., 4., 16., 5., 17.,
            27., 39., 28., 40., 29., 41., 6., 18., 7., 19., 8., 20., 30., 42., 31., 43., 32., 44.,
            9., 21., 10., 22., 11., 23., 33., 45., 34., 46., 35., 47.,
        ];
        assert_eq!(dcr.shape(), &[1, 2, 4, 6]);
        assert_eq!(dcr.to_f64_vec().unwrap(), want_dcr);
        let crd = run1(
            "DepthToSpace",
            13,
            &[("blocksize", Attribute::Int(2)), ("mode", s("CRD"))],
            &[x.clone()],
        );
        let want_crd: Vec<f64> = vec![
            0., 6., 1., 7., 2., 8., 12., 18., 13., 19., 14., 20., 3., 9., 4., 10., 5., 11., 15.,
            21., 16., 22., 17., 23., 24., 30., 25., 31., 26., 32., 36., 42., 37., 43., 38., 44.,
            27., 33., 28., 34., 29., 35., 39., 45., 40., 46., 41., 47.,
        ];
        assert_eq!(crd.to_f64_vec().unwrap(), want_crd);
        // Opset 1 has no mode attribute: always DCR.
        let y = run1(
            "DepthToSpace",
            1,
            &[("blocksize", Attribute::Int(2)), ("mode", s("CRD"))],
            &[x.clone()],
        );
        assert_eq!(y, dcr);
        // SpaceToDepth inverts DCR DepthToSpace.
        let back = run1(
            "SpaceToDepth",
            13,
            &[("blocksize", Attribute::Int(2))],
            &[dcr],
        );
        assert_eq!(back, x);
        // From opset 28 SpaceToDepth has the mode too: CRD inverts CRD.
        let back = run1(
            "SpaceToDepth",
            28,
            &[("blocksize", Attribute::Int(2)), ("mode", s("CRD"))],
            &[crd],
        );
        assert_eq!(back, x);
    }

    #[test]
    fn space_to_depth_example() {
        // Hand-computed: 1x1x2x4, blocksize 2 -> 1x4x1x2.
        let x = iota(&[1, 1, 2, 4]);
        let y = run1(
            "SpaceToDepth",
            13,
            &[("blocksize", Attribute::Int(2))],
            &[x],
        );
        assert_eq!(
            y,
            t(
                &[1, 4, 1, 2],
                vec![0.0f32, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]
            )
        );
    }

    #[test]
    fn block_errors() {
        let x = iota(&[1, 6, 2, 3]);
        let msg = fails(
            "DepthToSpace",
            13,
            &[("blocksize", Attribute::Int(2))],
            &[x.clone()],
        );
        assert!(msg.contains("multiple"), "{msg}");
        let msg = fails(
            "SpaceToDepth",
            13,
            &[("blocksize", Attribute::Int(2))],
            &[x.clone()],
        );
        assert!(msg.contains("multiples"), "{msg}");
        let msg = fails(
            "SpaceToDepth",
            13,
            &[("blocksize", Attribute::Int(0))],
            &[x.clone()],
        );
        assert!(msg.contains("positive"), "{msg}");
        let msg = fails(
            "DepthToSpace",
            13,
            &[("blocksize", Attribute::Int(1)), ("mode", s("XYZ"))],
            &[x.clone()],
        );
        assert!(msg.contains("DCR"), "{msg}");
        let msg = fails(
            "DepthToSpace",
            13,
            &[("blocksize", Attribute::Int(1))],
            &[iota(&[6, 2, 3])],
        );
        assert!(msg.contains("4-D"), "{msg}");
        let msg = fails("DepthToSpace", 13, &[], &[x]);
        assert!(msg.contains("blocksize"), "{msg}");
    }
}
