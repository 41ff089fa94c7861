"""Exports the PyTorch part of the benchmark zoo (issue 43) to ONNX, with reference data.

What: architectures that are hard to rebuild faithfully with onnx.helper, exported
from PyTorch the way a new user would, with seeded random weights:

  swin_t/               torchvision swin_t, 1x3x224x224 (window attention, roll/pad)
  convnext_tiny/        torchvision convnext_tiny, 1x3x224x224 (7x7 depthwise,
                        channels-last LayerNorm, permutes)
  mobilenet_v3_large/   torchvision mobilenet_v3_large, 1x3x224x224 (hard-swish,
                        hard-sigmoid, squeeze-excite, depthwise)
  resnext50_32x4d/      torchvision resnext50_32x4d, 1x3x224x224 (grouped conv)
  gpt2_tiny/            transformers GPT2LMHeadModel, GPT2Config(n_layer=2, n_embd=128,
                        n_head=2), input_ids 1x32, eager (causal-mask) attention, no cache;
                        TorchScript fails on its mask code (aten::diff, transformers 5),
                        so this one comes from the dynamo exporter (opset 18), whose
                        node names vary from run to run (the outputs do not)
  transformer_encoder/  torch.nn.TransformerEncoder: 4 post-LN layers, d_model 256,
                        4 heads, feed-forward 1024, batch_first, input 1x64x256

How: torch.manual_seed(0) before each model is built (torchvision weights=None, so
nothing is downloaded; BatchNorm statistics taken from one seeded random batch, so
that activations keep their scale, see calibrate_batchnorm), eval mode, batch 1, TorchScript exporter (dynamo=False),
opset 17, constant folding on; where the TorchScript exporter fails the dynamo
exporter (opset 18) is tried and the model's line says so. Inputs are seeded
(numpy default_rng(0)); the outputs in test_data_set_0 are onnxruntime's on the
exported model with graph optimisations off and one thread, the layout
gen_transformer_zoo.py writes:

  OUTDIR/<name>/model.onnx
  OUTDIR/<name>/test_data_set_0/input_<i>.pb, output_<i>.pb

OUTDIR defaults to <repo>/tests/data/generated/zoo (git-ignored). The repository's
own venv and CI never need torch: run this with a separate venv that the user gives,
holding torch, torchvision, transformers, onnx, onnxruntime (and onnxscript for the
dynamo fallback), e.g.

  python3 -m venv /work/torchvenv
  /work/torchvenv/bin/pip install torch torchvision transformers onnx==1.23.2 \
      onnxruntime==1.31.1 onnxscript
  /work/torchvenv/bin/python scripts/gen_torch_zoo.py [OUTDIR] [--only NAME ...]
"""

import argparse
import pathlib
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

try:
    import torch
except ImportError:
    sys.exit("gen_torch_zoo.py needs torch, torchvision and transformers: run it with a venv "
             "that has them (see the module docstring); the repository's .venv has none")

REPO = pathlib.Path(__file__).resolve().parent.parent
OPSET = 17
DYNAMO_OPSET = 18


def image(side: int = 224):
    rng = np.random.default_rng(0)
    return {"input": rng.standard_normal((1, 3, side, side)).astype(np.float32)}


def calibrate_batchnorm(model, side: int = 224) -> None:
    """Sets BatchNorm statistics to those of a seeded random batch.

    torchvision's initialisation (Kaiming fan-out, which counts every output
    channel even in depthwise convolutions) with fresh statistics (mean 0,
    variance 1) shrinks MobileNet v3's logits to about 1e-9. Statistics measured
    on data normalise every layer's output as a trained network's do.
    """
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: one batch gives its own statistics
    model.train()
    with torch.no_grad():
        model(torch.randn(8, 3, side, side, generator=torch.Generator().manual_seed(1)))
    model.eval()


def torchvision_model(name: str):
    def make():
        import torchvision
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None)
        calibrate_batchnorm(model)
        return model, image(), ["input"], ["logits"]
    return make


def gpt2_tiny():
    from transformers import GPT2Config, GPT2LMHeadModel

    class Logits(torch.nn.Module):
        """input_ids -> logits, without the cache and the output dictionary."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            return self.inner(input_ids=input_ids, use_cache=False, return_dict=False)[0]

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=2, n_positions=128, use_cache=False)
    try:
        inner = GPT2LMHeadModel(config, attn_implementation="eager")
    except TypeError:  # older transformers take it in the config only
        config._attn_implementation = "eager"
        inner = GPT2LMHeadModel(config)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, config.vocab_size, (1, 32)).astype(np.int64)
    return Logits(inner), {"input_ids": ids}, ["input_ids"], ["logits"]


def transformer_encoder():
    # In eval mode the layers take PyTorch's fused fast path
    # (aten::_transformer_encoder_layer_fwd), which no ONNX exporter knows;
    # without it they run, and export, as the documented sequence of modules.
    torch.backends.mha.set_fastpath_enabled(False)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024,
                                             dropout=0.1, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
    rng = np.random.default_rng(0)
    return model, {"input": rng.standard_normal((1, 64, 256)).astype(np.float32)}, \
        ["input"], ["output"]


MODELS = {
    "swin_t": torchvision_model("swin_t"),
    "convnext_tiny": torchvision_model("convnext_tiny"),
    "mobilenet_v3_large": torchvision_model("mobilenet_v3_large"),
    "resnext50_32x4d": torchvision_model("resnext50_32x4d"),
    "gpt2_tiny": gpt2_tiny,
    "transformer_encoder": transformer_encoder,
}


def export(model, feeds: dict, input_names: list, output_names: list,
           path: pathlib.Path) -> str:
    """Exports with TorchScript (opset 17), else dynamo (opset 18); returns which."""
    args = tuple(torch.from_numpy(feeds[n]) for n in input_names)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, args, str(path), opset_version=OPSET,
                              input_names=input_names, output_names=output_names,
                              do_constant_folding=True, dynamo=False)
        return f"TorchScript exporter, opset {OPSET}"
    except Exception as e:  # noqa: BLE001 - any exporter failure means: try dynamo
        print(f"  TorchScript export failed ({type(e).__name__}: {str(e)[:200]}); "
              "trying the dynamo exporter", flush=True)
    program = torch.onnx.export(model, args, input_names=input_names,
                                output_names=output_names, opset_version=DYNAMO_OPSET,
                                dynamo=True, external_data=False)
    program.save(str(path), external_data=False)
    return f"dynamo exporter, opset {DYNAMO_OPSET}"


def write(outdir: pathlib.Path, name: str, make) -> None:
    model, feeds, input_names, output_names = make()
    model.eval()
    folder = outdir / name
    data = folder / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    with torch.no_grad():
        how = export(model, feeds, input_names, output_names, path)
        torch_out = model(*[torch.from_numpy(feeds[n]) for n in input_names])
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    graph_inputs = [i.name for i in proto.graph.input]
    graph_outputs = [o.name for o in proto.graph.output]
    if graph_inputs != input_names:
        raise SystemExit(f"{name}: exported inputs {graph_inputs}, expected {input_names}")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    results = sess.run(None, feeds)
    for i, n in enumerate(input_names):
        (data / f"input_{i}.pb").write_bytes(
            numpy_helper.from_array(feeds[n], n).SerializeToString())
    for i, (n, value) in enumerate(zip(graph_outputs, results)):
        if not np.all(np.isfinite(value)):
            raise SystemExit(f"{name}: onnxruntime gave non-finite output {n}")
        (data / f"output_{i}.pb").write_bytes(numpy_helper.from_array(value, n).SerializeToString())
    # The export is checked against PyTorch itself, so a wrong export is caught here.
    expected = torch_out.numpy()
    diff = float(np.max(np.abs(results[0] - expected)))
    scale = float(np.max(np.abs(expected)))
    if diff > 1e-4 * max(scale, 1.0):
        raise SystemExit(f"{name}: onnxruntime differs from torch by {diff:.3g} (scale {scale:.3g})")
    ops = sorted({n.op_type for n in proto.graph.node})
    print(f"{path}: {how}, {len(proto.graph.node)} nodes, output {list(results[0].shape)}, "
          f"|ORT - torch| <= {diff:.2g}; ops {', '.join(ops)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", nargs="?", type=pathlib.Path,
                        default=REPO / "tests/data/generated/zoo")
    parser.add_argument("--only", nargs="+", choices=sorted(MODELS), help="models to write")
    args = parser.parse_args()
    print(f"gen_torch_zoo: torch {torch.__version__}, onnx {onnx.__version__}, "
          f"onnxruntime {ort.__version__}", flush=True)
    for name in args.only or MODELS:
        write(args.outdir, name, MODELS[name])


if __name__ == "__main__":
    main()
