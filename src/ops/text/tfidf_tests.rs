//! TfIdfVectorizer tests: skip-grams counted by hand, the three modes,
//! string pools, coordinate mapping, empty inputs and malformed attributes.

use crate::ir::attributes::Attribute;
use crate::ops::testutil::{build_op, infer_and_run, int, ints, string};
use crate::tensor::Tensor;

fn attrs(mode: &str, min: i64, max: i64, skip: i64) -> Vec<(&'static str, Attribute)> {
    // Unigrams [1], [2] at coordinates 0, 1; bigrams [1 2], [2 1] at 2, 3.
    vec![
        ("mode", string(mode)),
        ("min_gram_length", int(min)),
        ("max_gram_length", int(max)),
        ("max_skip_count", int(skip)),
        ("ngram_counts", ints(&[0, 2])),
        ("ngram_indexes", ints(&[0, 1, 2, 3])),
        ("pool_int64s", ints(&[1, 2, 1, 2, 2, 1])),
    ]
}

fn vectorize(a: &[(&str, Attribute)], x: &Tensor) -> crate::Result<Vec<f64>> {
    let op = build_op("TfIdfVectorizer", 9, a, &[], 1, 1)?;
    infer_and_run(op.as_ref(), &[Some(x)])?
        .remove(0)
        .to_f64_vec()
}

#[test]
fn skip_grams_by_hand() {
    let x = Tensor::from_vec(&[5], vec![1i64, 2, 9, 1, 2]).unwrap();
    // Adjacent pairs: 1-2, 2-9, 9-1, 1-2 → [1 2] twice.
    assert_eq!(
        vectorize(&attrs("TF", 1, 2, 0), &x).unwrap(),
        [2., 2., 2., 0.]
    );
    // Up to one skip adds pairs 1-9, 2-1, 9-2 → [2 1] once; unigrams not recounted.
    assert_eq!(
        vectorize(&attrs("TF", 1, 2, 1), &x).unwrap(),
        [2., 2., 2., 1.]
    );
    // Two skips add 1-1 and 2-2 (not in the pool); three add 1-2 (positions 0 and 4).
    assert_eq!(
        vectorize(&attrs("TF", 2, 2, 3), &x).unwrap(),
        [0., 0., 3., 1.]
    );
    // Unigrams only.
    assert_eq!(
        vectorize(&attrs("TF", 1, 1, 4), &x).unwrap(),
        [2., 2., 0., 0.]
    );
}

#[test]
fn idf_and_tfidf_weigh_by_coordinate() {
    let x = Tensor::from_vec(&[2, 3], vec![1i32, 2, 1, 2, 2, 2]).unwrap();
    let mut a = attrs("IDF", 1, 2, 0);
    a.push(("weights", Attribute::Floats(vec![0.5, 2.0, 3.0, 4.0])));
    // Row 0: 1,2,1 → counts [2, 1, 1, 1]; row 1: 2,2,2 → [0, 3, 0, 0].
    assert_eq!(
        vectorize(&a, &x).unwrap(),
        [0.5, 2., 3., 4., 0., 2., 0., 0.]
    );
    a[0] = ("mode", string("TFIDF"));
    assert_eq!(vectorize(&a, &x).unwrap(), [1., 2., 3., 4., 0., 6., 0., 0.]);
    // Without weights IDF marks presence.
    assert_eq!(
        vectorize(&attrs("IDF", 1, 2, 0), &x).unwrap(),
        [1., 1., 1., 1., 0., 1., 0., 0.]
    );
}

#[test]
fn string_pools_and_shared_coordinates() {
    let a = vec![
        ("mode", string("TF")),
        ("min_gram_length", int(1)),
        ("max_gram_length", int(1)),
        ("max_skip_count", int(0)),
        ("ngram_counts", ints(&[0])),
        // "a" and "b" both count at coordinate 1; coordinate 0 is unused.
        ("ngram_indexes", ints(&[1, 1])),
        (
            "pool_strings",
            Attribute::Strings(vec![b"a".to_vec(), b"b".to_vec()]),
        ),
    ];
    let x = Tensor::from_vec(&[3], vec!["a".to_string(), "b".into(), "c".into()]).unwrap();
    assert_eq!(vectorize(&a, &x).unwrap(), [0., 2.]);
    let ints_in = Tensor::from_vec(&[1], vec![1i64]).unwrap();
    assert!(vectorize(&a, &ints_in).is_err());
}

#[test]
fn empty_inputs() {
    let x = Tensor::from_vec(&[0], Vec::<i64>::new()).unwrap();
    assert_eq!(vectorize(&attrs("TF", 1, 2, 0), &x).unwrap(), [0.; 4]);
    let x = Tensor::from_vec(&[2, 0], Vec::<i64>::new()).unwrap();
    assert_eq!(vectorize(&attrs("TF", 1, 2, 0), &x).unwrap(), [0.; 8]);
}

#[test]
fn malformed_attributes_are_refused() {
    let x = Tensor::from_vec(&[1], vec![1i64]).unwrap();
    let with = |k: &'static str, v: Attribute| {
        let mut a = attrs("TF", 1, 2, 0);
        a.retain(|(n, _)| *n != k);
        a.push((k, v));
        vectorize(&a, &x)
    };
    assert!(with("mode", string("BM25")).is_err());
    assert!(with("min_gram_length", int(0)).is_err());
    assert!(with("max_gram_length", int(0)).is_err());
    assert!(with("max_skip_count", int(-1)).is_err());
    // 3 bigram items is not a whole number of bigrams; counts past the pool.
    assert!(with("ngram_counts", ints(&[0, 3])).is_err());
    assert!(with("ngram_counts", ints(&[0, 7])).is_err());
    assert!(with("ngram_indexes", ints(&[0, 1, 2])).is_err());
    assert!(with("ngram_indexes", ints(&[0, 1, 2, -3])).is_err());
    assert!(with("weights", Attribute::Floats(vec![1.0])).is_err());
    assert!(with("pool_strings", Attribute::Strings(vec![])).is_err());
    let x2 = Tensor::from_vec(&[1, 1, 1], vec![1i64]).unwrap();
    assert!(vectorize(&attrs("TF", 1, 2, 0), &x2).is_err());
}

#[test]
fn huge_coordinates_and_skips_stay_in_budget() {
    let x = Tensor::from_vec(&[3], vec![1i64, 2, 1]).unwrap();
    let mut a = attrs("TF", 1, 2, 0);
    a.retain(|(n, _)| *n != "ngram_indexes");
    a.push(("ngram_indexes", ints(&[0, 1, 2, 1 << 60])));
    let op = build_op("TfIdfVectorizer", 9, &a, &[], 1, 1).unwrap();
    let e = crate::tensor::budget::with_limit(1 << 20, || op.run(&[Some(&x)])).unwrap_err();
    assert!(matches!(e, crate::Error::MemoryLimit { .. }), "{e}");
    // A skip count far past the row ends at once, with the same counts.
    let far = vectorize(&attrs("TF", 1, 2, i64::MAX - 1), &x).unwrap();
    assert_eq!(far, vectorize(&attrs("TF", 1, 2, 2), &x).unwrap());
}
