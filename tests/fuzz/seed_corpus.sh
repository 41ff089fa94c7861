#!/usr/bin/env bash
# Seeds the fuzz corpora (idempotent; run from anywhere):
#   corpus/load_model/  every tests/data/generated/node/<case>/model.onnx (ONNX's
#                       own node tests, made by scripts/gen_node_tests.py, which
#                       scripts/test.sh runs) plus models/inception_mini.onnx
#   corpus/run_op/      one small deterministic seed per registered operator
#                       (the first two bytes of a run_op input pick the operator)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
load="$here/corpus/load_model"
runop="$here/corpus/run_op"
mkdir -p "$load" "$runop"

n=0
shopt -s nullglob
for m in "$repo"/tests/data/generated/node/*/model.onnx; do
    case_name="$(basename "$(dirname "$m")")"
    cp "$m" "$load/node_$case_name.onnx"
    n=$((n + 1))
done
if [ "$n" -eq 0 ]; then
    echo "warning: no tests/data/generated/node/*/model.onnx; generate them first:" >&2
    echo "  .venv/bin/python scripts/gen_node_tests.py   (or scripts/test.sh)" >&2
fi
cp "$repo/models/inception_mini.onnx" "$load/inception_mini.onnx"
echo "load_model: $((n + 1)) seeds in $load"

# run_op: op index k (u16, little-endian as `arbitrary` reads it), then
# deterministic filler bytes for opset, attributes and inputs.
python3 - "$runop" <<'PY'
import random, sys, pathlib
out = pathlib.Path(sys.argv[1])
rng = random.Random(1234)
for k in range(256):
    body = bytes(rng.randrange(256) for _ in range(96))
    (out / f"op_{k:03d}").write_bytes(k.to_bytes(2, "little") + body)
print(f"run_op: 256 seeds in {out}")
PY
