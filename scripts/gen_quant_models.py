"""Quantizes models with onnxruntime's own quantizer, as an app developer would, and
records onnxruntime's outputs on them: the int8 test data of ramify.

For each source model (light_random models of scripts/gen_test_data.py, upgraded
to opset 13 as per-channel quantization needs; the example model
models/inception_mini.onnx; and mobilenet_v2, a MobileNetV2 (width 1.0,
BatchNorm folded into the convolutions' biases, Clip(0, 6) activations) that this
script builds itself at opset 13 with seeded He-scaled random weights, into
<repo>/tests/data/generated/quant_sources/mobilenet_v2.onnx), writes under OUTDIR
(default <repo>/tests/data/generated/quant):

  <model>_<variant>/model.onnx               as the quantizer wrote it (after
                                             quant_pre_process), untouched
  <model>_<variant>/test_data_set_0/input_0.pb   a seeded input
  <model>_<variant>/test_data_set_0/output_0.pb  onnxruntime's output on it with
                                             graph optimisations off: the result the
                                             graph defines (one thread)
  <model>_<variant>/ort_optimized_output.pb  onnxruntime's output with its default
                                             optimisations (its fused int8 kernels,
                                             which round differently: up to two
                                             steps off the graph's result)
  <model>_<variant>/step.txt                 one quantization step of the output:
                                             the scale of the DequantizeLinear that
                                             produces it, or 0 when the output is
                                             computed in float (dynamic models)

Variants: qdq (quantize_static, QDQ format), qop (quantize_static, QOperator
format), both with per-channel int8 weights and uint8 activations, calibrated on
four seeded inputs; dyn (quantize_dynamic, int8 weights).

Idempotent like gen_test_data.py: a stamp records a hash of this script and the
pinned requirements. Usage: .venv/bin/python scripts/gen_quant_models.py [OUTDIR] [--force]
"""

import argparse
import hashlib
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import onnx
import onnx.version_converter
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process

REPO = pathlib.Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "scripts" / "requirements.txt"
GENERATED = REPO / "tests" / "data" / "generated"
SOURCES = {
    "inception_mini": REPO / "models" / "inception_mini.onnx",
    "squeezenet": GENERATED / "light_random" / "squeezenet" / "model.onnx",
    "inception_v1": GENERATED / "light_random" / "inception_v1" / "model.onnx",
    "resnet50": GENERATED / "light_random" / "resnet50" / "model.onnx",
    "mobilenet_v2": GENERATED / "quant_sources" / "mobilenet_v2.onnx",  # built by build_mobilenet_v2
}
VARIANTS = ["qdq", "qop", "dyn"]
# Recurrent models go through the dynamic quantizer only (it writes
# com.microsoft DynamicQuantizeLSTM), with per-tensor and per-channel scales.
LSTM_SOURCE = GENERATED / "quant_sources" / "lstm_mini.onnx"  # built by build_lstm
LSTM_INPUT = ("x", [12, 2, 24])
LSTM_VARIANTS = ["dyn", "dyn_pc"]
SEED = 20261128
STAMP = ".gen_quant_models.stamp"


def build_mobilenet_v2(path: pathlib.Path) -> None:
    """A MobileNetV2 (width 1.0) at opset 13 with seeded random weights.

    BatchNorm is taken as folded: every Conv has a bias. Weights are normal *
    sqrt(2 / fan_in) (He), biases normal * 0.01, so activations keep their scale
    through the depth. Clip takes its bounds as initializers (opset 13)."""
    rng = np.random.default_rng(SEED + 2)
    nodes, inits = [], [numpy_helper.from_array(np.array(0.0, np.float32), "clip_min"),
                        numpy_helper.from_array(np.array(6.0, np.float32), "clip_max")]

    def conv(x: str, cin: int, cout: int, k: int, stride: int, group: int, name: str,
             relu6: bool) -> str:
        fan_in = cin // group * k * k
        w = (rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.weight"), numpy_helper.from_array(b, f"{name}.bias")])
        nodes.append(helper.make_node("Conv", [x, f"{name}.weight", f"{name}.bias"], [f"{name}.out"], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride], group=group,
                                      pads=[k // 2] * 4))
        if not relu6:
            return f"{name}.out"
        nodes.append(helper.make_node("Clip", [f"{name}.out", "clip_min", "clip_max"], [f"{name}.relu6"],
                                      name=f"{name}.clip"))
        return f"{name}.relu6"

    x = conv("input", 3, 32, 3, 2, 1, "stem", True)
    cin = 32
    block = 0
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            name = f"block{block}"
            hidden = cin * t
            y = x if t == 1 else conv(x, cin, hidden, 1, 1, 1, f"{name}.expand", True)
            y = conv(y, hidden, hidden, 3, stride, hidden, f"{name}.dw", True)
            y = conv(y, hidden, c, 1, 1, 1, f"{name}.project", False)
            if stride == 1 and cin == c:
                nodes.append(helper.make_node("Add", [x, y], [f"{name}.add"], name=f"{name}.add"))
                y = f"{name}.add"
            x, cin = y, c
            block += 1
    x = conv(x, cin, 1280, 1, 1, 1, "head", True)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flatten"], name="flatten", axis=1))
    w = (rng.standard_normal((1000, 1280)) * np.sqrt(2.0 / 1280)).astype(np.float32)
    b = (rng.standard_normal(1000) * 0.01).astype(np.float32)
    inits += [numpy_helper.from_array(w, "classifier.weight"), numpy_helper.from_array(b, "classifier.bias")]
    nodes.append(helper.make_node("Gemm", ["flatten", "classifier.weight", "classifier.bias"], ["logits"],
                                  name="classifier", transB=1))
    graph = helper.make_graph(nodes, "mobilenet_v2",
                              [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 1000])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7,
                              producer_name="ramify gen_quant_models.py")
    onnx.checker.check_model(model, full_check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def build_lstm(path: pathlib.Path) -> None:
    """Two stacked LSTMs as PyTorch exports them, with seeded random weights:
    a bidirectional one (24 -> 32 per direction) whose Y is transposed and
    reshaped into the input of a forward one (64 -> 16)."""
    rng = np.random.default_rng(SEED + 3)
    seq, batch, inp = LSTM_INPUT[1]
    inits, nodes = [], []

    def lstm(name: str, x: str, size: int, hidden: int, dirs: int) -> str:
        def param(suffix: str, shape: list[int]) -> str:
            inits.append(numpy_helper.from_array(
                (rng.standard_normal(shape) / np.sqrt(hidden)).astype(np.float32), name + suffix))
            return name + suffix
        w = param("_W", [dirs, 4 * hidden, size])
        r = param("_R", [dirs, 4 * hidden, hidden])
        b = param("_B", [dirs, 8 * hidden])
        nodes.append(helper.make_node(
            "LSTM", [x, w, r, b], [name + "_Y"], hidden_size=hidden,
            direction="bidirectional" if dirs == 2 else "forward"))
        return name + "_Y"

    y0 = lstm("l0", "x", inp, 32, 2)
    inits.append(numpy_helper.from_array(np.array([seq, batch, 64], np.int64), "l0_shape"))
    nodes.append(helper.make_node("Transpose", [y0], ["l0_t"], perm=[0, 2, 1, 3]))
    nodes.append(helper.make_node("Reshape", ["l0_t", "l0_shape"], ["l0_out"]))
    y1 = lstm("l1", "l0_out", 64, 16, 1)
    graph = helper.make_graph(
        nodes, "lstm_mini",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [seq, batch, inp])],
        [helper.make_tensor_value_info(y1, onnx.TensorProto.FLOAT, [seq, 1, batch, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def source_hash() -> str:
    digest = hashlib.sha256(pathlib.Path(__file__).read_bytes())
    digest.update(REQUIREMENTS.read_bytes())
    return digest.hexdigest()


def input_of(model: onnx.ModelProto) -> tuple[str, list[int]]:
    init = {i.name for i in model.graph.initializer}
    (inp,) = [i for i in model.graph.input if i.name not in init]
    dims = [d.dim_value if d.HasField("dim_value") else 1 for d in inp.type.tensor_type.shape.dim]
    return inp.name, dims


class Calibration(CalibrationDataReader):
    """Four seeded standard-normal inputs."""

    def __init__(self, name: str, shape: list[int]):
        rng = np.random.default_rng(SEED + 1)
        self.batches = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


def output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear producing the (first) graph output, else 0."""
    out = model.graph.output[0].name
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for n in model.graph.node:
        if out in n.output and n.op_type == "DequantizeLinear" and n.input[1] in init:
            return float(np.max(init[n.input[1]]))
    return 0.0


def quantize(pre: pathlib.Path, variant: str, dest: pathlib.Path, name: str, shape: list[int]) -> None:
    if variant == "dyn":
        # The dynamic quantizer re-infers shapes and trips over value_info that
        # the light models' Gemm-after-Reshape leaves: start it without them.
        m = onnx.load(pre)
        del m.graph.value_info[:]
        bare = pre.with_name(pre.stem + "_bare.onnx")
        onnx.save(m, bare)
        quantize_dynamic(str(bare), str(dest), weight_type=QuantType.QInt8)
        return
    if variant == "dyn_pc":
        quantize_dynamic(str(pre), str(dest), weight_type=QuantType.QInt8, per_channel=True)
        return
    fmt = QuantFormat.QDQ if variant == "qdq" else QuantFormat.QOperator
    quantize_static(str(pre), str(dest), Calibration(name, shape), quant_format=fmt, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)


def write_case(model: str, variant: str, pre: pathlib.Path, name: str, shape: list[int],
               out: pathlib.Path) -> None:
    case = out / f"{model}_{variant}"
    data = case / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    quantize(pre, variant, case / "model.onnx", name, shape)
    x = np.random.default_rng(SEED).standard_normal(shape).astype(np.float32)
    onnx.save_tensor(numpy_helper.from_array(x, name), str(data / "input_0.pb"))
    for level, path in [(ort.GraphOptimizationLevel.ORT_DISABLE_ALL, data / "output_0.pb"),
                        (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, case / "ort_optimized_output.pb")]:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = level
        session = ort.InferenceSession(str(case / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        out = session.get_outputs()[0].name
        (y,) = session.run([out], {name: x})[:1]
        onnx.save_tensor(numpy_helper.from_array(y, out), str(path))
    step = output_step(onnx.load(case / "model.onnx"))
    (case / "step.txt").write_text(f"{step!r}\n")
    ops = sorted({f"{n.domain + ':' if n.domain else ''}{n.op_type}" for n in onnx.load(case / "model.onnx").graph.node})
    print(f"  {case.name}: output {list(y.shape)}, step {step:.4g}, ops {', '.join(ops)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", nargs="?", type=pathlib.Path, default=GENERATED / "quant")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    stamp = args.outdir / STAMP
    expected = [args.outdir / f"{m}_{v}" / f for m in SOURCES for v in VARIANTS
                for f in ("model.onnx", "step.txt", "test_data_set_0/output_0.pb",
                          "ort_optimized_output.pb")]
    expected += [args.outdir / f"lstm_mini_{v}" / "model.onnx" for v in LSTM_VARIANTS]
    if (not args.force and stamp.exists() and stamp.read_text() == source_hash()
            and all(p.exists() for p in expected)):
        print(f"gen_quant_models: {args.outdir} is up to date")
        return
    build_mobilenet_v2(SOURCES["mobilenet_v2"])
    missing = [str(p) for p in SOURCES.values() if not p.exists()]
    if missing:
        sys.exit(f"gen_quant_models: run scripts/gen_test_data.py first (missing {missing})")
    if args.outdir.exists():
        shutil.rmtree(args.outdir)
    args.outdir.mkdir(parents=True)
    print(f"gen_quant_models: writing {args.outdir}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for model, source in SOURCES.items():
            # The light models are opset 9; per-channel quantization needs 13
            # (DequantizeLinear's axis), as the quantizer's docs ask.
            upgraded = pathlib.Path(tmp) / f"{model}_13.onnx"
            m = onnx.load(source)
            if max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < 13:
                m = onnx.version_converter.convert_version(m, 13)
            onnx.save(m, upgraded)
            pre = pathlib.Path(tmp) / f"{model}_pre.onnx"
            quant_pre_process(str(upgraded), str(pre), skip_symbolic_shape=True)
            name, shape = input_of(m)
            for variant in VARIANTS:
                write_case(model, variant, pre, name, shape, args.outdir)
        build_lstm(LSTM_SOURCE)
        for variant in LSTM_VARIANTS:
            write_case("lstm_mini", variant, LSTM_SOURCE, *LSTM_INPUT, args.outdir)
    stamp.write_text(source_hash())


if __name__ == "__main__":
    main()
