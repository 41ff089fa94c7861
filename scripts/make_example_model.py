"""Builds ramify's example model, a small branchy Inception-style CNN, with reference data.

Writes models/inception_mini.onnx (opset 13, IR 8, input "input" float32 [1,3,96,96],
output "logits" [1,100]) and models/inception_mini/test_data_set_0/{input_0,output_0}.pb:
a seeded input and onnxruntime's output on it (graph optimisations disabled, one
thread). Weights are seeded random with He scaling, so the files are reproducible.

The network has every kind of fork ramify's scheduler must handle: three Inception
blocks (four siblings of unequal cost joined by Concat), a residual block (a fork
whose shortcut sibling is empty, joined by Add), and a block with a nested fork.

Usage: .venv/bin/python scripts/make_example_model.py [--out-dir models]
"""

import argparse
import pathlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SEED = 20240611
INPUT_SHAPE = (1, 3, 96, 96)
NUM_CLASSES = 100
OPSET = 13
IR_VERSION = 8


class Builder:
    """Accumulates nodes and initializers while tracking each value's shape and the FLOPs."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.flops = 0
        self.params = 0

    def _init(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array.astype(np.float32), name))
        self.params += array.size
        return name

    def _node(self, op: str, inputs: list[str], output: str, shape, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        self.shapes[output] = tuple(shape)
        return output

    def conv(self, name: str, x: str, cout: int, k, stride: int = 1, relu: bool = True,
             bias: bool = True) -> str:
        """Conv (He-initialised, 'same' padding) optionally followed by Relu."""
        kh, kw = (k, k) if isinstance(k, int) else k
        n, cin, h, w = self.shapes[x]
        oh, ow = (h + stride - 1) // stride, (w + stride - 1) // stride
        fan_in = cin * kh * kw
        weight = self.rng.standard_normal((cout, cin, kh, kw)) * np.sqrt(2.0 / fan_in)
        inputs = [x, self._init(f"{name}.weight", weight)]
        if bias:
            inputs.append(self._init(f"{name}.bias", self.rng.normal(0.0, 0.05, cout)))
        pads = [kh // 2, kw // 2, kh // 2, kw // 2]
        y = self._node("Conv", inputs, name, (n, cout, oh, ow), kernel_shape=[kh, kw],
                       strides=[stride, stride], pads=pads)
        self.flops += 2 * n * cout * oh * ow * fan_in + (n * cout * oh * ow if bias else 0)
        return self.relu(y) if relu else y

    def batchnorm(self, name: str, x: str) -> str:
        """BatchNormalization with trained-looking statistics."""
        c = self.shapes[x][1]
        params = [
            self.rng.uniform(0.7, 1.3, c),  # scale
            self.rng.normal(0.0, 0.1, c),  # bias
            self.rng.normal(0.0, 0.1, c),  # running mean
            self.rng.uniform(0.5, 1.5, c),  # running variance
        ]
        names = [self._init(f"{name}.{p}", a)
                 for p, a in zip(("scale", "bias", "mean", "var"), params)]
        self.flops += 2 * int(np.prod(self.shapes[x]))
        return self._node("BatchNormalization", [x, *names], name, self.shapes[x],
                          epsilon=1e-5)

    def relu(self, x: str) -> str:
        self.flops += int(np.prod(self.shapes[x]))
        return self._node("Relu", [x], f"{x}.relu", self.shapes[x])

    def maxpool(self, name: str, x: str, stride: int) -> str:
        """3x3 MaxPool with padding 1: stride 1 keeps the size, stride 2 halves it."""
        n, c, h, w = self.shapes[x]
        oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
        self.flops += 9 * n * c * oh * ow
        return self._node("MaxPool", [x], name, (n, c, oh, ow), kernel_shape=[3, 3],
                          strides=[stride, stride], pads=[1, 1, 1, 1])

    def concat(self, name: str, xs: list[str]) -> str:
        n, _, h, w = self.shapes[xs[0]]
        c = sum(self.shapes[x][1] for x in xs)
        return self._node("Concat", xs, name, (n, c, h, w), axis=1)

    def add(self, name: str, a: str, b: str) -> str:
        self.flops += int(np.prod(self.shapes[a]))
        return self._node("Add", [a, b], name, self.shapes[a])

    def inception(self, name: str, x: str, c1: int, c3r: int, c3: int, c5r: int, c5: int,
                  cp: int) -> str:
        """Four siblings: 1x1; 1x1->3x3; 1x1->3x3->3x3; MaxPool3x3/1->1x1; joined by Concat."""
        b1 = self.conv(f"{name}/1x1", x, c1, 1)
        b2 = self.conv(f"{name}/3x3", self.conv(f"{name}/3x3_reduce", x, c3r, 1), c3, 3)
        b3 = self.conv(f"{name}/double3x3_reduce", x, c5r, 1)
        b3 = self.conv(f"{name}/double3x3_a", b3, c5, 3)
        b3 = self.conv(f"{name}/double3x3_b", b3, c5, 3)
        b4 = self.conv(f"{name}/pool_proj", self.maxpool(f"{name}/pool", x, 1), cp, 1)
        return self.concat(f"{name}/output", [b1, b2, b3, b4])

    def residual(self, name: str, x: str) -> str:
        """Conv3x3-BN-Relu-Conv3x3-BN plus the identity shortcut, Add, Relu."""
        c = self.shapes[x][1]
        y = self.conv(f"{name}/conv1", x, c, 3, relu=False, bias=False)
        y = self.relu(self.batchnorm(f"{name}/bn1", y))
        y = self.conv(f"{name}/conv2", y, c, 3, relu=False, bias=False)
        y = self.batchnorm(f"{name}/bn2", y)
        return self.relu(self.add(f"{name}/add", y, x))

    def nested(self, name: str, x: str) -> str:
        """Three siblings; the middle one forks again into a 1x3 and a 3x3 conv joined by Concat."""
        b1 = self.conv(f"{name}/1x1", x, 96, 1)
        mid = self.conv(f"{name}/split_reduce", x, 96, 1)
        b2 = self.concat(f"{name}/split_output", [
            self.conv(f"{name}/split_1x3", mid, 64, (1, 3)),
            self.conv(f"{name}/split_3x3", mid, 128, 3),
        ])
        b3 = self.conv(f"{name}/pool_proj", self.maxpool(f"{name}/pool", x, 1), 64, 1)
        return self.concat(f"{name}/output", [b1, b2, b3])

    def head(self, x: str) -> str:
        """GlobalAveragePool, Flatten, Gemm to the class logits."""
        n, c, h, w = self.shapes[x]
        self.flops += n * c * h * w
        pooled = self._node("GlobalAveragePool", [x], "head/pool", (n, c, 1, 1))
        flat = self._node("Flatten", [pooled], "head/flatten", (n, c), axis=1)
        weight = self.rng.standard_normal((NUM_CLASSES, c)) * np.sqrt(1.0 / c)
        inputs = [flat, self._init("head/fc.weight", weight),
                  self._init("head/fc.bias", self.rng.normal(0.0, 0.05, NUM_CLASSES))]
        self.flops += 2 * n * NUM_CLASSES * c + n * NUM_CLASSES
        self.nodes.append(helper.make_node("Gemm", inputs, ["logits"], name="head/fc",
                                           transB=1))
        self.shapes["logits"] = (n, NUM_CLASSES)
        return "logits"


def build_model(rng: np.random.Generator) -> tuple[onnx.ModelProto, int]:
    """Returns the model and its FLOP count (multiply-adds count as two)."""
    b = Builder(rng)
    b.shapes["input"] = INPUT_SHAPE
    x = b.conv("stem/conv7x7_s2", "input", 48, 7, stride=2)  # 48x48
    x = b.maxpool("stem/pool", x, 2)  # 24x24
    x = b.inception("inception_a", x, 48, 48, 64, 16, 32, 32)  # 176 ch
    x = b.inception("inception_b", x, 64, 64, 96, 32, 48, 48)  # 256 ch
    x = b.maxpool("pool_b", x, 2)  # 12x12
    x = b.inception("inception_c", x, 96, 64, 128, 24, 48, 48)  # 320 ch
    x = b.conv("transition", x, 128, 1)  # 128 ch
    x = b.residual("residual", x)
    x = b.nested("nested", x)  # 352 ch
    b.head(x)
    graph = helper.make_graph(
        b.nodes, "inception_mini",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, INPUT_SHAPE)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, (1, NUM_CLASSES))],
        b.initializers,
    )
    model = helper.make_model(graph, producer_name="ramify/scripts/make_example_model.py",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    model.doc_string = ("Inception-style example CNN with seeded random weights "
                        f"({b.params} parameters, {b.flops} FLOPs).")
    return model, b.flops


def reference_output(model_path: pathlib.Path, x: np.ndarray) -> np.ndarray:
    """Runs onnxruntime without graph optimisations on one thread."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model_path), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"input": x})[0]


def main() -> None:
    repo = pathlib.Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=pathlib.Path, default=repo / "models",
                        help="where to write inception_mini.onnx and its data (default: %(default)s)")
    args = parser.parse_args()

    rng = np.random.default_rng(SEED)
    model, flops = build_model(rng)
    onnx.checker.check_model(model, full_check=True)
    x = rng.standard_normal(INPUT_SHAPE).astype(np.float32)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    model_path = args.out_dir / "inception_mini.onnx"
    onnx.save_model(model, model_path)
    y = reference_output(model_path, x)
    if not np.all(np.isfinite(y)) or y.std() <= 1e-3 * np.abs(y).max():
        raise SystemExit(f"degenerate logits: std {y.std()}, max |y| {np.abs(y).max()}")

    data_dir = args.out_dir / "inception_mini" / "test_data_set_0"
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "input_0.pb").write_bytes(numpy_helper.from_array(x, "input").SerializeToString())
    (data_dir / "output_0.pb").write_bytes(numpy_helper.from_array(y, "logits").SerializeToString())

    forks = sum(1 for n in model.graph.node if n.op_type in ("Concat", "Add"))
    print(f"wrote {model_path}: {model_path.stat().st_size} bytes, {len(model.graph.node)} nodes, "
          f"{forks} joins, {flops / 1e9:.3f} GFLOPs")
    print(f"wrote {data_dir}: logits mean {y.mean():.4f} std {y.std():.4f} "
          f"range [{y.min():.4f}, {y.max():.4f}]")


if __name__ == "__main__":
    main()
