#!/usr/bin/env python3
"""How big the C library is, and what makes it so.

Builds `libramify_ffi.so` in the shipping profile (`[profile.mobile]`: fat LTO,
one codegen unit) with its symbols kept, then reports:
  - the stripped size (what an app ships) and the ELF sections' sizes;
  - the largest contributors, by module path (two or three segments deep),
    summed over the sizes `nm` gives every function and object;
  - optionally the largest single symbols.

Usage:
  scripts/size_report.py                       # every operator family, x86-64
  scripts/size_report.py --features ops-conv,ops-pool,...   # a reduced build
  scripts/size_report.py --aarch64             # through scripts/aarch64.sh
  scripts/size_report.py --json out.json       # also write the numbers

The build goes to target/size (target/size-reduced with --features;
target/aarch64 for --aarch64) so it does not disturb the usual release build;
the x86-64 ones under $CARGO_TARGET_DIR instead of target/ when that is set.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where cargo builds: $CARGO_TARGET_DIR when set (a worktree with its own
# target folder), the repository's target/ otherwise.
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")


def build(features, aarch64):
    """Builds the cdylib unstripped; returns its path."""
    args = ["build", "-p", "ramify-ffi", "--profile", "mobile",
            "--config", "profile.mobile.strip=false"]
    if features is not None:
        args += ["--no-default-features", "--features", features]
    # A reduced build gets its own folder, so the two do not rebuild each other.
    sub = "size" if features is None else "size-reduced"
    if aarch64:
        cmd = (["bash", os.path.join(REPO, "scripts", "aarch64.sh"), "cargo"] + args
               + ["--target", "aarch64-unknown-linux-gnu"])
        # aarch64.sh builds under <repo>/target/aarch64 whatever the caller's
        # CARGO_TARGET_DIR.
        out = os.path.join(REPO, "target", "aarch64", "aarch64-unknown-linux-gnu", "mobile")
    else:
        cmd = ["cargo"] + args + ["--target-dir", os.path.join(TARGET, sub)]
        out = os.path.join(TARGET, sub, "mobile")
    subprocess.run(cmd, cwd=REPO, check=True)
    return os.path.join(out, "libramify_ffi.so")


def tool(name, aarch64):
    """The binutils program for the library's architecture."""
    return f"aarch64-linux-gnu-{name}" if aarch64 else name


def stripped_size(lib, aarch64):
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "lib.so")
        shutil.copy(lib, copy)
        subprocess.run([tool("strip", aarch64), "--strip-all", copy], check=True)
        return os.path.getsize(copy)


def sections(lib, aarch64):
    """Allocated sections worth naming, with their sizes."""
    out = subprocess.run([tool("size", aarch64), "-A", lib], check=True,
                         capture_output=True, text=True).stdout
    sizes = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            sizes[parts[0]] = int(parts[1])
    keep = [".text", ".rodata", ".eh_frame", ".eh_frame_hdr", ".gcc_except_table",
            ".data.rel.ro", ".dynsym", ".dynstr", ".rela.dyn"]
    return {k: sizes[k] for k in keep if k in sizes}


GENERIC = re.compile(r"<[^<>]*>")


def owner(symbol, depth):
    """The module path a demangled symbol belongs to, `depth` segments deep.

    `<rayon_core::job::StackJob<L,F,R> as rayon_core::job::Job>::execute`
    belongs to `rayon_core::job`; a symbol of ours to `ramify::ops::<family>`."""
    s = symbol
    if s.startswith("<"):
        s = s[1:]
        # `<F as ramify::ops::parallel::Task>::run`: a blanket impl over a
        # closure type belongs to the trait's module (the task bodies).
        head, sep, rest = s.partition(" as ")
        if sep and re.fullmatch(r"[A-Z][A-Za-z0-9]*", head):
            s = rest
    # Cut at the first generic argument list or ` as ` of a trait impl.
    cut = len(s)
    for mark in ("<", ">", " as ", "(", " "):
        i = s.find(mark)
        if i != -1:
            cut = min(cut, i)
    path = [p for p in s[:cut].split("::") if p]
    if not path:
        return "(unnamed)"
    if path[0] in ("ramify", "ramify_ffi") and len(path) > 2 and path[1] == "ops":
        depth += 1  # ramify::ops::<family>
    return "::".join(path[:depth])


def symbols(lib, aarch64):
    out = subprocess.run([tool("nm", aarch64), "-S", "--size-sort", "-C", lib], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[2].lower() in "tdrbvw":
            yield int(parts[1], 16), parts[3]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--features", help="operator families (default: all)")
    ap.add_argument("--aarch64", action="store_true", help="build for aarch64-unknown-linux-gnu")
    ap.add_argument("--lib", help="measure this library instead of building one")
    ap.add_argument("--top", type=int, default=10, help="contributors to list")
    ap.add_argument("--depth", type=int, default=2, help="module path segments per contributor")
    ap.add_argument("--symbols", type=int, default=0, help="also list the N largest symbols")
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()

    lib = a.lib or build(a.features, a.aarch64)
    stripped = stripped_size(lib, a.aarch64)
    secs = sections(lib, a.aarch64)
    groups = defaultdict(int)
    counts = defaultdict(int)
    biggest = []
    total = 0
    for size, name in symbols(lib, a.aarch64):
        g = owner(name, a.depth)
        groups[g] += size
        counts[g] += 1
        total += size
        biggest.append((size, name))

    print(f"library: {lib}")
    print(f"features: {a.features or 'all'}")
    print(f"stripped size: {stripped:,} bytes ({stripped / 1e6:.2f} MB)")
    print("sections: " + ", ".join(f"{k} {v:,}" for k, v in secs.items()))
    print(f"\n| contributor | bytes | symbols | share of symbol bytes |")
    print("|---|---|---|---|")
    top = sorted(groups.items(), key=lambda kv: -kv[1])[: a.top]
    for g, size in top:
        print(f"| {g} | {size:,} | {counts[g]:,} | {100 * size / max(total, 1):.1f} % |")
    print(f"| (all symbols) | {total:,} | {sum(counts.values()):,} | 100 % |")
    if a.symbols:
        print(f"\nlargest symbols:")
        for size, name in sorted(biggest, reverse=True)[: a.symbols]:
            print(f"{size:>10,}  {name[:160]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"library": lib, "features": a.features or "all",
                       "stripped_bytes": stripped, "sections": secs,
                       "contributors": [{"path": g, "bytes": s, "symbols": counts[g]}
                                        for g, s in top],
                       "symbol_bytes": total}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
