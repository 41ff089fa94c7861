"""Compares ramify's inference latency with onnxruntime's, side by side in one run.

For every model, thread count and background-load level, the two runtimes are
measured round by round, interleaved (the order flips every round), on the same
model and input. ramify runs as `BIN bench MODEL --runs K --warmup W --threads N
--json [ARGS]`, which prints one JSON object with `samples_ms`; onnxruntime runs in
this process (intra_op_num_threads=N, inter_op_num_threads=1, sequential execution,
default graph optimisations) with W warm-up and K timed runs per round. All samples
of a series are pooled across rounds; the table gives medians, 95th percentiles and
the ratios ramify/ORT (below 1: ramify is faster), and the ratio of the two medians
of each round taken back to back: the median of these per-round ratios, their
quartiles and extremes (the spread shows how much the machine moved meanwhile).
The JSON file keeps every sample, per round.

Inputs: test_data_set_0/input_*.pb beside the model (or in the directory named after
the model, as for models/inception_mini.onnx) when present, else seeded random
values of the declared shapes (symbolic dimensions = 1). Background load: that many
busy processes run during each measurement of either runtime, each bounded in time
and killed right after it.

Examples:
  .venv/bin/python scripts/compare.py --threads 1,2 --rounds 5 --runs-per-round 10
  .venv/bin/python scripts/compare.py --models models/inception_mini.onnx \\
      --ramify-variants "adaptive:--mode adaptive" "serial:--mode serial" --background-load 0,1
  .venv/bin/python scripts/compare.py --no-ramify --background-load 0,1 --json ort.json
"""

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

REPO = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_MODELS = ["inception_v1", "resnet50", "squeezenet", "densenet121", "shufflenet", "vgg19"]
INPUT_SEED = 0
BUSY_LOOP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "end = time.monotonic() + float(sys.argv[1])\n"
    "print('ready', flush=True)\n"
    "while time.monotonic() < end:\n"
    "    pass\n"
)
ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


@dataclasses.dataclass
class Variant:
    """One ramify configuration: a row label and the extra CLI arguments."""
    label: str
    args: list[str]


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def variant(text: str) -> Variant:
    label, sep, args = text.partition(":")
    if not sep or not label:
        raise argparse.ArgumentTypeError(f"expected LABEL:ARGS, got {text!r}")
    return Variant(label, shlex.split(args))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Arguments that begin with '-' and contain no space need the = form: "
               "--ramify-args=--serial.",
    )
    parser.add_argument("--models", nargs="+", type=pathlib.Path,
                        default=[REPO / "tests/data/generated/light_random" / n / "model.onnx"
                                 for n in DEFAULT_MODELS],
                        help="ONNX models (default: light_random/{%s} made by "
                             "scripts/gen_test_data.py)" % ",".join(DEFAULT_MODELS))
    parser.add_argument("--threads", type=int_list, default=[1, 2],
                        help="comma-separated thread counts (default: 1,2)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per series (default: 5)")
    parser.add_argument("--runs-per-round", type=int, default=10,
                        help="timed runs per runtime per round (default: 10)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed runs before each round's timed runs (default: 2)")
    parser.add_argument("--ramify", type=pathlib.Path, default=REPO / "target/release/ramify",
                        help="ramify binary (default: %(default)s)")
    parser.add_argument("--ramify-args", type=shlex.split, default=[],
                        help="extra arguments for every ramify call, e.g. '--mode serial'")
    parser.add_argument("--ramify-variants", nargs="+", type=variant, metavar="LABEL:ARGS",
                        help="ramify configurations measured as separate rows, e.g. "
                             "'adaptive:--mode adaptive' 'serial:--mode serial' "
                             "(default: one row 'ramify' with no extra arguments)")
    parser.add_argument("--no-ramify", action="store_true",
                        help="measure onnxruntime only (e.g. before ramify is built)")
    parser.add_argument("--background-load", type=int_list, default=[0],
                        help="comma-separated numbers of busy processes to run during each "
                             "measurement (default: 0)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds allowed for one ramify call, and the life bound of each "
                             "busy process (default: 600)")
    parser.add_argument("--json", type=pathlib.Path, metavar="FILE",
                        help="also write the settings, every sample and the summary as JSON")
    args = parser.parse_args()
    for name in ("rounds", "runs_per_round"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.threads) < 1:
        parser.error("--threads must be at least 1")
    missing = [str(m) for m in args.models if not m.is_file()]
    if missing:
        parser.error("model(s) not found: " + ", ".join(missing) +
                     " (the default models come from scripts/gen_test_data.py)")
    if args.no_ramify:
        args.ramify_variants = []
    else:
        if not (args.ramify.is_file() and os.access(args.ramify, os.X_OK)):
            parser.error(f"ramify binary not found or not executable: {args.ramify} "
                         "(build it with `cargo build --release`, pass --ramify BIN, "
                         "or use --no-ramify)")
        args.ramify_variants = args.ramify_variants or [Variant("ramify", [])]
    return args


# Seconds to wait before starting a ramify process (see measure_ramify).
PEER_SETTLE_S = 0.15


class BackgroundLoad:
    """Context manager running `count` busy processes, each ending by itself after max_s."""

    def __init__(self, count: int, max_s: float):
        self.count, self.max_s = count, max_s
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "BackgroundLoad":
        try:
            for _ in range(self.count):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-c", BUSY_LOOP, str(self.max_s)],
                    stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True))
            for proc in self.procs:  # wait until every one of them is spinning
                proc.stdout.readline()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()
            proc.stdout.close()
        self.procs = []


def model_label(path: pathlib.Path) -> str:
    return path.parent.name if path.name == "model.onnx" else path.stem


def load_feeds(model: pathlib.Path, session: ort.InferenceSession) -> tuple[dict, str]:
    """The model's inputs from test_data_set_0/input_*.pb, else seeded random values.

    The data set is looked for beside the model (DIR/model.onnx, DIR/test_data_set_0)
    and in the directory named after it (DIR/NAME.onnx, DIR/NAME/test_data_set_0)."""
    inputs = session.get_inputs()
    files = []
    for data in (model.parent / "test_data_set_0", model.with_suffix("") / "test_data_set_0"):
        files = files or sorted(data.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    if files:
        tensors = [onnx.load_tensor(str(f)) for f in files]
        if len(tensors) != len(inputs):
            raise SystemExit(f"{model}: {len(tensors)} input files for {len(inputs)} inputs")
        names = [i.name for i in inputs]
        if all(t.name in names for t in tensors):  # named tensors match by name, else by order
            return {t.name: numpy_helper.to_array(t) for t in tensors}, "test_data_set_0"
        return {i.name: numpy_helper.to_array(t) for i, t in zip(inputs, tensors)}, "test_data_set_0"
    rng = np.random.default_rng(INPUT_SEED)
    feeds = {}
    for i in inputs:
        if i.type not in ORT_TYPES:
            raise SystemExit(f"{model}: cannot make random data for input {i.name} of {i.type}")
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        dtype = ORT_TYPES[i.type]
        if np.issubdtype(dtype, np.floating):
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[i.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds, f"random (seed {INPUT_SEED})"


def ort_session(model: pathlib.Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def measure_ort(session: ort.InferenceSession, feeds: dict, runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        session.run(None, feeds)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def measure_ramify(binary: pathlib.Path, model: pathlib.Path, runs: int, warmup: int,
                   threads: int, extra: list[str], timeout: float) -> list[float]:
    cmd = [str(binary), "bench", str(model), "--runs", str(runs), "--warmup", str(warmup),
           "--threads", str(threads), "--json", *extra]
    # onnxruntime's intra-op threads in this process spin for about 40 ms after
    # its last run: a ramify started meanwhile rightly sees a busy competitor,
    # and its first load reading stands for its whole short life. Let them idle.
    time.sleep(PEER_SETTLE_S)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"ramify took more than {timeout:g} s: {shlex.join(cmd)}")
    if proc.returncode != 0:
        raise SystemExit(f"ramify exited with {proc.returncode}: {shlex.join(cmd)}\n"
                         f"{proc.stderr.strip()[-2000:]}")
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise SystemExit(f"ramify printed no single JSON object ({e}): {shlex.join(cmd)}\n"
                         f"stdout began: {proc.stdout[:500]!r}")
    missing = [k for k in ("median_ms", "p95_ms", "runs", "samples_ms")
               if not isinstance(report, dict) or k not in report]
    if missing:
        raise SystemExit(f"ramify's JSON lacks {', '.join(missing)}: {shlex.join(cmd)}")
    samples = report["samples_ms"]
    if (not isinstance(samples, list) or len(samples) != runs
            or not all(isinstance(s, (int, float)) for s in samples)):
        raise SystemExit(f"ramify's samples_ms is not a list of {runs} numbers: {shlex.join(cmd)}")
    return [float(s) for s in samples]


def summary(samples: list[float]) -> dict:
    return {"median_ms": float(np.median(samples)), "p95_ms": float(np.percentile(samples, 95)),
            "n": len(samples)}


def measure_series(args, model: pathlib.Path, session, feeds, threads: int, load: int) -> dict:
    """Runs all rounds for one (model, threads, load); returns, per series label, the
    samples of each round (a list of rounds, each a list of samples)."""
    labels = [v.label for v in args.ramify_variants] + ["ort"]
    rounds: dict[str, list[list[float]]] = {label: [] for label in labels}
    for round_index in range(args.rounds):
        order = [*args.ramify_variants, None]
        if round_index % 2:
            order.reverse()
        for v in order:
            with BackgroundLoad(load, args.timeout):
                if v is None:
                    rounds["ort"].append(
                        measure_ort(session, feeds, args.runs_per_round, args.warmup))
                else:
                    rounds[v.label].append(measure_ramify(
                        args.ramify, model, args.runs_per_round, args.warmup, threads,
                        [*args.ramify_args, *v.args], args.timeout))
    return rounds


def round_ratios(ours: list[list[float]], theirs: list[list[float]]) -> dict:
    """The per-round ratios of median latencies (round r of one series against round r
    of the other, measured back to back): their median, quartiles and extremes."""
    ratios = [float(np.median(a) / np.median(b)) for a, b in zip(ours, theirs)]
    return {"ratios": ratios, "median": float(np.median(ratios)),
            "p25": float(np.percentile(ratios, 25)), "p75": float(np.percentile(ratios, 75)),
            "min": min(ratios), "max": max(ratios)}


def print_table(title: str, rounds: dict[str, list[list[float]]],
                variants: list[Variant]) -> list[dict]:
    pooled = {label: [x for r in rs for x in r] for label, rs in rounds.items()}
    ort_stats = summary(pooled["ort"])
    print(f"\n== {title} ==")
    print(f"{'variant':<14}{'ramify med':>11}{'p95':>9}{'ORT med':>10}{'p95':>9}"
          f"{'ratio med':>11}{'ratio p95':>11}{'round ratios: median [p25-p75] (min-max)':>44}")
    ort_cells = f"{ort_stats['median_ms']:>10.2f}{ort_stats['p95_ms']:>9.2f}"
    rows = []
    for v in variants:
        stats = summary(pooled[v.label])
        ratio_median = stats["median_ms"] / ort_stats["median_ms"]
        ratio_p95 = stats["p95_ms"] / ort_stats["p95_ms"]
        per_round = round_ratios(rounds[v.label], rounds["ort"])
        spread = (f"{per_round['median']:.3f} [{per_round['p25']:.3f}-{per_round['p75']:.3f}]"
                  f" ({per_round['min']:.3f}-{per_round['max']:.3f})")
        print(f"{v.label:<14}{stats['median_ms']:>11.2f}{stats['p95_ms']:>9.2f}{ort_cells}"
              f"{ratio_median:>11.3f}{ratio_p95:>11.3f}{spread:>44}")
        rows.append({"variant": v.label, "ramify_args": v.args, "ramify": stats,
                     "ratio_median": ratio_median, "ratio_p95": ratio_p95,
                     "round_ratios": per_round})
    if not variants:
        print(f"{'(ORT only)':<14}{'-':>11}{'-':>9}{ort_cells}{'-':>11}{'-':>11}")
    print(f"(all times in ms; {ort_stats['n']} samples per runtime; ratio med and p95 are of "
          f"the pooled samples, round ratios compare the medians of each pair of rounds)")
    return rows


def main() -> None:
    # Let SIGTERM unwind like Ctrl-C, so that background processes are killed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    args = parse_args()
    ort.set_default_logger_severity(3)
    print(f"compare.py {datetime.datetime.now().isoformat(timespec='seconds')}: "
          f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, {args.rounds} rounds x "
          f"{args.runs_per_round} runs (+{args.warmup} warm-up) per runtime")
    if args.ramify_variants:
        print(f"ramify: {shlex.join([str(args.ramify), 'bench', *args.ramify_args])}; variants: "
              + ", ".join(f"{v.label} [{shlex.join(v.args)}]" for v in args.ramify_variants))
    results = []
    for model in args.models:
        for threads in args.threads:
            session = ort_session(model, threads)
            feeds, source = load_feeds(model, session)
            for load in args.background_load:
                title = (f"{model_label(model)}, {threads} thread(s), background load {load} "
                         f"(input: {source})")
                print(f"measuring {title} ...", file=sys.stderr, flush=True)
                rounds = measure_series(args, model, session, feeds, threads, load)
                rows = print_table(title, rounds, args.ramify_variants)
                sys.stdout.flush()
                results.append({"model": str(model), "threads": threads, "background_load": load,
                                "input": source,
                                "ort": summary([x for r in rounds["ort"] for x in r]),
                                "rows": rows, "samples_ms": rounds})
            del session
    if args.json:
        settings = {k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in vars(args).items()
                    if k not in ("models", "ramify_variants")}
        settings["ramify_variants"] = [dataclasses.asdict(v) for v in args.ramify_variants]
        settings["models"] = [str(m) for m in args.models]
        document = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "onnxruntime": ort.__version__, "cpus": os.cpu_count(),
                    "settings": settings, "results": results}
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
