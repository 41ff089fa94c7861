"""Checks ONNX node test cases through the command line, one process per case.

For each case folder under tests/data/generated/node (or those named in a list
file) and each of its test_data_set_N folders, runs
`ramify run model.onnx --input-dir test_data_set_N --output-dir OUT` and compares
OUT/output_*.pb with the expected outputs: same element type and shape, values
within rtol 1e-3 / atol 1e-7 (exact for integers, booleans and strings);
sequence and optional outputs (SequenceProto, OptionalProto) tensor by tensor.
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


# FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT4E2M1, FLOAT8E8M0.
MINIFLOATS = {17, 18, 19, 20, 23, 24}


def load(path):
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return t, numpy_helper.to_array(t)


def same_tensor(gp, wp):
    g, w = numpy_helper.to_array(gp), numpy_helper.to_array(wp)
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


def same_sequence(gs, ws):
    if len(gs.tensor_values) != len(ws.tensor_values):
        return f"{len(gs.tensor_values)} tensors != {len(ws.tensor_values)}"
    for i, (g, w) in enumerate(zip(gs.tensor_values, ws.tensor_values)):
        why = same_tensor(g, w)
        if why:
            return f"tensor {i}: {why}"
    return None


def same(got_path, want_path, kind="tensor_type"):
    """Compares two stored values of the declared kind: a TensorProto, a
    SequenceProto (tensor by tensor) or an OptionalProto (presence, then the
    value)."""
    if kind == "sequence_type":
        g, w = onnx.SequenceProto(), onnx.SequenceProto()
        g.ParseFromString(got_path.read_bytes())
        w.ParseFromString(want_path.read_bytes())
        return same_sequence(g, w)
    if kind == "optional_type":
        g, w = onnx.OptionalProto(), onnx.OptionalProto()
        g.ParseFromString(got_path.read_bytes())
        w.ParseFromString(want_path.read_bytes())
        for field, compare in (("tensor_value", same_tensor), ("sequence_value", same_sequence)):
            if g.HasField(field) != w.HasField(field):
                return f"{field} present {g.HasField(field)} != {w.HasField(field)}"
            if w.HasField(field):
                return compare(getattr(g, field), getattr(w, field))
        return None
    gp, _ = load(got_path)
    wp, _ = load(want_path)
    return same_tensor(gp, wp)


def output_kinds(model_path):
    """The declared kind of each graph output (tensor_type, sequence_type, ...)."""
    m = onnx.load(str(model_path), load_external_data=False)
    return [o.type.WhichOneof("value") or "tensor_type" for o in m.graph.output]


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
                kinds = output_kinds(case / "model.onnx")
                for want in sorted(ds.glob("output_*.pb")):
                    i = int(want.stem.split("_")[1])
                    kind = kinds[i] if i < len(kinds) else "tensor_type"
                    why = same(out / want.name, want, kind)
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
