//! The f32 fast path against the general path (the same node run on the
//! same values in f64), over every cell and attribute the fast path
//! handles: directions, `sequence_lens`, layout 1, batch rows beyond the
//! packed kernel's blocking, hidden sizes beyond one panel, initial states,
//! peepholes, `input_forget`, `linear_before_reset`, clip and non-default
//! activations; plus weights prepared at build against weights prepared
//! per run, and bit-identical results on pools of 1 and 2 threads.

use crate::ir::attributes::Attribute;
use crate::ops::testutil::{
    assert_close, bits, build_op, infer_and_run, int, rand_vec, string, with_threads,
};
use crate::tensor::Tensor;

/// One problem: the operator, its attributes and input shapes.
#[derive(Clone)]
struct Case {
    op: &'static str,
    gates: usize,
    attrs: Vec<(&'static str, Attribute)>,
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
    batch_first: bool,
    lens: Option<Vec<i32>>,
    init: bool,
    peep: bool,
}

fn case(op: &'static str, dirs: usize) -> Case {
    let gates = match op {
        "RNN" => 1,
        "GRU" => 3,
        _ => 4,
    };
    let dir = if dirs == 2 {
        "bidirectional"
    } else {
        "forward"
    };
    Case {
        op,
        gates,
        attrs: vec![("direction", string(dir))],
        seq: 5,
        batch: 2,
        input: 7,
        hidden: 9,
        dirs,
        batch_first: false,
        lens: None,
        init: false,
        peep: false,
    }
}

impl Case {
    fn with(mut self, name: &'static str, v: Attribute) -> Case {
        self.attrs.push((name, v));
        self
    }

    /// The inputs as f32 or f64 tensors (the same values), `None` where absent.
    fn inputs(&self, f64_: bool) -> Vec<Option<Tensor>> {
        let g = self.gates * self.hidden;
        let t = |shape: &[usize], seed: u64| {
            let v = rand_vec(shape.iter().product(), seed);
            Some(if f64_ {
                Tensor::from_vec(shape, v.iter().map(|&x| x as f64).collect::<Vec<_>>()).unwrap()
            } else {
                Tensor::from_vec(shape, v).unwrap()
            })
        };
        let (s, b) = (self.seq, self.batch);
        let x = if self.batch_first {
            [b, s, self.input]
        } else {
            [s, b, self.input]
        };
        let state = if self.batch_first {
            [b, self.dirs, self.hidden]
        } else {
            [self.dirs, b, self.hidden]
        };
        let mut ins = vec![
            t(&x, 1),
            t(&[self.dirs, g, self.input], 2),
            t(&[self.dirs, g, self.hidden], 3),
            t(&[self.dirs, 2 * g], 4),
            self.lens
                .as_ref()
                .map(|l| Tensor::from_vec(&[b], l.clone()).unwrap()),
        ];
        if self.init || self.peep {
            ins.push(if self.init { t(&state, 5) } else { None });
            if self.op == "LSTM" {
                ins.push(if self.init { t(&state, 6) } else { None });
            }
        }
        if self.peep {
            ins.push(t(&[self.dirs, 3 * self.hidden], 7));
        }
        ins
    }

    fn attrs(&self) -> Vec<(&str, Attribute)> {
        let mut a = self.attrs.clone();
        a.push(("hidden_size", int(self.hidden as i64)));
        if self.batch_first {
            a.push(("layout", int(1)));
        }
        a
    }

    fn outputs(&self) -> usize {
        if self.op == "LSTM" {
            3
        } else {
            2
        }
    }

    /// Runs the node, with W and R as build-time constants when `consts`.
    fn run(&self, f64_: bool, consts: bool) -> Vec<Tensor> {
        let ins = self.inputs(f64_);
        let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
        let c: Vec<Option<&Tensor>> = if consts {
            vec![None, refs[1], refs[2]]
        } else {
            vec![]
        };
        let op = build_op(self.op, 22, &self.attrs(), &c, refs.len(), self.outputs()).unwrap();
        infer_and_run(op.as_ref(), &refs).unwrap()
    }
}

/// The fast path (f32) matches the general path (f64) and does not depend
/// on whether W and R were constants at build.
fn check(c: &Case) {
    let fast = c.run(false, true);
    let general = c.run(true, false);
    assert_eq!(fast.len(), general.len());
    for (f, g) in fast.iter().zip(&general) {
        assert_eq!(f.dtype(), crate::tensor::DType::F32);
        assert_eq!(f.shape(), g.shape());
        assert_close(
            &f.to_f64_vec().unwrap(),
            &g.to_f64_vec().unwrap(),
            2e-5,
            2e-5,
        );
    }
    let per_run = c.run(false, false);
    for (a, b) in fast.iter().zip(&per_run) {
        assert_eq!(bits(a), bits(b), "prepared at build vs per run");
    }
}

const OPS: [&str; 3] = ["RNN", "GRU", "LSTM"];

#[test]
fn every_cell_matches_general_path_both_directions() {
    for op in OPS {
        check(&case(op, 1));
        check(&case(op, 2));
        let mut reverse = case(op, 1);
        reverse.attrs = vec![("direction", string("reverse"))];
        check(&reverse);
    }
    for lbr in [0, 1] {
        check(&case("GRU", 2).with("linear_before_reset", int(lbr)));
    }
}

#[test]
fn sequence_lens_layout_and_states_match_general_path() {
    for op in OPS {
        let c = Case {
            lens: Some(vec![5, 2, 0]),
            batch: 3,
            init: true,
            ..case(op, 2)
        };
        check(&c);
        check(&Case {
            batch_first: true,
            ..c.clone()
        });
    }
    check(&Case {
        lens: Some(vec![3, 1]),
        batch_first: true,
        ..case("GRU", 2).with("linear_before_reset", int(1))
    });
}

#[test]
fn peepholes_input_forget_and_clip_match_general_path() {
    let peep = Case {
        peep: true,
        init: true,
        ..case("LSTM", 2)
    };
    check(&peep);
    check(&peep.clone().with("input_forget", int(1)));
    check(&peep.clone().with("clip", Attribute::Float(0.4)));
    for op in ["RNN", "GRU"] {
        check(&case(op, 2).with("clip", Attribute::Float(0.3)));
        check(
            &case(op, 1)
                .with("clip", Attribute::Float(0.3))
                .with("linear_before_reset", int(1)),
        );
    }
}

#[test]
fn custom_activations_match_general_path() {
    let acts = |v: &[&str]| Attribute::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect());
    check(&case("LSTM", 1).with("activations", acts(&["HardSigmoid", "Relu", "Softsign"])));
    check(&case("GRU", 2).with(
        "activations",
        acts(&["Sigmoid", "LeakyRelu", "HardSigmoid", "Tanh"]),
    ));
    check(&case("RNN", 1).with("activations", acts(&["Relu"])));
}

#[test]
fn large_problems_cross_panels_and_row_blocks() {
    // hidden 70: two panels for R (and three for LSTM's 280 gate rows);
    // batch 6: a block of four rows and one of two.
    for op in OPS {
        let c = Case {
            hidden: 70,
            batch: 6,
            input: 33,
            seq: 4,
            lens: Some(vec![4, 3, 4, 1, 2, 4]),
            init: true,
            ..case(op, 2)
        };
        check(&c);
    }
    check(&Case {
        hidden: 70,
        batch: 5,
        ..case("GRU", 1).with("linear_before_reset", int(0))
    });
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    // Large enough for the projection to be cut into several blocks.
    for op in OPS {
        let c = Case {
            hidden: 96,
            batch: 3,
            input: 160,
            seq: 40,
            ..case(op, 2)
        };
        let one = with_threads(1, || c.run(false, true));
        let two = with_threads(2, || c.run(false, true));
        for (a, b) in one.iter().zip(&two) {
            assert_eq!(bits(a), bits(b), "{op}: 1 vs 2 threads");
        }
    }
}

/// A single direction whose steps are split across threads (`fast/split`):
/// hidden units in whole panels (128 and 192: two and three blocks), a step
/// product of at least 2¹⁵ multiply-adds.
fn split_case(op: &'static str, hidden: usize, batch: usize) -> Case {
    let c = Case {
        hidden,
        batch,
        input: 24,
        seq: 6,
        init: true,
        ..case(op, 1)
    };
    if op == "GRU" {
        c.with("linear_before_reset", int(1))
    } else {
        c
    }
}

#[test]
fn steps_split_across_threads_match_the_serial_loop_bit_for_bit() {
    let mut cases = Vec::new();
    for op in OPS {
        cases.push(split_case(op, 192, 1));
        cases.push(Case {
            lens: Some(vec![6, 2, 5]),
            batch_first: true,
            ..split_case(op, 128, 3)
        });
    }
    cases.push(split_case("LSTM", 128, 2).with("direction", string("reverse")));
    cases.push(Case {
        peep: true,
        ..split_case("LSTM", 128, 1)
            .with("clip", Attribute::Float(0.7))
            .with("input_forget", int(1))
    });
    for c in &cases {
        // The serial loop (one thread) is the reference: bit for bit. Both
        // stay near the general path (f64); sums of 128 to 192 products in
        // f32 drift further from it than the small cases above.
        let one = with_threads(1, || c.run(false, true));
        let general = c.run(true, false);
        for (f, g) in one.iter().zip(&general) {
            let (f, g) = (f.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
            assert_close(&f, &g, 1e-4, 1e-4);
        }
        for threads in [2, 3] {
            let many = with_threads(threads, || c.run(false, true));
            for (a, b) in one.iter().zip(&many) {
                assert_eq!(bits(a), bits(b), "{}: 1 vs {threads} threads", c.op);
            }
        }
    }
}
