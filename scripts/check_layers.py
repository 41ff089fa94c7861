#!/usr/bin/env python3
"""Fails when a module of the library imports one of a higher layer, or when
the layers above the operators name an operator type.

The layers of `src/`, lowest first, are listed in LAYERS (and drawn in
docs/architecture.md). A top-level module may name (`crate::m`, in code or in
rustdoc links) only modules of strictly lower layers, so the import graph of the
top-level modules is acyclic by construction. Comments that are not doc links
are ignored.

Operator knowledge lives on the operator (`ir::Operator`): the analysis,
execution, scheduling and load layers must not match on operator names, so no
string literal there (outside `#[cfg(test)]` code) may be the name of an
operator listed in docs/operators.md.

Usage: scripts/check_layers.py [--graph]   (from anywhere; exit 1 on a violation)
"""

import pathlib
import re
import sys

# Lowest first. Modules on one line are peers and must not import each other.
LAYERS = [
    ["error", "order"],
    ["tensor", "load"],
    ["ir"],
    ["ops", "sched"],
    ["graph"],
    ["analysis", "onnx"],
    ["exec"],
    ["session"],
]

REPO = pathlib.Path(__file__).resolve().parent.parent
SRC = REPO / "src"
# Layers that must not know operators by name.
NAME_FREE = ["analysis", "exec", "sched", "load"]
OPERATOR_ROW = re.compile(r"^\| ([A-Z][A-Za-z0-9]*) \| \d+ \|$")
STRING = re.compile(r'"([^"\\]*)"')
CRATE_PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
# `super::x` in a top-level module's own root file means the crate root.
LINE_COMMENT = re.compile(r"//(?![/!]).*$")


def module_files(name):
    """Every source file of top-level module `name`."""
    root = SRC / f"{name}.rs"
    files = [root] if root.exists() else []
    folder = SRC / name
    if folder.is_dir():
        files += sorted(folder.rglob("*.rs"))
    return files


def imports(path):
    """The top-level modules a file names through `crate::`."""
    found = set()
    in_block = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if in_block:
            if "*/" in line:
                in_block = False
                line = line.split("*/", 1)[1]
            else:
                continue
        if "/*" in line and '"' not in line:
            head, rest = line.split("/*", 1)
            if "*/" not in rest:
                in_block = True
            line = head
        line = LINE_COMMENT.sub("", line)
        found.update(CRATE_PATH.findall(line))
    return found


def operator_names():
    """The operator types of docs/operators.md."""
    page = REPO / "docs" / "operators.md"
    return {
        m.group(1)
        for line in page.read_text(encoding="utf-8").splitlines()
        if (m := OPERATOR_ROW.match(line))
    }


def operator_literals(path, names):
    """(line number, name) of each operator name written as a string literal
    in non-test code of `path`."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("#[cfg(test)]"):
            break
        code = LINE_COMMENT.sub("", line)
        if code.lstrip().startswith("//"):
            continue
        found += [(number, lit) for lit in STRING.findall(code) if lit in names]
    return found


def main():
    rank = {m: i for i, layer in enumerate(LAYERS) for m in layer}
    present = {p.stem for p in SRC.iterdir() if p.suffix == ".rs" or p.is_dir()}
    present -= {"lib", "main"}
    unknown = sorted(present - rank.keys())
    errors = [f"src/{m}: not placed in a layer of scripts/check_layers.py" for m in unknown]
    edges = {}
    for module in sorted(present & rank.keys()):
        for path in module_files(module):
            for target in imports(path):
                if target == module or target not in rank:
                    continue
                edges.setdefault(module, set()).add(target)
                if rank[target] >= rank[module]:
                    rel = path.relative_to(SRC.parent)
                    errors.append(
                        f"{rel}: `{module}` (layer {rank[module]}) imports "
                        f"`{target}` (layer {rank[target]}): a module may import "
                        "only lower layers"
                    )
    names = operator_names()
    if not names:
        errors.append("docs/operators.md: no operator rows found")
    for module in NAME_FREE:
        for path in module_files(module):
            for number, name in operator_literals(path, names):
                rel = path.relative_to(REPO)
                errors.append(
                    f"{rel}:{number}: names the operator {name!r}; put what it "
                    "needs on the operator (ir::Operator) instead"
                )
    if "--graph" in sys.argv:
        for module in sorted(edges, key=lambda m: rank[m]):
            print(f"{module} -> {', '.join(sorted(edges[module], key=lambda m: rank[m]))}")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_layers: {len(errors)} violation(s)", file=sys.stderr)
        return 1
    print(
        f"check_layers: {len(rank)} modules in {len(LAYERS)} layers, no upward import; "
        f"no operator names in {', '.join(NAME_FREE)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
