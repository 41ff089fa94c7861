//! One compiled sort for the whole library.
//!
//! Every `sort_by` call with its own closure (or on its own element type)
//! instantiates the standard library's sort anew, about ten kilobytes each:
//! a dozen such sorts in the scheduler, the load readers and the operators
//! were a visible share of the shipped library. The helpers here sort
//! indices through one comparator type, `&dyn Fn(usize, usize) -> Ordering`,
//! so the sort itself is compiled once; other element types are sorted by
//! sorting their indices. All sorts here are stable.

use std::cmp::Ordering;

/// Sorts the indices `idx` stably by `cmp`; the one place the sort is compiled.
#[inline(never)]
pub fn sort_indices(idx: &mut [usize], cmp: &dyn Fn(usize, usize) -> Ordering) {
    idx.sort_by(|&a, &b| cmp(a, b));
}

/// The stable order of `0..n` by `cmp`: the `k`-th entry is the index of the
/// `k`-th smallest item.
pub fn sorted_indices(n: usize, cmp: &dyn Fn(usize, usize) -> Ordering) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    sort_indices(&mut idx, cmp);
    idx
}

/// Sorts `v` stably by `cmp`, as `v.sort_by(cmp)` would, through
/// [`sort_indices`]: only the reordering is compiled per element type.
pub fn sort_by<T>(v: &mut Vec<T>, cmp: impl Fn(&T, &T) -> Ordering) {
    let idx = sorted_indices(v.len(), &|a, b| cmp(&v[a], &v[b]));
    let mut slots: Vec<Option<T>> = v.drain(..).map(Some).collect();
    // Every index appears once in `idx`, so every slot is taken once.
    v.extend(idx.iter().filter_map(|&i| slots[i].take()));
}

/// Sorts `v` ascending by [`f64::total_cmp`] (NaN after +inf).
pub fn sort_f64(v: &mut [f64]) {
    let order = sorted_indices(v.len(), &|a, b| v[a].total_cmp(&v[b]));
    let sorted: Vec<f64> = order.iter().map(|&i| v[i]).collect();
    v.copy_from_slice(&sorted);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_by_is_stable_and_matches_the_standard_sort() {
        let mut v: Vec<(u8, &str)> = vec![(3, "a"), (1, "b"), (3, "c"), (0, "d"), (1, "e")];
        let mut want = v.clone();
        want.sort_by_key(|x| x.0);
        sort_by(&mut v, |x, y| x.0.cmp(&y.0));
        assert_eq!(v, want);
        assert_eq!(v, vec![(0, "d"), (1, "b"), (1, "e"), (3, "a"), (3, "c")]);
    }

    #[test]
    fn sorted_indices_orders_by_the_comparator() {
        let keys = [5.0f64, -1.0, 2.0, -1.0];
        let idx = sorted_indices(keys.len(), &|a, b| keys[b].total_cmp(&keys[a]));
        assert_eq!(idx, vec![0, 2, 1, 3]);
    }

    #[test]
    fn sort_f64_puts_nan_last_and_negative_zero_first() {
        let mut v = [f64::NAN, 1.0, 0.0, -0.0, f64::NEG_INFINITY];
        sort_f64(&mut v);
        assert_eq!(v[0], f64::NEG_INFINITY);
        assert!(v[1] == 0.0 && v[1].is_sign_negative());
        assert!(v[2] == 0.0 && v[2].is_sign_positive());
        assert_eq!(v[3], 1.0);
        assert!(v[4].is_nan());
    }
}
