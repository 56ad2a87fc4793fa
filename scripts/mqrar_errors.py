#!/usr/bin/env python3
"""What an MQRAR-N model answers when it is wrong, from the errors CSV of `pathbench eval --errors`:
for each wrong read, is the predicted value one the key held earlier (its j-th most recent value,
j != N), a value of another key in the context, or no value of the context at all?

  mqrar_errors.py ERRORS.csv[.gz] --n-back N [--split test]

A model that finds a key's recent values but not which of them is the N-th answers mostly with the
key's other recent values; one that has not learned to find the key answers with values of other
keys or with values not in the context. The task (tasks/mqrar.cpp): a stream of "key value" pairs
(tokens k<i>, v<j>); at a key with at least N earlier assignments the target is the value of its
N-th most recent earlier one. Each wrong read's target is recomputed from the input and checked
against the CSV's: a mismatch (another N, another task) is an error, exit 2.

One Markdown table: the answer's kind, how many of the wrong reads, and their share; the key's j-th
most recent values by j, up to the largest j answered.
"""
import argparse
import csv
import gzip
import sys
from collections import Counter


def fail(msg):
    print(f"mqrar_errors.py: {msg}", file=sys.stderr)
    sys.exit(2)


def classify(tokens, preds, targets, positions, n_back):
    """The kind of each wrong answer at `positions`: ("key", j) for the key's j-th most recent value,
    "other key", "not in context" or "not a value"."""
    kinds = []
    for t in positions:
        key = tokens[t]
        if not key.startswith("k"):
            raise ValueError(f"position {t} is {key}, not a key")
        # The values assigned before t, most recent first, for this key and for all keys.
        mine = [tokens[i + 1] for i in range(t - 2, -1, -2) if tokens[i] == key]
        seen = {tokens[i + 1] for i in range(0, t, 2)}
        if len(mine) < n_back or mine[n_back - 1] != targets[t]:
            raise ValueError(f"position {t}: the target {targets[t]} is not the key's value {n_back} back")
        p = preds[t]
        if not p.startswith("v"):
            kinds.append("not a value")
        elif p in mine:
            kinds.append(("key", mine.index(p) + 1))
        elif p in seen:
            kinds.append("other key")
        else:
            kinds.append("not in context")
    return kinds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("errors", help="the CSV of `pathbench eval --errors` on an MQRAR run (gzipped if it ends in .gz)")
    ap.add_argument("--n-back", type=int, required=True, help="the task's n_back")
    ap.add_argument("--split", help="only this split's sequences")
    a = ap.parse_args()
    if a.n_back < 1:
        fail("--n-back must be >= 1")
    try:
        opener = gzip.open if a.errors.endswith(".gz") else open
        with opener(a.errors, "rt", newline="") as f:
            reader = csv.DictReader(f)
            rows, columns = list(reader), reader.fieldnames or []
    except (OSError, EOFError) as e:
        fail(f"cannot read {a.errors}: {getattr(e, 'strerror', None) or e}")
    need = ["split", "index", "input", "target", "prediction", "positions"]
    if any(c not in columns for c in need):
        fail(f"{a.errors} is not an errors CSV of `pathbench eval --errors` (columns {', '.join(need)})")
    counts = Counter()
    for r in rows:
        if a.split and r["split"] != a.split:
            continue
        tokens, targets, preds = r["input"].split(), r["target"].split(), r["prediction"].split()
        try:
            counts.update(classify(tokens, preds, targets, [int(t) for t in r["positions"].split()], a.n_back))
        except (ValueError, IndexError) as e:
            fail(f"{r['split']} sequence {r['index']}: {e}")
    total = sum(counts.values())
    if total == 0:
        print("no wrong reads")
        return
    js = sorted(k[1] for k in counts if isinstance(k, tuple))
    order = [("key", j) for j in range(1, (js[-1] if js else 0) + 1) if j != a.n_back]
    order += ["other key", "not in context", "not a value"]
    print(f"| answer (N = {a.n_back}) | wrong reads | share % |")
    print("|---|---|---|")
    for k in order:
        name = f"the key's value {k[1]} back" if isinstance(k, tuple) else k
        print(f"| {name} | {counts[k]} | {100 * counts[k] / total:.1f} |")
    print(f"| all wrong reads | {total} | 100 |")


if __name__ == "__main__":
    main()
