#!/usr/bin/env python3
"""Summarises an ncu --csv log of gem's CUDA kernels (bench/cuda/h200_run.sh dev|extra).

  ncu_steps.py LOG.csv [--compact OUT.csv]

Prints, for the last complete decode step (embed_kernel to embed_kernel) or, when the log has no
step boundary, for the last 96 launches: each kernel (name and grid) with its launch count, time
per launch, DRAM bytes read per launch and the resulting bytes/s. --compact writes one row per
launch (id, kernel, grid, block, ns, bytes read, bytes written) instead of ncu's one row per
metric.
"""
import argparse
import collections
import csv
import re


def launches(path):
    rows = list(csv.reader(open(path)))
    hdr, out = None, collections.OrderedDict()
    for r in rows:
        if r and r[0] == "ID":
            hdr = r
            continue
        if not hdr or len(r) != len(hdr):
            continue
        d = dict(zip(hdr, r))
        e = out.setdefault(d["ID"], {"name": d["Kernel Name"], "grid": d["Grid Size"],
                                     "block": d["Block Size"]})
        e[d["Metric Name"]] = float(d["Metric Value"].replace(",", ""))
    return list(out.values())


def short(name):
    name = re.sub(r"\(.*", "", name).replace("(anonymous namespace)::", "")
    return name.replace("unnamed>::", "").replace("void ", "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--compact")
    a = ap.parse_args()
    ks = launches(a.log)
    if a.compact:
        with open(a.compact, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "kernel", "grid", "block", "ns", "dram_read", "dram_write"])
            for i, k in enumerate(ks):
                w.writerow([i, short(k["name"]), k["grid"], k["block"],
                            int(k.get("gpu__time_duration.sum", 0)),
                            int(k.get("dram__bytes_read.sum", 0)),
                            int(k.get("dram__bytes_write.sum", 0))])
    starts = [i for i, k in enumerate(ks) if short(k["name"]).startswith("embed")]
    step = ks[starts[-2]:starts[-1]] if len(starts) >= 2 else ks[-96:]
    total = sum(k.get("gpu__time_duration.sum", 0) for k in step)
    print(f"{len(step)} launches, {total / 1e3:.1f} us of kernel time")
    agg = collections.OrderedDict()
    for k in step:
        e = agg.setdefault(f"{short(k['name'])} grid {k['grid']}", [0, 0.0, 0.0])
        e[0] += 1
        e[1] += k.get("gpu__time_duration.sum", 0)
        e[2] += k.get("dram__bytes_read.sum", 0)
    print(f"{'n':>4} {'us/launch':>10} {'MB/launch':>10} {'GB/s':>7}  kernel")
    for name, (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:4d} {t / n / 1e3:10.2f} {b / n / 1e6:10.2f} {b / t if t else 0:7.0f}  {name}")


if __name__ == "__main__":
    main()
