#!/usr/bin/env python3
"""Peak memory and cold start: ramify against onnxruntime, model by model.

Each round runs, for every model, one fresh process of each runtime, in
alternating order (ramify first on even rounds), so both see the same
machine state:
  - ramify: `ramify run MODEL --cpus T`; its peak resident size is the
    process's maximum RSS (from wait4), and its cold start is the load time
    it prints (`SessionBuilder::build_from_file`) plus its first run.
  - onnxruntime: a Python process that imports onnxruntime and numpy, notes
    its own peak RSS (the baseline), creates an InferenceSession with T
    intra-op threads and runs it once; its peak is net of that baseline, and
    its cold start is session creation plus the first run.
The report gives per model the medians over rounds, the ratio of medians,
and the model file's size (the memory target is relative to it).

Usage:
  scripts/footprint.py                      # the example and light models
  scripts/footprint.py --models a.onnx b.onnx --rounds 5 --threads 1
  scripts/footprint.py --json out.json
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIGHT = os.path.join(REPO, "tests", "data", "generated", "light_random")

ORT_CHILD = r"""
import json, sys, time
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) * 1024
import numpy as np, onnxruntime as ort
base = hwm()
path, threads = sys.argv[1], int(sys.argv[2])
o = ort.SessionOptions()
o.intra_op_num_threads = threads
o.inter_op_num_threads = 1
t0 = time.perf_counter()
s = ort.InferenceSession(path, o, providers=['CPUExecutionProvider'])
t1 = time.perf_counter()
types = {'tensor(float)': np.float32, 'tensor(int64)': np.int64, 'tensor(int32)': np.int32,
         'tensor(uint8)': np.uint8, 'tensor(int8)': np.int8, 'tensor(bool)': np.bool_,
         'tensor(double)': np.float64, 'tensor(float16)': np.float16}
rng = np.random.default_rng(0)
feeds = {}
for i in s.get_inputs():
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
    feeds[i.name] = rng.random(shape).astype(types.get(i.type, np.float32))
t2 = time.perf_counter()
s.run(None, feeds)
t3 = time.perf_counter()
print(json.dumps({'base': base, 'peak': hwm(), 'create_ms': (t1 - t0) * 1e3,
                  'run_ms': (t3 - t2) * 1e3}))
"""


def default_models():
    models = [os.path.join(REPO, "models", "inception_mini.onnx")]
    for name in ("squeezenet", "inception_v1", "resnet50", "densenet121", "vgg19"):
        p = os.path.join(LIGHT, name, "model.onnx")
        if os.path.exists(p):
            models.append(p)
    return models


def peak_of(cmd):
    """Runs cmd; returns (stdout, max RSS in bytes) from wait4."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd[:3]} exited with {os.waitstatus_to_exitcode(status)}")
    return b"".join(chunks).decode(), usage.ru_maxrss * 1024


def ramify_once(binary, model, threads):
    out, peak = peak_of([binary, "run", model, "--cpus", str(threads)])
    load = float(re.search(r"loaded in ([0-9.]+) ms", out).group(1))
    run = float(re.search(r"run time ([0-9.]+) ms", out).group(1))
    return {"peak": peak, "cold_ms": load + run, "load_ms": load, "run_ms": run}


def ort_once(python, model, threads):
    out, _ = peak_of([python, "-c", ORT_CHILD, model, str(threads)])
    d = json.loads(out.strip().splitlines()[-1])
    return {"peak": d["peak"] - d["base"], "cold_ms": d["create_ms"] + d["run_ms"],
            "load_ms": d["create_ms"], "run_ms": d["run_ms"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", help="model files (default: example + light models)")
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "ramify"))
    ap.add_argument("--python", default=os.path.join(REPO, ".venv", "bin", "python"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the per-model medians here")
    a = ap.parse_args()

    models = a.models or default_models()
    rows = []
    for model in models:
        ram, ort = [], []
        for r in range(a.rounds):
            order = [("ramify", ram), ("ort", ort)]
            if r % 2:
                order.reverse()
            for who, acc in order:
                if who == "ramify":
                    acc.append(ramify_once(a.bin, model, a.threads))
                else:
                    acc.append(ort_once(a.python, model, a.threads))
        med = lambda xs, k: statistics.median(x[k] for x in xs)
        size = os.path.getsize(model)
        row = {
            "model": os.path.relpath(model, REPO),
            "file_mb": size / 1e6,
            "ramify_peak_mb": med(ram, "peak") / 1e6,
            "ort_peak_mb": med(ort, "peak") / 1e6,
            "ramify_cold_ms": med(ram, "cold_ms"),
            "ort_cold_ms": med(ort, "cold_ms"),
            "ramify_load_ms": med(ram, "load_ms"),
            "ort_create_ms": med(ort, "load_ms"),
        }
        rows.append(row)
        print(f"{row['model']}: done", file=sys.stderr)

    print(f"threads {a.threads}, {a.rounds} alternating rounds, medians")
    print("| model | file MB | ramify peak MB | ramify / file | onnxruntime net peak MB "
          "| ramify cold ms (load + first run) | onnxruntime cold ms (create + first run) "
          "| cold ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['file_mb']:.1f} | {r['ramify_peak_mb']:.1f} | "
              f"{r['ramify_peak_mb'] / r['file_mb']:.2f} | {r['ort_peak_mb']:.1f} | "
              f"{r['ramify_cold_ms']:.1f} ({r['ramify_load_ms']:.1f} + "
              f"{r['ramify_cold_ms'] - r['ramify_load_ms']:.1f}) | "
              f"{r['ort_cold_ms']:.1f} ({r['ort_create_ms']:.1f} + "
              f"{r['ort_cold_ms'] - r['ort_create_ms']:.1f}) | "
              f"{r['ramify_cold_ms'] / r['ort_cold_ms']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
