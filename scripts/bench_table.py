#!/usr/bin/env python3
"""Markdown table of results/bench/train.csv (written by scripts/gpu.sh bench).

One row per (config, position encoding): pathbench's CUDA trainer in ms per step at each precision
in the CSV (fp32, TF32, bf16: `--precision`; PyTorch's bf16 is its bf16 autocast), and its ratio
to PyTorch eager RoPE at the same precision, measured in the same run. The issue's
target is a ratio <= 1/3 (0.333). Usage: scripts/bench_table.py results/bench/train.csv
"""
import csv
import sys


def main(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"bench_table: {path} has no rows")
    torch = {(r["config"], r["precision"]): float(r["ms_per_step"])
             for r in rows if r["framework"] == "pytorch" and r["compiled"] in ("0", "False", "false")}
    ours = {(r["config"], r["pe"], r["precision"]): float(r["ms_per_step"])
            for r in rows if r["framework"] == "pathbench"}
    configs = list(dict.fromkeys(r["config"] for r in rows))
    pes = list(dict.fromkeys(r["pe"] for r in rows if r["framework"] == "pathbench"))
    first = rows[0]
    print(f"GPU: {first['gpu']}; commit {first['commit']}; {first['date']}; command: scripts/gpu.sh bench\n")
    precs = [p for p in ("fp32", "tf32", "bf16") if any(r["precision"] == p for r in rows)]
    names = {"fp32": "fp32", "tf32": "TF32", "bf16": "bf16"}
    print("| config | pe | " + " | ".join(f"{names[p]} ms | / PyTorch {names[p]} RoPE" for p in precs) + " |")
    print("|---|---|" + "---|---|" * len(precs))
    for c in configs:
        base = {p: torch.get((c, p)) for p in precs}
        print(f"| {c} | PyTorch eager rope | " + " | ".join(f"{fmt(base[p])} | 1" for p in precs) + " |")
        for pe in pes:
            cells = []
            for prec in precs:
                ms = ours.get((c, pe, prec))
                cells += [fmt(ms), fmt(ms / base[prec]) if ms and base[prec] else "–"]
            print(f"| {c} | {pe} | " + " | ".join(cells) + " |")


def fmt(x):
    return "–" if x is None else f"{x:.3g}"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench_table.py TRAIN_CSV")
    main(sys.argv[1])
