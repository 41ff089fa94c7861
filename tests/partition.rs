//! Partitioning (seed 004) end to end: the parts ramify writes, loaded as
//! models of their own and chained, give the whole model's outputs bit for
//! bit; so does the pipeline, one input at a time and over a stream; the
//! parts are ordered (each reads only the model's inputs and earlier parts'
//! outputs); bad requests get clear errors.

mod common;

use common::{generated, repo};
use ramify::analysis::{Critical, PartitionOptions};
use ramify::onnx::read_tensor_file;
use ramify::{partition_model, Error, Partitioned, Pipeline, Session, SessionBuilder, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn example() -> PathBuf {
    repo().join("models/inception_mini.onnx")
}

fn light(name: &str) -> PathBuf {
    let p = generated().join("light").join(name).join("model.onnx");
    assert!(
        p.exists(),
        "{} is missing: run scripts/gen_test_data.py",
        p.display()
    );
    p
}

fn quant(name: &str) -> PathBuf {
    let p = generated().join("quant").join(name).join("model.onnx");
    assert!(
        p.exists(),
        "{} is missing: run scripts/gen_quant_models.py",
        p.display()
    );
    p
}

fn split(model: &Path, parts: usize, critical: Critical) -> Partitioned {
    let options = PartitionOptions {
        parts,
        ..PartitionOptions::default()
    };
    partition_model(model, &options, critical).unwrap()
}

/// The model's reference input beside it, or seeded values of its declared shape.
fn inputs(session: &Session, model: &Path) -> Vec<(String, Arc<Tensor>)> {
    let data = model.parent().unwrap().join("test_data_set_0");
    let data = if data.exists() {
        data
    } else {
        model.with_extension("").join("test_data_set_0")
    };
    session
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, info)| {
            let t = read_tensor_file(&data.join(format!("input_{i}.pb"))).unwrap();
            (info.name.clone(), Arc::new(t))
        })
        .collect()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// Chains the part models in plain sessions, as an app would.
fn chain(split: &Partitioned, feeds: &[(String, Arc<Tensor>)]) -> HashMap<String, Tensor> {
    let mut bag: HashMap<String, Arc<Tensor>> = feeds.iter().cloned().collect();
    for part in &split.parts {
        let s = Session::from_bytes(&part.model).unwrap();
        let ins: Vec<(String, Tensor)> = s
            .inputs()
            .iter()
            .map(|i| (i.name.clone(), (*bag[&i.name]).clone()))
            .collect();
        assert_eq!(
            s.inputs()
                .iter()
                .map(|i| i.name.clone())
                .collect::<Vec<_>>(),
            part.inputs
        );
        for (name, t) in s.run(ins).unwrap() {
            bag.insert(name, Arc::new(t));
        }
    }
    bag.into_iter().map(|(k, v)| (k, (*v).clone())).collect()
}

fn check_bit_for_bit(model: &Path, parts: usize, critical: Critical) {
    let whole = Session::from_file(model).unwrap();
    let feeds = inputs(&whole, model);
    let want = whole
        .run(feeds.iter().map(|(n, t)| (n.clone(), (**t).clone())))
        .unwrap();
    let split = split(model, parts, critical);
    assert_eq!(split.parts.len(), parts);
    // Ordered: each part reads the model's inputs and earlier parts' outputs.
    let mut known: Vec<String> = split.inputs.clone();
    for part in &split.parts {
        for i in &part.inputs {
            assert!(known.contains(i), "part {} reads {i} too early", part.index);
        }
        known.extend(part.outputs.iter().cloned());
    }
    let chained = chain(&split, &feeds);
    let pipeline =
        Pipeline::new(&split, &SessionBuilder::new(), &ramify::available_cpus()).unwrap();
    let piped = pipeline.run(feeds.iter().cloned()).unwrap();
    let mut streamed = Vec::new();
    let n = pipeline.run_stream((0..3).map(|_| feeds.clone()), |i, r| {
        streamed.push((i, r.unwrap()))
    });
    assert_eq!(n, 3);
    assert_eq!(
        streamed.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    for (k, (name, w)) in want.iter().enumerate() {
        let what = format!("{} in {parts} parts, output {name}", model.display());
        assert_eq!(bits(&chained[name]), bits(w), "chained sessions: {what}");
        assert_eq!(piped[k].0, *name);
        assert_eq!(bits(&piped[k].1), bits(w), "pipeline run: {what}");
        for (_, out) in &streamed {
            assert_eq!(bits(&out[k].1), bits(w), "pipeline stream: {what}");
        }
    }
}

#[test]
fn parts_of_the_example_model_reproduce_it_bit_for_bit() {
    for parts in [1, 2, 3] {
        check_bit_for_bit(&example(), parts, Critical::Bytes(65536));
    }
    check_bit_for_bit(&example(), 4, Critical::Path);
}

#[test]
fn parts_of_a_light_inception_reproduce_it_bit_for_bit() {
    check_bit_for_bit(&light("inception_v1"), 3, Critical::Bytes(65536));
}

#[test]
fn parts_of_an_int8_model_reproduce_it_bit_for_bit() {
    check_bit_for_bit(&quant("inception_v1_qdq"), 2, Critical::Bytes(65536));
    check_bit_for_bit(&quant("mobilenet_v2_qop"), 3, Critical::Path);
    // Residual blocks: a DequantizeLinear read by a Conv and by an Add that
    // fusion puts in different integer operators, maybe in different parts.
    check_bit_for_bit(&quant("resnet50_qdq"), 4, Critical::Bytes(65536));
}

#[test]
fn the_refinement_never_ends_worse_than_it_started() {
    let s = split(&example(), 3, Critical::Bytes(65536));
    let r = &s.refinement;
    let initial = r.initial.cut(&s.tasks);
    let best = r.best.cut(&s.tasks);
    assert!(best.critical <= initial.critical);
    assert_eq!(r.history[0].cut.critical, initial.critical);
    assert_eq!(r.history[r.best_iteration].cut.critical, best.critical);
    // Every operator in exactly one part, every part non-empty.
    assert_eq!(r.best.assignment.len(), s.tasks.tasks.len());
    for p in 0..3 {
        assert!(!r.best.members(p).is_empty());
    }
}

#[test]
fn bad_requests_get_clear_errors() {
    let options = |parts| PartitionOptions {
        parts,
        ..PartitionOptions::default()
    };
    let e = partition_model(example(), &options(0), Critical::Path).unwrap_err();
    assert!(matches!(e, Error::Config(ref m) if m.contains('0')), "{e}");
    let e = partition_model(example(), &options(100_000), Critical::Path).unwrap_err();
    assert!(
        matches!(e, Error::Config(ref m) if m.contains("100000")),
        "{e}"
    );
    let split = split(&example(), 2, Critical::Path);
    let e = Pipeline::new(&split, &SessionBuilder::new(), &[]).unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    let e = partition_model(
        repo().join("no/such/model.onnx"),
        &options(2),
        Critical::Path,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
}

#[test]
fn a_pipeline_reports_a_missing_input_per_item_and_goes_on() {
    let split = split(&example(), 2, Critical::Path);
    let pipeline =
        Pipeline::new(&split, &SessionBuilder::new(), &ramify::available_cpus()).unwrap();
    let good = vec![(
        "input".to_string(),
        Arc::new(Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96])),
    )];
    let items = vec![good.clone(), Vec::new(), good];
    let mut results = Vec::new();
    pipeline.run_stream(items, |i, r| results.push((i, r.is_ok())));
    assert_eq!(results, [(0, true), (1, false), (2, true)]);
}

/// x → Relu → r, x → Neg → Sigmoid → s, then If(cond) whose branches read r
/// and s from the enclosing graph (no explicit inputs): Add or Sub.
fn control_flow_model() -> Vec<u8> {
    use common::{bytes, graph, graph_attr, model, node, value_info};
    let branch = |op: &str| {
        graph(
            vec![node(op, &["r", "s"], &["out"])],
            vec![],
            vec![value_info("out", 1, &[2, 3])],
            vec![],
        )
    };
    let mut if_node = node("If", &["cond"], &["y"]);
    if_node.attribute = vec![
        graph_attr("then_branch", branch("Add")),
        graph_attr("else_branch", branch("Sub")),
    ];
    bytes(&model(
        graph(
            vec![
                node("Relu", &["x"], &["r"]),
                node("Neg", &["x"], &["n"]),
                node("Sigmoid", &["n"], &["s"]),
                if_node,
            ],
            vec![value_info("x", 1, &[2, 3]), value_info("cond", 9, &[])],
            vec![value_info("y", 1, &[2, 3])],
            vec![],
        ),
        13,
    ))
}

#[test]
fn control_flow_reading_values_across_the_cut_gets_them_as_part_inputs() {
    let path = common::temp_dir("partition-if").join("if.onnx");
    std::fs::write(&path, control_flow_model()).unwrap();
    let whole = Session::from_file(&path).unwrap();
    let x = Tensor::from_vec(&[2, 3], vec![-1.5f32, -0.5, 0.0, 0.5, 1.0, 2.0]).unwrap();
    for parts in [2, 3, 4] {
        let split = split(&path, parts, Critical::Bytes(0));
        for cond in [true, false] {
            let c = Tensor::from_vec(&[], vec![cond]).unwrap();
            let feeds = vec![
                ("x".to_string(), Arc::new(x.clone())),
                ("cond".to_string(), Arc::new(c.clone())),
            ];
            let want = whole.run([("x", x.clone()), ("cond", c)]).unwrap();
            let got = chain(&split, &feeds);
            assert_eq!(
                bits(&got["y"]),
                bits(&want[0].1),
                "{parts} parts, cond {cond}"
            );
        }
    }
}

#[test]
fn a_huge_declared_input_is_refused_with_a_memory_error() {
    use common::{bytes, graph, model, node, value_info};
    let m = model(
        graph(
            vec![node("Relu", &["x"], &["y"])],
            vec![value_info("x", 1, &[1 << 20, 1 << 20, 1 << 10])],
            vec![value_info("y", 1, &[1 << 20, 1 << 20, 1 << 10])],
            vec![],
        ),
        13,
    );
    let path = common::temp_dir("partition-huge").join("huge.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    let options = PartitionOptions::default();
    let e = partition_model(&path, &options, Critical::Path).unwrap_err();
    assert!(e.to_string().contains("over the memory limit"), "{e}");
}
