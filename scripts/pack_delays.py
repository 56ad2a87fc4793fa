#!/usr/bin/env python3
"""Where the wall time of a sweep's finished runs went, from their run records alone: training at
the run's own steady pace, the delay before it (a run's start: building the model, its first
steps) and the time after its last logged step (final evaluation, checkpoint, freeing the model).
For runs packed on one GPU, a start or end far longer than the run trained alone needs is time a
run waited for the others (kernels/dev/pack_notes.md).

  pack_delays.py RUNS_DIR [RUNS_DIR ...] [--commit C] [--csv OUT.csv]

A run's steady pace is the seconds per step between its second and last metrics.jsonl lines; its
start delay is the elapsed time of the first line minus that line's steps at that pace; its end is
wall_s (result.json) minus the elapsed time of the last line; it holds the final evaluation,
whose share of eval_s (every evaluation of the run, also printed) the records do not give. Runs
with fewer than three logged lines are left out. Prints one line per RUNS_DIR: runs, wall, start
and end totals and shares, and the median start delay; --csv writes one row per run.
"""
import argparse
import csv
import json
import os
import statistics
import sys


def run_rows(runs_dir, commit):
    for name in sorted(os.listdir(runs_dir)):
        d = os.path.join(runs_dir, name)
        paths = [os.path.join(d, f) for f in ("result.json", "metrics.jsonl", "meta.json", "config.json")]
        if not all(os.path.isfile(p) for p in paths):
            continue
        result, meta, cfg = (json.load(open(p)) for p in (paths[0], paths[2], paths[3]))
        if commit and meta.get("commit") != commit:
            continue
        lines = [json.loads(x) for x in open(paths[1]) if x.strip()]
        if len(lines) < 3 or "wall_s" not in result:
            continue
        pace = (lines[-1]["elapsed_s"] - lines[1]["elapsed_s"]) / (lines[-1]["step"] - lines[1]["step"])
        start = max(0.0, lines[0]["elapsed_s"] - lines[0]["step"] * pace)
        yield {"run_id": name, "pe": cfg.get("pe", ""), "layers": cfg.get("layers", ""),
               "commit": meta.get("commit", ""), "wall_s": result["wall_s"], "start_s": start,
               "end_s": max(0.0, result["wall_s"] - lines[-1]["elapsed_s"]), "eval_s": result.get("eval_s", 0.0),
               "s_per_step": pace}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs_dirs", nargs="+")
    ap.add_argument("--commit", help="only the runs made at this commit (meta.json)")
    ap.add_argument("--csv", help="write one row per run here")
    a = ap.parse_args()
    every = []
    for runs_dir in a.runs_dirs:
        if not os.path.isdir(runs_dir):
            print(f"pack_delays.py: {runs_dir} is not a directory", file=sys.stderr)
            sys.exit(2)
        rows = list(run_rows(runs_dir, a.commit))
        every += rows
        if not rows:
            print(f"{runs_dir}: no finished run with three or more logged steps")
            continue
        wall = sum(r["wall_s"] for r in rows)
        start = sum(r["start_s"] for r in rows)
        end = sum(r["end_s"] for r in rows)
        ev = sum(r["eval_s"] for r in rows)
        print(f"{runs_dir}: {len(rows)} runs, wall {wall:.0f} s; start delay {start:.0f} s ({100 * start / wall:.0f}%), "
              f"after the last step {end:.0f} s ({100 * end / wall:.0f}%); evaluation (all of it) {ev:.0f} s; "
              f"median start delay {statistics.median(r['start_s'] for r in rows):.1f} s")
    if a.csv and every:
        with open(a.csv + ".tmp", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(every[0]))
            w.writeheader()
            w.writerows(every)
        os.replace(a.csv + ".tmp", a.csv)


if __name__ == "__main__":
    main()
