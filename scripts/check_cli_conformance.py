"""Checks ONNX node test cases through the command line, one process per case.

For each case folder under tests/data/generated/node (or those named in a list
file) and each of its test_data_set_N folders, runs
`ramify run model.onnx --input-dir test_data_set_N --output-dir OUT` and compares
OUT/output_*.pb with the expected outputs: same element type and shape, values
within rtol 1e-3 / atol 1e-7 (exact for integers, booleans and strings).
Cases with random outputs, named in tests/conformance/random.txt with a
property, get the same type and shape checks and then the property instead of
the values (as tests/conformance/random.rs does): `binary` (every value 0 or
1) or `dropout` (0 or x/(1 - ratio), mask true exactly where kept, kept count
within 6 sigma of n(1 - ratio)).

Usage: .venv/bin/python scripts/check_cli_conformance.py [--bin target/release/ramify]
           [--list tests/conformance/passing.txt]
"""

import argparse
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

REPO = pathlib.Path(__file__).resolve().parent.parent


# FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT4E2M1.
MINIFLOATS = {17, 18, 19, 20, 23}


def load(path):
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return t, numpy_helper.to_array(t)


def same(got_path, want_path):
    gp, g = load(got_path)
    wp, w = load(want_path)
    if gp.data_type != wp.data_type:
        return f"type {gp.data_type} != {wp.data_type}"
    if g.shape != w.shape:
        return f"shape {g.shape} != {w.shape}"
    if wp.data_type in MINIFLOATS:
        # float8 / float4: compare encodings (numpy's == is False for NaN).
        if not np.array_equal(g.view(np.uint8), w.view(np.uint8)):
            return "values differ"
    elif w.dtype.kind in "fc" or w.dtype.name == "bfloat16":
        if not np.allclose(g.astype(np.float32).astype(np.float64),
                           w.astype(np.float32).astype(np.float64), rtol=1e-3, atol=1e-7,
                           equal_nan=True):
            return "values differ"
    elif not np.array_equal(g, w):
        return "values differ"
    return None


def random_cases():
    """The cases of tests/conformance/random.txt with their property."""
    lines = (REPO / "tests/conformance/random.txt").read_text().splitlines()
    pairs = (l.split(":", 1) for l in lines if l.strip() and not l.startswith("#"))
    return {case.strip(): prop.strip() for case, prop in pairs}


def check_property(prop, ds, out):
    """Checks a random case's outputs in `out` by property; None if they pass."""
    wants = sorted(ds.glob("output_*.pb"))
    got = []
    for want in wants:
        gp, g = load(out / want.name)
        wp, w = load(want)
        if gp.data_type != wp.data_type or g.shape != w.shape:
            return f"{want.name}: type/shape {gp.data_type} {g.shape} != {wp.data_type} {w.shape}"
        got.append(g.astype(np.float64))
    if prop == "binary":
        return None if all(np.isin(g, (0.0, 1.0)).all() for g in got) else "not 0 or 1"
    if prop != "dropout":
        return f"unknown property {prop}"
    inputs = [load(p)[1] for p in sorted(ds.glob("input_*.pb"))]
    x = inputs[0].astype(np.float64).ravel()
    ratio = float(inputs[1]) if len(inputs) > 1 else 0.5
    y = got[0].ravel()
    scaled = x / (1.0 - ratio)
    kept = np.abs(y - scaled) <= 1e-7 + 1e-3 * np.abs(scaled)
    mask = got[1].ravel() == 1.0 if len(got) > 1 else kept
    if not np.all(np.where(mask, kept, y == 0.0)):
        return "values are not 0 or x/(1 - ratio) where the mask says"
    n = y.size
    if abs(mask.sum() - n * (1 - ratio)) > 6 * (n * ratio * (1 - ratio)) ** 0.5:
        return f"{mask.sum()} of {n} kept at ratio {ratio}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", type=pathlib.Path, default=REPO / "target/debug/ramify")
    ap.add_argument("--list", type=pathlib.Path, default=REPO / "tests/conformance/passing.txt")
    a = ap.parse_args()
    root = REPO / "tests/data/generated/node"
    names = [l.strip() for l in a.list.read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    randoms = random_cases()
    passed, failed = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            case = root / name
            ok = True
            for ds in sorted(case.glob("test_data_set_*")):
                out = pathlib.Path(tmp) / name / ds.name
                r = subprocess.run([str(a.bin), "run", str(case / "model.onnx"), "--input-dir",
                                    str(ds), "--output-dir", str(out)],
                                   capture_output=True, text=True, timeout=120)
                if r.returncode != 0:
                    failed.append((name, r.stderr.strip().splitlines()[-1:]))
                    ok = False
                    break
                if name in randoms:
                    why = check_property(randoms[name], ds, out)
                    if why:
                        failed.append((name, f"{randoms[name]}: {why}"))
                        ok = False
                        break
                    continue
                for want in sorted(ds.glob("output_*.pb")):
                    why = same(out / want.name, want)
                    if why:
                        failed.append((name, f"{want.name}: {why}"))
                        ok = False
                        break
                if not ok:
                    break
            passed += ok
    for name, why in failed:
        print(f"FAIL {name}: {why}")
    print(f"{passed} of {len(names)} cases pass through the command line")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
