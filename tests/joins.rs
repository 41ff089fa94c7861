//! Concatenations without copies (`exec::joins`): the convolutions that
//! feed a channel Concat at batch 1 write straight into its output, the
//! other inputs are copied in, and the result has the same bits as each
//! branch run on its own and joined by hand, serially and with the
//! branches in parallel. Where the layout or the readers do not allow it,
//! nothing is joined.

mod common;

use common::*;
use model_builder::onnx_protobuf::ModelProto;
use ramify::{Mode, Session, SessionBuilder, Tensor};

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

const C: usize = 4;
const H: usize = 9;

/// The three branches of the test block, each a node list reading `x` and
/// writing its own output: a 1×1 Conv (3 channels), a 3×3 Conv with a
/// fused Relu (5 channels), a 3×3 MaxPool (4 channels).
fn branches() -> Vec<(Vec<model_builder::onnx_protobuf::NodeProto>, &'static str)> {
    let mut conv3 = node("Conv", &["x", "wb", "bb"], &["yb0"]);
    conv3.attribute.push(ints_attr("pads", &[1, 1, 1, 1]));
    let mut pool = node("MaxPool", &["x"], &["yc"]);
    pool.attribute.push(ints_attr("kernel_shape", &[3, 3]));
    pool.attribute.push(ints_attr("pads", &[1, 1, 1, 1]));
    vec![
        (vec![node("Conv", &["x", "wa"], &["ya"])], "ya"),
        (vec![conv3, node("Relu", &["yb0"], &["yb"])], "yb"),
        (vec![pool], "yc"),
    ]
}

fn weights() -> Vec<model_builder::onnx_protobuf::TensorProto> {
    vec![
        initializer("wa", &[3, C as i64, 1, 1], &values(3 * C, 1)),
        initializer("wb", &[5, C as i64, 3, 3], &values(5 * C * 9, 2)),
        initializer("bb", &[5], &values(5, 3)),
    ]
}

/// The block: the branches joined by a Concat on the channels; `extra`
/// also returns `ya` as a graph output.
fn block(batch: i64, extra: bool) -> ModelProto {
    let mut nodes = Vec::new();
    let mut outs = Vec::new();
    for (n, o) in branches() {
        nodes.extend(n);
        outs.push(o);
    }
    let mut cat = node("Concat", &outs, &["y"]);
    cat.attribute.push(int_attr("axis", 1));
    nodes.push(cat);
    let dims = [batch, C as i64, H as i64, H as i64];
    let mut outputs = vec![value_info("y", 1, &[batch, 12, H as i64, H as i64])];
    if extra {
        outputs.push(value_info("ya", 1, &[batch, 3, H as i64, H as i64]));
    }
    model(
        graph(nodes, vec![value_info("x", 1, &dims)], outputs, weights()),
        13,
    )
}

/// One branch alone, as a model.
fn branch(k: usize) -> ModelProto {
    let (nodes, out) = branches().swap_remove(k);
    let dims = [1, C as i64, H as i64, H as i64];
    let channels = [3, 5, 4][k];
    model(
        graph(
            nodes,
            vec![value_info("x", 1, &dims)],
            vec![value_info(out, 1, &[1, channels, H as i64, H as i64])],
            weights(),
        ),
        13,
    )
}

fn input(batch: usize) -> Tensor {
    Tensor::from_vec(&[batch, C, H, H], values(batch * C * H * H, 7)).unwrap()
}

/// The Concat node's index and the indices of the nodes that produce its
/// inputs, in the plan of `s` for `x`.
fn plan_joins(
    s: &Session,
    x: Tensor,
) -> (
    usize,
    Vec<Option<ramify::exec::Part>>,
    Option<ramify::exec::Join>,
) {
    let plan = s.plan([("x", x)]).unwrap();
    let nodes = &plan.graph.nodes;
    let cat = nodes.iter().position(|n| n.op_type == "Concat").unwrap();
    let parts = (0..nodes.len()).map(|i| plan.joins.part(i)).collect();
    (plan.joins.count(), parts, plan.joins.join(cat).cloned())
}

#[test]
fn convolutions_write_into_the_concat_and_the_pool_is_copied_in() {
    let s = Session::from_bytes(&bytes(&block(1, false))).unwrap();
    let (count, parts, join) = plan_joins(&s, input(1));
    assert_eq!(count, 1);
    let join = join.expect("the Concat joins its inputs");
    let plane = H * H;
    assert_eq!(join.shape, vec![1, 12, H, H]);
    assert_eq!(
        join.parts,
        vec![
            (0, 3 * plane),
            (3 * plane, 5 * plane),
            (8 * plane, 4 * plane)
        ]
    );
    // The convolutions (the second with its Relu fused in) write their
    // parts; the MaxPool cannot and is copied.
    assert_eq!(join.placed, vec![true, true, false]);
    let placed: Vec<_> = parts.iter().flatten().copied().collect();
    assert_eq!(placed.len(), 2);
    assert!(placed.iter().all(|p| p.join == 0 && p.total == 12 * plane));
    assert_eq!(
        placed.iter().map(|p| (p.offset, p.len)).collect::<Vec<_>>(),
        vec![(0, 3 * plane), (3 * plane, 5 * plane)]
    );
}

#[test]
fn joined_output_has_the_bits_of_the_branches_joined_by_hand() {
    // Each branch alone, joined by hand along the channels (batch 1: one
    // after the other).
    let mut want = Vec::new();
    for k in 0..3 {
        let s = Session::from_bytes(&bytes(&branch(k))).unwrap();
        let out = s.run([("x", input(1))]).unwrap();
        want.extend(f32_bits(&out[0].1));
    }
    let path = temp_dir("joins").join("block.onnx");
    std::fs::write(&path, bytes(&block(1, false))).unwrap();
    for (mode, cpus) in [(Mode::Serial, 1), (Mode::Parallel, 3), (Mode::Parallel, 2)] {
        let s = SessionBuilder::new()
            .mode(mode)
            .cpus(cpus)
            .oversubscribe(true)
            .build_from_file(&path)
            .unwrap();
        // Several runs: each takes its joined buffer afresh from the pools
        // (filled with NaNs in test builds), so a part left unwritten shows.
        for _ in 0..3 {
            let (out, report) = s.run_with_report([("x", input(1))]).unwrap();
            assert_eq!(f32_bits(&out[0].1), want, "{mode:?} on {cpus} CPUs");
            if mode == Mode::Parallel {
                assert!(report
                    .forks
                    .iter()
                    .any(|f| matches!(f.decision, ramify::sched::Decision::Parallel(_))));
            }
        }
    }
}

#[test]
fn nothing_is_joined_across_a_batch_or_for_a_value_read_elsewhere() {
    // Batch 2: each input is two blocks of the output, not one.
    let s = Session::from_bytes(&bytes(&block(2, false))).unwrap();
    let (count, parts, join) = plan_joins(&s, input(2));
    assert_eq!(count, 0);
    assert!(join.is_none() && parts.iter().all(Option::is_none));
    let out = s.run([("x", input(2))]).unwrap();
    assert_eq!(out[0].1.shape(), &[2, 12, H, H]);

    // `ya` is also a graph output: its Conv keeps its own tensor, and the
    // 3×3 Conv alone writes into the Concat.
    let s = Session::from_bytes(&bytes(&block(1, true))).unwrap();
    let (count, _, join) = plan_joins(&s, input(1));
    assert_eq!(count, 1);
    assert_eq!(join.unwrap().placed, vec![false, true, false]);
    let out = s.run([("x", input(1))]).unwrap();
    let y = f32_bits(&out[0].1);
    let ya = f32_bits(&out[1].1);
    assert_eq!(&y[..ya.len()], &ya[..]);
    let s = Session::from_bytes(&bytes(&block(1, false))).unwrap();
    assert_eq!(f32_bits(&s.run([("x", input(1))]).unwrap()[0].1), y);
}
