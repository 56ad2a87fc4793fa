#!/usr/bin/env python3
"""The first evaluated step at which each run reached a value, from a history.csv of `pathbench
collect`: how fast, in steps, a run learned, where a fixed-budget table only says whether.

  first_step.py HISTORY.csv --split val --metric seq_acc --at 0.9 [0.99 ...] [--rows pe,lr] [--where COL=V ...]

One Markdown row per run (the --rows columns, then seed), one column per threshold: the first step
whose value is >= it, or "not by S" with S the run's last evaluated step. Periodic evaluations
may read a subset of the split (eval_every_n): the step is that evaluation's. At a run's last step
the history keeps the final evaluation (the whole split) only; when the run stopped there by its
stop_at rule on this split and metric, the periodic value that met the rule (in the `stop` column)
counts as well, so a run stopped at the threshold is not reported as "not by" that step.
"""
import argparse
import csv
import re
import sys
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("history")
    ap.add_argument("--split", required=True)
    ap.add_argument("--metric", required=True)
    ap.add_argument("--at", type=float, nargs="+", required=True)
    ap.add_argument("--rows", default="pe,lr", help="comma-separated columns naming a run (seed is added)")
    ap.add_argument("--where", action="append", default=[], help="COLUMN=VALUE, repeatable")
    a = ap.parse_args()
    try:
        rows = list(csv.DictReader(open(a.history)))
    except OSError as e:
        print(f"first_step.py: cannot read {a.history}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    keys = a.rows.split(",") + ["seed"]
    where = [w.split("=", 1) for w in a.where]
    for col in keys + [a.metric, "split", "step"] + [c for c, _ in where]:
        if rows and col not in rows[0]:
            print(f"first_step.py: {a.history} has no column '{col}'", file=sys.stderr)
            sys.exit(2)
    stop_at = re.compile(rf"stop_at {re.escape(a.split)}:{re.escape(a.metric)}>=\S+ \((\S+) at step (\d+)\)")
    runs = defaultdict(set)  # run key → {(step, value)}
    for r in rows:
        if r["split"] == a.split and all(r[c] == v for c, v in where):
            runs[tuple(r[k] for k in keys)].add((int(r["step"]), float(r[a.metric])))
            if m := stop_at.match(r.get("stop", "")):
                runs[tuple(r[k] for k in keys)].add((int(m.group(2)), float(m.group(1))))
    print("| " + " | ".join(keys) + " | " + " | ".join(f"first step with {a.metric} ≥ {t:g}" for t in a.at) + " |")
    print("|" + "---|" * (len(keys) + len(a.at)))
    for key, points in sorted(runs.items()):
        points = sorted(points)
        cells = [next((str(s) for s, v in points if v >= t), f"not by {points[-1][0]}") for t in a.at]
        print("| " + " | ".join(key) + " | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
