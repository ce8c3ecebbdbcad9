#!/usr/bin/env python3
"""PTX instructions per kernel of a CUDA source of gem, on this machine (no GPU needed).

    python3 bench/cuda/ptx_size.py src/backend/cuda/attention.cu [--match decode] [--lines KERNEL]

Compiles the file to PTX with the build's flags (sm_90a, -O3, -lineinfo) and prints, per kernel
entry, the number of PTX instructions (directives, labels and braces not counted). With --lines,
also the instructions of that kernel attributed to each source line (-lineinfo), the largest
first: where the code of a kernel comes from (a loader inlined at several call sites, code the
default path never runs).
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")


def ptx_of(source):
    out = os.path.join(tempfile.mkdtemp(prefix="gem-ptx-"), "out.ptx")
    cmd = [NVCC, "-I" + os.path.join(ROOT, "src"), "-O3", "-DNDEBUG", "-arch=sm_90a", "-lineinfo",
           "--expt-relaxed-constexpr", "-std=c++20", "-diag-suppress=2810", "-x", "cu", "-ptx",
           source, "-o", out]
    if not os.path.isfile(source):
        sys.exit(f"ptx_size: {source}: no such file (expected a .cu source of gem)")
    if not os.access(NVCC, os.X_OK):
        sys.exit(f"ptx_size: nvcc not found at {NVCC} (set NVCC)")
    if subprocess.run(cmd).returncode != 0:
        sys.exit(f"ptx_size: nvcc failed on {source} (its messages above)")
    with open(out) as f:
        return f.read()


def is_instruction(line):
    s = line.strip()
    return bool(s) and not s.startswith((".", "//", "$", "{", "}", "(", ")"))


def kernels(ptx):
    """(mangled name, body lines) per .entry."""
    for m in re.finditer(r"\.entry (\S+)\(", ptx):
        end = ptx.index("\n}\n", m.end())
        yield m.group(1), ptx[m.end():end].split("\n")


def short_name(mangled):
    # _ZN3gem4cuda<anon>NNname... -> name plus its template arguments, still mangled but readable
    m = re.search(r"\d+((?:attention|matvec|residual|rms|qkv|kv|quantize|gelu|softcap|embed|"
                  r"repack|dequant|sample|merge)\w*)", mangled)
    return m.group(1) if m else mangled


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("--match", default="", help="only kernels whose name contains this")
    ap.add_argument("--lines", default="", help="per source line for the kernel containing this")
    args = ap.parse_args()
    ptx = ptx_of(args.source)
    files = dict(re.findall(r"\.file\s+(\d+)\s+\"([^\"]+)\"", ptx))
    for name, body in kernels(ptx):
        short = short_name(name)
        if args.match not in short:
            continue
        print(f"{sum(map(is_instruction, body)):7d}  {short}")
        if args.lines and args.lines in short:
            per = collections.Counter()
            where = ("?", 0)
            for line in body:
                loc = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)", line)
                if loc:
                    where = (files.get(loc.group(1), "?"), int(loc.group(2)))
                elif is_instruction(line):
                    per[where] += 1
            for (path, ln), n in per.most_common(25):
                inside = path.startswith(ROOT + os.sep)
                print(f"         {n:6d}  {os.path.relpath(path, ROOT) if inside else path}:{ln}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
