#!/usr/bin/env python3
"""Lists the compiled shaders whose loops lost multiply-add contraction.

glslang propagates `precise` backwards through every value the precise one is computed from, so a
`precise` in a product's epilogue can mark the product loop's accumulation `NoContraction`: the
driver may then no longer fuse its multiply-adds (slower on NVIDIA, and other bits than a build
of the same loop without it: a token alone and in a batch then disagree). This prints, for each
SPIR-V file given (default: the release build's shaders), the `NoContraction` adds and
multiplies that take a loop-carried value (an OpPhi) as an operand, which is where such a loop
shows. Expected hits: the exact-mode kernels and RMSNorm (their arithmetic is the CPU's on
purpose) and a rounding applied once to a loop's result. Needs `spirv-dis` (Debian: spirv-tools).

Usage: python3 bench/spirv_loop_nocontraction.py [FILE.spv ...]
"""
import glob
import re
import subprocess
import sys


def loop_hits(path):
    text = subprocess.run(["spirv-dis", path], capture_output=True, text=True, check=True).stdout
    marked = set(re.findall(r"OpDecorate (%\w+) NoContraction", text))
    defs = {}
    for line in text.splitlines():
        m = re.match(r"\s*(%\w+) = (\w+) (.*)", line)
        if m:
            defs[m.group(1)] = (m.group(2), m.group(3))
    hits = []
    for result in sorted(marked):
        op, args = defs.get(result, ("", ""))
        if op not in ("OpFAdd", "OpFSub", "OpFMul"):
            continue
        operands = re.findall(r"%\w+", args)[1:]
        if any(defs.get(a, ("",))[0] == "OpPhi" for a in operands):
            hits.append(f"{result} = {op} {args}")
    return hits


def main():
    files = sys.argv[1:] or sorted(glob.glob("target/release/build/strata-gpu-*/out/*.spv"))
    if not files:
        sys.exit("no SPIR-V files: build first (cargo build --release) or name them")
    for path in files:
        hits = loop_hits(path)
        if hits:
            print(f"{path}: {len(hits)}")
            for h in hits:
                print(f"    {h}")


if __name__ == "__main__":
    main()
