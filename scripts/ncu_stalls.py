#!/usr/bin/env python3
"""Where the warps of a kernel wait, from ncu's per-instruction stall samples.

Input: the CSV of `ncu -i REPORT --page source --csv --print-source sass` (a report collected with
`--section SourceCounters`, as `scripts/gpu.sh ncu-stalls` does). For each kernel in it: the share
of each stall reason over all samples, then the SASS in windows of --window instructions (in
program order, so loop bodies and phases stay together) with their share of the samples, of the
leading reasons, and their most frequent opcodes, then the --top instructions with the most
samples of --reason.

  scripts/ncu_stalls.py build-gpu/logs/ncu_stalls_path_B8_T4096_H16_D64_sass.csv [--window 150]
"""
import argparse
import collections
import csv
import sys

REASONS = ["long_sb", "short_sb", "wait", "barrier", "math", "mio", "lg", "branch_resolving",
           "dispatch", "no_inst", "not_selected", "selected"]
SAMPLES = "Warp Stall Sampling (All Samples)"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def kernels(path):
    """(kernel name, [rows as dicts]) per kernel section of the CSV."""
    name, lines, out = None, [], []
    for line in open(path, newline=""):
        if line.startswith('"Kernel Name"'):
            if name is not None:
                out.append((name, list(csv.DictReader(lines))))
            name, lines = next(csv.reader([line]))[1], []
        elif name is not None:
            lines.append(line)
    if name is not None:
        out.append((name, list(csv.DictReader(lines))))
    return out


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else "?"


def report(name, rows, window, top, reason):
    total = sum(number(r.get(SAMPLES, "")) for r in rows)
    print(f"## {name}\n{len(rows)} instructions, {total:,.0f} samples")
    if not total:
        return
    shares = {k: sum(number(r.get("stall_" + k, "")) for r in rows) / total for k in REASONS}
    print("stall reasons: " + ", ".join(f"{k} {v:.1%}" for k, v in sorted(shares.items(), key=lambda x: -x[1])))
    lead = [k for k, _ in sorted(shares.items(), key=lambda x: -x[1])[:4]]
    print(f"\n| instructions | samples | {' | '.join(lead)} | barriers | top opcodes |")
    print("|---|---|" + "---|" * len(lead) + "---|---|")
    for start in range(0, len(rows), window):
        part = rows[start:start + window]
        s = sum(number(r.get(SAMPLES, "")) for r in part)
        if s / total < 0.005:
            continue
        cells = " | ".join(f"{sum(number(r.get('stall_' + k, '')) for r in part) / total:.1%}" for k in lead)
        ops = collections.Counter(opcode(r.get("Source", "")) for r in part)
        bars = sum("BAR.SYNC" in r.get("Source", "") for r in part)
        print(f"| {start}–{start + len(part) - 1} | {s / total:.1%} | {cells} | {bars} | "
              + ", ".join(f"{o} {n}" for o, n in ops.most_common(4)) + " |")
    key = "stall_" + reason
    print(f"\ntop {top} instructions by {reason}:")
    for i in sorted(range(len(rows)), key=lambda i: -number(rows[i].get(key, "")))[:top]:
        r = rows[i]
        print(f"  {i:5d} {number(r.get(key, '')) / total:6.2%}  {r.get('Source', '').strip()[:90]}")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--window", type=int, default=150, help="instructions per window (default 150)")
    ap.add_argument("--top", type=int, default=10, help="instructions listed by --reason (default 10)")
    ap.add_argument("--reason", default="long_sb", choices=REASONS, help="default long_sb")
    args = ap.parse_args()
    if args.window < 1 or args.top < 0:
        sys.exit("ncu_stalls.py: --window needs a positive integer and --top one >= 0")
    try:
        found = kernels(args.csv)
    except OSError as e:
        sys.exit(f"ncu_stalls.py: cannot read {args.csv}: {e.strerror}")
    if not found:
        sys.exit(f"ncu_stalls.py: {args.csv} has no \"Kernel Name\" section (not ncu --page source --csv output?)")
    seen = set()
    for name, rows in found:
        if name in seen:  # ncu repeats a kernel's section per source view; the first one is enough
            continue
        seen.add(name)
        report(name, rows, args.window, args.top, args.reason)


if __name__ == "__main__":
    main()
