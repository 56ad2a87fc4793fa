#!/usr/bin/env python3
"""The slow-call lines of sweep logs (core/slow_call.h, PB_SLOW_CALL_S) as a table: for each runtime
call, how many lines, their seconds in all and the longest; and for the waits for the capture
fence, who held it as each began (the call holding it alone, or nothing, and whether captures
were in flight). kernels/dev/pack_notes.md's counts come from it.

  slow_calls.py LOG [LOG ...]

One table per LOG, in Markdown. A log without slow-call lines prints "no slow calls".
"""
import re
import sys
from collections import Counter, defaultdict

LINE = re.compile(r"pathbench: slow call: (?P<what>.+?) took (?P<s>[0-9.]+) s on thread \d+"
                  r"(?:, run \S+)? \(at [0-9.]+ s after the process started"
                  r"(?:; held alone for (?P<holder>.+?), (?P<capturing>\d+) threads capturing)?")


def table(path):
    seconds, holders = defaultdict(list), Counter()
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.search(line)
            if not m:
                continue
            seconds[m["what"]].append(float(m["s"]))
            if m["holder"] is not None:
                captures = "captures in flight" if int(m["capturing"]) > 0 else "no capture"
                holders[f"{m['holder']}; {captures}"] += 1
    out = [f"## {path}", ""]
    if not seconds:
        return out + ["no slow calls", ""]
    out += ["| call | lines | seconds in all | longest |", "|---|---|---|---|"]
    for what, s in sorted(seconds.items(), key=lambda kv: -sum(kv[1])):
        out.append(f"| {what} | {len(s)} | {sum(s):.1f} | {max(s):.2f} |")
    if holders:
        out += ["", "| the fence's wait began with it held alone for | lines |", "|---|---|"]
        out += [f"| {h} | {n} |" for h, n in holders.most_common()]
    return out + [""]


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        asked = len(sys.argv) == 2
        print(__doc__.strip(), file=sys.stdout if asked else sys.stderr)
        sys.exit(0 if asked else 2)
    for path in sys.argv[1:]:
        try:
            print("\n".join(table(path)))
        except OSError as e:
            print(f"slow_calls.py: cannot read {path}: {e.strerror}", file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":
    main()
