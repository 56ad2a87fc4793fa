#!/usr/bin/env python3
"""The first evaluated step at which each run reached a value, from a history.csv of `pathbench
collect`: how fast, in steps, a run learned, where a fixed-budget table only says whether.

  first_step.py HISTORY.csv --split val --metric seq_acc --at 0.9 [0.99 ...] [--rows pe,lr] [--where COL=V ...]
  first_step.py HISTORY.csv --split val --metric seq_acc --at 0.9 --rows pe --cols task_len [--where ...]
  ... --order pe=nope,rope,alibi      rows in this order of pe's values (a spec by its name, the text
                                      before ':'); values not listed after them. Otherwise numbers by
                                      value, then text

One Markdown row per run (the --rows columns, then seed), one column per threshold: the first step
whose value is >= it, or "not by S" with S the run's last evaluated step. With --cols (one
threshold), a table of the --rows values against the values of that column: each cell lists the
first steps of all its runs (every seed and every value of the columns not named), in thousands,
in increasing order, then "+k not" for the k runs that never reached the threshold.

Periodic evaluations may read a subset of the split (eval_every_n): the step is that evaluation's.
At a run's last step the history keeps the final evaluation (the whole split) only; when the run
stopped there by its stop_at rule on this split and metric, the periodic value that met the rule
(in the `stop` column) counts as well, so a run stopped at the threshold is not reported as "not
by" that step. That value is the whole split's: in a distance_history.csv (a row per range of
recall distances, column distance_from) it says nothing of one range, and is not used.
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
    ap.add_argument("--cols", help="a column: one table cell per (--rows value, value of this column)")
    ap.add_argument("--order", action="append", default=[], help="COLUMN=V1,V2,...: the rows' order of its values")
    a = ap.parse_args()
    if a.cols and len(a.at) != 1:
        print("first_step.py: --cols takes one threshold (--at X)", file=sys.stderr)
        sys.exit(2)
    try:
        rows = list(csv.DictReader(open(a.history)))
    except OSError as e:
        print(f"first_step.py: cannot read {a.history}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    keys = a.rows.split(",") + (["run_id", a.cols] if a.cols else ["seed"])
    for opt in a.where + a.order:
        if "=" not in opt:
            print(f"first_step.py: '{opt}' is not COLUMN=VALUE", file=sys.stderr)
            sys.exit(2)
    where = [w.split("=", 1) for w in a.where]
    order = {c: v.split(",") for c, v in (o.split("=", 1) for o in a.order)}
    for col in keys + [a.metric, "split", "step"] + [c for c, _ in where] + list(order):
        if rows and col not in rows[0]:
            print(f"first_step.py: {a.history} has no column '{col}'", file=sys.stderr)
            sys.exit(2)
    per_range = bool(rows) and "distance_from" in rows[0]  # the stop rule's value is the whole split's
    stop_at = re.compile(rf"stop_at {re.escape(a.split)}:{re.escape(a.metric)}>=\S+ \((\S+) at step (\d+)\)")
    runs = defaultdict(set)  # run key → {(step, value)}
    for r in rows:
        if r["split"] == a.split and all(r[c] == v for c, v in where):
            points = runs[tuple(r[k] for k in keys)]
            points.add((int(r["step"]), float(r[a.metric])))
            if not per_range and (m := stop_at.match(r.get("stop", ""))):
                points.add((int(m.group(2)), float(m.group(1))))
    first = {key: [next((s for s, v in sorted(p) if v >= t), None) for t in a.at] for key, p in runs.items()}

    def row_order(key):
        return [value_order(v, order.get(col)) for col, v in zip(keys, key)]

    if a.cols:
        pivot(first, len(keys) - 2, row_order, a)
        return
    print("| " + " | ".join(keys) + " | " + " | ".join(f"first step with {a.metric} ≥ {t:g}" for t in a.at) + " |")
    print("|" + "---|" * (len(keys) + len(a.at)))
    for key, points in sorted(runs.items(), key=lambda kv: row_order(kv[0])):
        cells = [str(s) if s is not None else f"not by {max(points)[0]}" for s in first[key]]
        print("| " + " | ".join(key) + " | " + " | ".join(cells) + " |")


def number_or_text(v):
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def value_order(v, listed):
    """A value's place: its index in `listed` (matched by the name before ':'), then unlisted ones."""
    name = v.split(":", 1)[0]
    if listed and name in listed:
        return (0, listed.index(name), number_or_text(v))
    return (1, 0, number_or_text(v))


def pivot(first, n_row_keys, row_order, a):
    """One cell per (row, column value): its runs' first steps in thousands, then '+k not'."""
    cells = defaultdict(list)
    for key, steps in first.items():
        cells[(key[:n_row_keys], key[-1])].append(steps[0])
    row_values = sorted({r for r, _ in cells}, key=row_order)
    col_values = sorted({c for _, c in cells}, key=number_or_text)
    print(f"*first evaluated step with {a.split} {a.metric} ≥ {a.at[0]:g}, in thousands, every run; "
          f"+k not: k runs that never reached it*")
    print()
    print(f"| {a.rows.replace(',', ' ')} \\ {a.cols} | " + " | ".join(col_values) + " |")
    print("|" + "---|" * (len(col_values) + 1))
    for r in row_values:
        out = []
        for c in col_values:
            steps = cells.get((r, c), [])
            reached = sorted(s for s in steps if s is not None)
            text = " ".join(f"{s / 1000:g}" for s in reached)
            if len(reached) < len(steps):
                text += f" +{len(steps) - len(reached)} not"
            out.append(text.strip())
        print("| " + " ".join(r) + " | " + " | ".join(out) + " |")


if __name__ == "__main__":
    main()
