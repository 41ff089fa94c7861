//! `ramify inspect --dot FILE`: a plan's graph in Graphviz DOT. Nodes are
//! labelled with their name, operator type and FLOPs; every sibling of every
//! fork is a filled cluster `cluster_f<F>_s<S>` with its own colour, nested
//! as the forks nest. Render with `dot -Tsvg FILE -o graph.svg`.

use ramify::exec::Plan;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;

/// One sibling of one fork, as a cluster.
struct Cluster {
    fork: usize,
    sibling: usize,
    nodes: BTreeSet<usize>,
    parent: Option<usize>,
}

fn quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// FLOPs with an SI prefix, e.g. `1.18 MFLOPs`.
pub fn flops_text(f: u64) -> String {
    let x = f as f64;
    match f {
        0..1_000 => format!("{f} FLOPs"),
        1_000..1_000_000 => format!("{:.2} kFLOPs", x * 1e-3),
        1_000_000..1_000_000_000 => format!("{:.2} MFLOPs", x * 1e-6),
        _ => format!("{:.2} GFLOPs", x * 1e-9),
    }
}

/// The `k`-th cluster's fill colour (HSV, hues spread by the golden ratio).
fn fill(k: usize) -> String {
    let hue = (k as f64 * 0.618_033_988_75).fract();
    format!("{hue:.3} 0.250 1.000")
}

/// The siblings of every fork, each with its enclosing cluster (the smallest
/// earlier cluster holding all its nodes).
fn clusters(plan: &Plan) -> Vec<Cluster> {
    let mut all: Vec<Cluster> = Vec::new();
    for (f, fork) in plan.structure.forks.iter().enumerate() {
        for (s, sib) in fork.siblings.iter().enumerate() {
            all.push(Cluster {
                fork: f,
                sibling: s,
                nodes: sib.nodes.iter().copied().collect(),
                parent: None,
            });
        }
    }
    // Larger first, so that a parent always precedes its children.
    all.sort_by(|a, b| (b.nodes.len(), a.fork, a.sibling).cmp(&(a.nodes.len(), b.fork, b.sibling)));
    for i in 0..all.len() {
        all[i].parent = (0..i)
            .filter(|&j| all[i].nodes.is_subset(&all[j].nodes))
            .min_by_key(|&j| (all[j].nodes.len(), usize::MAX - j));
    }
    all
}

/// The clusters directly under `parent`, by fork then sibling.
fn in_order(all: &[Cluster], parent: Option<usize>) -> Vec<usize> {
    let mut v: Vec<usize> = (0..all.len())
        .filter(|&j| all[j].parent == parent)
        .collect();
    v.sort_by_key(|&j| (all[j].fork, all[j].sibling));
    v
}

fn emit_cluster(
    out: &mut String,
    plan: &Plan,
    all: &[Cluster],
    home: &HashMap<usize, usize>,
    c: usize,
    depth: usize,
) {
    let pad = "  ".repeat(depth);
    let cl = &all[c];
    let _ = writeln!(
        out,
        "{pad}subgraph cluster_f{}_s{} {{\n{pad}  label=\"fork {} sibling {}\"; style=filled; \
         fillcolor=\"{}\"; color=\"0.000 0.000 0.500\";",
        cl.fork,
        cl.sibling,
        cl.fork,
        cl.sibling,
        fill(c)
    );
    for &n in &cl.nodes {
        if home.get(&n) == Some(&c) {
            emit_node(out, plan, n, depth + 1);
        }
    }
    for child in in_order(all, Some(c)) {
        emit_cluster(out, plan, all, home, child, depth + 1);
    }
    let _ = writeln!(out, "{pad}}}");
}

fn emit_node(out: &mut String, plan: &Plan, n: usize, depth: usize) {
    let node = &plan.graph.nodes[n];
    let _ = writeln!(
        out,
        "{}n{n} [label=\"{}\\n{}\\n{}\"];",
        "  ".repeat(depth),
        quote(&node.name),
        quote(&node.op_type),
        flops_text(plan.flops.get(n).copied().unwrap_or(0)),
    );
}

/// The plan's graph as a DOT digraph.
pub fn to_dot(plan: &Plan) -> String {
    let g = &plan.graph;
    let all = clusters(plan);
    // Each node lives in the smallest cluster holding it (the last in order).
    let mut home: HashMap<usize, usize> = HashMap::new();
    for (c, cl) in all.iter().enumerate() {
        for &n in &cl.nodes {
            home.insert(n, c);
        }
    }
    let mut out = String::from("digraph ramify {\n  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontsize=10];\n");
    for &v in &g.inputs {
        let _ = writeln!(out, "  v{v} [shape=oval, label=\"{}\"];", quote(g.name(v)));
    }
    for n in (0..g.nodes.len()).filter(|n| !home.contains_key(n)) {
        emit_node(&mut out, plan, n, 1);
    }
    for c in in_order(&all, None) {
        emit_cluster(&mut out, plan, &all, &home, c, 1);
    }
    let mut producer: HashMap<usize, usize> = HashMap::new();
    for (i, node) in g.nodes.iter().enumerate() {
        for v in node.outputs.iter().flatten() {
            producer.insert(*v, i);
        }
    }
    for (i, node) in g.nodes.iter().enumerate() {
        for v in node.inputs.iter().flatten() {
            if let Some(p) = producer.get(v) {
                let _ = writeln!(out, "  n{p} -> n{i};");
            } else if g.inputs.contains(v) {
                let _ = writeln!(out, "  v{v} -> n{i};");
            }
        }
    }
    for &v in &g.outputs {
        let _ = writeln!(
            out,
            "  out{v} [shape=oval, label=\"{}\"];",
            quote(g.name(v))
        );
        if let Some(p) = producer.get(&v) {
            let _ = writeln!(out, "  n{p} -> out{v};");
        }
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flops_and_colours() {
        assert_eq!(flops_text(12), "12 FLOPs");
        assert_eq!(flops_text(1_180_000), "1.18 MFLOPs");
        assert_eq!(flops_text(3_000_000_000), "3.00 GFLOPs");
        assert_ne!(fill(0), fill(1));
        assert_eq!(quote("a\"b"), "a\\\"b");
    }
}
