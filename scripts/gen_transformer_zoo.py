"""Generates transformer benchmark models for the comparison with onnxruntime.

Torch is not needed: the graphs are built with onnx.helper in the shape that
PyTorch's TorchScript exporter (opset 17) gives Hugging Face BERT and ViT:
Linear layers on 3-D activations as MatMul followed by a bias Add (bias first),
LayerNormalization nodes, the erf form of GELU decomposed as Div(x, sqrt 2) ->
Erf -> Add 1 -> Mul x -> Mul 0.5 (and the orders other exporters use), and
attention as MatMul(Q, K^T) -> Div sqrt(d) -> Add mask -> Softmax -> MatMul V
with Reshape/Transpose around the heads. Weights are seeded random
(numpy default_rng(0)), so generation is deterministic.

Writes under OUTDIR (default <repo>/tests/data/generated/zoo):

  bert_tiny/model.onnx            token + position + type embeddings (Gather),
                                  2 encoder layers, hidden 128, 2 heads, seq 128,
                                  batch 1, attention mask input
  vit_small_like/model.onnx       16x16/16 Conv patch embedding of 1x3x224x224
                                  (196 tokens + cls), hidden 192, 3 heads,
                                  4 pre-LN layers, MLP 768, classifier head
  <name>/test_data_set_0/         seeded inputs and onnxruntime's outputs
                                  (graph optimisations off)

Usage: .venv/bin/python scripts/gen_transformer_zoo.py [OUTDIR]
"""

import argparse
import math
import pathlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

REPO = pathlib.Path(__file__).resolve().parent.parent
OPSET = 17


class Builder:
    """Accumulates nodes and initializers with unique, exporter-like names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, tag: str) -> str:
        self.count += 1
        return f"/{tag}_{self.count}"

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, name: str, shape: tuple, scale: float | None = None) -> str:
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[0])
        w = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.const(name, w)

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        n = self.name(op_type)
        out = f"{n}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=n, **attrs))
        return out

    def scalar(self, v: float) -> str:
        n = self.name("Constant")
        return self.const(f"{n}_value", np.array(v, dtype=np.float32))

    def ints(self, values: list[int]) -> str:
        n = self.name("Constant")
        return self.const(f"{n}_value", np.array(values, dtype=np.int64))

    def linear(self, x: str, prefix: str, n_in: int, n_out: int) -> str:
        """torch.nn.Linear on a 3-D input: MatMul by W^T, then Add(bias, .)."""
        w = self.weight(f"{prefix}.weight_T", (n_in, n_out))
        b = self.const(f"{prefix}.bias",
                       (self.rng.standard_normal(n_out) * 0.02).astype(np.float32))
        return self.op("Add", [b, self.op("MatMul", [x, w])])

    def layer_norm(self, x: str, prefix: str, n: int) -> str:
        g = self.const(f"{prefix}.weight",
                       (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32))
        b = self.const(f"{prefix}.bias", (0.1 * self.rng.standard_normal(n)).astype(np.float32))
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-12)

    def gelu(self, x: str, order: int) -> str:
        """erf GELU in one of the exporters' orders."""
        erf = self.op("Erf", [self.op("Div", [x, self.scalar(math.sqrt(2.0))])])
        if order == 0:  # torch nn.GELU: (x * (erf + 1)) * 0.5
            return self.op("Mul", [self.op("Mul", [x, self.op("Add", [erf, self.scalar(1.0)])]),
                                   self.scalar(0.5)])
        # Hugging Face gelu: (x * 0.5) * (1 + erf)
        half = self.op("Mul", [x, self.scalar(0.5)])
        return self.op("Mul", [half, self.op("Add", [self.scalar(1.0), erf])])

    def attention(self, x: str, prefix: str, seq: int, hidden: int, heads: int,
                  mask: str | None) -> str:
        d = hidden // heads
        split = self.ints([1, seq, heads, d])

        def heads_of(t: str) -> str:
            return self.op("Transpose", [self.op("Reshape", [t, split])], perm=[0, 2, 1, 3])

        q = heads_of(self.linear(x, f"{prefix}.query", hidden, hidden))
        k = self.linear(x, f"{prefix}.key", hidden, hidden)
        k_t = self.op("Transpose", [self.op("Reshape", [k, split])], perm=[0, 2, 3, 1])
        v = heads_of(self.linear(x, f"{prefix}.value", hidden, hidden))
        scores = self.op("Div", [self.op("MatMul", [q, k_t]), self.scalar(math.sqrt(d))])
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        probs = self.op("Softmax", [scores], axis=-1)
        ctx = self.op("Transpose", [self.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = self.op("Reshape", [ctx, self.ints([1, seq, hidden])])
        return self.linear(ctx, f"{prefix}.output", hidden, hidden)


def bert_tiny(b: Builder):
    seq, hidden, heads, ffn, vocab, layers = 128, 128, 2, 512, 30522, 2
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])
    am = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq])
    words = b.weight("embeddings.word_embeddings.weight", (vocab, hidden), 0.02)
    pos = b.weight("embeddings.position_embeddings.weight", (512, hidden), 0.02)
    types = b.weight("embeddings.token_type_embeddings.weight", (2, hidden), 0.02)
    pos_ids = b.const("embeddings.position_ids", np.arange(seq, dtype=np.int64)[None, :])
    type_ids = b.const("embeddings.token_type_ids", np.zeros((1, seq), dtype=np.int64))
    x = b.op("Add", [b.op("Gather", [words, "input_ids"]), b.op("Gather", [types, type_ids])])
    x = b.op("Add", [x, b.op("Gather", [pos, pos_ids])])
    x = b.layer_norm(x, "embeddings.LayerNorm", hidden)
    # extended mask: (1 - mask[:, None, None, :]) * float32 min
    m = b.op("Cast", [b.op("Unsqueeze", ["attention_mask", b.ints([1, 2])])], to=TensorProto.FLOAT)
    m = b.op("Mul", [b.op("Sub", [b.scalar(1.0), m]), b.scalar(float(np.finfo(np.float32).min))])
    for layer in range(layers):
        p = f"encoder.layer.{layer}"
        a = b.attention(x, f"{p}.attention.self", seq, hidden, heads, m)
        x = b.layer_norm(b.op("Add", [a, x]), f"{p}.attention.output.LayerNorm", hidden)
        h = b.gelu(b.linear(x, f"{p}.intermediate.dense", hidden, ffn), order=layer % 2)
        h = b.linear(h, f"{p}.output.dense", ffn, hidden)
        x = b.layer_norm(b.op("Add", [h, x]), f"{p}.output.LayerNorm", hidden)
    b.nodes[-1].output[0] = "last_hidden_state"
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden])
    ids_data = b.rng.integers(0, vocab, (1, seq)).astype(np.int64)
    mask_data = np.ones((1, seq), dtype=np.int64)
    mask_data[0, 100:] = 0
    return [ids, am], [out], {"input_ids": ids_data, "attention_mask": mask_data}


def vit_small_like(b: Builder):
    hidden, heads, mlp, layers, patch, side = 192, 3, 768, 4, 16, 224
    tokens = (side // patch) ** 2 + 1
    img = helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [1, 3, side, side])
    w = b.weight("embeddings.patch_embeddings.projection.weight", (hidden, 3, patch, patch),
                 1.0 / math.sqrt(3 * patch * patch))
    bias = b.const("embeddings.patch_embeddings.projection.bias",
                   (0.02 * b.rng.standard_normal(hidden)).astype(np.float32))
    x = b.op("Conv", ["pixel_values", w, bias], kernel_shape=[patch, patch],
             strides=[patch, patch], pads=[0, 0, 0, 0], dilations=[1, 1], group=1)
    x = b.op("Reshape", [x, b.ints([1, hidden, tokens - 1])])
    x = b.op("Transpose", [x], perm=[0, 2, 1])
    cls = b.weight("embeddings.cls_token", (1, 1, hidden), 0.02)
    x = b.op("Concat", [cls, x], axis=1)
    x = b.op("Add", [x, b.weight("embeddings.position_embeddings", (1, tokens, hidden), 0.02)])
    for layer in range(layers):
        p = f"encoder.layer.{layer}"
        h = b.layer_norm(x, f"{p}.layernorm_before", hidden)
        x = b.op("Add", [b.attention(h, f"{p}.attention", tokens, hidden, heads, None), x])
        h = b.layer_norm(x, f"{p}.layernorm_after", hidden)
        h = b.gelu(b.linear(h, f"{p}.intermediate.dense", hidden, mlp), order=layer % 2)
        x = b.op("Add", [b.linear(h, f"{p}.output.dense", mlp, hidden), x])
    x = b.layer_norm(x, "layernorm", hidden)
    x = b.op("Gather", [x, b.const("cls_index", np.array(0, dtype=np.int64))], axis=1)
    wc = b.weight("classifier.weight", (1000, hidden), 1.0 / math.sqrt(hidden))
    bc = b.const("classifier.bias", np.zeros(1000, dtype=np.float32))
    b.nodes.append(helper.make_node("Gemm", [x, wc, bc], ["logits"], name="/classifier/Gemm",
                                    alpha=1.0, beta=1.0, transB=1))
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])
    data = b.rng.standard_normal((1, 3, side, side)).astype(np.float32)
    return [img], [out], {"pixel_values": data}


MODELS = {"bert_tiny": bert_tiny, "vit_small_like": vit_small_like}


def write(outdir: pathlib.Path, name: str, make) -> None:
    b = Builder(seed=0)
    inputs, outputs, feeds = make(b)
    graph = helper.make_graph(b.nodes, name, inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="ramify gen_transformer_zoo.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    folder = outdir / name
    data = folder / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(folder / "model.onnx"), options,
                                providers=["CPUExecutionProvider"])
    results = sess.run(None, feeds)
    for i, inp in enumerate(inputs):
        t = numpy_helper.from_array(feeds[inp.name], inp.name)
        (data / f"input_{i}.pb").write_bytes(t.SerializeToString())
    for i, (out, value) in enumerate(zip(outputs, results)):
        if not np.all(np.isfinite(value)):
            raise SystemExit(f"{name}: onnxruntime gave non-finite output {out.name}")
        t = numpy_helper.from_array(value, out.name)
        (data / f"output_{i}.pb").write_bytes(t.SerializeToString())
    print(f"{folder / 'model.onnx'}: {len(b.nodes)} nodes, "
          f"outputs {[r.shape for r in results]}, onnxruntime ran it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", nargs="?", type=pathlib.Path,
                        default=REPO / "tests/data/generated/zoo")
    parser.add_argument("--only", nargs="+", choices=sorted(MODELS), help="models to write")
    args = parser.parse_args()
    for name in args.only or MODELS:
        write(args.outdir, name, MODELS[name])


if __name__ == "__main__":
    main()
