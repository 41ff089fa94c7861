"""Time per operator type (or per node), ramify against onnxruntime, on one model and one thread count.

ramify: K calls of `BIN bench MODEL --runs R --threads N --trace FILE`; each trace
holds one warm run's spans (category = the operator type after ramify's fusions,
e.g. a Conv with its activation folded in). Spans are summed per category, and the
median over the K traces is reported (fork spans are left out: they enclose nodes).
onnxruntime: one session (default graph optimisations, intra_op_num_threads=N,
sequential) with enable_profiling; W warm-up runs then R runs; node kernel times are
summed per op type (after onnxruntime's fusions, e.g. FusedConv) within each
model_run, and the median over the R runs is reported.

Both columns are per-operator times of one run in ms; the rows are sorted by the
difference ramify - onnxruntime. Operator types rarely match one to one, because
each runtime fuses differently: read the rows together with the totals.

With --by node the rows are nodes instead (ramify's span name, onnxruntime's node
name without its `_kernel_time` suffix): a node that one runtime fused into another
appears in one column only; its --top largest differences are shown.

Usage: .venv/bin/python scripts/op_profile.py MODEL [--threads 1] [--traces 5]
           [--runs 20] [--bin target/release/ramify] [--by type|node] [--top 25]
"""

import argparse
import collections
import json
import pathlib
import subprocess
import tempfile

import numpy as np
import onnxruntime as ort

from compare import load_feeds

REPO = pathlib.Path(__file__).resolve().parent.parent


def ramify_profile(binary: pathlib.Path, model: pathlib.Path, threads: int, traces: int,
                   runs: int, by_node: bool = False) -> dict[str, float]:
    per_trace: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "trace.json"
        for _ in range(traces):
            subprocess.run([str(binary), "bench", str(model), "--runs", str(runs), "--threads",
                            str(threads), "--trace", str(path), "--json"],
                           check=True, capture_output=True)
            sums: dict[str, float] = collections.defaultdict(float)
            for e in json.loads(path.read_text())["traceEvents"]:
                if e.get("ph") == "X" and e.get("cat") != "fork":
                    sums[e["name"] if by_node else e["cat"]] += e["dur"] / 1e3
            per_trace.append(sums)
    return median_per_key(per_trace)


def ort_profile(model: pathlib.Path, threads: int, runs: int, warmup: int,
                by_node: bool = False) -> dict[str, float]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = str(pathlib.Path(tmp) / "ort")
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        feeds, _ = load_feeds(model, session)
        for _ in range(warmup + runs):
            session.run(None, feeds)
        events = json.loads(pathlib.Path(session.end_profiling()).read_text())
    run_spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                       if e.get("cat") == "Session" and e.get("name") == "model_run")
    per_run: list[dict[str, float]] = [collections.defaultdict(float) for _ in run_spans]
    starts = [s for s, _ in run_spans]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        i = int(np.searchsorted(starts, e["ts"], side="right")) - 1
        if i >= 0 and e["ts"] <= run_spans[i][1]:
            key = e["name"].removesuffix("_kernel_time") if by_node else e["args"]["op_name"]
            per_run[i][key] += e["dur"] / 1e3
    return median_per_key(per_run[warmup:])


def median_per_key(samples: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for s in samples for k in s}
    return {k: float(np.median([s.get(k, 0.0) for s in samples])) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=pathlib.Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--traces", type=int, default=5, help="ramify traces (default: 5)")
    ap.add_argument("--runs", type=int, default=20, help="runs per bench call and ORT runs")
    ap.add_argument("--warmup", type=int, default=3, help="onnxruntime warm-up runs")
    ap.add_argument("--bin", type=pathlib.Path, default=REPO / "target/release/ramify")
    ap.add_argument("--by", choices=["type", "node"], default="type",
                    help="one row per operator type (default) or per node")
    ap.add_argument("--top", type=int, default=25,
                    help="with --by node: rows shown, largest differences first")
    a = ap.parse_args()
    ort.set_default_logger_severity(3)
    by_node = a.by == "node"
    r = ramify_profile(a.bin, a.model, a.threads, a.traces, a.runs, by_node)
    o = ort_profile(a.model, a.threads, a.runs, a.warmup, by_node)
    rows = sorted(set(r) | set(o), key=lambda k: o.get(k, 0.0) - r.get(k, 0.0))
    if by_node:
        rows = rows[:a.top]
    print(f"{a.model}, {a.threads} thread(s): summed op time per run, ms (median)")
    print(f"{'node' if by_node else 'op type':<28}{'ramify':>10}{'ORT':>10}{'diff':>10}")
    for k in rows:
        print(f"{k:<28}{r.get(k, 0.0):>10.3f}{o.get(k, 0.0):>10.3f}"
              f"{r.get(k, 0.0) - o.get(k, 0.0):>10.3f}")
    print(f"{'total':<28}{sum(r.values()):>10.3f}{sum(o.values()):>10.3f}"
          f"{sum(r.values()) - sum(o.values()):>10.3f}")


if __name__ == "__main__":
    main()
