#!/usr/bin/env python3
"""The median of a training metric of each run over windows of steps, read from the run records
(the `metrics.jsonl` of each run in a results folder's records.tgz): what a run's training did
between its evaluations, e.g. whether the gradient of a run stuck at chance shrinks or grows.

  metric_windows.py RECORDS.tgz RUNS.csv --metric grad_norm --windows 1000 5000 10000 20000
                    [--rows pe,lr] [--where COL=VALUE ...]

RUNS.csv (`pathbench collect`) chooses and names the runs: one Markdown row per run that matches
every --where (the --rows columns, then seed), one column per window [a, b) of consecutive
--windows values (the last window includes its end). A cell is the median of the metric over the
run's logged steps in the window (`metrics.jsonl` logs every log_every steps), "-" when it logged
none there. A run of RUNS.csv with no metrics.jsonl in RECORDS.tgz is an error: the two files
describe different records.
"""
import argparse
import csv
import json
import statistics
import sys
import tarfile


def fail(msg):
    print(f"metric_windows.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", help="a records.tgz of `scripts/lease.sh publish`")
    ap.add_argument("runs", help="the runs.csv collected from the same records")
    ap.add_argument("--metric", required=True, help="a field of metrics.jsonl, e.g. grad_norm or loss")
    ap.add_argument("--windows", type=int, nargs="+", required=True, help="step boundaries, increasing")
    ap.add_argument("--rows", default="pe,lr", help="comma-separated columns of RUNS.csv naming a run (seed is added)")
    ap.add_argument("--where", action="append", default=[], help="COLUMN=VALUE, repeatable")
    a = ap.parse_args()
    if len(a.windows) < 2 or any(x >= y for x, y in zip(a.windows, a.windows[1:])):
        fail("--windows takes two or more increasing steps")
    for w in a.where:
        if "=" not in w:
            fail(f"'{w}' is not COLUMN=VALUE")
    where = [w.split("=", 1) for w in a.where]
    try:
        runs = list(csv.DictReader(open(a.runs)))
    except OSError as e:
        fail(f"cannot read {a.runs}: {e.strerror}")
    keys = a.rows.split(",") + ["seed"]
    for col in ["run_id"] + keys + [c for c, _ in where]:
        if runs and col not in runs[0]:
            fail(f"{a.runs} has no column '{col}'")
    chosen = [r for r in runs if all(r[c] == v for c, v in where)]

    wanted = {r["run_id"] for r in chosen}
    logs = {}  # run_id -> its metrics.jsonl lines, read in one pass over the gzipped tar
    try:
        with tarfile.open(a.records) as tar:
            for m in tar:
                run = m.name.split("/")[-2] if m.name.endswith("/metrics.jsonl") else None
                if run in wanted:
                    text = tar.extractfile(m).read().decode()
                    logs[run] = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, tarfile.TarError) as e:
        fail(f"cannot read {a.records}: {e}")
    spans = list(zip(a.windows, a.windows[1:]))
    print("| " + " | ".join(keys) + " | " + " | ".join(f"{lo:,}–{hi:,}" for lo, hi in spans) + " |")
    print("|" + "---|" * (len(keys) + len(spans)))
    for r in sorted(chosen, key=lambda r: [r[k] for k in keys]):
        lines = logs.get(r["run_id"])
        if lines is None:
            fail(f"run {r['run_id']} of {a.runs} has no metrics.jsonl in {a.records}")
        cells = []
        for i, (lo, hi) in enumerate(spans):
            last = i == len(spans) - 1
            v = [x[a.metric] for x in lines if a.metric in x and lo <= x["step"] and (x["step"] < hi or last and x["step"] == hi)]
            cells.append(f"{statistics.median(v):.3g}" if v else "-")
        print("| " + " | ".join(r[k] for k in keys) + " | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
