#!/usr/bin/env python3
"""Rows of results/bench/sweep.csv for one benchmark sweep timed with each engine
(scripts/gpu.sh sweep-bench): runs per hour, the ratio to the process engine, model FLOP
utilisation and the projected wall time of the whole paper sweep on one GPU.

  sweep_bench.py --sweep NAME --full sweeps/paper-X.toml --full-runs N --processes RUNS_DIR WALL_S K
                 --packed RUNS_DIR WALL_S K [--stacked RUNS_DIR WALL_S KxN] --gpu NAME --commit C
                 --date D --csv results/bench/sweep.csv

Model FLOPs of a run: steps × (6 · P · B · T + 6 · L · B · T² · d_model), P the parameters outside
the embedding (read from model.safetensors), the second term causal attention's QKᵀ and AV
(2 · T² · d per sequence and layer forward, ×3 with the backward). Evaluation is not counted.
mfu = model FLOPs / wall / 790e12 (the H200's dense bf16 peak, whatever the run's precision).
projected_full_s = wall × (full runs / runs) × (full steps / steps): the engine's time for the
whole paper sweep at this benchmark's throughput, every run to its full steps. run_wall_s is a
run's mean wall time (its own, from result.json: longer than alone when runs share the GPU),
eval_share the fraction of the runs' time spent evaluating.
"""
import argparse
import csv
import json
import os
import struct
import tomllib

PEAK = 790e12


def params(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    total = embed = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        size = 1
        for d in t["shape"]:
            size *= d
        total += size
        if name.startswith("embed"):
            embed += size
    return total - embed


def flops(runs_dir):
    """Model FLOPs, steps, runs, and the runs' summed wall and evaluation seconds."""
    total, steps, n, run_wall, eval_s, precisions = 0.0, 0, 0, 0.0, 0.0, set()
    for d in sorted(os.listdir(runs_dir)):
        run = os.path.join(runs_dir, d)
        if not os.path.exists(os.path.join(run, "result.json")):
            continue
        cfg = json.load(open(os.path.join(run, "config.json")))
        res = json.load(open(os.path.join(run, "result.json")))
        with open(os.path.join(run, "eval.jsonl")) as f:
            T = json.loads(f.readline())["len"]
        B, L, C = cfg["batch"], cfg["layers"], cfg["d_model"]
        total += res["steps"] * (6 * params(os.path.join(run, "model.safetensors")) * B * T + 6 * L * B * T * T * C)
        steps += res["steps"]
        n += 1
        run_wall += res["wall_s"]
        eval_s += res.get("eval_s", 0.0)
        precisions.add(cfg["precision"])
    return total, steps, n, run_wall, eval_s, "+".join(sorted(precisions))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sweep", required=True)
    p.add_argument("--full", required=True)
    p.add_argument("--full-runs", type=int, required=True)
    p.add_argument("--processes", nargs=3, required=True)
    p.add_argument("--packed", nargs=3, required=True)
    p.add_argument("--stacked", nargs=3)  # sweep --pack K --stack N, k written KxN
    p.add_argument("--gpu", required=True)
    p.add_argument("--commit", required=True)
    p.add_argument("--date", required=True)
    p.add_argument("--csv", required=True)
    a = p.parse_args()
    full_steps = tomllib.load(open(a.full, "rb"))["base"]["steps"]
    rows, rph = [], {}
    engines = [("processes", a.processes), ("packed", a.packed)] + ([("stacked", a.stacked)] if a.stacked else [])
    for engine, (runs_dir, wall, k) in engines:
        wall = float(wall)
        f, steps, n, run_wall, eval_s, precision = flops(runs_dir)
        rph[engine] = n / wall * 3600
        rows.append({"sweep": a.sweep, "precision": precision, "engine": engine, "k": k, "runs": n, "wall_s": f"{wall:.1f}",
                     "runs_per_hour": f"{rph[engine]:.0f}", "ratio": "", "mfu": f"{f / wall / PEAK:.2e}",
                     "projected_full_s": f"{wall * a.full_runs / n * full_steps / (steps / n):.0f}",
                     "run_wall_s": f"{run_wall / n:.1f}", "eval_share": f"{eval_s / run_wall:.2f}",
                     "gpu": a.gpu, "commit": a.commit, "date": a.date})
    for r in rows:
        r["ratio"] = f"{rph[r['engine']] / rph['processes']:.2f}"
    cols = list(rows[0].keys())
    old = []
    if os.path.exists(a.csv):
        old = [r for r in csv.DictReader(open(a.csv)) if (r["sweep"], r.get("precision")) != (a.sweep, rows[0]["precision"])]
    with open(a.csv + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, cols, lineterminator="\n")
        w.writeheader()
        for r in old + rows:
            w.writerow({c: r.get(c, "") for c in cols})
    os.replace(a.csv + ".tmp", a.csv)
    for r in rows:
        print(" ".join(f"{c}={r[c]}" for c in ("sweep", "precision", "engine", "k", "runs", "wall_s", "runs_per_hour", "ratio",
                                                "mfu", "projected_full_s", "run_wall_s", "eval_share")))


if __name__ == "__main__":
    main()
