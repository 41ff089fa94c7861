#!/usr/bin/env python3
"""Prints the functions a program ran most instructions in, from the
per-symbol counts of scripts/qemu_insn_count.c (`symbols=FILE`): Rust's
legacy symbol mangling decoded, hashes dropped, the top N with their share.

Usage: insn_profile.py SYMBOLS_FILE [--top N]
"""
import argparse
import re
from collections import Counter

ESCAPES = {"$SP$": "@", "$BP$": "*", "$RF$": "&", "$LT$": "<", "$GT$": ">",
           "$LP$": "(", "$RP$": ")", "$C$": ",", "..": "::"}


def demangle(sym: str) -> str:
    """`_ZN4core3ptr8drop17h0123456789abcdefE` -> `core::ptr::drop`."""
    if not sym.startswith("_ZN") or not sym.endswith("E"):
        return sym
    body, parts, i = sym[3:-1], [], 0
    while i < len(body):
        m = re.match(r"\d+", body[i:])
        if not m:
            return sym
        n = int(m.group())
        i += len(m.group())
        parts.append(body[i:i + n])
        i += n
    if parts and re.fullmatch(r"h[0-9a-f]{16}", parts[-1]):
        parts.pop()
    out = "::".join(parts)
    for k, v in ESCAPES.items():
        out = out.replace(k, v)
    out = re.sub(r"\$u([0-9a-f]+)\$", lambda m: chr(int(m.group(1), 16)), out)
    return out.replace("_$", "$").replace("::_", "::")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("symbols")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    counts = Counter()
    with open(args.symbols) as f:
        for line in f:
            n, _, sym = line.rstrip("\n").partition(" ")
            counts[demangle(sym)] += int(n)
    total = sum(counts.values())
    print(f"{total:>16,} instructions in all")
    for sym, n in counts.most_common(args.top):
        print(f"{n:>16,} {100 * n / max(total, 1):5.1f}%  {sym}")


if __name__ == "__main__":
    main()
