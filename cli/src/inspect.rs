//! `ramify inspect`: every fork of a model with its siblings (operator count,
//! FLOPs, estimated single-thread time) and the plan the policy would choose
//! at a given load and CPU count, after the device's clusters and core
//! capacities; `--dot FILE` also writes the graph in
//! Graphviz DOT (see `dot.rs`).

use crate::inputs;
use anyhow::{Context, Result};
use clap::Args;
use ramify::analysis::Fork;
use ramify::exec::Plan;
use ramify::sched::makespan::{parallel_makespan, serial_seconds};
use ramify::sched::{band, decide, Decision, PolicyConfig};
use ramify::SessionBuilder;
use std::path::PathBuf;

#[derive(Args)]
pub struct InspectArgs {
    /// The model file (default: the example model in models/).
    model: Option<PathBuf>,
    /// The device utilisation n in [0, 1] to plan for.
    #[arg(long, default_value_t = 0.0)]
    load: f64,
    /// CPUs m to plan for (default: all).
    #[arg(long)]
    cpus: Option<usize>,
    /// Also write the graph in Graphviz DOT to this file (each fork's
    /// siblings coloured, nodes labelled with op type and FLOPs).
    #[arg(long, value_name = "FILE")]
    dot: Option<PathBuf>,
    #[command(flatten)]
    placement: crate::placement::PlacementArgs,
}

fn node_name(plan: &Plan, i: Option<usize>, none: &str) -> String {
    match i {
        Some(i) => {
            let n = &plan.graph.nodes[i];
            format!("{} ({})", n.name, n.op_type)
        }
        None => none.to_string(),
    }
}

fn describe(plan: &Plan, index: usize, f: &Fork, policy: &PolicyConfig, load: f64) {
    let indent = "  ".repeat(f.depth);
    println!(
        "{indent}fork {index}: {} -> join {}{}{}",
        node_name(plan, f.node, "graph inputs"),
        node_name(plan, f.join, "graph outputs"),
        if f.shortcut { ", with shortcut" } else { "" },
        if f.parallel {
            ""
        } else {
            " (one sibling: runs in order)"
        },
    );
    let speedup = |k: usize| policy.speedup(k);
    let times = plan.sibling_times(index, &speedup);
    for (i, s) in f.siblings.iter().enumerate() {
        let flops: u64 = s.nodes.iter().map(|&n| plan.flops[n]).sum();
        println!(
            "{indent}  sibling {i}: {:>3} ops {:>12} FLOPs  t = {:.3} ms  [{} .. {}]",
            s.nodes.len(),
            flops,
            times[i] * 1e3,
            plan.graph.nodes[s.nodes[0]].name,
            plan.graph.nodes[*s.nodes.last().unwrap_or(&s.nodes[0])].name,
        );
    }
    if f.parallel {
        let b = band(load, policy, None);
        let method = decide(load, b, policy, &times);
        println!(
            "{indent}  plan at n = {load:.2} (band {b}): {}",
            describe_decision(&method)
        );
        if let Decision::Parallel(pools) = &method {
            let seconds_at = |s: usize, k: usize| plan.sibling_seconds_at(index, s, k, &speedup);
            let threads = policy.serial_threads(b);
            let parallel = parallel_makespan(pools, &seconds_at, policy.fork_overhead);
            let serial = serial_seconds(times.len(), threads, &seconds_at);
            let verdict = if !policy.makespan_check || parallel < serial {
                "parallel kept"
            } else {
                "runs serially instead"
            };
            println!(
                "{indent}  makespan check: parallel {:.3} ms, serial on {threads} CPU(s) {:.3} ms: {verdict}",
                parallel * 1e3,
                serial * 1e3
            );
        }
    }
}

fn describe_decision(d: &Decision) -> String {
    match d {
        Decision::Parallel(pools) => pools
            .iter()
            .map(|p| format!("{} CPU(s) for siblings {:?}", p.cpus, p.siblings))
            .collect::<Vec<_>>()
            .join("; "),
        Decision::Serial { threads } => format!("serial, each operator on {threads} CPU(s)"),
    }
}

pub fn main(a: InspectArgs) -> Result<()> {
    let model = a.model.unwrap_or_else(crate::default_model);
    let cpus = a
        .cpus
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let session = a
        .placement
        .apply(SessionBuilder::new())
        .cpus(cpus)
        .oversubscribe(true)
        .fixed_load(a.load)
        .build_from_file(&model)
        .with_context(|| format!("loading {}", model.display()))?;
    let plan = session.plan(inputs::load(&session, None)?)?;
    let policy = PolicyConfig::for_cpus(cpus);
    println!(
        "model {}: {} nodes, {:.3} GFLOPs, {} forks ({} parallel), m = {cpus}",
        model.display(),
        plan.graph.nodes.len(),
        plan.total_flops() as f64 * 1e-9,
        plan.structure.forks.len(),
        plan.structure.forks.iter().filter(|f| f.parallel).count(),
    );
    print!(
        "{}",
        crate::placement::describe_topology(session.topology(), session.placement())
    );
    for (i, f) in plan.structure.forks.iter().enumerate() {
        describe(&plan, i, f, &policy, a.load);
    }
    if let Some(path) = &a.dot {
        std::fs::write(path, crate::dot::to_dot(&plan))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
