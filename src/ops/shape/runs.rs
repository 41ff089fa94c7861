//! Fewer, longer offset maps for [`offset_copy`](super::offset_copy): the
//! same output in the same row-major order, read over as few dimensions as
//! possible, so that slices, gathers and broadcasts that read whole trailing
//! blocks copy them as one contiguous run instead of row by row.

use super::PAD;

/// Whether `m` reads `m[0], m[0] + step, …` (no padding).
fn progression(m: &[usize], step: usize) -> bool {
    m.first().is_some_and(|&f| {
        f != PAD
            && m.iter().enumerate().all(|(j, &v)| {
                v != PAD && Some(v) == j.checked_mul(step).and_then(|o| f.checked_add(o))
            })
    })
}

/// The longest run a merge makes, in elements: the run's map is built
/// and scanned, so runs stop where their copies are long enough to make
/// the per-row cost negligible, and many rows still split over threads.
const MAX_RUN: usize = 1 << 14;

/// `maps` with every map of one (non-padding) entry folded into a constant
/// offset, and a contiguous last map merged with the map before it while
/// that one steps by the last one's length (up to [`MAX_RUN`] elements). `None` when nothing changes or
/// a map is empty (the output is then empty anyway).
pub(super) fn merge_maps(maps: &[Vec<usize>]) -> Option<Vec<Vec<usize>>> {
    if maps.iter().any(|m| m.is_empty()) {
        return None;
    }
    let single = |m: &Vec<usize>| m.len() == 1 && m[0] != PAD;
    let base: usize = maps.iter().filter(|m| single(m)).map(|m| m[0]).sum();
    let mut out: Vec<Vec<usize>> = maps.iter().filter(|m| !single(m)).cloned().collect();
    let mut merged = out.len() != maps.len();
    while let [.., outer, last] = &out[..] {
        let long = outer.len().saturating_mul(last.len()) > MAX_RUN;
        if long || !(progression(last, 1) && progression(outer, last.len())) {
            break;
        }
        let (start, len) = (outer[0] + last[0], outer.len() * last.len());
        out.truncate(out.len() - 2);
        out.push((start..start + len).collect());
        merged = true;
    }
    if !merged {
        return None;
    }
    match out.first_mut() {
        Some(m) => m.iter_mut().filter(|v| **v != PAD).for_each(|v| *v += base),
        None => out.push(vec![base]),
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_trailing_blocks_merge_into_one_run() {
        // Rows 1..3 of a 4×5 input: one run of 10 from offset 5.
        let maps = vec![vec![5, 10], (0..5).collect()];
        assert_eq!(merge_maps(&maps), Some(vec![(5..15).collect()]));
        // A unit dimension folds into the offset; a strided one stays.
        let maps = vec![vec![60], vec![0, 40], (0..4).collect(), vec![1, 2]];
        assert_eq!(
            merge_maps(&maps),
            Some(vec![vec![60, 100], (0..4).collect(), vec![1, 2]])
        );
        // Every map a single entry: one element.
        assert_eq!(merge_maps(&[vec![3], vec![4]]), Some(vec![vec![7]]));
        // Padding is never merged nor folded, but the offset still reaches
        // the other entries of the first map.
        let maps = vec![vec![2], vec![PAD, 0, 3], (0..3).collect()];
        assert_eq!(
            merge_maps(&maps),
            Some(vec![vec![PAD, 2, 5], (0..3).collect()])
        );
        assert_eq!(merge_maps(&[vec![0, 1], vec![0, PAD]]), None);
        assert_eq!(merge_maps(&[vec![0, 3], vec![0, 1]]), None);
        assert_eq!(merge_maps(&[vec![0, 1], vec![]]), None);
        // Runs stop growing at MAX_RUN elements.
        let outer = vec![0, 1 << 13, 1 << 14];
        let maps = vec![outer.clone(), vec![0, 1 << 12], (0..1 << 12).collect()];
        assert_eq!(merge_maps(&maps), Some(vec![outer, (0..1 << 13).collect()]));
    }
}
