#!/usr/bin/env python3
"""Summarises a kernel trace CSV of gem decode steps (bench/cuda/trace_steps.sh; the columns
of nsys's cuda_gpu_trace report, so an nsys export works too).

  trace_steps.py TRACE.csv

Takes the kernels of the last complete decode step but one (embed_kernel to embed_kernel) and
prints per kernel (name and grid; a product also by the kernel before it, which tells
attn_output from ffn_down): launches, mean duration, mean gap from the previous kernel's end to
its start, and the step's totals (time, busy time, gaps). The L2 prefetch kernels run on a side
branch, concurrently: they are listed on their own and left out of the chain's gaps and busy time.
"""
import collections
import csv
import re
import sys


def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("void ", "")
    return re.sub(r"\(.*", "", name).replace("gem::cuda::", "")


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    ks = []
    for r in rows:
        name = r.get("Name", "")
        if not r.get("GrdX") or name.startswith("[CUDA"):
            continue
        ks.append((int(r["Start (ns)"]), int(r["Duration (ns)"]), short(name),
                   f'({r["GrdX"]},{r["GrdY"]},{r["GrdZ"]})'))
    ks.sort()
    starts = [i for i, k in enumerate(ks) if k[2].startswith("embed_kernel")]
    if len(starts) < 3:
        print(f"{len(ks)} kernels, {len(starts)} steps: too few")
        return
    step = ks[starts[-3]:starts[-2]]
    t0, t1 = step[0][0], step[-1][0] + step[-1][1]
    stats = collections.OrderedDict()
    side = collections.OrderedDict()
    busy = gaps = 0
    prev_end = None
    prev_name = "-"
    for s, d, name, grid in step:
        if name.startswith("l2_prefetch"):
            e = side.setdefault((name, grid), [0, 0])
            e[0] += 1
            e[1] += d
            continue
        gap = s - prev_end if prev_end is not None else 0
        prev_end = max(prev_end or 0, s + d)
        key = (name + (f" after {prev_name.split('<')[0]}" if name.startswith("matvec") else ""), grid)
        prev_name = name
        e = stats.setdefault(key, [0, 0, 0])
        e[0] += 1
        e[1] += d
        e[2] += gap
        busy += d
        gaps += gap
    print(f"step: {len(step)} kernels, {(t1 - t0) / 1e3:.1f} us, kernels {busy / 1e3:.1f} us, "
          f"gaps {gaps / 1e3:.1f} us")
    print(f"{'n':>4} {'us/launch':>10} {'gap us':>8} {'total us':>9}  kernel")
    for (name, grid), (n, d, g) in sorted(stats.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        print(f"{n:4d} {d / n / 1e3:10.2f} {g / n / 1e3:8.2f} {(d + g) / 1e3:9.1f}  {name} {grid}")
    for (name, grid), (n, d) in side.items():
        print(f"{n:4d} {d / n / 1e3:10.2f} {'side':>8} {d / 1e3:9.1f}  {name} {grid}")


if __name__ == "__main__":
    main()
