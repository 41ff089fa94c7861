//! Control-flow bodies run by the executor. [`Bodies`] is the
//! [`BodyBinder`] a session passes to the ONNX conversion: it runs the
//! load-time passes over each body once (specialise on the declared types,
//! prune, fuse), and the [`Subgraph`] it gives the operator keeps a [`Plan`]
//! per set of input facts, built on the first run with them and reused by
//! every later one (a loop's trips). A plan runs on the operator's own
//! thread ([`run_inline`]), under the interrupt, memory budget and int8
//! settings in force there, with the value store's lifetimes, recycling and
//! views. Past [`MAX_PLANS`] sets of facts (a loop growing a value every
//! trip), the body's runs share one plan specialised on types alone.

use super::executor::run_inline;
use super::Plan;
use crate::analysis::CostModel;
use crate::error::Result;
use crate::graph::pipeline::{optimize, Stage};
use crate::graph::{Body, BodyBinder, ValueId};
use crate::ir::{Fact, Subgraph, Value};
use crate::tensor::{budget, DType};
use std::sync::{Arc, Mutex};

/// How many plans for distinct input facts a body keeps; further sets of
/// facts share one plan specialised on the declared types alone.
pub const MAX_PLANS: usize = 8;

/// The [`BodyBinder`] that makes control-flow bodies run through the
/// executor: each body goes through the load-time passes once, and its
/// subgraph builds a [`Plan`] per set of input facts (up to [`MAX_PLANS`]),
/// reused by every later run with those facts, and walks it node by node on
/// the calling operator's thread.
#[derive(Debug, Clone, Copy)]
pub struct Bodies {
    /// Whether the load-time fusion passes run over the bodies.
    pub fusion: bool,
}

impl Bodies {
    /// `body` optimised at load, with no plans yet.
    fn planned(&self, mut body: Body) -> Result<PlannedBody> {
        let declared = body.declared_kinds();
        let stage = Stage::Load {
            fusion: self.fusion,
        };
        optimize(&mut body.graph, &declared, stage)?;
        Ok(PlannedBody {
            body,
            declared,
            plans: Mutex::new(Plans::default()),
        })
    }
}

impl BodyBinder for Bodies {
    fn bind(&self, body: Body) -> Result<Arc<dyn Subgraph>> {
        Ok(Arc::new(self.planned(body)?))
    }
}

/// A body with its plans.
#[derive(Debug)]
struct PlannedBody {
    /// The body, optimised at load.
    body: Body,
    /// The facts of its inputs by their declared types, for the generic plan.
    declared: Vec<(ValueId, Fact)>,
    plans: Mutex<Plans>,
}

/// The plans of one body built so far.
#[derive(Debug, Default)]
struct Plans {
    /// Plans for the input facts they were built for.
    specific: Vec<(Vec<Fact>, Arc<Plan>)>,
    /// The plan for any input shapes, once `specific` is full.
    generic: Option<Arc<Plan>>,
}

/// Whether `inputs` have the facts `facts` (without building them).
fn fits(facts: &[Fact], inputs: &[Value]) -> bool {
    facts.len() == inputs.len()
        && facts.iter().zip(inputs).all(|(f, v)| {
            f.kind == v.kind()
                && f.dtype == v.dtype()
                && match v {
                    Value::Tensor(t) => f.shape.as_deref() == Some(t.shape()),
                    _ => true,
                }
        })
}

impl PlannedBody {
    /// The plan for these input values (in `graph.inputs` order), built on
    /// first use.
    fn plan_for(&self, inputs: &[Value]) -> Result<Arc<Plan>> {
        let full = {
            let plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, p)) = plans.specific.iter().find(|(f, _)| fits(f, inputs)) {
                return Ok(p.clone());
            }
            if let (true, Some(p)) = (plans.specific.len() >= MAX_PLANS, &plans.generic) {
                return Ok(p.clone());
            }
            plans.specific.len() >= MAX_PLANS
        };
        // Built outside the lock: building may run other bodies (folding).
        let g = &self.body.graph;
        // The cost model's estimates steer forks, and a body runs serially.
        let cost = CostModel::default();
        let limit = budget::current_limit();
        if full {
            let plan = Arc::new(Plan::generic(g, &self.declared, &cost, 1, limit)?);
            let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
            return Ok(plans.generic.get_or_insert(plan).clone());
        }
        let facts: Vec<Fact> = inputs.iter().map(Fact::of_value).collect();
        let known: Vec<(ValueId, Fact)> = g.inputs.iter().copied().zip(facts.clone()).collect();
        let plan = Arc::new(Plan::new(g, &known, &cost, 1, limit)?);
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if plans.specific.len() < MAX_PLANS && !plans.specific.iter().any(|(f, _)| *f == facts) {
            plans.specific.push((facts, plan.clone()));
        }
        Ok(plan)
    }
}

impl Subgraph for PlannedBody {
    fn formal(&self) -> usize {
        self.body.formal
    }

    fn implicit(&self) -> usize {
        self.body.implicit
    }

    fn num_outputs(&self) -> usize {
        self.body.num_outputs()
    }

    fn declared_output(&self, k: usize) -> Option<DType> {
        self.body.declared_output(k)
    }

    fn run(&self, formal: Vec<Value>, implicit: &[Option<&Value>]) -> Result<Vec<Value>> {
        let inputs = self.body.inputs(formal, implicit)?;
        let plan = self.plan_for(&inputs)?;
        run_inline(&plan, self.body.graph.inputs.iter().copied().zip(inputs))
    }

    fn infer(&self, formal: &[Option<Fact>], implicit: &[Option<&Fact>]) -> Vec<Option<Fact>> {
        self.body.infer(formal, implicit)
    }

    fn nominal_flops(&self, per_node: u64) -> u64 {
        self.body.nominal_flops(per_node)
    }

    fn is_random(&self) -> bool {
        self.body.is_random()
    }
}

#[cfg(test)]
/// Unit tests of bodies run through the executor: one plan per set of input
/// facts, reused; the generic plan past the limit; outer-scope values picked
/// by their index; errors that name the node, never a panic.
mod tests {
    use super::{Bodies, PlannedBody, MAX_PLANS};
    use crate::graph::Body;
    use crate::ir::{Subgraph, Value};
    use crate::tensor::Tensor;
    use model_builder::{bytes, graph, initializer, model, named_node, value_info_free};

    const FLOAT: i32 = 1;

    /// y = Relu(x * 2) + s: `x` formal, `s` from the outer scope (the node's
    /// second implicit input), both of any length.
    fn body() -> PlannedBody {
        let g = graph(
            vec![
                named_node("scale", "Mul", &["x", "two"], &["m"]),
                named_node("relu", "Relu", &["m"], &["r"]),
                named_node("shift", "Add", &["r", "s"], &["y"]),
            ],
            vec![
                value_info_free("x", FLOAT, &[-2]),
                value_info_free("s", FLOAT, &[-2]),
            ],
            vec![value_info_free("y", FLOAT, &[-2])],
            vec![initializer("two", &[], &[2.0])],
        );
        let binder = Bodies { fusion: true };
        let graph = crate::onnx::load_model_bytes(&bytes(&model(g, 13)), &binder).unwrap();
        binder
            .planned(Body {
                graph,
                formal: 1,
                outer: vec![1],
                implicit: 2,
            })
            .unwrap()
    }

    fn floats(v: &[f32]) -> Value {
        Tensor::from_vec(&[v.len()], v.to_vec()).unwrap().into()
    }

    fn run(b: &PlannedBody, x: &[f32], s: &[f32]) -> Vec<f64> {
        let s = floats(s);
        let out = b.run(vec![floats(x)], &[None, Some(&s)]).unwrap();
        out[0].as_tensor("y").unwrap().to_f64_vec().unwrap()
    }

    fn plans(b: &PlannedBody) -> (usize, bool) {
        let p = b.plans.lock().unwrap();
        (p.specific.len(), p.generic.is_some())
    }

    #[test]
    fn a_plan_per_input_shape_is_built_once_and_reused() {
        let b = body();
        assert_eq!(plans(&b), (0, false));
        for _ in 0..5 {
            assert_eq!(run(&b, &[1.0, -1.0], &[0.5, 0.5]), vec![2.5, 0.5]);
        }
        assert_eq!(plans(&b), (1, false));
        assert_eq!(run(&b, &[3.0, -1.0, 1.0], &[1.0]), vec![7.0, 1.0, 3.0]);
        assert_eq!(plans(&b), (2, false));
    }

    #[test]
    fn shapes_past_the_limit_share_one_generic_plan() {
        let b = body();
        for n in 1..=MAX_PLANS + 3 {
            let x: Vec<f32> = (0..n).map(|i| i as f32 - 1.0).collect();
            let want: Vec<f64> = x
                .iter()
                .map(|&v| f64::from(v.max(0.0)) * 2.0 + 1.0)
                .collect();
            assert_eq!(run(&b, &x, &[1.0]), want, "length {n}");
        }
        assert_eq!(plans(&b), (MAX_PLANS, true));
        // A shape seen early still finds its own plan.
        assert_eq!(run(&b, &[1.0], &[0.0]), vec![2.0]);
    }

    #[test]
    fn bad_inputs_are_errors_that_name_the_node() {
        let b = body();
        let s = floats(&[1.0, 2.0, 3.0]);
        // Shapes that do not broadcast: the Add node is named.
        let err = b
            .run(vec![floats(&[1.0, 2.0])], &[None, Some(&s)])
            .unwrap_err();
        assert!(err.to_string().contains("shift"), "{err}");
        // The wrong element type: the Mul node is named.
        let x: Value = Tensor::from_vec(&[2], vec![1i64, 2]).unwrap().into();
        let err = b.run(vec![x], &[None, Some(&s)]).unwrap_err();
        assert!(err.to_string().contains("scale"), "{err}");
        // A missing outer-scope value and a wrong input count.
        let err = b.run(vec![floats(&[1.0])], &[Some(&s), None]).unwrap_err();
        assert!(err.to_string().contains("not available"), "{err}");
        assert!(b.run(vec![], &[None, Some(&s)]).is_err());
    }
}
