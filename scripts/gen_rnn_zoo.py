"""Writes the recurrent-network benchmark models of the zoo (issue 43).

Each model is built with onnx.helper the way PyTorch's TorchScript exporter
(opset 17) emits the matching torch.nn module, with seeded random weights
(numpy default_rng(0)), into tests/data/generated/zoo/<name>/model.onnx:

- lstm_bidir_2layer: nn.LSTM(128, 256, num_layers=2, bidirectional=True) on
  X [50, 1, 128]: two bidirectional LSTM nodes, each Y [seq, 2, batch, 256]
  turned into [seq, batch, 512] by Transpose(0, 2, 1, 3) and Reshape.
- gru_2layer: nn.GRU(128, 256, num_layers=2) on X [50, 1, 128]: two forward
  GRU nodes with linear_before_reset=1, Y squeezed on the direction axis.
- rnn_tanh: nn.RNN(64, 128) (tanh) on X [20, 1, 64], one RNN node.

Initial states are zero initializers (what the exporter builds when no state
is passed) and sequence_lens is left out. Beside each model,
test_data_set_0/input_0.pb holds a seeded standard-normal input (numpy
default_rng(1)) and output_0.pb onnxruntime's output on it (graph
optimisations off, one thread), the layout gen_transformer_zoo.py writes.
Deterministic and fast: the same bytes on every run.

Usage: .venv/bin/python scripts/gen_rnn_zoo.py [--out DIR]
"""

import argparse
import pathlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

REPO = pathlib.Path(__file__).resolve().parent.parent
OPSET = 17


def uniform(rng, shape, hidden):
    """torch's default RNN initialisation: U(-1/sqrt(hidden), 1/sqrt(hidden))."""
    bound = 1.0 / np.sqrt(hidden)
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def init(name, array):
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def recurrent_layer(rng, op, layer, x_name, input_size, hidden, dirs, inits, extra):
    """One exported torch RNN layer: its node and initializers; returns Y's name."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    g = gates * hidden
    p = f"{op.lower()}{layer}"
    inits += [
        init(f"{p}_W", uniform(rng, (dirs, g, input_size), hidden)),
        init(f"{p}_R", uniform(rng, (dirs, g, hidden), hidden)),
        init(f"{p}_B", uniform(rng, (dirs, 2 * g), hidden)),
        init(f"{p}_h0", np.zeros((dirs, 1, hidden), np.float32)),
    ]
    ins = [x_name, f"{p}_W", f"{p}_R", f"{p}_B", "", f"{p}_h0"]
    outs = [f"{p}_Y", f"{p}_Yh"]
    if op == "LSTM":
        inits.append(init(f"{p}_c0", np.zeros((dirs, 1, hidden), np.float32)))
        ins.append(f"{p}_c0")
        outs.append(f"{p}_Yc")
    direction = "bidirectional" if dirs == 2 else "forward"
    node = helper.make_node(op, ins, outs, name=f"/{p}/{op}", hidden_size=hidden,
                            direction=direction, **extra)
    return node, f"{p}_Y"


def stacked(name, op, seq, batch, input_size, hidden, layers, dirs, extra):
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "input"
    size = input_size
    for layer in range(layers):
        node, y = recurrent_layer(rng, op, layer, x, size, hidden, dirs, inits, extra)
        nodes.append(node)
        last = layer == layers - 1
        out = "output" if last else f"l{layer}_out"
        if dirs == 2:
            # [seq, 2, batch, hidden] -> [seq, batch, 2, hidden] -> [seq, batch, 2·hidden]
            t = f"l{layer}_t"
            shape = f"l{layer}_shape"
            inits.append(init(shape, np.array([0, 0, -1], np.int64)))
            nodes.append(helper.make_node("Transpose", [y], [t], perm=[0, 2, 1, 3]))
            nodes.append(helper.make_node("Reshape", [t, shape], [out]))
        else:
            axes = f"l{layer}_axes"
            inits.append(init(axes, np.array([1], np.int64)))
            nodes.append(helper.make_node("Squeeze", [y, axes], [out]))
        x = out
        size = dirs * hidden
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [seq, batch, input_size])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [seq, batch, dirs * hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="gen_rnn_zoo")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


MODELS = {
    "lstm_bidir_2layer": lambda: stacked("lstm_bidir_2layer", "LSTM", 50, 1, 128, 256, 2, 2, {}),
    "gru_2layer": lambda: stacked("gru_2layer", "GRU", 50, 1, 128, 256, 2, 1,
                                  {"linear_before_reset": 1}),
    "rnn_tanh": lambda: stacked("rnn_tanh", "RNN", 20, 1, 64, 128, 1, 1, {}),
}


def write_reference(path: pathlib.Path, model) -> None:
    """test_data_set_0 beside PATH: a seeded input and onnxruntime's output."""
    graph_input = model.graph.input[0]
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {graph_input.name: x})
    if not np.all(np.isfinite(y)):
        raise SystemExit(f"{path}: onnxruntime gave a non-finite output")
    data = path.parent / "test_data_set_0"
    data.mkdir(exist_ok=True)
    (data / "input_0.pb").write_bytes(numpy_helper.from_array(x, graph_input.name)
                                      .SerializeToString())
    (data / "output_0.pb").write_bytes(numpy_helper.from_array(y, model.graph.output[0].name)
                                       .SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=REPO / "tests/data/generated/zoo")
    args = ap.parse_args()
    for name, make in MODELS.items():
        path = args.out / name / "model.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        model = make()
        onnx.save(model, str(path))
        write_reference(path, model)
        print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")


if __name__ == "__main__":
    main()
