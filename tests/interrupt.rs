//! Stopping runs from outside: a time limit and a cancellation token end a
//! Loop of 2^62 trips (a hostile model's hang) within one iteration of the
//! moment they fire, at load time (constant folding) and at run time, and
//! the session keeps giving correct results afterwards.

mod common;

use common::{bytes, graph, graph_attr, int64_init, model, node, value_info};
use onnx_protobuf::{ModelProto, TensorProto};
use ramify::{CancelToken, Error, RunOptions, SessionBuilder, Tensor};
use std::time::{Duration, Instant};

const FLOAT: i32 = 1;
const INT64: i32 = 7;
const BOOL: i32 = 9;
const FOREVER: i64 = 1 << 62;

/// v_final = v0 + M: a Loop of M trips adding one each time. With
/// `constant_m`, M and v0 are initializers (the loop is folded at load).
fn counting_loop(constant_m: Option<i64>) -> ModelProto {
    let mut body = graph(
        vec![
            node("Identity", &["cond_in"], &["cond_out"]),
            node("Add", &["v_in", "one"], &["v_out"]),
        ],
        vec![
            value_info("i", INT64, &[]),
            value_info("cond_in", BOOL, &[]),
            value_info("v_in", FLOAT, &[1]),
        ],
        vec![
            value_info("cond_out", BOOL, &[]),
            value_info("v_out", FLOAT, &[1]),
        ],
        vec![common::initializer("one", &[1], &[1.0])],
    );
    body.name = "body".into();
    let mut lp = node("Loop", &["m", "", "v0"], &["v_final"]);
    lp.attribute.push(graph_attr("body", body));
    let (inputs, inits): (Vec<_>, Vec<TensorProto>) = match constant_m {
        None => (
            vec![value_info("m", INT64, &[]), value_info("v0", FLOAT, &[1])],
            vec![],
        ),
        Some(m) => (
            vec![],
            vec![int64_init("m", m), common::initializer("v0", &[1], &[0.0])],
        ),
    };
    model(
        graph(
            vec![lp],
            inputs,
            vec![value_info("v_final", FLOAT, &[1])],
            inits,
        ),
        13,
    )
}

fn feeds(m: i64) -> [(&'static str, Tensor); 2] {
    [
        ("m", Tensor::scalar(m)),
        ("v0", Tensor::from_vec(&[1], vec![0.5f32]).unwrap()),
    ]
}

#[test]
fn a_time_limit_stops_an_endless_loop_and_the_session_goes_on() {
    let session = SessionBuilder::new()
        .build_from_bytes(&bytes(&counting_loop(None)))
        .unwrap();
    let options = RunOptions::new().time_limit(Duration::from_millis(200));
    let start = Instant::now();
    let err = session
        .run_with_options(feeds(FOREVER), &options)
        .unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, Error::Deadline(_)), "{err}");
    assert!(took < Duration::from_secs(3), "stopped only after {took:?}");
    // The same session, within its limit, gives the right answer.
    let (out, _) = session.run_with_options(feeds(3), &options).unwrap();
    assert_eq!(out[0].1.to_f64_vec().unwrap(), vec![3.5]);
}

#[test]
fn cancelling_from_another_thread_stops_the_run() {
    let session = SessionBuilder::new()
        .build_from_bytes(&bytes(&counting_loop(None)))
        .unwrap();
    let token = CancelToken::new();
    let canceller = {
        let token = token.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            token.cancel();
            Instant::now()
        })
    };
    let options = RunOptions::new().cancel(token);
    let err = session
        .run_with_options(feeds(FOREVER), &options)
        .unwrap_err();
    let stopped = Instant::now();
    let cancelled = canceller.join().unwrap();
    assert!(matches!(err, Error::Cancelled), "{err}");
    let lag = stopped.duration_since(cancelled);
    assert!(
        lag < Duration::from_secs(1),
        "stopped {lag:?} after the cancel"
    );
    // A fresh token: the session runs normally.
    let (out, _) = session
        .run_with_options(feeds(2), &RunOptions::new().cancel(CancelToken::new()))
        .unwrap();
    assert_eq!(out[0].1.to_f64_vec().unwrap(), vec![2.5]);
}

#[test]
fn the_session_time_limit_bounds_loading_too() {
    // M and v0 are constants: the whole loop is folded while loading.
    let start = Instant::now();
    let err = SessionBuilder::new()
        .time_limit(Duration::from_millis(200))
        .build_from_bytes(&bytes(&counting_loop(Some(FOREVER))))
        .unwrap_err();
    assert!(err.is_interrupt(), "{err}");
    assert!(start.elapsed() < Duration::from_secs(3));
    // A loop that finishes folds to its value at load.
    let session = SessionBuilder::new()
        .time_limit(Duration::from_millis(2000))
        .build_from_bytes(&bytes(&counting_loop(Some(4))))
        .unwrap();
    let out = session.run(Vec::<(&str, Tensor)>::new()).unwrap();
    assert_eq!(out[0].1.to_f64_vec().unwrap(), vec![4.0]);
}
