"""Load sweep: ramify's scheduling modes against onnxruntime at fixed thread counts,
under 0, 1, 2... busy background processes, side by side in one run.

For every model and background load, each round measures, in an order that rotates
every round: ramify `--mode adaptive`, `--mode serial` and `--mode parallel` (all with
`--cpus M`, M = all CPUs unless --cpus is given), and onnxruntime with 1 intra-op
thread and with M (onnxruntime's default: one per core). The busy processes run only
while a series is measured and are killed after it. The samples of all rounds are
pooled; the table gives median and p95 per configuration, and two verdicts:

  adaptive/best  ramify adaptive's median over the best median of all the others;
                 "ok" when at most 1.05 (adaptive within 5 % of the best fixed choice);
  vs ORT default adaptive's median over onnxruntime's at M threads; under background
                 load it must be below 1.
  vs ORT best    adaptive's median over the best median of onnxruntime's fixed settings
                 (1 and M threads): at most 0.9 with 0 or 1 busy process and at most 0.7
                 with 2 or more; and adaptive's p95 below the best p95 of onnxruntime's
                 settings (issue 37's must-show).

With --sweeps N the whole sweep runs N times; the last lines count how many sweeps met
every verdict, per model and load.

The measuring functions are those of scripts/compare.py (same input data, same
onnxruntime settings, same ramify bench call).

Example (the issue's table, about 10 minutes on a 2-core machine):
  .venv/bin/python scripts/load_sweep.py --rounds 5 --runs-per-round 10 \\
      --models tests/data/generated/light_random/inception_v1/model.onnx models/inception_mini.onnx
"""

import argparse
import datetime
import json
import os
import pathlib
import sys

import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare  # noqa: E402  (the measuring functions)

REPO = compare.REPO
MODES = ("adaptive", "serial", "parallel")
TOLERANCE = 1.05


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", type=pathlib.Path,
                        default=[REPO / "tests/data/generated/light_random/inception_v1/model.onnx",
                                 REPO / "models/inception_mini.onnx"],
                        help="ONNX models (default: light inception_v1 and the example model)")
    parser.add_argument("--background-load", type=compare.int_list, default=[0, 1, 2],
                        help="comma-separated numbers of busy processes (default: 0,1,2)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1,
                        help="ramify's CPU limit and onnxruntime's larger thread count "
                             "(default: all CPUs, %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default: 5)")
    parser.add_argument("--runs-per-round", type=int, default=10,
                        help="timed runs per configuration per round (default: 10)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed runs before each configuration's timed runs (default: 3)")
    parser.add_argument("--ramify", type=pathlib.Path, default=REPO / "target/release/ramify",
                        help="ramify binary (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds allowed for one ramify call and life bound of each busy "
                             "process (default: 600)")
    parser.add_argument("--sweeps", type=int, default=1,
                        help="repeat the whole sweep this many times (default: 1)")
    parser.add_argument("--json", type=pathlib.Path, metavar="FILE",
                        help="also write every sample and the summary as JSON")
    args = parser.parse_args()
    if min(args.rounds, args.runs_per_round, args.cpus, args.sweeps) < 1:
        parser.error("--rounds, --runs-per-round, --cpus and --sweeps must be at least 1")
    missing = [str(m) for m in args.models if not m.is_file()]
    if missing:
        parser.error("model(s) not found: " + ", ".join(missing))
    if not (args.ramify.is_file() and os.access(args.ramify, os.X_OK)):
        parser.error(f"ramify binary not found: {args.ramify} (cargo build --release)")
    return args


def configurations(cpus: int) -> list[str]:
    one_ort = ["ort 1t"] if cpus == 1 else ["ort 1t", f"ort {cpus}t"]
    return [f"ramify {m}" for m in MODES] + one_ort


def measure(args, label: str, model: pathlib.Path, sessions: dict, feeds: dict) -> list[float]:
    if label.startswith("ramify "):
        mode = label.split()[1]
        return compare.measure_ramify(args.ramify, model, args.runs_per_round, args.warmup,
                                      args.cpus, ["--mode", mode], args.timeout)
    threads = int(label.split()[1].rstrip("t"))
    return compare.measure_ort(sessions[threads], feeds, args.runs_per_round, args.warmup)


def sweep(args, model: pathlib.Path, load: int, sessions: dict, feeds: dict) -> dict:
    labels = configurations(args.cpus)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(args.rounds):
        shift = r % len(labels)
        for label in labels[shift:] + labels[:shift]:
            with compare.BackgroundLoad(load, args.timeout):
                samples[label] += measure(args, label, model, sessions, feeds)
    return samples


def ort_bound(load: int) -> float:
    """The most adaptive's median may be of onnxruntime's best (issue 37)."""
    return 0.9 if load <= 1 else 0.7


def verdicts(stats: dict, cpus: int, load: int) -> dict:
    adaptive = stats["ramify adaptive"]["median_ms"]
    others = {k: v["median_ms"] for k, v in stats.items() if k != "ramify adaptive"}
    best_label = min(others, key=others.get)
    ort_default = stats.get(f"ort {cpus}t", stats["ort 1t"])["median_ms"]
    ort = {k: v for k, v in stats.items() if k.startswith("ort ")}
    ort_best = min(ort, key=lambda k: ort[k]["median_ms"])
    ort_best_p95 = min(v["p95_ms"] for v in ort.values())
    over_ort = adaptive / ort[ort_best]["median_ms"]
    return {"best_other": best_label, "adaptive_over_best": adaptive / others[best_label],
            "within_5pct": adaptive <= TOLERANCE * others[best_label],
            "adaptive_over_ort_default": adaptive / ort_default,
            "below_ort_default": adaptive < ort_default if load > 0 else None,
            "ort_best": ort_best, "adaptive_over_ort_best": over_ort,
            "ort_bound": ort_bound(load),
            "p95_below_ort_best": stats["ramify adaptive"]["p95_ms"] < ort_best_p95,
            "meets_ort_bounds": (over_ort <= ort_bound(load)
                                 and stats["ramify adaptive"]["p95_ms"] < ort_best_p95)}


def print_table(title: str, stats: dict, v: dict) -> None:
    print(f"\n== {title} ==")
    print(f"{'configuration':<18}{'median ms':>11}{'p95 ms':>10}{'med / adaptive':>16}")
    adaptive = stats["ramify adaptive"]["median_ms"]
    for label, s in stats.items():
        print(f"{label:<18}{s['median_ms']:>11.2f}{s['p95_ms']:>10.2f}"
              f"{s['median_ms'] / adaptive:>16.3f}")
    within = "ok" if v["within_5pct"] else "NOT within 5 %"
    print(f"adaptive / best other ({v['best_other']}): {v['adaptive_over_best']:.3f} ({within})")
    below = v["below_ort_default"]
    tail = "" if below is None else (" (below)" if below else " (NOT below)")
    print(f"adaptive / ORT default: {v['adaptive_over_ort_default']:.3f}{tail}")
    met = "met" if v["meets_ort_bounds"] else "NOT met"
    p95 = "below" if v["p95_below_ort_best"] else "NOT below"
    print(f"adaptive / ORT best ({v['ort_best']}): {v['adaptive_over_ort_best']:.3f} "
          f"(bound {v['ort_bound']}), p95 {p95} ORT's best p95: {met}")


def main() -> None:
    args = parse_args()
    ort.set_default_logger_severity(3)
    print(f"load_sweep.py {datetime.datetime.now().isoformat(timespec='seconds')}: onnxruntime "
          f"{ort.__version__}, {os.cpu_count()} CPUs, ramify --cpus {args.cpus}, {args.rounds} "
          f"rounds x {args.runs_per_round} runs (+{args.warmup} warm-up) per configuration")
    results, failures = [], []
    met: dict[str, int] = {}
    prepared = []
    for model in args.models:
        threads = sorted({1, args.cpus})
        sessions = {t: compare.ort_session(model, t) for t in threads}
        feeds, source = compare.load_feeds(model, sessions[1])
        prepared.append((model, sessions, feeds, source))
    for n in range(args.sweeps):
        for model, sessions, feeds, source in prepared:
            for load in args.background_load:
                key = f"{compare.model_label(model)}, background load {load}"
                title = f"{key} (input: {source}; sweep {n + 1} of {args.sweeps})"
                print(f"measuring {title} ...", file=sys.stderr, flush=True)
                samples = sweep(args, model, load, sessions, feeds)
                stats = {k: compare.summary(v) for k, v in samples.items()}
                v = verdicts(stats, args.cpus, load)
                print_table(title, stats, v)
                sys.stdout.flush()
                if (not v["within_5pct"] or v["below_ort_default"] is False
                        or not v["meets_ort_bounds"]):
                    failures.append(title)
                met[key] = met.get(key, 0) + int(v["meets_ort_bounds"])
                results.append({"model": str(model), "background_load": load, "input": source,
                                "sweep": n + 1, "stats": stats, "verdicts": v,
                                "samples_ms": samples})
    print("\nsweeps meeting the bounds against onnxruntime's best (issue 37):")
    for key, count in met.items():
        print(f"  {key}: {count} of {args.sweeps}")
    print("\nall verdicts met" if not failures else
          "\nverdicts not met: " + "; ".join(failures))
    if args.json:
        document = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "onnxruntime": ort.__version__, "cpus": os.cpu_count(),
                    "settings": {k: str(v) if isinstance(v, pathlib.Path) else v
                                 for k, v in vars(args).items() if k != "models"},
                    "models": [str(m) for m in args.models], "results": results}
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
