//! Bad input gets a typed error that names the problem, never a panic.

mod common;

use common::*;
use onnx_protobuf::{tensor_proto::DataLocation, StringStringEntryProto};
use ramify::{Error, Session, Tensor};

#[test]
fn valid_model_runs() {
    let s = Session::from_bytes(&bytes(&relu_add_model())).unwrap();
    let x = Tensor::from_vec(&[1, 4], vec![-1.0f32, 0.5, -3.0, 2.0]).unwrap();
    let out = s.run([("x", x)]).unwrap();
    assert_eq!(out[0].0, "y");
    assert_eq!(out[0].1.to_f64_vec().unwrap(), vec![1.0, 2.5, 3.0, 6.0]);
}

#[test]
fn truncated_file() {
    let b = bytes(&relu_add_model());
    // A cut inside the last field is malformed protobuf.
    let err = Session::from_bytes(&b[..b.len() - 1]).unwrap_err();
    assert!(matches!(err, Error::Malformed(_)), "{err:?}");
    // Every shorter prefix is rejected with an error too, never a panic:
    // a cut on a field boundary parses, and then the model is incomplete.
    for cut in 0..b.len() {
        assert!(
            Session::from_bytes(&b[..cut]).is_err(),
            "prefix of {cut} bytes"
        );
    }
}

#[test]
fn random_bytes() {
    let mut s = 0x1234_5678_9abc_def1u64;
    let junk: Vec<u8> = (0..4096)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    let err = Session::from_bytes(&junk).unwrap_err();
    assert!(
        matches!(err, Error::Malformed(_) | Error::InvalidModel(_)),
        "{err:?}"
    );
}

#[test]
fn graph_with_a_cycle() {
    let m = model(
        graph(
            vec![
                node("Relu", &["x"], &["a"]),
                node("Add", &["a", "c"], &["b"]),
                node("Relu", &["b"], &["c"]),
            ],
            vec![value_info("x", 1, &[4])],
            vec![value_info("c", 1, &[4])],
            vec![],
        ),
        13,
    );
    let err = Session::from_bytes(&bytes(&m)).unwrap_err();
    assert!(matches!(err, Error::Cycle { .. }), "{err:?}");
}

#[test]
fn unknown_operator_names_op_domain_and_opset() {
    let m = model(
        graph(
            vec![node("FrobnicateTensor", &["x"], &["y"])],
            vec![value_info("x", 1, &[4])],
            vec![value_info("y", 1, &[4])],
            vec![],
        ),
        17,
    );
    let err = Session::from_bytes(&bytes(&m)).unwrap_err();
    match &err {
        Error::UnsupportedOperator {
            op, domain, opset, ..
        } => {
            assert_eq!(
                (op.as_str(), domain.as_str(), *opset),
                ("FrobnicateTensor", "", 17)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("FrobnicateTensor"));
}

/// Tools leave imports of domains no node uses (onnxruntime's quantization
/// pre-processing adds `ai.onnx.training`, `com.microsoft.nchwc`, ...): the
/// model loads. A node in such a domain fails, naming op, domain and opset.
#[test]
fn unused_domain_imports_load_and_a_node_in_one_is_named() {
    let mut m = relu_add_model();
    for (domain, version) in [
        ("com.example.custom", 1),
        ("ai.onnx.training", 1),
        ("com.microsoft.nchwc", 1),
    ] {
        let mut o = onnx_protobuf::OperatorSetIdProto::new();
        o.domain = domain.into();
        o.version = version;
        m.opset_import.push(o);
    }
    let s = Session::from_bytes(&bytes(&m)).expect("unused imports are accepted");
    assert_eq!(s.inputs().len(), 1);

    let mut n = node("Frob", &["x"], &["z"]);
    n.domain = "com.example.custom".into();
    let g = m.graph.as_mut().unwrap();
    g.node.push(n);
    g.output.push(value_info("z", 1, &[4]));
    let err = Session::from_bytes(&bytes(&m)).unwrap_err();
    match &err {
        Error::UnsupportedOperator {
            op, domain, opset, ..
        } => assert_eq!(
            (op.as_str(), domain.as_str(), *opset),
            ("Frob", "com.example.custom", 1)
        ),
        other => panic!("{other:?}"),
    }
}

/// Messages name the input (file or memory buffer) and the real cause.
#[test]
fn load_errors_name_the_source_and_the_cause() {
    let dir = std::env::temp_dir();
    match Session::from_file(&dir).unwrap_err() {
        Error::Io { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::IsADirectory);
            assert!(source.to_string().contains("directory"), "{source}");
        }
        other => panic!("{other:?}"),
    }
    let err = Session::from_bytes(&[]).unwrap_err();
    assert!(matches!(err, Error::InvalidModel(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "invalid model: the model is empty (memory buffer with 0 bytes)"
    );
    let empty = dir.join(format!("ramify_empty_{}.onnx", std::process::id()));
    std::fs::write(&empty, b"").unwrap();
    let err = Session::from_file(&empty).unwrap_err();
    std::fs::remove_file(&empty).unwrap();
    assert!(
        err.to_string().contains("the model is empty (file "),
        "{err}"
    );

    let b = bytes(&relu_add_model());
    let err = Session::from_bytes(&b[..b.len() - 1]).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("the data ends inside top-level field"),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!("(in the memory buffer of {} bytes)", b.len() - 1)),
        "{msg}"
    );
    // Neither text nor a huge field number is an ONNX model.
    for junk in [
        &b"hello, this is not a model at all"[..],
        b"\xff\xff\xff\xff\x7f\x00",
    ] {
        let msg = Session::from_bytes(junk).unwrap_err().to_string();
        assert!(msg.contains("not an ONNX model"), "{msg}");
        assert!(!msg.contains("file"), "no file is involved: {msg}");
    }
}

#[test]
fn missing_initializer() {
    let m = model(
        graph(
            vec![node("Add", &["x", "w"], &["y"])],
            vec![value_info("x", 1, &[4])],
            vec![value_info("y", 1, &[4])],
            vec![],
        ),
        13,
    );
    let err = Session::from_bytes(&bytes(&m)).unwrap_err();
    assert!(
        matches!(&err, Error::MissingValue { value, .. } if value == "w"),
        "{err:?}"
    );
}

#[test]
fn external_data_outside_the_model_folder() {
    let dir = temp_dir("external");
    std::fs::write(dir.join("secret.bin"), [0u8; 16]).unwrap();
    let inner = dir.join("model");
    std::fs::create_dir_all(&inner).unwrap();
    let mut m = relu_add_model();
    let g = m.graph.as_mut().unwrap();
    let init = &mut g.initializer[0];
    init.raw_data.clear();
    init.data_location = DataLocation::EXTERNAL.into();
    let mut e = StringStringEntryProto::new();
    e.key = "location".into();
    e.value = "../secret.bin".into();
    init.external_data.push(e);
    let path = inner.join("model.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    let err = Session::from_file(&path).unwrap_err();
    assert!(
        matches!(&err, Error::ExternalData { tensor, .. } if tensor == "b"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("leaves the model's folder"),
        "{err}"
    );
}

#[test]
fn external_data_inside_the_model_folder_loads() {
    let dir = temp_dir("external-ok");
    let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(dir.join("weights.bin"), [vec![0u8; 8], data].concat()).unwrap();
    let mut m = relu_add_model();
    let init = &mut m.graph.as_mut().unwrap().initializer[0];
    init.raw_data.clear();
    init.data_location = DataLocation::EXTERNAL.into();
    for (k, v) in [
        ("location", "weights.bin"),
        ("offset", "8"),
        ("length", "16"),
    ] {
        let mut e = StringStringEntryProto::new();
        e.key = k.into();
        e.value = v.into();
        init.external_data.push(e);
    }
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    let s = Session::from_file(&path).unwrap();
    let out = s
        .run([("x", Tensor::from_vec(&[1, 4], vec![0.0f32; 4]).unwrap())])
        .unwrap();
    assert_eq!(out[0].1.to_f64_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn unknown_input_name() {
    let s = Session::from_bytes(&bytes(&relu_add_model())).unwrap();
    let err = s
        .run([("nope", Tensor::from_vec(&[1, 4], vec![0.0f32; 4]).unwrap())])
        .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownInput { name, expected } if name == "nope" && expected == &["x"]),
        "{err:?}"
    );
}

#[test]
fn wrong_input_shape() {
    let s = Session::from_bytes(&bytes(&relu_add_model())).unwrap();
    let err = s
        .run([("x", Tensor::from_vec(&[1, 5], vec![0.0f32; 5]).unwrap())])
        .unwrap_err();
    assert!(
        matches!(&err, Error::InputShape { actual, .. } if actual == &[1, 5]),
        "{err:?}"
    );
    assert!(err.to_string().contains("[N, 4]"), "{err}");
}

#[test]
fn wrong_input_element_type() {
    let s = Session::from_bytes(&bytes(&relu_add_model())).unwrap();
    let err = s
        .run([("x", Tensor::from_vec(&[1, 4], vec![0i64; 4]).unwrap())])
        .unwrap_err();
    assert!(
        matches!(&err, Error::InputType { actual, expected, .. } if actual == "int64" && expected == "float32"),
        "{err:?}"
    );
}

#[test]
fn missing_input() {
    let s = Session::from_bytes(&bytes(&relu_add_model())).unwrap();
    let err = s.run(Vec::<(&str, Tensor)>::new()).unwrap_err();
    assert!(
        matches!(&err, Error::MissingInput(n) if n == "x"),
        "{err:?}"
    );
}

#[test]
fn unsupported_ir_version() {
    let mut m = relu_add_model();
    m.ir_version = 2;
    let err = Session::from_bytes(&bytes(&m)).unwrap_err();
    assert!(matches!(err, Error::InvalidModel(_)), "{err:?}");
}
