#!/usr/bin/env bash
# Creates <repo>/.venv and installs the pinned packages of scripts/requirements.txt.
#
# Idempotent: a stamp file inside .venv records the hash of requirements.txt, and
# nothing is done while it matches. Works from any directory. PYTHON overrides the
# interpreter used to create the venv (default: python3).
#
# Usage: scripts/ensure_venv.sh
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$script_dir/.." && pwd)"
venv="$repo/.venv"
requirements="$script_dir/requirements.txt"
stamp="$venv/.ramify-requirements.sha256"

if command -v sha256sum >/dev/null 2>&1; then
    want="$(sha256sum "$requirements" | cut -d' ' -f1)"
else
    want="$(shasum -a 256 "$requirements" | cut -d' ' -f1)"
fi

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "ensure_venv: $venv is up to date (requirements hash ${want:0:12})"
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "ensure_venv: creating $venv with ${PYTHON:-python3} ($("${PYTHON:-python3}" --version 2>&1))"
    "${PYTHON:-python3}" -m venv "$venv"
fi

echo "ensure_venv: installing $requirements into $venv"
rm -f "$stamp"
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet -r "$requirements"
echo "$want" > "$stamp"
echo "ensure_venv: done; use $venv/bin/python"
