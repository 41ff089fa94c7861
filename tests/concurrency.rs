//! Concurrent runs of one session: several host threads running the example
//! model at once, in every mode, finish (no deadlock between runs that share
//! the session's pools and re-pin them) and give identical outputs.

mod common;

use common::repo;
use ramify::{Mode, SessionBuilder, Tensor};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn concurrent_runs_of_one_session_finish_and_agree() {
    for mode in [Mode::Parallel, Mode::Adaptive, Mode::Serial] {
        let session = std::sync::Arc::new(
            SessionBuilder::new()
                .mode(mode)
                .cpus(2)
                .build_from_file(repo().join("models/inception_mini.onnx"))
                .unwrap(),
        );
        let input = session.inputs()[0].name.clone();
        let (tx, rx) = mpsc::channel();
        for t in 0..3 {
            let (session, input, tx) = (session.clone(), input.clone(), tx.clone());
            std::thread::spawn(move || {
                let mut last = None;
                for i in 0..20 {
                    let x = Tensor::from_vec(
                        &[1, 3, 96, 96],
                        (0..3 * 96 * 96)
                            .map(|k| ((k + i) % 17) as f32 * 0.1)
                            .collect(),
                    )
                    .unwrap();
                    let out = session.run([(input.as_str(), x)]).unwrap();
                    if i == 19 {
                        last = Some(out[0].1.clone());
                    }
                }
                tx.send((t, last)).unwrap();
            });
        }
        drop(tx);
        let mut outputs = Vec::new();
        for _ in 0..3 {
            let (_, out) = rx
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("{mode:?}: concurrent runs did not finish (deadlock?)"));
            outputs.push(out.unwrap());
        }
        assert!(outputs.windows(2).all(|w| w[0] == w[1]), "{mode:?}");
    }
}
