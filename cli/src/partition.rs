//! `ramify partition`: splits a model into K ordered parts with few critical
//! cut edges (seed 004), prints the parts (operators, estimated time, FLOPs),
//! the cut (values, bytes, critical count) and the refinement's history;
//! `--emit DIR` writes the parts as ONNX models, `--dot FILE` draws them as
//! Graphviz clusters.

use crate::dot::flops_text;
use anyhow::{bail, Context, Result};
use clap::Args;
use ramify::analysis::{Critical, PartitionOptions, TaskGraph};
use ramify::Partitioned;
use std::fmt::Write;
use std::path::PathBuf;

/// The critical edges' default for `partition` and `bench --pipeline`.
pub const DEFAULT_CRITICAL: &str = "bytes:65536";

// The numeric defaults are the library's (`PartitionOptions::default`).
#[derive(Args)]
pub struct PartitionArgs {
    /// Model file (default: the example model in models/).
    model: Option<PathBuf>,
    /// Number of parts.
    #[arg(long, default_value_t = PartitionOptions::default().parts)]
    parts: usize,
    /// Which edges are critical: `bytes:N` (the values between two
    /// operators exceed N bytes) or `path` (the edges of the critical path
    /// of the cost model's estimates).
    #[arg(long, default_value = DEFAULT_CRITICAL, value_parser = parse_critical)]
    pub critical: Critical,
    /// A boundary operator moves when it gains more than this many critical
    /// neighbours in the other part than it has in its own.
    #[arg(long, default_value_t = PartitionOptions::default().threshold)]
    threshold: i64,
    /// How far a part's estimated time may grow past the initial split's
    /// largest part (0.25 = 25 %).
    #[arg(long, default_value_t = PartitionOptions::default().balance)]
    balance: f64,
    /// Write the parts as ONNX models DIR/part_<i>.onnx.
    #[arg(long, value_name = "DIR")]
    emit: Option<PathBuf>,
    /// Write the graph with one cluster per part as Graphviz DOT.
    #[arg(long, value_name = "FILE")]
    dot: Option<PathBuf>,
}

/// Parses `bytes:N` or `path`.
pub fn parse_critical(s: &str) -> Result<Critical, String> {
    match s.split_once(':') {
        None if s == "path" => Ok(Critical::Path),
        Some(("bytes", n)) => n
            .parse()
            .map(Critical::Bytes)
            .map_err(|_| format!("{n:?} is not a byte count")),
        _ => Err(format!("{s:?}: expected bytes:N or path")),
    }
}

pub fn main(a: PartitionArgs) -> Result<()> {
    let model = a.model.clone().unwrap_or_else(crate::default_model);
    if a.balance.is_nan() || a.balance < 0.0 {
        bail!("--balance must be 0 or more, not {}", a.balance);
    }
    let options = PartitionOptions {
        parts: a.parts,
        threshold: a.threshold,
        balance: a.balance,
        ..PartitionOptions::default()
    };
    let split = ramify::partition_model(&model, &options, a.critical)
        .with_context(|| format!("partitioning {}", model.display()))?;
    print!("{}", describe(&split, &a));
    if let Some(dir) = &a.emit {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for part in &split.parts {
            let path = dir.join(format!("part_{}.onnx", part.index));
            std::fs::write(&path, &part.model)
                .with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    if let Some(path) = &a.dot {
        std::fs::write(path, dot(&split.tasks, &split))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The report: the refinement's history, the parts and the cut.
fn describe(split: &Partitioned, a: &PartitionArgs) -> String {
    let g = &split.tasks;
    let r = &split.refinement;
    let mut s = String::new();
    let critical = match a.critical {
        Critical::Bytes(n) => format!("values over {n} bytes"),
        Critical::Path => "the critical path".to_string(),
    };
    let _ = writeln!(
        s,
        "{} operators, {} parts; critical edges: {critical} ({} of {} edges)",
        g.tasks.len(),
        a.parts,
        g.edges.iter().filter(|e| e.critical).count(),
        g.edges.len()
    );
    let _ = writeln!(
        s,
        "refinement (threshold {}, balance {}):",
        a.threshold, a.balance
    );
    for (i, it) in r.history.iter().enumerate() {
        let moves: Vec<String> = it
            .moves
            .iter()
            .map(|m| format!("{} {}→{}", g.tasks[m.task].name, m.from, m.to))
            .collect();
        let _ = writeln!(
            s,
            "  {:>3}: cut {} edges, {} critical, {} bytes; boundary {} ({} new); largest part {:.3} ms{}",
            if i == 0 { "initial".to_string() } else { i.to_string() },
            it.cut.edges,
            it.cut.critical,
            it.cut.bytes,
            it.boundary,
            it.new_boundary,
            it.max_part_seconds * 1e3,
            if moves.is_empty() { String::new() } else { format!("; moved {}", moves.join(", ")) }
        );
    }
    let _ = writeln!(
        s,
        "best: {}",
        if r.best_iteration == 0 {
            "the initial split".to_string()
        } else {
            format!("iteration {}", r.best_iteration)
        }
    );
    let best = &r.best;
    let seconds = best.part_seconds(g);
    let flops = best.part_flops(g);
    for part in &split.parts {
        let p = part.index;
        let _ = writeln!(
            s,
            "part {p}: {} operators ({} ONNX nodes), {}, estimated {:.3} ms; inputs {}; outputs {}",
            best.members(p).len(),
            part.nodes,
            flops_text(flops[p]),
            seconds[p] * 1e3,
            part.inputs.join(", "),
            part.outputs.join(", ")
        );
    }
    let cut = best.cut(g);
    let _ = writeln!(
        s,
        "cut: {} edges, {} critical, {} bytes",
        cut.edges, cut.critical, cut.bytes
    );
    for e in &g.edges {
        let (from, to) = (best.assignment[e.from], best.assignment[e.to]);
        if from != to {
            let _ = writeln!(
                s,
                "  {} ({} bytes) part {from} → part {to}{}",
                e.values.join(", "),
                e.bytes,
                if e.critical { ", critical" } else { "" }
            );
        }
    }
    s
}

fn quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The task graph in DOT, one filled cluster per part, critical edges bold
/// and cut edges red.
fn dot(g: &TaskGraph, split: &Partitioned) -> String {
    let best = &split.refinement.best;
    let mut s =
        String::from("digraph partition {\n  node [shape=box, style=filled, fillcolor=white];\n");
    for p in 0..best.parts {
        let hue = (p as f64 * 0.618_033_988_75).fract();
        let _ = writeln!(
            s,
            "  subgraph cluster_part{p} {{\n    label=\"part {p}\";\n    style=filled;\n    fillcolor=\"{hue:.3} 0.250 1.000\";"
        );
        for t in best.members(p) {
            let task = &g.tasks[t];
            let _ = writeln!(
                s,
                "    n{t} [label=\"{}\\n{}\"];",
                quote(&task.name),
                flops_text(task.flops)
            );
        }
        s.push_str("  }\n");
    }
    for e in &g.edges {
        let cut = best.assignment[e.from] != best.assignment[e.to];
        let mut attrs = Vec::new();
        if e.critical {
            attrs.push("penwidth=2.5".to_string());
        }
        if cut {
            attrs.push("color=red".to_string());
        }
        attrs.push(format!("tooltip=\"{} bytes\"", e.bytes));
        let _ = writeln!(s, "  n{} -> n{} [{}];", e.from, e.to, attrs.join(", "));
    }
    s.push_str("}\n");
    s
}
