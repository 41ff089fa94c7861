//! If, Loop and Scan on models built in code: branches that read
//! outer-scope values, an If nested in a Loop body that reads a value two
//! scopes out, a branch naming a value that exists nowhere, and opset 8's
//! batched Scan with and without sequence lengths.

mod common;

use common::{
    graph, graph_attr, initializer, int64_init, int_attr, ints_attr, model, node, value_info,
};
use onnx_protobuf::Message;
use ramify::{SessionBuilder, Tensor};

const FLOAT: i32 = 1;
const INT64: i32 = 7;
const BOOL: i32 = 9;

/// If(c): then y = x + [10, 20] (a branch initializer), else y = -x; both
/// branches read the outer graph's input x.
fn if_model(else_input: &str) -> Vec<u8> {
    let then_branch = graph(
        vec![node("Add", &["x", "k"], &["t"])],
        vec![],
        vec![value_info("t", FLOAT, &[2])],
        vec![initializer("k", &[2], &[10.0, 20.0])],
    );
    let else_branch = graph(
        vec![node("Neg", &[else_input], &["e"])],
        vec![],
        vec![value_info("e", FLOAT, &[2])],
        vec![],
    );
    let mut n = node("If", &["c"], &["y"]);
    n.attribute.push(graph_attr("then_branch", then_branch));
    n.attribute.push(graph_attr("else_branch", else_branch));
    let g = graph(
        vec![n],
        vec![value_info("x", FLOAT, &[2]), value_info("c", BOOL, &[])],
        vec![value_info("y", FLOAT, &[2])],
        vec![],
    );
    model(g, 13).write_to_bytes().unwrap()
}

fn run_if(c: bool) -> Vec<f64> {
    let s = SessionBuilder::new()
        .build_from_bytes(&if_model("x"))
        .unwrap();
    let x = Tensor::from_vec(&[2], vec![1.5f32, -2.0]).unwrap();
    let out = s.run([("x", x), ("c", Tensor::scalar(c))]).unwrap();
    out[0].1.to_f64_vec().unwrap()
}

#[test]
fn if_branches_read_outer_scope_values() {
    assert_eq!(run_if(true), vec![11.5, 18.0]);
    assert_eq!(run_if(false), vec![-1.5, 2.0]);
}

#[test]
fn if_branch_naming_an_unknown_value_is_an_error() {
    let err = SessionBuilder::new()
        .build_from_bytes(&if_model("nowhere"))
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("nowhere"), "{err}");
}

/// Loop M times over v (starting at 0): the body's If adds the outer x in
/// the first two iterations and subtracts it after, so x is read two
/// scopes out; a scan output collects v after every iteration.
fn loop_model() -> Vec<u8> {
    let add = graph(
        vec![node("Add", &["v_in", "x"], &["a"])],
        vec![],
        vec![value_info("a", FLOAT, &[2])],
        vec![],
    );
    let sub = graph(
        vec![node("Sub", &["v_in", "x"], &["s"])],
        vec![],
        vec![value_info("s", FLOAT, &[2])],
        vec![],
    );
    let mut choose = node("If", &["early"], &["v_out"]);
    choose.attribute.push(graph_attr("then_branch", add));
    choose.attribute.push(graph_attr("else_branch", sub));
    let mut body = graph(
        vec![
            node("Identity", &["cond_in"], &["cond_out"]),
            node("Less", &["i", "two"], &["early"]),
            choose,
            node("Identity", &["v_out"], &["scan"]),
        ],
        vec![
            value_info("i", INT64, &[]),
            value_info("cond_in", BOOL, &[]),
            value_info("v_in", FLOAT, &[2]),
        ],
        vec![
            value_info("cond_out", BOOL, &[]),
            value_info("v_out", FLOAT, &[2]),
            value_info("scan", FLOAT, &[2]),
        ],
        vec![],
    );
    body.initializer.push(int64_init("two", 2));
    let mut lp = node("Loop", &["m", "", "v0"], &["v_final", "history"]);
    lp.attribute.push(graph_attr("body", body));
    let g = graph(
        vec![lp],
        vec![
            value_info("x", FLOAT, &[2]),
            value_info("m", INT64, &[]),
            value_info("v0", FLOAT, &[2]),
        ],
        vec![
            value_info("v_final", FLOAT, &[2]),
            value_info("history", FLOAT, &[-1, 2]),
        ],
        vec![],
    );
    model(g, 13).write_to_bytes().unwrap()
}

#[test]
fn loop_body_if_reads_a_value_two_scopes_out() {
    let s = SessionBuilder::new()
        .build_from_bytes(&loop_model())
        .unwrap();
    let x = Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
    let v0 = Tensor::from_vec(&[2], vec![0.0f32, 0.0]).unwrap();
    let out = s
        .run([("x", x), ("m", Tensor::scalar(5i64)), ("v0", v0)])
        .unwrap();
    // +x, +x, −x, −x, −x.
    assert_eq!(out[0].1.to_f64_vec().unwrap(), vec![-1.0, -2.0]);
    assert_eq!(out[1].1.shape(), &[5, 2]);
    assert_eq!(
        out[1].1.to_f64_vec().unwrap(),
        vec![1.0, 2.0, 2.0, 4.0, 1.0, 2.0, 0.0, 0.0, -1.0, -2.0]
    );
}

/// Opset 8's Scan over a batch of two: state `sum` (init [2, 2]) adds each
/// step of x ([2, 3, 2]) read forward; a second scan input reads x again in
/// reverse; the scan outputs are the running sum and the reversed slices.
/// `lens` names the sequence_lens input ("" for none).
fn scan8_model(lens: &str) -> Vec<u8> {
    let body = graph(
        vec![
            node("Add", &["sum_in", "fwd"], &["sum_out"]),
            node("Identity", &["sum_out"], &["sums"]),
            node("Identity", &["rev"], &["revs"]),
        ],
        vec![
            value_info("sum_in", FLOAT, &[2]),
            value_info("fwd", FLOAT, &[2]),
            value_info("rev", FLOAT, &[2]),
        ],
        vec![
            value_info("sum_out", FLOAT, &[2]),
            value_info("sums", FLOAT, &[2]),
            value_info("revs", FLOAT, &[2]),
        ],
        vec![],
    );
    let mut scan = node(
        "Scan",
        &[lens, "init", "x", "x"],
        &["final", "all_sums", "all_revs"],
    );
    scan.attribute.push(graph_attr("body", body));
    scan.attribute.push(int_attr("num_scan_inputs", 2));
    scan.attribute.push(ints_attr("directions", &[0, 1]));
    let mut inputs = vec![
        value_info("init", FLOAT, &[2, 2]),
        value_info("x", FLOAT, &[2, 3, 2]),
    ];
    if !lens.is_empty() {
        inputs.push(value_info(lens, INT64, &[2]));
    }
    let g = graph(
        vec![scan],
        inputs,
        vec![
            value_info("final", FLOAT, &[2, 2]),
            value_info("all_sums", FLOAT, &[2, 3, 2]),
            value_info("all_revs", FLOAT, &[2, 3, 2]),
        ],
        vec![],
    );
    model(g, 8).write_to_bytes().unwrap()
}

fn run_scan8(lens: Option<Vec<i64>>) -> ramify::Result<Vec<Vec<f64>>> {
    let name = if lens.is_some() { "lens" } else { "" };
    let s = SessionBuilder::new().build_from_bytes(&scan8_model(name))?;
    let init = Tensor::from_vec(&[2, 2], vec![0.0f32, 0.0, 100.0, 100.0]).unwrap();
    let x: Vec<f32> = vec![
        1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    ];
    let x = Tensor::from_vec(&[2, 3, 2], x).unwrap();
    let mut feeds = vec![("init", init), ("x", x)];
    if let Some(l) = lens {
        feeds.push(("lens", Tensor::from_vec(&[l.len()], l).unwrap()));
    }
    let out = s.run(feeds)?;
    assert_eq!(out[0].1.shape(), &[2, 2]);
    assert_eq!(out[1].1.shape(), &[2, 3, 2]);
    assert_eq!(out[2].1.shape(), &[2, 3, 2]);
    Ok(out.iter().map(|(_, t)| t.to_f64_vec().unwrap()).collect())
}

#[test]
fn scan8_runs_each_batch_entry_over_the_full_sequence() {
    let out = run_scan8(None).unwrap();
    assert_eq!(out[0], vec![9.0, 12.0, 190.0, 220.0]);
    assert_eq!(
        out[1],
        vec![1.0, 2.0, 4.0, 6.0, 9.0, 12.0, 110.0, 120.0, 140.0, 160.0, 190.0, 220.0]
    );
    assert_eq!(
        out[2],
        vec![5.0, 6.0, 3.0, 4.0, 1.0, 2.0, 50.0, 60.0, 30.0, 40.0, 10.0, 20.0]
    );
}

#[test]
fn scan8_sequence_lens_stop_an_entry_early_and_pad_its_outputs() {
    let out = run_scan8(Some(vec![3, 2])).unwrap();
    // Entry 1 runs two steps; its reverse input starts from its own last
    // step (x[1][1]); its scan outputs are padded with zeros.
    assert_eq!(out[0], vec![9.0, 12.0, 140.0, 160.0]);
    assert_eq!(
        out[1],
        vec![1.0, 2.0, 4.0, 6.0, 9.0, 12.0, 110.0, 120.0, 140.0, 160.0, 0.0, 0.0]
    );
    assert_eq!(
        out[2],
        vec![5.0, 6.0, 3.0, 4.0, 1.0, 2.0, 30.0, 40.0, 10.0, 20.0, 0.0, 0.0]
    );
    // A zero length keeps the initial state.
    let out = run_scan8(Some(vec![0, 1])).unwrap();
    assert_eq!(out[0], vec![0.0, 0.0, 110.0, 120.0]);
    assert_eq!(&out[1][..6], &[0.0; 6]);
    // Lengths past the sequence, negative or of the wrong count are errors.
    for bad in [vec![4, 1], vec![-1, 1]] {
        let e = run_scan8(Some(bad.clone())).unwrap_err().to_string();
        assert!(e.contains("sequence length"), "{bad:?}: {e}");
    }
    assert!(run_scan8(Some(vec![1])).is_err());
}
