#!/usr/bin/env python3
"""Per-kernel GPU time of one training step, from `ncu --metrics gpu__time_duration.sum --csv`.

scripts/gpu.sh profile writes one CSV per (config, encoding) into results/bench/ncu/ (ncu of
`pathbench bench train --device cuda --precision tf32 --warmup-steps 0 --measure-steps 1`: exactly one step,
run eagerly). This prints, per file, the step's total kernel time and the kernels taking the most,
summed over launches, as Markdown. Usage: scripts/ncu_summary.py FILE.csv [...] [--top N]
"""
import argparse
import collections
import csv
import os
import re
import sys

UNIT_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}


def ncu_rows(path):
    """The rows of ncu's CSV table (one per kernel launch and metric), skipping ncu's other output;
    None when the file holds no table."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        return None
    return list(csv.DictReader(l for l in lines[start:] if l.startswith('"')))


def kernel_times(path):
    rows = ncu_rows(path)
    if rows is None:
        sys.exit(f"ncu_summary: {path} holds no ncu CSV table")
    ms, count = collections.defaultdict(float), collections.Counter()
    for row in rows:
        if row["Metric Name"] != "gpu__time_duration.sum":
            continue
        name = re.sub(r"\(.*", "", row["Kernel Name"])[:70]
        ms[name] += float(row["Metric Value"].replace(",", "")) * UNIT_MS[row["Metric Unit"]]
        count[name] += 1
    return ms, count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    for path in args.files:
        ms, count = kernel_times(path)
        total = sum(ms.values())
        print(f"### {os.path.basename(path)}: {total:.2f} ms of kernels, {sum(count.values())} launches\n")
        print("| ms | launches | share | kernel |\n|---|---|---|---|")
        for name, t in sorted(ms.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"| {t:.3f} | {count[name]} | {t / total:.0%} | `{name}` |")
        print()


if __name__ == "__main__":
    main()
