"""Generates ONNX's own backend node test cases for ramify's conformance suite.

Writes, under OUTDIR (default <repo>/tests/data/generated/node), one folder per case
of the pinned `onnx` package (onnx.backend.test.case.node.collect_testcases):

  <case>/model.onnx
  <case>/test_data_set_<i>/input_<j>.pb, output_<j>.pb   (serialized TensorProto;
        sequence, map and optional values as SequenceProto / MapProto /
        OptionalProto, exactly as onnx's own `backend-test-tools generate-data`)

The layout is the one `ramify run MODEL --input-dir D --output-dir O` reads and writes.
Idempotent: a stamp records a hash of this script and scripts/requirements.txt;
nothing is done while it matches (--force regenerates).

Usage: .venv/bin/python scripts/gen_node_tests.py [OUTDIR] [--force]
"""

import argparse
import hashlib
import pathlib
import shutil
import sys
import time
import warnings

import onnx
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case.node import collect_testcases

REPO = pathlib.Path(__file__).resolve().parent.parent


def stamp_value() -> str:
    h = hashlib.sha256()
    h.update(pathlib.Path(__file__).read_bytes())
    h.update((REPO / "scripts" / "requirements.txt").read_bytes())
    h.update(onnx.__version__.encode())
    return h.hexdigest()


def serialize(value, value_info) -> bytes:
    """The bytes of one input or output, by its declared type."""
    t = value_info.type
    name = value_info.name
    if t.HasField("map_type"):
        return numpy_helper.from_dict(value, name).SerializeToString()
    if t.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()
    if t.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, name).SerializeToString()


def write_case(case, out: pathlib.Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "model.onnx").write_bytes(case.model.SerializeToString())
    graph = case.model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets):
        d = out / f"test_data_set_{i}"
        d.mkdir()
        for j, value in enumerate(inputs):
            (d / f"input_{j}.pb").write_bytes(serialize(value, graph.input[j]))
        for j, value in enumerate(outputs):
            (d / f"output_{j}.pb").write_bytes(serialize(value, graph.output[j]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", default=str(REPO / "tests/data/generated/node"))
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    outdir = pathlib.Path(args.outdir)
    stamp = outdir / ".stamp"
    want = stamp_value()
    if not args.force and stamp.exists() and stamp.read_text() == want:
        print(f"gen_node_tests: {outdir} is up to date")
        return 0
    start = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    written = 0
    for case in cases:
        if case.model is None or not case.data_sets:
            continue
        write_case(case, outdir / case.name)
        written += 1
    stamp.write_text(want)
    print(f"gen_node_tests: wrote {written} cases to {outdir} in {time.time() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
