//! [`TapSums`]' portable pass (a multiply then an add, 8 lanes a row)
//! against a direct sum with the same rounding, bit for bit: rows shorter
//! and longer than a chunk and not multiples of it, resumed passes, and
//! the activation applied before the store.

use super::TapSums;
use crate::ops::gemm::fused::Activation;
use crate::ops::testutil::rand_vec as values;

#[test]
fn the_portable_pass_sums_each_output_in_tap_order() {
    for (i, &(oh, ow)) in [(1, 3), (2, 8), (3, 13), (5, 16), (2, 33), (4, 70)]
        .iter()
        .enumerate()
    {
        // A 3×3 window over a plane of rows `cols` wide (two spare columns
        // and the chunk's read-ahead), taps in row-major order.
        let cols = ow + 2;
        let offsets: Vec<usize> = (0..9).map(|t| (t / 3) * cols + t % 3).collect();
        let phases = values((oh + 2) * cols + super::MAX_LANES, 7 + i as u64);
        let w = values(9, 3 + i as u64);
        let init = 0.25;
        for (resume, act) in [(false, None), (false, Some(Activation::Relu)), (true, None)] {
            let start = values(oh * ow, 11 + i as u64);
            let mut got = start.clone();
            let sums = TapSums {
                ow,
                cols,
                offsets: &offsets,
                resume,
                act,
            };
            sums.run_plain(&mut got, init, &w, &phases);
            let want: Vec<f32> = (0..oh * ow)
                .map(|o| {
                    let (y, x) = (o / ow, o % ow);
                    let s0 = if resume { start[o] } else { init };
                    let s = offsets
                        .iter()
                        .zip(&w)
                        .fold(s0, |a, (&at, &wv)| a + wv * phases[at + y * cols + x]);
                    act.map_or(s, |f| f.eval(s))
                })
                .collect();
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{oh}x{ow} resume {resume} {act:?}");
        }
    }
}
