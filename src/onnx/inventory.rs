//! The operators a model file uses, read from its protobuf without building
//! anything: every node of the graph and of its subgraphs (If, Loop, Scan
//! bodies), with the opset the model imports for the node's domain. What a
//! reduced build must include to load the model.

use super::framing::check_framing;
use crate::error::{Error, Result};
use onnx_protobuf::{GraphProto, Message, ModelProto};
use std::collections::{BTreeSet, HashMap};
use std::io::BufReader;
use std::path::Path;

/// One operator type a model uses.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UsedOperator {
    /// Its domain as the model writes it (`""` for the default ONNX domain).
    pub domain: String,
    /// The operator type.
    pub op: String,
    /// The opset the model imports for that domain (0 when it imports none).
    pub opset: i64,
}

/// The distinct operators of the model file at `path`, sorted.
///
/// ```
/// let ops = ramify::onnx::operators_used(std::path::Path::new("models/inception_mini.onnx"))?;
/// assert!(ops.iter().any(|o| o.op == "Conv"));
/// # Ok::<(), ramify::Error>(())
/// ```
pub fn operators_used(path: &Path) -> Result<Vec<UsedOperator>> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = BufReader::new(std::fs::File::open(path).map_err(io)?);
    check_framing(&mut reader)?;
    let model = ModelProto::parse_from_reader(&mut reader)
        .map_err(|e| Error::Malformed(format!("{e} (in the file {})", path.display())))?;
    let opsets: HashMap<&str, i64> = model
        .opset_import
        .iter()
        .map(|o| {
            (
                if o.domain == "ai.onnx" {
                    ""
                } else {
                    o.domain.as_str()
                },
                o.version,
            )
        })
        .collect();
    let mut used = BTreeSet::new();
    if let Some(g) = model.graph.as_ref() {
        walk(g, &opsets, &mut used);
    }
    Ok(used.into_iter().collect())
}

fn walk(g: &GraphProto, opsets: &HashMap<&str, i64>, used: &mut BTreeSet<UsedOperator>) {
    for n in &g.node {
        let domain = if n.domain == "ai.onnx" {
            ""
        } else {
            n.domain.as_str()
        };
        used.insert(UsedOperator {
            domain: domain.to_string(),
            op: n.op_type.clone(),
            opset: opsets.get(domain).copied().unwrap_or(0),
        });
        for a in &n.attribute {
            for body in a.g.as_ref().into_iter().chain(&a.graphs) {
                walk(body, opsets, used);
            }
        }
    }
}
