"""Generates ramify's model test data from the light models that the onnx package ships.

Writes, under OUTDIR (default <repo>/tests/data/generated):

  light/<name>/model.onnx            the onnx package's light_<name>.onnx, copied as is
  light/<name>/test_data_set_0/      input_0.pb: the input ONNX's own backend runner
                                     feeds these models (arange(n)/n, float32);
                                     output_0.pb: the shipped reference output
  light_random/<name>/model.onnx     the same architecture with seeded random weights
                                     as real initializers and the final Softmax removed
                                     (graph output "logits")
  light_random/<name>/test_data_set_0/
                                     input_0.pb: a seeded standard-normal input;
                                     output_0.pb: onnxruntime's output on it (graph
                                     optimisations disabled, one thread)

The light models are onnx-caffe2 exports (IR 3, opset 9) whose large weights were
replaced by ConstantOfShape(0.02) nodes fed by "<weight>__SHAPE" initializers, so
their outputs are constant. light_random/ rebuilds every float parameter by its role
(He-normal conv and Gemm weights, small biases, BatchNormalization scale ~1, bias ~0,
mean ~0, variance ~1) so that activations stay finite and the logits differ.

Idempotent: a stamp file records a hash of this script and scripts/requirements.txt;
nothing is done while it matches and every output exists (--force regenerates).

Usage: .venv/bin/python scripts/gen_test_data.py [OUTDIR] [--force]
"""

import argparse
import hashlib
import pathlib
import shutil
import sys
import time
import zlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.runner import Runner

REPO = pathlib.Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "scripts" / "requirements.txt"
LIGHT_DIR = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512"]
SEED = 20240611
STAMP = ".gen_test_data.stamp"
DATA_FILES = ["model.onnx", "test_data_set_0/input_0.pb", "test_data_set_0/output_0.pb"]


def source_hash() -> str:
    digest = hashlib.sha256(pathlib.Path(__file__).read_bytes())
    digest.update(REQUIREMENTS.read_bytes())
    return digest.hexdigest()


def pinned_onnx_version() -> str:
    for line in REQUIREMENTS.read_text().splitlines():
        if line.startswith("onnx=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit(f"{REQUIREMENTS} pins no onnx version")


def data_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (IR 3 lists both)."""
    initializers = {t.name for t in graph.initializer}
    return [v for v in graph.input if v.name not in initializers]


def write_tensor(path: pathlib.Path, array: np.ndarray, name: str) -> None:
    path.write_bytes(numpy_helper.from_array(array, name).SerializeToString())


def write_light(name: str, out: pathlib.Path) -> None:
    """Copies the light model and writes the backend runner's input and the shipped output."""
    source = LIGHT_DIR / f"light_{name}.onnx"
    data = out / "test_data_set_0"
    data.mkdir(parents=True)
    shutil.copyfile(source, out / "model.onnx")
    graph = onnx.load(source).graph
    for i, value in enumerate(data_inputs(graph)):
        x = Runner.generate_dummy_data(value, seed=0, name=name, random=False)
        write_tensor(data / f"input_{i}.pb", x, value.name)
    shutil.copyfile(LIGHT_DIR / f"light_{name}_output_0.pb", data / "output_0.pb")


def consumers_of(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for index, value in enumerate(node.input):
            uses.setdefault(value, []).append((node, index))
    return uses


def parameter_role(name: str, uses, shape: tuple[int, ...], int_values
                   ) -> tuple[onnx.NodeProto, int, tuple[int, ...]]:
    """Follows a parameter through Reshape/Unsqueeze to the operator input it feeds.

    Returns that node, the input index and the parameter's shape as the node sees it."""
    while True:
        if len(uses.get(name, [])) != 1:
            raise SystemExit(f"parameter {name} has {len(uses.get(name, []))} consumers, expected 1")
        node, index = uses[name][0]
        if node.op_type == "Reshape" and index == 0:
            shape = int_values[node.input[1]]
        elif node.op_type != "Unsqueeze":
            return node, index, shape
        name = node.output[0]


def feeds_relu(node: onnx.NodeProto, uses, constants: set[str]) -> bool:
    """Whether node's output reaches a Relu through per-channel affine nodes only
    (BatchNormalization, or Mul/Add with a constant operand)."""
    while True:
        next_uses = uses.get(node.output[0], [])
        if len(next_uses) != 1:
            return False
        node, index = next_uses[0]
        if node.op_type == "Relu":
            return True
        affine = (node.op_type == "BatchNormalization" and index == 0
                  or node.op_type in ("Mul", "Add") and any(v in constants for v in node.input))
        if not affine:
            return False


def random_parameter(rng: np.random.Generator, shape: tuple[int, ...], node: onnx.NodeProto,
                     index: int, seen_shape: tuple[int, ...], gain: float) -> np.ndarray:
    """Draws a parameter of `shape` suited to input `index` of `node` (float32, no copies).

    Weights are normal with variance gain / fan_in: He (gain 2) before a Relu, LeCun
    (gain 1) elsewhere, so that linear layers before a residual Sum do not double the
    variance each time."""
    op = node.op_type
    if op in ("Conv", "Gemm") and index == 1:
        if op == "Conv":
            fan_in = int(np.prod(seen_shape[1:]))
        else:
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            fan_in = seen_shape[1] if trans_b else seen_shape[0]
        w = rng.standard_normal(shape, dtype=np.float32)
        w *= np.float32(np.sqrt(gain / fan_in))
        return w
    if (op in ("Conv", "Gemm") and index == 2) or op == "Add":
        return rng.normal(0.0, 0.01, shape).astype(np.float32)
    if op == "BatchNormalization" and index in (1, 4):  # scale, running variance
        return rng.uniform(0.9, 1.1, shape).astype(np.float32)
    if op == "BatchNormalization" and index in (2, 3):  # bias, running mean
        return rng.normal(0.0, 0.05, shape).astype(np.float32)
    if op == "Mul":  # the per-channel scale of a caffe2 Scale layer after BatchNormalization
        return rng.uniform(0.9, 1.1, shape).astype(np.float32)
    raise SystemExit(f"no initialisation rule for input {index} of {op} node {node.name or node.output[0]}")


def randomise(name: str, rng: np.random.Generator) -> tuple[onnx.ModelProto, int]:
    """Returns light_<name> with random real weights and logits output, and its weight bytes."""
    model = onnx.load(LIGHT_DIR / f"light_{name}.onnx")
    graph = model.graph
    int_values = {t.name: tuple(int(v) for v in numpy_helper.to_array(t))
                  for t in graph.initializer if t.data_type == TensorProto.INT64}
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    fills = {n.output[0]: n for n in graph.node if n.op_type == "ConstantOfShape"}
    for weight, node in fills.items():
        shapes[weight] = int_values[node.input[0]]
    uses = consumers_of(graph)
    constants = set(shapes) | {n.output[0] for n in graph.node
                               if n.op_type == "Unsqueeze" and n.input[0] in shapes}

    # Every float parameter is redrawn: the ConstantOfShape fills and also the float
    # initializers that the export kept (small trained biases and BatchNormalization
    # statistics), since trained statistics do not match random weights.
    float_initializers = {t.name for t in graph.initializer if t.data_type == TensorProto.FLOAT}
    params = list(dict.fromkeys(v for n in graph.node for v in n.input
                                if v in fills or v in float_initializers))
    dropped = set(params) | {n.input[0] for n in fills.values()}
    kept = [v for v in graph.input if v.name not in dropped]
    del graph.input[:]
    graph.input.extend(kept)
    kept = [t for t in graph.initializer if t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del kept

    # One parameter at a time, straight into the graph, so that peak memory stays near
    # the model's own size (VGG-19 has 575 MB of weights).
    weight_bytes = 0
    for value in params:
        target, index, seen_shape = parameter_role(value, uses, shapes[value], int_values)
        gain = 2.0 if feeds_relu(target, uses, constants) else 1.0
        array = random_parameter(rng, shapes[value], target, index, seen_shape, gain)
        weight_bytes += array.nbytes
        tensor = graph.initializer.add()
        tensor.name = value
        tensor.data_type = TensorProto.FLOAT
        tensor.dims.extend(array.shape)
        tensor.raw_data = array.tobytes()
        del array
        # IR 3: every initializer must also be a graph input.
        graph.input.append(helper.make_tensor_value_info(value, TensorProto.FLOAT, shapes[value]))
    nodes = [n for n in graph.node if n.op_type != "ConstantOfShape"]

    # Drop the final Softmax and call the graph output "logits".
    output = graph.output[0]
    last = nodes[-1]
    if last.op_type == "Softmax" and last.output[0] == output.name:
        nodes.pop()
        logits = last.input[0]
    else:
        logits = output.name
    for node in nodes:
        for k, value in enumerate(node.output):
            if value == logits:
                node.output[k] = "logits"
        if logits in node.input:
            raise SystemExit(f"{name}: {logits} feeds {node.op_type} as well as the output")
    del graph.node[:]
    graph.node.extend(nodes)
    output.name = "logits"
    model.doc_string = (f"light_{name} from onnx {onnx.__version__} with seeded random weights "
                        "and without its final Softmax; made by ramify's scripts/gen_test_data.py")
    return model, weight_bytes


def reference_run(model_path: pathlib.Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """onnxruntime's output without graph optimisations, on one thread."""
    ort.set_default_logger_severity(3)  # not the warning about resnet50's unused initializer
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    return session.run(["logits"], feeds)[0]


def write_light_random(name: str, out: pathlib.Path) -> int:
    """Writes the random-weight model with its input and reference output; returns weight bytes."""
    rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
    model, weight_bytes = randomise(name, rng)
    onnx.checker.check_model(model)
    data = out / "test_data_set_0"
    data.mkdir(parents=True)
    model_path = out / "model.onnx"
    onnx.save_model(model, model_path)
    feeds = {}
    for i, value in enumerate(data_inputs(model.graph)):
        shape = [d.dim_value if d.HasField("dim_value") else 1
                 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(shape, dtype=np.float32)
        write_tensor(data / f"input_{i}.pb", feeds[value.name], value.name)
    del model
    y = reference_run(model_path, feeds)
    peak = float(np.abs(y).max())
    if not np.all(np.isfinite(y)) or float(y.std()) <= 1e-3 * peak:
        raise SystemExit(f"light_random/{name}: degenerate logits (std {y.std():.3g}, "
                         f"max |logit| {peak:.3g})")
    write_tensor(data / "output_0.pb", y, "logits")
    print(f"  light_random/{name}: {weight_bytes:,} weight bytes, logits {list(y.shape)} "
          f"std {y.std():.3g} max|.| {peak:.3g}", flush=True)
    return weight_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", nargs="?", type=pathlib.Path,
                        default=REPO / "tests" / "data" / "generated",
                        help="output directory (default: %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="regenerate even when the stamp says the data is up to date")
    args = parser.parse_args()

    stamp = args.outdir / STAMP
    want = source_hash()
    expected = [args.outdir / kind / name / f
                for kind in ("light", "light_random") for name in MODELS for f in DATA_FILES]
    if (not args.force and stamp.is_file() and stamp.read_text().strip() == want
            and all(p.is_file() for p in expected)):
        print(f"gen_test_data: {args.outdir} is up to date")
        return
    if onnx.__version__ != pinned_onnx_version():
        sys.exit(f"gen_test_data: onnx {onnx.__version__} is installed but {REQUIREMENTS} pins "
                 f"{pinned_onnx_version()}; run scripts/ensure_venv.sh and use .venv/bin/python")

    start = time.monotonic()
    stamp.unlink(missing_ok=True)
    for kind in ("light", "light_random"):
        shutil.rmtree(args.outdir / kind, ignore_errors=True)
    print(f"gen_test_data: writing {args.outdir / 'light'}", flush=True)
    for name in MODELS:
        write_light(name, args.outdir / "light" / name)
    print(f"gen_test_data: writing {args.outdir / 'light_random'}", flush=True)
    total = sum(write_light_random(name, args.outdir / "light_random" / name) for name in MODELS)
    stamp.write_text(want + "\n")
    print(f"gen_test_data: done in {time.monotonic() - start:.1f} s "
          f"({total:,} random weight bytes in all)")


if __name__ == "__main__":
    main()
