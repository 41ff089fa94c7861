"""Seeded, structure-aware model-mutation campaign against `ramify run`.

Each case I takes one seed model -- an ONNX node test case with its test_data_set_0
inputs, models/inception_mini.onnx, or any other model of at most 5 MB under
tests/data/generated/ -- and applies 1 to 3 mutations drawn by
random.Random(f"{SEED}:{I}"): declared dimensions, integer and float attributes,
node wiring, stored tensors (initializers and Constant values: truncated, retyped,
reshaped, pointed at external data outside the folder), opset imports, ir_version,
dropped, duplicated or retyped nodes, input tensors, shape and count inputs that ask
for terabytes, Loop trip counts, or the raw bytes of the serialized model. The
mutated model and inputs go into a temporary folder of their own, and

    BIN run model.onnx [--input-dir inputs] --output-dir out [RAMIFY_ARG ...]

runs there under a timeout, in its own process group, with RUST_BACKTRACE=1, its
address space limited (RLIMIT_AS), files limited to 1 GiB (RLIMIT_FSIZE, SIGXFSZ
ignored), no core files, and the highest OOM-killer score. The seed, the case index,
the seed files and the binary's `ramify ops` list fully determine each case, so
`--only I` regenerates case I alone.

Outcomes: ran (exit 0), error (non-zero exit, no panic), panic (stderr has
"panicked" or "internal error"), abort (SIGABRT or exit 134), signal (any other
signal), hang (timeout: the process group is killed). oom-rlimit counts the cases
whose stderr has "memory allocation of". ran and error pass; the others fail.

Usage: .venv/bin/python scripts/mutate_campaign.py [--bin target/release/ramify]
           [--seed S] [--count N] [--only I ...] [--jobs J] [--timeout SEC]
           [--rlimit-gb G] [--keep DIR] [--json FILE] [--ramify-arg=ARG ...]

Give ramify options that start with "-" in the `=` form:
`--ramify-arg=--memory-limit --ramify-arg=1G`.
Prints a progress line every 500 cases, then a table by class, the largest peak RSS,
every failure signature with its count, examples, the mutations behind it and a
command that reproduces one, and last `N passed, M failed`. Exits 1 if any case
failed. `--keep DIR` keeps every failing case (and every case named by --only) in
DIR/<index>/: model.onnx, inputs/, stderr.txt and mutation.txt.
"""

import argparse
import collections
import json
import math
import os
import pathlib
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

REPO = pathlib.Path(__file__).resolve().parent.parent
MAX_SEED_BYTES = 5 << 20
MAX_FILE_BYTES = 1 << 30
PROGRESS_EVERY = 500
POLL_S = 0.002

CLASSES = ("ran", "error", "panic", "abort", "signal", "hang")
PASSING = ("ran", "error")

HUGE_INTS = [2**31, 2**62, 2**63 - 1, -1, -(2**31), -(2**62), 0]
BAD_DIMS = [0, -1, 2**31, 2**40]
BAD_FLOATS = [math.nan, math.inf, -math.inf, 1e30, -1e30]
HUGE_SHAPES = [[2**40], [2**14] * 3, [2**31, 2**31], [2**32, 2**32], [2**62, 4], [2**21] * 3]
BAD_DTYPES = list(range(0, 24)) + [99, -1]
EXTERNAL_LOCATIONS = ["../../etc/passwd", "/etc/passwd", "/dev/zero", "missing.bin", ".", ""]
EXTERNAL_NUMBERS = [0, -1, 2**31, 2**40, 2**62, 2**64 + 5]
TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                "uint64_data")
HUGE_OPS = {"Constant", "ConstantOfShape", "Expand", "Tile", "Range", "Reshape", "Pad",
            "Resize", "Upsample"}


class Seed(NamedTuple):
    model: pathlib.Path
    input_dir: pathlib.Path | None
    features: frozenset  # op types, and "@int", "@float", "@tensor", "@inputs"


class Case:
    """One mutated model and its inputs, being built."""

    def __init__(self, seed: Seed, registered_ops: list[str]):
        self.seed = seed
        self.model = onnx.ModelProto()
        self.model.ParseFromString(seed.model.read_bytes())
        self.inputs = [p.read_bytes() for p in input_files(seed.input_dir)]
        self.tensor_inputs = tensor_input_ids(self.model, len(self.inputs))
        self.use_input_dir = seed.input_dir is not None
        self.registered_ops = registered_ops


# ---------------------------------------------------------------- seeds and models

def input_files(folder: pathlib.Path | None) -> list[pathlib.Path]:
    if folder is None:
        return []
    return sorted(folder.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))


def all_graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                yield from all_graphs(a.g)
            for g in a.graphs:
                yield from all_graphs(g)


def all_nodes(model: onnx.ModelProto) -> list:
    return [n for g in all_graphs(model.graph) for n in g.node]


def label(node) -> str:
    return f"{node.op_type}({node.output[0] if node.output else node.name})"


def tensor_input_ids(model: onnx.ModelProto, n_files: int) -> list[int]:
    """Indices of the input files that hold tensors (not sequences, maps, optionals)."""
    init = {t.name for t in model.graph.initializer}
    feeds = [vi for vi in model.graph.input if vi.name not in init]
    return [j for j in range(min(n_files, len(feeds))) if feeds[j].type.HasField("tensor_type")]


def find_seeds() -> list[Seed]:
    models = [REPO / "models/inception_mini.onnx"]
    models += sorted(p for p in (REPO / "tests/data/generated").rglob("*.onnx")
                     if p.stat().st_size <= MAX_SEED_BYTES)
    seeds = []
    for path in models:
        folders = [path.parent / "test_data_set_0", path.with_suffix("") / "test_data_set_0"]
        input_dir = next((d for d in folders if d.is_dir()), None)
        model = onnx.ModelProto()
        model.ParseFromString(path.read_bytes())
        seeds.append(Seed(path, input_dir, seed_features(model, input_dir)))
    return seeds


def seed_features(model: onnx.ModelProto, input_dir: pathlib.Path | None) -> frozenset:
    nodes = all_nodes(model)
    attr_types = {a.type for n in nodes for a in n.attribute}
    features = {n.op_type for n in nodes}
    if attr_types & {AttributeProto.INT, AttributeProto.INTS}:
        features.add("@int")
    if attr_types & {AttributeProto.FLOAT, AttributeProto.FLOATS}:
        features.add("@float")
    if stored_tensors(model):
        features.add("@tensor")
    if input_files(input_dir):
        features.add("@inputs")
    return frozenset(features)


def registered_ops(binary: str) -> list[str]:
    out = subprocess.run([binary, "ops"], capture_output=True, text=True, check=True).stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.strip())


def stored_tensors(model: onnx.ModelProto) -> list[tuple[str, TensorProto]]:
    """Initializers and tensor-valued attributes (Constant, ConstantOfShape values)."""
    found = []
    for g in all_graphs(model.graph):
        found += [(f"initializer {t.name!r}", t) for t in g.initializer]
        for n in g.node:
            for a in n.attribute:
                if a.type == AttributeProto.TENSOR:
                    found.append((f"{label(n)}.{a.name}", a.t))
                found += [(f"{label(n)}.{a.name}[{k}]", t) for k, t in enumerate(a.tensors)]
    return found


def payload_field(t: TensorProto) -> str | None:
    if t.raw_data:
        return "raw_data"
    return next((f for f in TYPED_FIELDS if len(getattr(t, f))), None)


def add_constant(case: Case, values, dtype) -> str:
    name = f"mut_const_{len(case.model.graph.initializer)}"
    case.model.graph.initializer.append(numpy_helper.from_array(np.array(values, dtype), name))
    return name


def known_rank(case: Case, name: str, rng: random.Random) -> int:
    """The rank of a value in the unmutated seed, by shape inference, else a guess."""
    seed = onnx.ModelProto()
    seed.ParseFromString(case.seed.model.read_bytes())
    try:
        seed = onnx.shape_inference.infer_shapes(seed)
    except Exception:
        pass
    g = seed.graph
    for vi in (*g.input, *g.value_info, *g.output):
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            return len(vi.type.tensor_type.shape.dim)
    for t in g.initializer:
        if t.name == name:
            return len(t.dims)
    return rng.randint(1, 4)


# ---------------------------------------------------------------- model mutations
# Each takes (case, rng), changes case and returns (tag, description), or None when
# the model has nothing it applies to.

def mut_dims(case, rng):
    root = case.model.graph
    subgraphs = list(all_graphs(root))[1:]
    values = [(vi, True) for vi in root.input]
    values += [(vi, False) for vi in (*root.output, *root.value_info)]
    values += [(vi, False) for g in subgraphs for vi in (*g.input, *g.output, *g.value_info)]
    values = [(vi, feed) for vi, feed in values if vi.type.HasField("tensor_type")]
    if not values:
        return None
    vi, is_feed = rng.choice(values)
    dims = vi.type.tensor_type.shape.dim
    if not dims:
        dims.add()
    k = rng.randrange(len(dims))
    value = rng.choice(BAD_DIMS + ["symbolic"])
    if value == "symbolic":
        dims[k].dim_param = "mut_sym"
    else:
        dims[k].dim_value = value
    note = f"declared dim {k} of {vi.name!r} -> {value}"
    if is_feed and rng.random() < 0.5:
        case.use_input_dir = False
        note += " (no --input-dir: inputs made from declared shapes)"
    return "dims", note


def mut_int_attr(case, rng):
    found = [(n, a) for n in all_nodes(case.model) for a in n.attribute
             if a.type in (AttributeProto.INT, AttributeProto.INTS)]
    if not found:
        return None
    node, a = rng.choice(found)
    value = rng.choice(HUGE_INTS)
    if a.type == AttributeProto.INT:
        a.i, where = value, ""
    elif a.ints and rng.random() < 0.5:
        k = rng.randrange(len(a.ints))
        a.ints[k], where = value, f"[{k}]"
    else:
        a.ints[:], where = [value] * max(1, len(a.ints)), "[*]"
    return f"int_attr:{node.op_type}", f"{label(node)}.{a.name}{where} = {value}"


def mut_float_attr(case, rng):
    found = [(n, a) for n in all_nodes(case.model) for a in n.attribute
             if a.type in (AttributeProto.FLOAT, AttributeProto.FLOATS)]
    if not found:
        return None
    node, a = rng.choice(found)
    value = rng.choice(BAD_FLOATS)
    if a.type == AttributeProto.FLOAT:
        a.f = value
    else:
        a.floats[:] = [value] * max(1, len(a.floats))
    return f"float_attr:{node.op_type}", f"{label(node)}.{a.name} = {value}"


def mut_rewire(case, rng):
    graphs = [g for g in all_graphs(case.model.graph) if any(n.input for n in g.node)]
    if not graphs:
        return None
    g = rng.choice(graphs)
    at = rng.choice([i for i, n in enumerate(g.node) if n.input])
    node = g.node[at]
    k = rng.randrange(len(node.input))
    producers = [(i, o) for i, n in enumerate(g.node) for o in n.output if o]
    how = rng.choice(["node output", "missing", "empty"])
    if how == "node output" and producers:
        src, target = rng.choice(producers)
        order = "itself" if src == at else "a later node" if src > at else "an earlier node"
        why = f" (output of {label(g.node[src])}, {order})"
    else:
        target, why = ("mut_missing", " (missing)") if how == "missing" else ("", " (empty)")
    old, node.input[k] = node.input[k], target
    return f"rewire:{node.op_type}", f"{label(node)}.input[{k}] {old!r} -> {target!r}{why}"


def mut_tensor_truncate(case, rng):
    found = [(where, t) for where, t in stored_tensors(case.model) if payload_field(t)]
    if not found:
        return None
    where, t = rng.choice(found)
    field = payload_field(t)
    if field == "raw_data":
        n = len(t.raw_data)
        t.raw_data = t.raw_data[:rng.randrange(n)]
        kept = len(t.raw_data)
    else:
        data = getattr(t, field)
        n = len(data)
        kept = rng.randrange(n)
        del data[kept:]
    return "tensor_truncate", f"{where} {field} cut from {n} to {kept}"


def mut_tensor_dtype(case, rng):
    found = stored_tensors(case.model)
    if not found:
        return None
    where, t = rng.choice(found)
    old = t.data_type
    t.data_type = rng.choice([d for d in BAD_DTYPES if d != old])
    return "tensor_dtype", f"{where} data_type {old} -> {t.data_type}"


def mut_tensor_dims(case, rng):
    found = stored_tensors(case.model)
    if not found:
        return None
    where, t = rng.choice(found)
    old = list(t.dims)
    how = rng.choice(["bigger", "2^40", "negative", "wrapping", "rank 1000"])
    if how == "bigger" and t.dims:
        k = rng.randrange(len(t.dims))
        t.dims[k] = t.dims[k] * rng.randint(2, 1000) + 1
    elif how == "bigger":
        t.dims.append(rng.randint(2, 1000))
    elif how == "2^40":
        t.dims[:] = old[:-1] + [2**40]
    elif how == "negative":
        t.dims[:] = old[:-1] + [rng.choice([-1, -7, -(2**40)])]
    elif how == "wrapping":
        t.dims[:] = [2**32, 2**32]
    else:
        t.dims[:] = [1] * 1000
    return "tensor_dims", f"{where} dims {old} -> {abbrev(list(t.dims))} ({how})"


def mut_external(case, rng):
    found = stored_tensors(case.model)
    if not found:
        return None
    where, t = rng.choice(found)
    for f in ("raw_data",) + TYPED_FIELDS:
        t.ClearField(f)
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    entries = {"location": rng.choice(EXTERNAL_LOCATIONS)}
    for key in ("offset", "length"):
        if rng.random() < 0.6:
            entries[key] = str(rng.choice(EXTERNAL_NUMBERS))
    for key, value in entries.items():
        e = t.external_data.add()
        e.key, e.value = key, value
    return "external", f"{where} external data {entries}"


def mut_opset(case, rng):
    opsets = case.model.opset_import
    how = rng.choice(["version", "domain", "drop all", "duplicate"])
    if how == "drop all" or not opsets:
        del opsets[:]
        return "opset", "opset_import removed"
    o = rng.choice(opsets)
    if how == "version":
        old, o.version = o.version, rng.choice([0, -1, 2**40, 2**62])
        return "opset", f"opset {o.domain!r} version {old} -> {o.version}"
    if how == "domain":
        old, o.domain = o.domain, rng.choice(["ai.onnx.ml", "com.example", "ai.onnx", "x" * 300])
        return "opset", f"opset domain {old!r} -> {abbrev(o.domain)!r}"
    dup = opsets.add()
    dup.domain, dup.version = o.domain, rng.choice([1, o.version + 1, 2**40])
    return "opset", f"opset {o.domain!r} imported twice (versions {o.version}, {dup.version})"


def mut_ir_version(case, rng):
    old = case.model.ir_version
    case.model.ir_version = rng.choice([0, -1, 1, 2**40, 2**62])
    return "ir_version", f"ir_version {old} -> {case.model.ir_version}"


def mut_drop_node(case, rng):
    graphs = [g for g in all_graphs(case.model.graph) if g.node]
    if not graphs:
        return None
    g = rng.choice(graphs)
    ks = sorted(rng.sample(range(len(g.node)), rng.randint(1, min(3, len(g.node)))))
    names = [label(g.node[k]) for k in ks]
    for k in reversed(ks):
        del g.node[k]
    return "drop_node", f"dropped nodes {names}"


def mut_dup_node(case, rng):
    graphs = [g for g in all_graphs(case.model.graph) if g.node]
    if not graphs:
        return None
    g = rng.choice(graphs)
    src = rng.choice(g.node)
    copy = onnx.NodeProto()
    copy.CopyFrom(src)
    at = rng.randrange(len(g.node) + 1)
    g.node.insert(at, copy)
    return f"dup_node:{src.op_type}", f"{label(src)} duplicated at position {at}"


def mut_op_type(case, rng):
    nodes = all_nodes(case.model)
    if not nodes:
        return None
    node = rng.choice(nodes)
    old, node.op_type = node.op_type, rng.choice(case.registered_ops)
    return f"op_type:{node.op_type}", f"{label(node)} op_type {old} -> {node.op_type}"


def mut_input_tensor(case, rng):
    if not case.tensor_inputs or not case.use_input_dir:
        return None
    j = rng.choice(case.tensor_inputs)
    t = TensorProto()
    t.ParseFromString(case.inputs[j])
    how = rng.choice(["dims", "truncate", "dtype"])
    if how == "dims":
        old = list(t.dims)
        change = rng.choice(["set", "add", "drop", "scalar"])
        if change == "set" and t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice([0, -1, 2**31, 2**40])
        elif change in ("set", "add"):
            t.dims.append(rng.choice([1, 3, 2**40]))
        elif change == "drop" and t.dims:
            del t.dims[rng.randrange(len(t.dims))]
        else:
            del t.dims[:]
        note = f"input_{j}.pb dims {old} -> {list(t.dims)}"
    elif how == "truncate" and payload_field(t):
        field = payload_field(t)
        data = getattr(t, field)
        n = len(data)
        if field == "raw_data":
            t.raw_data = data[:rng.randrange(n)]
        else:
            del data[rng.randrange(n):]
        note = f"input_{j}.pb {field} cut from {n} to {len(getattr(t, field))}"
    else:
        old = t.data_type
        t.data_type = rng.choice([d for d in BAD_DTYPES if d != old])
        note = f"input_{j}.pb data_type {old} -> {t.data_type}"
    case.inputs[j] = t.SerializeToString()
    return "input_tensor", note


def huge_feeds(op: str, rank: int, rng) -> dict:
    """Input index -> (values, dtype) asking `op` for an enormous output; None clears."""
    shape = rng.choice(HUGE_SHAPES)
    if op == "ConstantOfShape":
        return {0: (shape, np.int64)}
    if op == "Expand":
        return {1: (shape + [1] * rank, np.int64)}
    if op == "Tile":
        return {1: ([rng.choice([2**20, 2**32, 2**40])] * rank, np.int64)}
    if op == "Reshape":
        return {1: (rng.choice(HUGE_SHAPES + [[-1, -1], [0, 2**40], [-2]]), np.int64)}
    if op == "Range":
        return rng.choice([{0: (0, np.int64), 1: (2**40, np.int64), 2: (1, np.int64)},
                           {0: (0, np.int64), 1: (10, np.int64), 2: (0, np.int64)},
                           {0: (2**62, np.int64), 1: (-(2**62), np.int64), 2: (-1, np.int64)},
                           {0: (0, np.float32), 1: (1, np.float32), 2: (1e-30, np.float32)}])
    if op == "Pad":
        return {1: ([rng.choice([2**20, 2**40, -(2**40)])] * (2 * rank), np.int64)}
    if op == "Upsample":
        return {1: ([rng.choice([1e5, 1e12, math.inf])] * rank, np.float32)}
    if rng.random() < 0.5:  # Resize by scales
        scale = rng.choice([1e5, 1e12, math.inf, math.nan, 0.0, -1.0])
        return {2: ([scale] * rank, np.float32), 3: None}
    return {2: None, 3: ([rng.choice([2**20, 2**40])] * rank, np.int64)}


def mut_huge_shape(case, rng):
    nodes = [n for n in all_nodes(case.model) if n.op_type in HUGE_OPS]
    if not nodes:
        return None
    op = rng.choice(sorted({n.op_type for n in nodes}))
    node = rng.choice([n for n in nodes if n.op_type == op])
    if node.op_type == "Constant":
        values = [a for a in node.attribute if a.type == AttributeProto.TENSOR]
        if not values:
            return None
        values[0].t.dims[:] = rng.choice(HUGE_SHAPES)
        return "huge_shape:Constant", f"{label(node)} value dims -> {list(values[0].t.dims)}"
    rank = known_rank(case, node.input[0] if node.input else "", rng)
    notes = []
    for k, feed in sorted(huge_feeds(node.op_type, rank, rng).items()):
        while len(node.input) <= k:
            node.input.append("")
        if feed is None:
            node.input[k] = ""
            notes.append(f"input[{k}] = ''")
        else:
            node.input[k] = add_constant(case, *feed)
            notes.append(f"input[{k}] = {abbrev(feed[0])}")
    return f"huge_shape:{node.op_type}", f"{label(node)} {', '.join(notes)}"


def mut_loop_trip(case, rng):
    loops = [n for n in all_nodes(case.model) if n.op_type == "Loop"]
    if not loops:
        return None
    node = rng.choice(loops)
    trips = rng.choice([2**31, 2**62, 2**63 - 1])
    node.input[0] = add_constant(case, trips, np.int64)
    return "loop_trip", f"{label(node)} trip count M = {trips}"


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, tuple[str, str]]:
    """One byte-level change to the serialized model."""
    how = rng.choice(["flip", "delete", "insert", "truncate"]) if data else "insert"
    buf = bytearray(data)
    if how == "flip":
        at = sorted(rng.sample(range(len(buf)), min(len(buf), rng.randint(1, 16))))
        for k in at:
            buf[k] ^= rng.randrange(1, 256)
        note = f"flipped bytes at {abbrev(at)}"
    elif how == "delete":
        k = rng.randrange(len(buf))
        n = rng.randint(1, min(64, len(buf) - k))
        del buf[k:k + n]
        note = f"deleted {n} bytes at {k}"
    elif how == "insert":
        k = rng.randrange(len(buf) + 1)
        n = rng.randint(1, 64)
        buf[k:k] = rng.randbytes(n)
        note = f"inserted {n} random bytes at {k}"
    else:
        k = rng.randrange(len(buf))
        del buf[k:]
        note = f"truncated from {len(data)} to {k} bytes"
    return bytes(buf), ("bytes", note)


# kind -> (weight, mutation; None for the byte-level class, applied after serializing)
MUTATIONS = {
    "dims": (6, mut_dims),
    "int_attr": (8, mut_int_attr),
    "float_attr": (3, mut_float_attr),
    "rewire": (6, mut_rewire),
    "tensor_truncate": (4, mut_tensor_truncate),
    "tensor_dtype": (4, mut_tensor_dtype),
    "tensor_dims": (5, mut_tensor_dims),
    "external": (4, mut_external),
    "opset": (3, mut_opset),
    "ir_version": (2, mut_ir_version),
    "drop_node": (3, mut_drop_node),
    "dup_node": (3, mut_dup_node),
    "op_type": (4, mut_op_type),
    "input_tensor": (6, mut_input_tensor),
    "huge_shape": (8, mut_huge_shape),
    "loop_trip": (1, mut_loop_trip),
    "bytes": (8, None),
}
# What a seed must have for a kind to apply: a case drawing such a kind picks a seed
# with one feature of the set, drawn uniformly (so each huge-shape op gets its share).
NEEDS = {
    "int_attr": {"@int"},
    "float_attr": {"@float"},
    "tensor_truncate": {"@tensor"},
    "tensor_dtype": {"@tensor"},
    "tensor_dims": {"@tensor"},
    "external": {"@tensor"},
    "input_tensor": {"@inputs"},
    "huge_shape": HUGE_OPS,
    "loop_trip": {"Loop"},
}


def draw_kind(rng: random.Random) -> str:
    kinds = list(MUTATIONS)
    return rng.choices(kinds, weights=[MUTATIONS[k][0] for k in kinds])[0]


def apply_kind(case: Case, kind: str, rng: random.Random) -> tuple[str, str]:
    """Applies `kind`, or other drawn kinds while the model offers it nothing."""
    for _ in range(20):
        if MUTATIONS[kind][1] is not None:
            done = MUTATIONS[kind][1](case, rng)
            if done:
                return done
        kind = draw_kind(rng)
    return mut_ir_version(case, rng)


def build_case(seed_value: int, index: int, seeds: list[Seed], ops: list[str]):
    """The mutated case `index`: (Case, model bytes, [(tag, description)])."""
    rng = random.Random(f"{seed_value}:{index}")
    kinds = [draw_kind(rng) for _ in range(rng.choice([1, 1, 2, 2, 3]))]
    wanted = [rng.choice(sorted(NEEDS[k])) for k in kinds if k in NEEDS]
    pool = [s for s in seeds if all(w in s.features for w in wanted)]
    case = Case(rng.choice(pool or seeds), ops)
    notes = [apply_kind(case, k, rng) for k in kinds if k != "bytes"]
    data = case.model.SerializeToString()
    for _ in range(kinds.count("bytes")):
        data, note = mutate_bytes(data, rng)
        notes.append(note)
    return case, data, notes


def abbrev(value, limit=80) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."


# ---------------------------------------------------------------- running

class Job(NamedTuple):
    index: int
    folder: pathlib.Path
    proc: subprocess.Popen
    start: float
    seed: Seed
    notes: list
    command: list


class Result(NamedTuple):
    index: int
    cls: str
    status: str
    rss_kib: int
    seconds: float
    stderr: str


def write_case(folder: pathlib.Path, case: Case, data: bytes) -> list[str]:
    """Writes the case into `folder`; returns its ramify arguments (relative paths)."""
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(data)
    args = ["run", "model.onnx"]
    if case.use_input_dir:
        (folder / "inputs").mkdir()
        for j, blob in enumerate(case.inputs):
            (folder / "inputs" / f"input_{j}.pb").write_bytes(blob)
        args += ["--input-dir", "inputs"]
    return args + ["--output-dir", "out"]


def child_limits(address_space: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    return apply


def start_job(index: int, folder: pathlib.Path, args, seeds, ops) -> Job:
    case, data, notes = build_case(args.seed, index, seeds, ops)
    command = [args.bin, *write_case(folder, case, data), *args.ramify_arg]
    with open(folder / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(command, cwd=folder, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, "RUST_BACKTRACE": "1"},
                                preexec_fn=child_limits(int(args.rlimit_gb * (1 << 30))),
                                start_new_session=True)
    return Job(index, folder, proc, time.monotonic(), case.seed, notes, command)


def poll_job(job: Job, timeout: float) -> Result | None:
    """The job's result once it has ended (killing it past `timeout`), else None."""
    pid, status, usage = os.wait4(job.proc.pid, os.WNOHANG)
    hung = False
    if pid == 0:
        if time.monotonic() - job.start < timeout:
            return None
        os.killpg(job.proc.pid, signal.SIGKILL)
        _, status, usage = os.wait4(job.proc.pid, 0)
        hung = True
    seconds = time.monotonic() - job.start
    job.proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = (job.folder / "stderr.txt").read_text(errors="replace")
    return Result(job.index, classify(hung, status, stderr), describe_status(hung, status),
                  usage.ru_maxrss, seconds, stderr)


def classify(hung: bool, status: int, stderr: str) -> str:
    if hung:
        return "hang"
    if "panicked" in stderr or "internal error" in stderr:
        return "panic"
    if os.WIFSIGNALED(status):
        return "abort" if os.WTERMSIG(status) == signal.SIGABRT else "signal"
    code = os.WEXITSTATUS(status)
    if code == 134:
        return "abort"
    return "ran" if code == 0 else "error"


def describe_status(hung: bool, status: int) -> str:
    if hung:
        return "killed after timeout"
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return f"exit {os.WEXITSTATUS(status)}"


# ---------------------------------------------------------------- signatures

def normalise(text: str) -> str:
    text = re.sub(r"0x[0-9a-fA-F]+", "0xH", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    return re.sub(r"\d+", "N", text).strip()[:200]


def panic_site(stderr: str) -> tuple[str, str]:
    """(location, message) of the first panic; a std location gets the crate frame."""
    m = re.search(r"panicked at (\S+?):\n(.*)", stderr)
    if not m:
        line = next((l for l in stderr.splitlines() if "internal error" in l), "")
        return "", line
    location, message = m.group(1), m.group(2)
    if "/rustc/" in location or "/.cargo/" in location:
        frames = re.findall(r"^\s+at (\S+)$", stderr, re.M)
        own = next((f for f in frames if "/rustc/" not in f and "/.cargo/" not in f), None)
        location = re.sub(r"^/rustc/\w+/", "/rustc/…/", location)
        if own:
            location += f" via {re.sub(r'^.*?(?=src/)', '', own)}"
    return location, message


def meaningful_lines(stderr: str) -> list[str]:
    skip = ("note:", "stack backtrace", "      at ", "  ")
    return [l for l in stderr.splitlines() if l.strip() and not l.startswith(skip)]


def signature(r: Result) -> str:
    if r.cls == "panic":
        location, message = panic_site(r.stderr)
        return f"{location}: {normalise(message)}" if location else normalise(message)
    lines = meaningful_lines(r.stderr)
    alloc = next((l for l in lines if "memory allocation of" in l), None)
    last = alloc or (lines[-1] if lines else "")
    return f"{r.status}: {normalise(last)}" if last else r.status


def stderr_tail(r: Result) -> str:
    if r.cls == "panic":
        location, message = panic_site(r.stderr)
        return f"panicked at {location}: {message}" if location else message
    lines = meaningful_lines(r.stderr)
    return abbrev(" | ".join(lines[-2:]), 300) if lines else "(empty)"


# ---------------------------------------------------------------- reporting

def reproduce_command(args, index: int) -> str:
    keep = str(args.keep or "/tmp/mutate_case")
    parts = [".venv/bin/python", "scripts/mutate_campaign.py", "--bin", args.bin,
             "--timeout", str(args.timeout), "--rlimit-gb", str(args.rlimit_gb),
             "--seed", str(args.seed), "--only", str(index), "--keep", keep]
    parts += [f"--ramify-arg={a}" for a in args.ramify_arg]
    return shlex.join(parts)


def keep_case(job: Job, r: Result, keep: pathlib.Path) -> None:
    dest = keep / str(job.index)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(job.folder, dest, ignore=shutil.ignore_patterns("out"))
    lines = [f"case {job.index}, seed model {job.seed.model.relative_to(REPO)}",
             f"inputs from {job.seed.input_dir.relative_to(REPO) if job.seed.input_dir else '-'}"]
    lines += [f"mutation {tag}: {note}" for tag, note in job.notes]
    lines += [f"command (in this folder): {shlex.join(job.command)}",
              f"outcome: {r.cls} ({r.status}), peak RSS {r.rss_kib} KiB, {r.seconds:.2f} s",
              f"stderr tail: {stderr_tail(r)}"]
    (dest / "mutation.txt").write_text("\n".join(lines) + "\n")


def progress_line(done: int, total: int, counts, started: float) -> str:
    parts = " ".join(f"{c}={counts[c]}" for c in CLASSES)
    return f"[{done}/{total}] {time.monotonic() - started:.0f} s  {parts}"


def collect_signatures(records: list, args) -> list[dict]:
    groups = collections.defaultdict(list)
    for r, notes in records:
        if r.cls not in PASSING:
            groups[(r.cls, signature(r))].append((r, notes))
    out = []
    for (cls, sig), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        tags = collections.Counter(tag for _, notes in members for tag, _ in notes)
        first, first_notes = members[0]
        out.append({
            "class": cls, "signature": sig, "count": len(members),
            "examples": [r.index for r, _ in members[:3]],
            "by_mutation": dict(tags.most_common(8)),
            "example_mutation": [f"{tag}: {note}" for tag, note in first_notes],
            "example_stderr": stderr_tail(first),
            "reproduce": reproduce_command(args, first.index),
        })
    return out


def print_summary(counts, oom, peak, sigs) -> None:
    print("\nclass        cases")
    for c in CLASSES:
        print(f"{c:<12} {counts[c]}")
    print(f"{'oom-rlimit':<12} {oom}   (failures whose stderr says 'memory allocation of')")
    if peak:
        print(f"max peak RSS: {peak[0] / 1024:.1f} MiB (case {peak[1]})")
    if sigs:
        print(f"\n{len(sigs)} distinct failure signatures:")
    for s in sigs:
        print(f"\n[{s['class']}] x{s['count']}  {s['signature']}")
        print(f"    examples: {', '.join(map(str, s['examples']))}")
        print(f"    mutations: {', '.join(f'{k} {v}' for k, v in s['by_mutation'].items())}")
        print(f"    e.g. case {s['examples'][0]}: {'; '.join(s['example_mutation'])}")
        print(f"    stderr: {s['example_stderr']}")
        print(f"    reproduce: {s['reproduce']}")


# ---------------------------------------------------------------- main

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--bin", default=str(REPO / "target/release/ramify"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--only", type=int, action="append", metavar="I",
                    help="run only case I (repeatable); the case is kept with --keep")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    ap.add_argument("--rlimit-gb", type=float, default=16.0,
                    help="address-space limit of each ramify process, GiB")
    ap.add_argument("--keep", type=pathlib.Path, help="keep failing cases in DIR/<index>/")
    ap.add_argument("--json", type=pathlib.Path, help="write counts and signatures here")
    ap.add_argument("--ramify-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for `ramify run` (repeatable; --ramify-arg=--flag)")
    args = ap.parse_args()
    args.bin = str(pathlib.Path(args.bin).resolve())
    return args


def run_campaign(args, seeds, ops, workdir: pathlib.Path):
    indices = args.only or list(range(args.count))
    pending = iter(indices)
    running, records = [], []
    counts = collections.Counter()
    oom, peak = 0, None
    started = time.monotonic()
    try:
        while True:
            while len(running) < args.jobs and (index := next(pending, None)) is not None:
                running.append(start_job(index, workdir / str(index), args, seeds, ops))
            if not running:
                break
            time.sleep(POLL_S)
            still = []
            for job in running:
                r = poll_job(job, args.timeout)
                if r is None:
                    still.append(job)
                    continue
                counts[r.cls] += 1
                failed = r.cls not in PASSING
                if failed and "memory allocation of" in r.stderr:
                    oom += 1
                if peak is None or r.rss_kib > peak[0]:
                    peak = (r.rss_kib, r.index)
                if args.keep and (failed or args.only):
                    keep_case(job, r, args.keep)
                records.append((r, job.notes))
                shutil.rmtree(job.folder)
                if len(records) % PROGRESS_EVERY == 0:
                    print(progress_line(len(records), len(indices), counts, started), flush=True)
            running = still
    finally:
        for job in running:
            os.killpg(job.proc.pid, signal.SIGKILL)
            job.proc.wait()
    return counts, oom, peak, records, time.monotonic() - started


def main() -> int:
    args = parse_args()
    seeds = find_seeds()
    ops = registered_ops(args.bin)
    print(f"{len(seeds)} seed models, {len(ops)} registered ops, seed {args.seed}", flush=True)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="mutate_campaign_"))
    try:
        counts, oom, peak, records, wall = run_campaign(args, seeds, ops, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    records.sort(key=lambda rec: rec[0].index)
    sigs = collect_signatures(records, args)
    print_summary(counts, oom, peak, sigs)
    passed = sum(counts[c] for c in PASSING)
    failed = len(records) - passed
    print(f"\nwall time {wall:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "seed": args.seed, "cases": len(records), "wall_s": round(wall, 1),
            "classes": {c: counts[c] for c in CLASSES}, "oom_rlimit": oom,
            "max_rss_kib": peak[0] if peak else 0, "max_rss_case": peak[1] if peak else None,
            "signatures": sigs}, indent=2) + "\n")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
