//! What a build with only some operator families (cargo features) gives: the
//! example model runs and matches its reference wherever its families are
//! built, and an operator of a family left out fails to load with
//! `Error::OperatorLeftOut` naming the operator and the feature. The test
//! command runs this file in the full build and again in the example model's
//! reduced build (`ramify ops --required models/inception_mini.onnx`).

mod common;

use common::*;
use ramify::onnx::read_tensor_file;
use ramify::ops::{catalog, registry};
use ramify::{Error, Session};

#[test]
fn the_example_model_runs_in_its_reduced_build() {
    let dir = repo().join("models/inception_mini");
    let s = Session::from_file(repo().join("models/inception_mini.onnx")).unwrap();
    let input = read_tensor_file(&dir.join("test_data_set_0/input_0.pb")).unwrap();
    let want = read_tensor_file(&dir.join("test_data_set_0/output_0.pb")).unwrap();
    let out = s.run([("input", input)]).unwrap();
    let (got, want) = (out[0].1.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 + 1e-3 * w.abs(), "{g} vs {w}");
    }
}

/// Every operator of the catalog is either built (in the registry, with the
/// same family and opset) or refused at load naming its feature.
#[test]
fn operators_of_left_out_families_are_named_with_their_feature() {
    let mut left_out = 0;
    for feature in catalog().features() {
        // One operator of this family, loaded in a one-node model.
        let (domain, op, since) = catalog_member(feature);
        if let Some(e) = registry().get_in(domain, op) {
            assert_eq!(
                (e.since, catalog().get(domain, op).unwrap().feature),
                (since, feature)
            );
            continue;
        }
        left_out += 1;
        let mut n = node(op, &["x"], &["y"]);
        n.domain = domain.into();
        let mut m = model(
            graph(
                vec![n],
                vec![value_info("x", 1, &[4])],
                vec![value_info("y", 1, &[4])],
                vec![],
            ),
            since.max(13),
        );
        if !domain.is_empty() {
            let mut o = onnx_protobuf::OperatorSetIdProto::new();
            o.domain = domain.into();
            o.version = since;
            m.opset_import.push(o);
        }
        match Session::from_bytes(&bytes(&m)).unwrap_err() {
            Error::OperatorLeftOut {
                op: got,
                feature: f,
                ..
            } => assert_eq!((got.as_str(), f), (op, feature)),
            other => panic!("{op} ({feature}): {other:?}"),
        }
    }
    eprintln!(
        "{left_out} of {} families left out of this build",
        catalog().features().len()
    );
}

/// The first operator (by name) of the family built by `feature`.
fn catalog_member(feature: &str) -> (&'static str, &'static str, i64) {
    catalog()
        .entries()
        .into_iter()
        .find(|(_, _, e)| e.feature == feature)
        .map(|(domain, op, e)| (domain, op, e.since))
        .expect("every feature has an operator")
}
