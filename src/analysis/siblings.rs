//! The sibling finder. A fork is a node (or the graph inputs) whose results
//! feed two or more nodes; its join is its immediate post-dominator; the
//! nodes strictly between split into siblings by connected components, so
//! siblings are independent subgraphs even where the branches are not
//! series-parallel. The finder also turns the graph into a step tree that
//! the executor walks: plain nodes, and forks whose siblings run as units.

use super::dominators::Dag;
use crate::graph::Graph;
use std::collections::VecDeque;

/// One sibling subgraph: its nodes in execution order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sibling {
    /// Node indices (into the graph's node list), in topological order.
    pub nodes: Vec<usize>,
}

/// A fork found in the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fork {
    /// The fork node; `None` when the fork is the graph inputs themselves.
    pub node: Option<usize>,
    /// The join node; `None` when the siblings only meet at the graph outputs.
    pub join: Option<usize>,
    /// The siblings between fork and join.
    pub siblings: Vec<Sibling>,
    /// True when the fork also feeds the join directly (an empty sibling, as
    /// in a residual block's identity shortcut).
    pub shortcut: bool,
    /// Nesting depth: 0 for top-level forks.
    pub depth: usize,
    /// True when the executor runs the siblings as a parallel fork (two or
    /// more siblings and none of them pulled into an enclosing sibling's order).
    pub parallel: bool,
}

/// One step of execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Run one node.
    Node(usize),
    /// Run the siblings of fork `fork` (an index into [`Structure::forks`]),
    /// each a list of steps, then continue.
    Fork {
        /// Index into [`Structure::forks`].
        fork: usize,
        /// The steps of each sibling.
        siblings: Vec<Vec<Step>>,
    },
}

/// The forks of a graph and the step tree the executor walks.
#[derive(Debug, Clone, Default)]
pub struct Structure {
    /// Every fork, in the order found.
    pub forks: Vec<Fork>,
    /// The top-level steps.
    pub steps: Vec<Step>,
}

impl Structure {
    /// Whether any fork runs its siblings as a parallel fork; without one
    /// the steps are a plain sequence of nodes (a residual block's fork
    /// has one sibling and runs as part of that sequence).
    pub fn forks_any(&self) -> bool {
        self.forks.iter().any(|f| f.parallel)
    }
}

struct Finder<'a> {
    dag: &'a Dag,
    ipdom: Vec<usize>,
    done: Vec<bool>,
    forks: Vec<Fork>,
}

/// Finds the forks and siblings of a graph whose nodes are in topological order.
pub fn find_structure(graph: &Graph) -> Structure {
    let dag = Dag::of(graph);
    let mut f = Finder {
        ipdom: dag.post_dominators(),
        done: vec![false; dag.n + 2],
        forks: Vec::new(),
        dag: &dag,
    };
    f.done[dag.source()] = true;
    let mut steps = Vec::new();
    f.fork_at(dag.source(), 0, &mut steps);
    let all: Vec<usize> = (0..dag.n).collect();
    f.walk(&all, 0, &mut steps);
    Structure {
        forks: f.forks,
        steps,
    }
}

impl Finder<'_> {
    /// Appends the steps for `nodes` (topologically ordered) to `steps`.
    fn walk(&mut self, nodes: &[usize], depth: usize, steps: &mut Vec<Step>) {
        for &v in nodes {
            if self.done[v] {
                continue;
            }
            self.done[v] = true;
            steps.push(Step::Node(v));
            self.fork_at(v, depth, steps);
        }
    }

    /// If `v` is a fork, records it; when it has two or more siblings, runs
    /// their outside dependencies first and appends a fork step.
    fn fork_at(&mut self, v: usize, depth: usize, steps: &mut Vec<Step>) {
        let dag = self.dag;
        if dag.succ[v].len() < 2 {
            return;
        }
        let join = self.ipdom[v];
        let region = self.region(v, join);
        if region.is_empty() {
            return;
        }
        let components = self.components(&region);
        let shortcut = dag.succ[v].contains(&join);
        let fork_index = self.forks.len();
        let parallel = components.len() >= 2;
        self.forks.push(Fork {
            node: (v != dag.source()).then_some(v),
            join: (join != dag.sink()).then_some(join),
            siblings: components
                .iter()
                .map(|c| Sibling { nodes: c.clone() })
                .collect(),
            shortcut,
            depth,
            parallel,
        });
        if !parallel {
            return;
        }
        // Nodes the region reads that are neither done nor in it do not
        // depend on `v`, so they can run now, before the fork.
        for a in self.outside_ancestors(&region) {
            self.done[a] = true;
            steps.push(Step::Node(a));
        }
        let mut sibling_steps = Vec::with_capacity(components.len());
        for c in &components {
            let mut s = Vec::new();
            self.walk(c, depth + 1, &mut s);
            sibling_steps.push(s);
        }
        steps.push(Step::Fork {
            fork: fork_index,
            siblings: sibling_steps,
        });
    }

    /// Nodes reachable from `fork` without passing `join`, excluding both.
    fn region(&self, fork: usize, join: usize) -> Vec<usize> {
        let dag = self.dag;
        let mut seen = vec![false; dag.n + 2];
        let mut queue = VecDeque::from([fork]);
        let mut out = Vec::new();
        seen[fork] = true;
        while let Some(x) = queue.pop_front() {
            for &s in &dag.succ[x] {
                if s == join || s == dag.sink() || seen[s] || self.done[s] {
                    continue;
                }
                seen[s] = true;
                out.push(s);
                queue.push_back(s);
            }
        }
        out.sort_unstable();
        out
    }

    /// Splits the region into connected components (ignoring direction),
    /// each sorted, ordered by first node.
    fn components(&self, region: &[usize]) -> Vec<Vec<usize>> {
        let dag = self.dag;
        let mut comp = vec![usize::MAX; dag.n + 2];
        let mut inside = vec![false; dag.n + 2];
        for &r in region {
            inside[r] = true;
        }
        let mut out: Vec<Vec<usize>> = Vec::new();
        for &r in region {
            if comp[r] != usize::MAX {
                continue;
            }
            let id = out.len();
            let mut members = vec![r];
            comp[r] = id;
            let mut stack = vec![r];
            while let Some(x) = stack.pop() {
                for &y in dag.succ[x].iter().chain(&dag.pred[x]) {
                    if inside[y] && comp[y] == usize::MAX {
                        comp[y] = id;
                        members.push(y);
                        stack.push(y);
                    }
                }
            }
            members.sort_unstable();
            out.push(members);
        }
        out
    }

    /// Not-yet-run ancestors of the region that lie outside it, in order.
    fn outside_ancestors(&self, region: &[usize]) -> Vec<usize> {
        let dag = self.dag;
        let mut inside = vec![false; dag.n + 2];
        for &r in region {
            inside[r] = true;
        }
        let mut seen = vec![false; dag.n + 2];
        let mut stack: Vec<usize> = region.to_vec();
        let mut out = Vec::new();
        while let Some(x) = stack.pop() {
            for &p in &dag.pred[x] {
                if inside[p] || seen[p] || self.done[p] {
                    continue;
                }
                seen[p] = true;
                out.push(p);
                stack.push(p);
            }
        }
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::test_support::dummy_node;
    use crate::graph::Value;

    /// A graph from `(name, inputs)` pairs: each node outputs a value named
    /// like itself; "x" is the graph input; `outputs` are the graph outputs.
    fn graph(nodes: &[(&str, &[&str])], outputs: &[&str]) -> Graph {
        let mut names: Vec<String> = vec!["x".into()];
        names.extend(nodes.iter().map(|(n, _)| n.to_string()));
        let id = |n: &str| names.iter().position(|x| x == n).expect("known value");
        let nodes = nodes
            .iter()
            .map(|(n, ins)| {
                let ins: Vec<usize> = ins.iter().map(|i| id(i)).collect();
                dummy_node(n, &ins, &[id(n)])
            })
            .collect();
        Graph {
            values: names
                .iter()
                .map(|n| Value {
                    name: n.clone(),
                    declared: None,
                })
                .collect(),
            nodes,
            inputs: vec![0],
            outputs: outputs.iter().map(|o| id(o)).collect(),
            constants: vec![None; names.len()],
            released: Vec::new(),
            metadata: Default::default(),
        }
    }

    fn names(g: &Graph, s: &Sibling) -> Vec<String> {
        s.nodes.iter().map(|&i| g.nodes[i].name.clone()).collect()
    }

    fn inception(prefix: &str, input: &str) -> Vec<(String, Vec<String>)> {
        let p = |s: &str| format!("{prefix}{s}");
        vec![
            (p("b1"), vec![input.to_string()]),
            (p("b2a"), vec![input.to_string()]),
            (p("b2b"), vec![p("b2a")]),
            (p("b3a"), vec![input.to_string()]),
            (p("b3b"), vec![p("b3a")]),
            (p("b3c"), vec![p("b3b")]),
            (p("b4p"), vec![input.to_string()]),
            (p("b4"), vec![p("b4p")]),
            (p("cat"), vec![p("b1"), p("b2b"), p("b3c"), p("b4")]),
        ]
    }

    fn build(spec: &[(String, Vec<String>)], outputs: &[&str]) -> Graph {
        let owned: Vec<(&str, Vec<&str>)> = spec
            .iter()
            .map(|(n, ins)| (n.as_str(), ins.iter().map(|s| s.as_str()).collect()))
            .collect();
        let refs: Vec<(&str, &[&str])> = owned.iter().map(|(n, i)| (*n, i.as_slice())).collect();
        graph(&refs, outputs)
    }

    #[test]
    fn inception_blocks_have_one_fork_with_four_siblings_each() {
        let mut spec = vec![("stem".to_string(), vec!["x".to_string()])];
        spec.extend(inception("i1_", "stem"));
        spec.push(("pool".into(), vec!["i1_cat".into()]));
        spec.extend(inception("i2_", "pool"));
        let g = build(&spec, &["i2_cat"]);
        let s = find_structure(&g);
        let forks: Vec<&Fork> = s.forks.iter().filter(|f| f.parallel).collect();
        assert_eq!(forks.len(), 2);
        for (f, p) in forks.iter().zip(["i1_", "i2_"]) {
            assert_eq!(f.siblings.len(), 4);
            assert_eq!(g.nodes[f.join.unwrap()].name, format!("{p}cat"));
            assert_eq!(
                names(&g, &f.siblings[2]),
                vec![format!("{p}b3a"), format!("{p}b3b"), format!("{p}b3c")]
            );
            assert!(!f.shortcut);
        }
        assert_eq!(g.nodes[forks[0].node.unwrap()].name, "stem");
        assert_eq!(g.nodes[forks[1].node.unwrap()].name, "pool");
    }

    #[test]
    fn residual_block_branch_and_shortcut() {
        let g = graph(
            &[
                ("a", &["x"]),
                ("b", &["a"]),
                ("c", &["b"]),
                ("add", &["c", "a"]),
                // A downsampling block: residual path and a conv shortcut.
                ("d", &["add"]),
                ("e", &["d"]),
                ("s", &["add"]),
                ("add2", &["e", "s"]),
            ],
            &["add2"],
        );
        let s = find_structure(&g);
        assert_eq!(s.forks.len(), 2);
        let identity = &s.forks[0];
        assert_eq!(g.nodes[identity.node.unwrap()].name, "a");
        assert_eq!(g.nodes[identity.join.unwrap()].name, "add");
        assert!(identity.shortcut);
        assert_eq!(identity.siblings.len(), 1);
        assert_eq!(names(&g, &identity.siblings[0]), vec!["b", "c"]);
        assert!(!identity.parallel);
        let projected = &s.forks[1];
        assert!(!projected.shortcut && projected.parallel);
        assert_eq!(projected.siblings.len(), 2);
        assert_eq!(names(&g, &projected.siblings[0]), vec!["d", "e"]);
        assert_eq!(names(&g, &projected.siblings[1]), vec!["s"]);
    }

    #[test]
    fn nested_forks_are_found() {
        let g = graph(
            &[
                ("a", &["x"]),
                ("b", &["a"]),
                ("c", &["b"]),
                ("d", &["b"]),
                ("e", &["c", "d"]),
                ("f", &["a"]),
                ("g", &["e", "f"]),
            ],
            &["g"],
        );
        let s = find_structure(&g);
        let outer = &s.forks[0];
        assert_eq!(outer.depth, 0);
        assert_eq!(names(&g, &outer.siblings[0]), vec!["b", "c", "d", "e"]);
        assert_eq!(names(&g, &outer.siblings[1]), vec!["f"]);
        let inner = &s.forks[1];
        assert_eq!(inner.depth, 1);
        assert_eq!(g.nodes[inner.node.unwrap()].name, "b");
        assert_eq!(g.nodes[inner.join.unwrap()].name, "e");
        assert_eq!(inner.siblings.len(), 2);
        // The step tree nests the inner fork inside the outer's first sibling.
        let Step::Fork { siblings, .. } = &s.steps[1] else {
            panic!("expected the outer fork: {:?}", s.steps)
        };
        assert!(matches!(siblings[0][1], Step::Fork { fork: 1, .. }));
    }

    #[test]
    fn cross_linked_branches_form_one_sibling() {
        // b and c both hang off a, but c also reads b: not independent.
        let g = graph(
            &[
                ("a", &["x"]),
                ("b", &["a"]),
                ("c", &["a", "b"]),
                ("j", &["b", "c"]),
            ],
            &["j"],
        );
        let s = find_structure(&g);
        assert_eq!(s.forks.len(), 2); // a (b, c entangled) and b (c, j)
        let f = &s.forks[0];
        assert_eq!(f.siblings.len(), 1);
        assert!(!f.parallel);
        assert!(s.steps.iter().all(|st| matches!(st, Step::Node(_))));
    }

    #[test]
    fn graph_inputs_can_fork() {
        let g = graph(&[("a", &["x"]), ("b", &["x"]), ("j", &["a", "b"])], &["j"]);
        let s = find_structure(&g);
        assert_eq!(s.forks.len(), 1);
        assert_eq!(s.forks[0].node, None);
        assert_eq!(s.forks[0].siblings.len(), 2);
        assert!(matches!(s.steps[0], Step::Fork { .. }));
    }

    /// Walks the steps, running fork siblings in reverse order, and checks
    /// that every node's producers ran before it and every node runs once.
    fn check_steps(g: &Graph, steps: &[Step], done: &mut Vec<bool>) {
        for st in steps {
            match st {
                Step::Node(i) => {
                    for &v in g.nodes[*i].inputs.iter().flatten() {
                        if let Some(p) = g.nodes.iter().position(|n| n.outputs.contains(&Some(v))) {
                            assert!(
                                done[p],
                                "{} ran before {}",
                                g.nodes[*i].name, g.nodes[p].name
                            );
                        }
                    }
                    assert!(!done[*i]);
                    done[*i] = true;
                }
                Step::Fork { siblings, .. } => {
                    for s in siblings.iter().rev() {
                        check_steps(g, s, done);
                    }
                }
            }
        }
    }

    #[test]
    fn random_dags_give_valid_step_trees() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..200 {
            let n = 2 + rnd(25) as usize;
            let mut spec: Vec<(String, Vec<String>)> = Vec::new();
            for i in 0..n {
                let k = 1 + rnd(3) as usize;
                let mut ins: Vec<String> = (0..k)
                    .map(|_| {
                        let j = rnd(i as u64 + 1) as usize;
                        if j == 0 {
                            "x".to_string()
                        } else {
                            format!("n{}", j - 1)
                        }
                    })
                    .collect();
                ins.sort();
                ins.dedup();
                spec.push((format!("n{i}"), ins));
            }
            let last = format!("n{}", n - 1);
            let g = build(&spec, &[last.as_str()]);
            let s = find_structure(&g);
            let mut done = vec![false; g.nodes.len()];
            check_steps(&g, &s.steps, &mut done);
            assert!(done.iter().all(|&d| d), "every node runs");
            for f in &s.forks {
                // Siblings are independent: no edge between two of them.
                for (a, sa) in f.siblings.iter().enumerate() {
                    for sb in f.siblings.iter().skip(a + 1) {
                        for &u in &sa.nodes {
                            for &v in &sb.nodes {
                                let reads = |x: usize, y: usize| {
                                    g.nodes[x]
                                        .inputs
                                        .iter()
                                        .flatten()
                                        .any(|i| g.nodes[y].outputs.contains(&Some(*i)))
                                };
                                assert!(!reads(u, v) && !reads(v, u));
                            }
                        }
                    }
                }
            }
        }
    }
}
