#!/usr/bin/env python3
"""Chains the part models that `ramify partition --emit` wrote in onnxruntime
and compares the result with onnxruntime's run of the whole model.

Every part must pass onnx's checker and read only the model's inputs and
earlier parts' outputs; every output of the whole model must match within
1e-5 of its largest magnitude. Inputs are seeded random values of the
declared types (free dimensions 1).

Usage: check_partition.py MODEL PART_0.onnx PART_1.onnx ...   (exit 1 on a mismatch)
"""

import sys

import numpy as np
import onnx
import onnxruntime as ort

TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
         "tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(bool)": np.bool_}


def feed(info, rng):
    shape = [d if isinstance(d, int) else 1 for d in info.shape]
    dtype = TYPES[info.type]
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 2, size=shape).astype(dtype)


def main():
    model, parts = sys.argv[1], sys.argv[2:]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    whole = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    bag = {i.name: feed(i, rng) for i in whole.get_inputs()}
    want = whole.run(None, dict(bag))
    for path in parts:
        onnx.checker.check_model(onnx.load(path))
        s = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        missing = [i.name for i in s.get_inputs() if i.name not in bag]
        if missing:
            print(f"{path} reads {missing}, which no earlier part computes")
            return 1
        out = s.run(None, {i.name: bag[i.name] for i in s.get_inputs()})
        bag.update({o.name: v for o, v in zip(s.get_outputs(), out)})
    worst = 0.0
    for o, w in zip(whole.get_outputs(), want):
        got = bag[o.name]
        rel = float(np.max(np.abs(got.astype(np.float64) - w)) / max(np.max(np.abs(w)), 1e-30))
        print(f"{o.name}: max difference {rel:.3e} of the largest magnitude")
        worst = max(worst, rel)
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
