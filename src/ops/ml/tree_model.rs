//! TreeEnsemble's trees as read from its attributes, checked once at load:
//! every `nodes_*` list as long as the others, every `leaf_*` list too, child
//! and root indices in range, modes known, one NaN-terminated set of
//! `membership_values` per BRANCH_MEMBER node, thresholds of one float type.

use crate::error::{Error, Result};
use crate::ir::attributes::Attributes;
use crate::tensor::{DType, Tensor};

pub(super) const OP: &str = "TreeEnsemble";

/// A node's comparison (`nodes_modes`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Mode {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    Member,
}

/// Where a branch leads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Child {
    Node(usize),
    Leaf(usize),
}

/// One interior node.
#[derive(Debug, Clone)]
pub(super) struct Node {
    pub mode: Mode,
    pub feature: usize,
    /// The threshold (unused by BRANCH_MEMBER).
    pub split: f64,
    /// The set of BRANCH_MEMBER (sorted, no NaN), else empty.
    pub members: Vec<f64>,
    pub missing_true: bool,
    pub on_true: Child,
    pub on_false: Child,
}

/// A checked ensemble.
#[derive(Debug, Clone)]
pub(super) struct Model {
    pub nodes: Vec<Node>,
    pub roots: Vec<usize>,
    /// Per leaf: (target, weight).
    pub leaves: Vec<(usize, f64)>,
    pub n_targets: usize,
    /// The element type of the thresholds and weights (the input's type).
    pub dtype: DType,
    /// The largest feature index any node reads.
    pub max_feature: Option<usize>,
}

fn req_ints(a: &Attributes, name: &str) -> Result<Vec<i64>> {
    a.ints_opt(name)?
        .ok_or_else(|| a.error(name, "required but missing"))
}

fn req_tensor<'a>(a: &'a Attributes, name: &str) -> Result<&'a Tensor> {
    a.tensor_opt(name)?
        .ok_or_else(|| a.error(name, "required but missing"))
}

fn index(a: &Attributes, name: &str, v: i64, len: usize) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| a.error(name, format!("index {v} is out of range 0..{len}")))
}

fn check_len(a: &Attributes, name: &str, len: usize, want: usize, of: &str) -> Result<()> {
    if len == want {
        Ok(())
    } else {
        Err(a.error(name, format!("has {len} entries, but {of} has {want}")))
    }
}

/// The float values of a threshold, weight or member tensor of type `dtype`.
fn floats(a: &Attributes, name: &str, t: &Tensor, dtype: DType) -> Result<Vec<f64>> {
    if t.dtype() != dtype {
        return Err(a.error(
            name,
            format!(
                "must have the type of nodes_splits ({dtype}), found {}",
                t.dtype()
            ),
        ));
    }
    t.to_f64_vec()
}

fn mode(a: &Attributes, v: i64) -> Result<Mode> {
    Ok(match v {
        0 => Mode::Leq,
        1 => Mode::Lt,
        2 => Mode::Gte,
        3 => Mode::Gt,
        4 => Mode::Eq,
        5 => Mode::Neq,
        6 => Mode::Member,
        other => return Err(a.error("nodes_modes", format!("unknown mode {other} (0..=6)"))),
    })
}

impl Model {
    /// Reads and checks the ensemble from the node's attributes.
    pub(super) fn from_attributes(a: &Attributes) -> Result<Model> {
        let features = req_ints(a, "nodes_featureids")?;
        let n = features.len();
        let splits_t = req_tensor(a, "nodes_splits")?;
        let dtype = splits_t.dtype();
        if !matches!(dtype, DType::F32 | DType::F64 | DType::F16) {
            return Err(a.error(
                "nodes_splits",
                format!("must be float, double or float16, found {dtype}"),
            ));
        }
        let splits = floats(a, "nodes_splits", splits_t, dtype)?;
        let modes = req_tensor(a, "nodes_modes")?;
        if modes.dtype() != DType::U8 {
            return Err(a.error(
                "nodes_modes",
                format!("must be uint8, found {}", modes.dtype()),
            ));
        }
        let modes = modes.to_i64_vec()?;
        let true_ids = req_ints(a, "nodes_truenodeids")?;
        let false_ids = req_ints(a, "nodes_falsenodeids")?;
        let true_leafs = req_ints(a, "nodes_trueleafs")?;
        let false_leafs = req_ints(a, "nodes_falseleafs")?;
        let missing = a.ints_opt("nodes_missing_value_tracks_true")?;
        for (name, len) in [
            ("nodes_splits", splits.len()),
            ("nodes_modes", modes.len()),
            ("nodes_truenodeids", true_ids.len()),
            ("nodes_falsenodeids", false_ids.len()),
            ("nodes_trueleafs", true_leafs.len()),
            ("nodes_falseleafs", false_leafs.len()),
            (
                "nodes_missing_value_tracks_true",
                missing.as_ref().map_or(n, Vec::len),
            ),
        ] {
            check_len(a, name, len, n, "nodes_featureids")?;
        }
        if let Some(h) = a.tensor_opt("nodes_hitrates")? {
            // Popularity only: it never changes a prediction.
            check_len(a, "nodes_hitrates", h.len(), n, "nodes_featureids")?;
        }
        let targets = req_ints(a, "leaf_targetids")?;
        let weights = floats(a, "leaf_weights", req_tensor(a, "leaf_weights")?, dtype)?;
        check_len(
            a,
            "leaf_weights",
            weights.len(),
            targets.len(),
            "leaf_targetids",
        )?;
        let n_targets = a
            .int_opt("n_targets")?
            .ok_or_else(|| a.error("n_targets", "required: it sets the output's width"))?;
        let n_targets = usize::try_from(n_targets).map_err(|_| {
            a.error(
                "n_targets",
                format!("must not be negative, found {n_targets}"),
            )
        })?;
        let leaves = targets
            .iter()
            .zip(&weights)
            .map(|(&t, &w)| Ok((index(a, "leaf_targetids", t, n_targets)?, w)))
            .collect::<Result<Vec<_>>>()?;
        let member_values = match a.tensor_opt("membership_values")? {
            Some(m) => floats(a, "membership_values", m, dtype)?,
            None => Vec::new(),
        };
        let sets = member_values.iter().filter(|v| v.is_nan()).count();
        let mut members = member_values.into_iter();
        let child = |name: &str, id: i64, leaf: i64| -> Result<Child> {
            Ok(if leaf != 0 {
                Child::Leaf(index(a, name, id, leaves.len())?)
            } else {
                Child::Node(index(a, name, id, n)?)
            })
        };
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let mode = mode(a, modes[i])?;
            let set = if mode == Mode::Member {
                let mut set: Vec<f64> = members
                    .by_ref()
                    .take_while(|v| !v.is_nan())
                    .map(positive_zero)
                    .collect();
                crate::order::sort_f64(&mut set);
                set
            } else {
                Vec::new()
            };
            nodes.push(Node {
                mode,
                feature: usize::try_from(features[i]).map_err(|_| {
                    a.error(
                        "nodes_featureids",
                        format!("must not be negative, found {}", features[i]),
                    )
                })?,
                split: splits[i],
                members: set,
                missing_true: missing.as_ref().is_some_and(|m| m[i] != 0),
                on_true: child("nodes_truenodeids", true_ids[i], true_leafs[i])?,
                on_false: child("nodes_falsenodeids", false_ids[i], false_leafs[i])?,
            });
        }
        let member_nodes = nodes.iter().filter(|n| n.mode == Mode::Member).count();
        if sets != member_nodes {
            return Err(a.error(
                "membership_values",
                format!("holds {sets} NaN-terminated sets for {member_nodes} BRANCH_MEMBER nodes"),
            ));
        }
        let roots = req_ints(a, "tree_roots")?
            .iter()
            .map(|&r| index(a, "tree_roots", r, n))
            .collect::<Result<Vec<_>>>()?;
        check_acyclic(&nodes, &roots)?;
        let max_feature = nodes.iter().map(|n| n.feature).max();
        Ok(Model {
            nodes,
            roots,
            leaves,
            n_targets,
            dtype,
            max_feature,
        })
    }
}

impl Node {
    /// Whether `x` takes the true branch.
    pub(super) fn goes_true(&self, x: f64) -> bool {
        let hit = match self.mode {
            Mode::Leq => x <= self.split,
            Mode::Lt => x < self.split,
            Mode::Gte => x >= self.split,
            Mode::Gt => x > self.split,
            Mode::Eq => x == self.split,
            Mode::Neq => x != self.split,
            Mode::Member => {
                let x = positive_zero(x);
                self.members.binary_search_by(|m| m.total_cmp(&x)).is_ok()
            }
        };
        hit || (self.missing_true && x.is_nan())
    }
}

/// `v` with -0 made +0, so that set membership compares by value.
fn positive_zero(v: f64) -> f64 {
    if v == 0.0 {
        0.0
    } else {
        v
    }
}

/// Refuses trees whose branches loop (shared subtrees are fine), so that
/// walking a tree always ends at a leaf.
fn check_acyclic(nodes: &[Node], roots: &[usize]) -> Result<()> {
    const NEW: u8 = 0;
    const ON_PATH: u8 = 1;
    const DONE: u8 = 2;
    let mut state = vec![NEW; nodes.len()];
    for &root in roots {
        if state[root] == DONE {
            continue;
        }
        state[root] = ON_PATH;
        // (node, how many of its two branches were followed)
        let mut path = vec![(root, 0u8)];
        while let Some((node, followed)) = path.last_mut() {
            let node = *node;
            let child = match *followed {
                0 => nodes[node].on_true,
                1 => nodes[node].on_false,
                _ => {
                    state[node] = DONE;
                    path.pop();
                    continue;
                }
            };
            *followed += 1;
            if let Child::Node(c) = child {
                match state[c] {
                    ON_PATH => {
                        return Err(Error::op(
                            OP,
                            format!("the branches from node {c} lead back to it (a cycle)"),
                        ))
                    }
                    NEW => {
                        state[c] = ON_PATH;
                        path.push((c, 0));
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}
