#!/usr/bin/env bash
# The whole test suite: Python reference data (pinned, in a local venv), then
# formatting, lints, every Rust test (library, integration, C API), a
# bounded, seeded model-mutation campaign against the command line, and the
# aarch64 lints and mobile type-checks.
# Usage: scripts/test.sh   (from anywhere; CI runs it through .ci/run)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# No incremental caches (gigabytes in a one-off build); show the disk the run
# starts with, as a full disk shows up only as a linker's bus error.
export CARGO_INCREMENTAL=0
df -h . | tail -n 1

scripts/ensure_venv.sh
.venv/bin/python scripts/gen_test_data.py
.venv/bin/python scripts/gen_node_tests.py
.venv/bin/python scripts/gen_quant_models.py
# The benchmark zoo's onnx.helper models (tests/zoo.rs); the torch-exported
# part (gen_torch_zoo.py) is for benchmarks only and needs no place here.
.venv/bin/python scripts/gen_transformer_zoo.py
.venv/bin/python scripts/gen_rnn_zoo.py

# The C API test runs its program under valgrind.
if ! command -v valgrind >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "test.sh: installing valgrind"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
    else
        echo "test.sh: valgrind is required for the C API test (apt-get install valgrind)" >&2
        exit 1
    fi
fi

# The library's layers import only downwards; operators are not known by
# name above them (docs/architecture.md).
.venv/bin/python scripts/check_layers.py
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# Every test binary runs even when one fails, so one run shows every failure.
cargo test --workspace --no-fail-fast

# A reduced build: only the operator families the example model needs (what
# `ramify ops --required` prints); the example runs, and every operator of a
# family left out is refused naming its cargo feature.
features=$(target/debug/ramify ops --required models/inception_mini.onnx | sed -n 's/^build: .*--features //p')
echo "test.sh: reduced build with --features $features"
cargo test -p ramify --no-default-features --features "$features" --test reduced_build

# Hostile input: 3,000 mutated models through `ramify run`, each a run or a
# clean error (no panic, abort, signal or hang) within the given budget.
.venv/bin/python scripts/mutate_campaign.py --bin target/debug/ramify --count 3000 \
    --seed 41 --jobs 2 --timeout 60 \
    --ramify-arg=--memory-limit --ramify-arg=1G --ramify-arg=--time-limit --ramify-arg=10000

# ARM64: clippy -D warnings for aarch64, the chosen tests under qemu on a
# plain ARMv8.0 core and on qemu's default core (the subset and why are in
# scripts/aarch64.sh), and the Android/iOS type-checks.
bash scripts/aarch64.sh clippy
bash scripts/aarch64.sh test
bash scripts/aarch64.sh mobile
