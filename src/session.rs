//! The public entry point: a [`Session`] loads a model once and runs it many
//! times, from any thread. It validates inputs, keeps one specialised plan per
//! set of input shapes, and runs the plan on its thread pool.

use crate::error::{Error, Result};
use crate::exec::{run_serial, Plan};
use crate::graph::{prune, specialize, Declared, Graph, ValueId};
use crate::ops::Fact;
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The name and declared type of a model input or output.
#[derive(Debug, Clone)]
pub struct IoInfo {
    /// The value's name.
    pub name: String,
    /// The declared element type and shape, if the model declares them.
    pub declared: Option<Declared>,
}

/// Configures and builds a [`Session`].
#[derive(Debug, Clone, Default)]
pub struct SessionBuilder {
    threads: Option<usize>,
}

impl SessionBuilder {
    /// A builder with default settings (all CPUs).
    pub fn new() -> Self {
        Self::default()
    }

    /// Limits the number of CPU threads the session uses (at least 1).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n.max(1));
        self
    }

    /// Loads a model file (external data is read from beside it).
    pub fn build_from_file(self, path: impl AsRef<Path>) -> Result<Session> {
        Session::new(crate::onnx::load_model_file(path.as_ref())?, self)
    }

    /// Loads a model from bytes in memory.
    pub fn build_from_bytes(self, bytes: &[u8]) -> Result<Session> {
        Session::new(crate::onnx::load_model_bytes(bytes)?, self)
    }
}

/// A loaded model, ready to run. `Session` is `Send + Sync`: runs from
/// several threads at once are allowed.
///
/// ```no_run
/// use ramify::{Session, Tensor};
/// let session = Session::from_file("models/inception_mini.onnx")?;
/// let input = Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96]);
/// let outputs = session.run([("input", input)])?;
/// println!("{}", outputs[0].1);
/// # Ok::<(), ramify::Error>(())
/// ```
pub struct Session {
    graph: Graph,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    plans: Mutex<HashMap<Vec<Vec<usize>>, Arc<Plan>>>,
    pool: rayon::ThreadPool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("nodes", &self.graph.nodes.len())
            .finish()
    }
}

impl Session {
    /// A builder for sessions with non-default settings.
    pub fn builder() -> SessionBuilder {
        SessionBuilder::new()
    }

    /// Loads a model file with default settings.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Session> {
        SessionBuilder::new().build_from_file(path)
    }

    /// Loads a model from bytes with default settings.
    pub fn from_bytes(bytes: &[u8]) -> Result<Session> {
        SessionBuilder::new().build_from_bytes(bytes)
    }

    fn new(mut graph: Graph, options: SessionBuilder) -> Result<Session> {
        let threads = options.threads.unwrap_or_else(num_cpus::get).max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("ramify-{i}"))
            .build()
            .map_err(|e| Error::Config(format!("cannot start {threads} threads: {e}")))?;
        // Fold what does not depend on the inputs once, at load.
        let declared: Vec<(ValueId, Fact)> = graph
            .inputs
            .iter()
            .filter_map(|&id| {
                let d = graph.values[id].declared.as_ref()?;
                let shape = d.dims.as_ref().and_then(|_| {
                    d.concrete_shape(usize::MAX)
                        .filter(|s| !s.contains(&usize::MAX))
                });
                Some((
                    id,
                    Fact {
                        dtype: d.dtype,
                        shape,
                    },
                ))
            })
            .collect();
        pool.install(|| specialize(&mut graph, &declared, false))?;
        prune(&mut graph);
        graph.rebuild_ops()?;
        let info = |ids: &[ValueId]| -> Vec<IoInfo> {
            ids.iter()
                .map(|&id| IoInfo {
                    name: graph.values[id].name.clone(),
                    declared: graph.values[id].declared.clone(),
                })
                .collect()
        };
        let inputs = info(&graph.inputs);
        let outputs = info(&graph.outputs);
        Ok(Session {
            graph,
            inputs,
            outputs,
            plans: Mutex::new(HashMap::new()),
            pool,
        })
    }

    /// The inputs the caller feeds, in the model's order.
    pub fn inputs(&self) -> &[IoInfo] {
        &self.inputs
    }

    /// The outputs a run returns, in the model's order.
    pub fn outputs(&self) -> &[IoInfo] {
        &self.outputs
    }

    /// The graph after load-time folding.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Orders named inputs by the model's inputs, checking names, element
    /// types and shapes against the declarations.
    fn bind<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
    ) -> Result<Vec<Arc<Tensor>>> {
        let mut bound: Vec<Option<Arc<Tensor>>> = vec![None; self.inputs.len()];
        for (name, t) in inputs {
            let name = name.as_ref();
            let Some(i) = self.inputs.iter().position(|x| x.name == name) else {
                return Err(Error::UnknownInput {
                    name: name.to_string(),
                    expected: self.inputs.iter().map(|x| x.name.clone()).collect(),
                });
            };
            if let Some(d) = &self.inputs[i].declared {
                if d.dtype != t.dtype() {
                    return Err(Error::InputType {
                        name: name.to_string(),
                        actual: t.dtype().to_string(),
                        expected: d.dtype.to_string(),
                    });
                }
                if !d.accepts(t.shape()) {
                    return Err(Error::InputShape {
                        name: name.to_string(),
                        actual: t.shape().to_vec(),
                        expected: d.to_string(),
                    });
                }
            }
            bound[i] = Some(Arc::new(t.into_standard_layout()));
        }
        bound
            .into_iter()
            .zip(&self.inputs)
            .map(|(t, info)| t.ok_or_else(|| Error::MissingInput(info.name.clone())))
            .collect()
    }

    /// The plan for these input tensors' shapes, built on first use.
    pub fn plan_for(&self, inputs: &[Arc<Tensor>]) -> Result<Arc<Plan>> {
        let key: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
        if let Some(p) = self
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(p.clone());
        }
        let facts: Vec<(ValueId, Fact)> = self
            .graph
            .inputs
            .iter()
            .zip(inputs)
            .map(|(&id, t)| (id, Fact::of(t)))
            .collect();
        let plan = Arc::new(self.pool.install(|| Plan::new(&self.graph, &facts))?);
        self.plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, plan.clone());
        Ok(plan)
    }

    /// Runs the model on named inputs and returns the named outputs in the
    /// model's output order.
    pub fn run<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Tensor)>,
    ) -> Result<Vec<(String, Tensor)>> {
        let bound = self.bind(inputs)?;
        let plan = self.plan_for(&bound)?;
        let feeds: Vec<(ValueId, Arc<Tensor>)> =
            self.graph.inputs.iter().copied().zip(bound).collect();
        let outs = self.pool.install(|| run_serial(&plan, feeds))?;
        Ok(self
            .outputs
            .iter()
            .zip(outs)
            .map(|(info, t)| {
                let t = Arc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone());
                (info.name.clone(), t)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Session>();
    }
}
