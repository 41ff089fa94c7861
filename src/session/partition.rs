//! Partitioning a model into ordered parts (seed 004): the plan at the model's
//! input shapes gives the task graph (operators, the values between them and
//! each operator's estimated single-thread time), the analysis layer splits it
//! with few critical cut edges, and the ONNX layer writes every part as a
//! model of its own whose inputs and outputs are the values crossing the cut.

use super::{Outputs, RunOptions, Session};
use crate::analysis::{partition, Critical, PartitionOptions, Refinement, TaskGraph};
use crate::error::{Error, Result};
use crate::exec::Plan;
use crate::ir::Fact;
use crate::onnx::{split_model_file, PartModel, SplitSpec};
use crate::tensor::{budget, Tensor};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A model split into parts, with how the split was found.
#[derive(Debug, Clone)]
pub struct Partitioned {
    /// The task graph that was split: the plan's operators in execution
    /// order and the values between them.
    pub tasks: TaskGraph,
    /// The initial split, every refinement iteration and the best split.
    pub refinement: Refinement,
    /// The part models, in pipeline order.
    pub parts: Vec<PartModel>,
    /// The whole model's inputs, in its order.
    pub inputs: Vec<String>,
    /// The whole model's outputs, in its order.
    pub outputs: Vec<String>,
}

/// Splits the model file at `path` into `options.parts` ordered parts whose
/// critical cut edges (by `critical`) are few and whose single-thread times
/// (measured over a few runs on one CPU) are balanced, at the model's
/// declared input shapes (free dimensions taken as 1).
///
/// ```
/// use ramify::analysis::{Critical, PartitionOptions};
/// let options = PartitionOptions { parts: 2, ..PartitionOptions::default() };
/// let split = ramify::partition_model("models/inception_mini.onnx", &options, Critical::Path)?;
/// assert_eq!(split.parts.len(), 2);
/// assert!(split.refinement.best.cut(&split.tasks).critical
///     <= split.refinement.initial.cut(&split.tasks).critical);
/// # Ok::<(), ramify::Error>(())
/// ```
pub fn partition_model(
    path: impl AsRef<Path>,
    options: &PartitionOptions,
    critical: Critical,
) -> Result<Partitioned> {
    let path = path.as_ref();
    let session = Session::builder()
        .cpus(1)
        .keep_weights(true)
        .build_from_file(path)?;
    let inputs = declared_inputs(&session)?;
    let plan = session.plan_for(&inputs)?;
    let seconds = measured_seconds(&session, &plan, &inputs);
    let tasks = TaskGraph::from_graph(&plan.graph, &plan.facts, &seconds, &plan.flops, critical);
    let refinement = partition(&tasks, options)?;
    let parts = split(path, &plan, &refinement.best.assignment, options.parts)?;
    Ok(Partitioned {
        tasks,
        refinement,
        parts,
        inputs: session.inputs().iter().map(|i| i.name.clone()).collect(),
        outputs: session.outputs().iter().map(|o| o.name.clone()).collect(),
    })
}

/// Runs of the model on one CPU whose node times stand for the operators'
/// single-thread times (the first run warms up and is not kept).
const TIMED_RUNS: usize = 5;

/// Each operator's single-thread seconds as measured over a few runs on one
/// CPU (the cost model's estimate where a node was not timed): a pipeline's
/// throughput is set by its slowest stage, and estimates from FLOPs alone
/// can be off by half for one operator class against another. A model that
/// cannot run on zeros (a divisor, a scale or a split size among its
/// inputs) keeps the estimates.
fn measured_seconds(session: &Session, plan: &Plan, inputs: &[Arc<Tensor>]) -> Vec<f64> {
    let names: Vec<String> = session.inputs().iter().map(|i| i.name.clone()).collect();
    for _ in 0..=TIMED_RUNS {
        let mut outputs = Outputs::new();
        let feeds = names.iter().cloned().zip(inputs.iter().cloned());
        if session
            .run_bound(feeds, &mut outputs, &RunOptions::default())
            .is_err()
        {
            return plan.estimate.clone();
        }
    }
    (0..plan.graph.nodes.len())
        .map(|i| plan.node_seconds_at(i, 1, &|_| 1.0))
        .collect()
}

/// Zero tensors of the inputs' declared types and shapes (free dimensions 1).
fn declared_inputs(session: &Session) -> Result<Vec<Arc<Tensor>>> {
    session
        .inputs()
        .iter()
        .map(|info| {
            let declared = info.declared.as_ref();
            let shape = declared.and_then(|d| d.concrete_shape(1));
            match (declared, shape) {
                (Some(d), Some(shape)) => {
                    // The shape comes from the file: check it before allocating.
                    budget::with_limit(session.memory_limit(), || {
                        budget::check(&format!("input {:?}", info.name), d.dtype, &shape)
                    })?;
                    Ok(Arc::new(Tensor::zeros(d.dtype, &shape)))
                }
                _ => Err(Error::Config(format!(
                    "input {:?} declares no shape, so the model cannot be partitioned ahead of a run",
                    info.name
                ))),
            }
        })
        .collect()
}

/// Writes the part models: which part computes each value of the plan's
/// graph, the constants and the value types, handed to the ONNX layer.
fn split(path: &Path, plan: &Plan, assignment: &[usize], parts: usize) -> Result<Vec<PartModel>> {
    let g = &plan.graph;
    let mut part_of = HashMap::new();
    for (node, &part) in g.nodes.iter().zip(assignment) {
        for &o in node.outputs.iter().flatten() {
            part_of.insert(g.name(o).to_string(), part);
        }
    }
    let constants: HashMap<String, Arc<Tensor>> = g
        .constants
        .iter()
        .enumerate()
        .filter_map(|(id, c)| Some((g.name(id).to_string(), c.clone()?)))
        .collect();
    let facts: HashMap<String, Fact> = plan
        .facts
        .iter()
        .enumerate()
        .filter(|(id, _)| *id < g.values.len())
        .filter_map(|(id, f)| Some((g.name(id).to_string(), f.clone()?)))
        .collect();
    split_model_file(
        path,
        &SplitSpec {
            parts,
            part_of: &part_of,
            constants: &constants,
            facts: &facts,
        },
    )
}
