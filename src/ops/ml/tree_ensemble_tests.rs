//! TreeEnsemble tests: each comparison mode, missing values, set
//! membership, the aggregates and post-transforms, against hand-walked trees,
//! and the checks on malformed ensembles.

use super::super::testutil::build_ml;
use super::erfinv;
use crate::ir::attributes::Attribute;
use crate::ops::testutil::{infer_and_run, int, ints};
use crate::tensor::Tensor;

fn f64s(v: &[f64]) -> Attribute {
    Attribute::Tensor(Tensor::from_vec(&[v.len()], v.to_vec()).unwrap())
}

fn modes(v: &[u8]) -> Attribute {
    Attribute::Tensor(Tensor::from_vec(&[v.len()], v.to_vec()).unwrap())
}

/// Two trees over features 0 and 1, targets 0 and 1:
/// tree A: node 0 (x0 `mode` 2.0) → leaf 0 (t0, 1.0) | leaf 1 (t1, 10.0);
/// tree B: node 1 (x1 <= 0.5) → leaf 2 (t0, 100.0) | leaf 3 (t0, 1000.0).
fn two_trees<'a>(mode: u8, extra: &[(&'a str, Attribute)]) -> Vec<(&'a str, Attribute)> {
    let mut a: Vec<(&str, Attribute)> = vec![
        ("nodes_featureids", ints(&[0, 1])),
        ("nodes_splits", f64s(&[2.0, 0.5])),
        ("nodes_modes", modes(&[mode, 0])),
        ("nodes_truenodeids", ints(&[0, 2])),
        ("nodes_trueleafs", ints(&[1, 1])),
        ("nodes_falsenodeids", ints(&[1, 3])),
        ("nodes_falseleafs", ints(&[1, 1])),
        ("leaf_targetids", ints(&[0, 1, 0, 0])),
        ("leaf_weights", f64s(&[1.0, 10.0, 100.0, 1000.0])),
        ("n_targets", int(2)),
        ("tree_roots", ints(&[0, 1])),
    ];
    for (k, v) in extra {
        a.retain(|(n, _)| n != k);
        a.push((k, v.clone()));
    }
    a
}

fn predict(attrs: &[(&str, Attribute)], rows: &[[f64; 2]]) -> crate::Result<Vec<f64>> {
    let op = build_ml("TreeEnsemble", 5, attrs, 1)?;
    let x = Tensor::from_vec(&[rows.len(), 2], rows.concat()).unwrap();
    infer_and_run(op.as_ref(), &[Some(&x)])?
        .remove(0)
        .to_f64_vec()
}

#[test]
fn each_mode_against_hand_walks() {
    let rows = [[1.0, 0.0], [2.0, 1.0], [3.0, 0.5]];
    // (mode, whether x0 in 1, 2, 3 goes true)
    let cases: [(u8, [bool; 3]); 6] = [
        (0, [true, true, false]),
        (1, [true, false, false]),
        (2, [false, true, true]),
        (3, [false, false, true]),
        (4, [false, true, false]),
        (5, [true, false, true]),
    ];
    for (mode, truth) in cases {
        let y = predict(&two_trees(mode, &[]), &rows).unwrap();
        for (r, goes_true) in truth.iter().enumerate() {
            let b = if rows[r][1] <= 0.5 { 100.0 } else { 1000.0 };
            let want = if *goes_true {
                [1.0 + b, 0.0]
            } else {
                [b, 10.0]
            };
            assert_eq!(&y[2 * r..2 * r + 2], &want, "mode {mode} row {r}");
        }
    }
}

#[test]
fn missing_values_and_membership() {
    let rows = [[f64::NAN, 0.0]];
    // NaN fails every comparison but NEQ, unless missing values track true.
    assert_eq!(predict(&two_trees(0, &[]), &rows).unwrap(), [100.0, 10.0]);
    assert_eq!(predict(&two_trees(5, &[]), &rows).unwrap(), [101.0, 0.0]);
    let track = [("nodes_missing_value_tracks_true", ints(&[1, 0]))];
    assert_eq!(predict(&two_trees(0, &track), &rows).unwrap(), [101.0, 0.0]);
    // Node 0 tests x0 in {-0.0, 4.0}; node 1 keeps its threshold.
    let member = [("membership_values", f64s(&[4.0, -0.0, f64::NAN]))];
    let rows = [[4.0, 0.0], [0.0, 0.0], [2.0, 0.0]];
    let y = predict(&two_trees(6, &member), &rows).unwrap();
    assert_eq!(y, [101.0, 0.0, 101.0, 0.0, 100.0, 10.0]);
    let missing = predict(&two_trees(6, &[]), &rows).unwrap_err();
    assert!(
        missing.to_string().contains("membership_values"),
        "{missing}"
    );
}

#[test]
fn aggregates_and_post_transforms() {
    // Both trees give target 0: 1.0 and 100.0 (row [1, 0]).
    let rows = [[1.0, 0.0]];
    let run = |agg: i64, post: i64| {
        predict(
            &two_trees(
                0,
                &[
                    ("aggregate_function", int(agg)),
                    ("post_transform", int(post)),
                ],
            ),
            &rows,
        )
        .unwrap()
    };
    assert_eq!(run(0, 0), [50.5, 0.0]);
    assert_eq!(run(1, 0), [101.0, 0.0]);
    assert_eq!(run(2, 0), [1.0, 0.0]);
    assert_eq!(run(3, 0), [100.0, 0.0]);
    // Softmax of [1, 0] (MIN): e/(e+1), 1/(e+1).
    let e = 1f64.exp();
    let s = run(2, 1);
    assert!((s[0] - e / (e + 1.0)).abs() < 1e-12 && (s[1] - 1.0 / (e + 1.0)).abs() < 1e-12);
    let l = run(2, 2);
    assert!((l[0] - 1.0 / (1.0 + (-1f64).exp())).abs() < 1e-12 && (l[1] - 0.5).abs() < 1e-12);
    // SOFTMAX_ZERO: the only nonzero score takes all, zero stays zero.
    assert_eq!(run(2, 3), [1.0, 0.0]);
    // PROBIT needs scores in [0, 1]: weights 0.25 and 0.5 sum to 0.75 on target 0.
    let p = predict(
        &two_trees(
            0,
            &[
                ("post_transform", int(4)),
                ("leaf_weights", f64s(&[0.25, 0.5, 0.5, 0.5])),
            ],
        ),
        &rows,
    )
    .unwrap();
    // 0.75 → √2·erfinv(0.5) = Φ⁻¹(0.75) = 0.6744897501960817; 0 → −∞.
    assert!((p[0] - 0.674_489_750_196_081_7).abs() < 1e-12, "{p:?}");
    assert_eq!(p[1], f64::NEG_INFINITY);
}

#[test]
fn erfinv_inverts_erf() {
    for y in [-0.999_999, -0.9, -0.3, 0.0, 1e-9, 0.5, 0.99] {
        assert!((libm::erf(erfinv(y)) - y).abs() < 1e-14, "{y}");
    }
    assert!(erfinv(1.5).is_nan());
}

#[test]
fn float32_and_empty_batches() {
    let mut attrs = two_trees(0, &[]);
    let f32s = |v: &[f32]| Attribute::Tensor(Tensor::from_vec(&[v.len()], v.to_vec()).unwrap());
    attrs.retain(|(n, _)| *n != "nodes_splits" && *n != "leaf_weights");
    attrs.push(("nodes_splits", f32s(&[2.0, 0.5])));
    attrs.push(("leaf_weights", f32s(&[1.0, 10.0, 100.0, 1000.0])));
    let op = build_ml("TreeEnsemble", 5, &attrs, 1).unwrap();
    let x = Tensor::from_vec(&[1, 2], vec![3f32, 1.0]).unwrap();
    let y = infer_and_run(op.as_ref(), &[Some(&x)]).unwrap().remove(0);
    assert_eq!(y, Tensor::from_vec(&[1, 2], vec![1000f32, 10.0]).unwrap());
    let e = Tensor::from_vec(&[0, 2], Vec::<f32>::new()).unwrap();
    assert_eq!(
        infer_and_run(op.as_ref(), &[Some(&e)]).unwrap()[0].shape(),
        &[0, 2]
    );
    // f64 data against f32 thresholds, and too few features, are refused.
    let d = Tensor::from_vec(&[1, 2], vec![3f64, 1.0]).unwrap();
    assert!(op.run(&[Some(&d)]).is_err());
    let narrow = Tensor::from_vec(&[1, 1], vec![3f32]).unwrap();
    assert!(op
        .run(&[Some(&narrow)])
        .unwrap_err()
        .to_string()
        .contains("feature 1"));
}

#[test]
fn malformed_ensembles_are_refused() {
    let bad =
        |extra: &[(&str, Attribute)]| build_ml("TreeEnsemble", 5, &two_trees(0, extra), 1).is_err();
    // A cycle: node 1's false branch goes back to node 0 ... and node 0 to node 1.
    assert!(bad(&[
        ("nodes_falsenodeids", ints(&[1, 0])),
        ("nodes_falseleafs", ints(&[0, 0]))
    ]));
    assert!(bad(&[("nodes_truenodeids", ints(&[0, 7]))]));
    assert!(bad(&[("leaf_targetids", ints(&[0, 2, 0, 0]))]));
    assert!(bad(&[("nodes_featureids", ints(&[0]))]));
    assert!(bad(&[("nodes_modes", modes(&[7, 0]))]));
    assert!(bad(&[("tree_roots", ints(&[2]))]));
    assert!(bad(&[("aggregate_function", int(4))]));
    assert!(bad(&[("post_transform", int(5))]));
    let mut no_targets = two_trees(0, &[]);
    no_targets.retain(|(n, _)| *n != "n_targets");
    assert!(build_ml("TreeEnsemble", 5, &no_targets, 1).is_err());
    // A shared subtree is not a cycle.
    assert!(!bad(&[
        ("nodes_falsenodeids", ints(&[1, 3])),
        ("nodes_falseleafs", ints(&[0, 1]))
    ]));
}

#[test]
fn a_huge_target_count_is_refused_by_the_budget() {
    let op = build_ml(
        "TreeEnsemble",
        5,
        &two_trees(0, &[("n_targets", int(1 << 50))]),
        1,
    )
    .unwrap();
    let x = Tensor::from_vec(&[2, 2], vec![0f64; 4]).unwrap();
    let e = crate::tensor::budget::with_limit(1 << 20, || op.run(&[Some(&x)])).unwrap_err();
    assert!(matches!(e, crate::Error::MemoryLimit { .. }), "{e}");
}
