#!/usr/bin/env python3
"""The slow-call lines of sweep logs (core/slow_call.h, PB_SLOW_CALL_S) as a table: for each runtime
call, how many lines, their seconds in all and the longest; and for the waits for the capture
fence, who held it as each began (the call holding it alone, or nothing, and whether captures
were in flight). kernels/dev/pack_notes.md's counts come from it. Then each stalled call (a call
still open after PB_STALL_TRACE_S seconds) with the stack its thread wrote: the frames as
backtrace_symbols_fd prints them, C++ names demangled where c++filt is on the PATH.

  slow_calls.py LOG [LOG ...]

One table per LOG, in Markdown. A log without slow-call lines prints "no slow calls".
"""
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict

LINE = re.compile(r"pathbench: slow call: (?P<what>.+?) took (?P<s>[0-9.]+) s on thread \d+"
                  r"(?:, run \S+)? \(at [0-9.]+ s after the process started"
                  r"(?:; held alone for (?P<holder>.+?), (?P<capturing>\d+) threads capturing)?")
STALL = re.compile(r"pathbench: stalled call: (?P<what>.+?) open for (?P<s>[0-9.]+) s(?:, run (?P<run>\S+))?;"
                   r" the stack of its thread follows")
FRAME = re.compile(r"^\S+\(\S*\)\s*\[0x[0-9a-f]+\]$")  # BINARY(SYMBOL+OFFSET) [ADDRESS]


def demangled(frames):
    if not frames or not shutil.which("c++filt"):
        return frames
    out = subprocess.run(["c++filt"], input="\n".join(frames), capture_output=True, text=True)
    return out.stdout.splitlines() if out.returncode == 0 else frames


def stalls_section(stalls):
    out = []
    for head, frames in stalls:
        out += [f"### stalled: {head['what']} open for {head['s']} s, run {head['run'] or '?'}", "", "```"]
        out += demangled(frames) + ["```", ""]
    return out


def table(path):
    seconds, holders, stalls = defaultdict(list), Counter(), []
    stack = None  # the frames of the stall just read, while its lines follow
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            stall = STALL.search(line)
            if stall:
                stalls.append((stall, []))
                stack = stalls[-1][1]
                continue
            if stack is not None and FRAME.match(line):
                stack.append(line)
                continue
            stack = None
            m = LINE.search(line)
            if not m:
                continue
            seconds[m["what"]].append(float(m["s"]))
            if m["holder"] is not None:
                captures = "captures in flight" if int(m["capturing"]) > 0 else "no capture"
                holders[f"{m['holder']}; {captures}"] += 1
    out = [f"## {path}", ""]
    if not seconds:
        return out + ["no slow calls", ""] + stalls_section(stalls)
    out += ["| call | lines | seconds in all | longest |", "|---|---|---|---|"]
    for what, s in sorted(seconds.items(), key=lambda kv: -sum(kv[1])):
        out.append(f"| {what} | {len(s)} | {sum(s):.1f} | {max(s):.2f} |")
    if holders:
        out += ["", "| the fence's wait began with it held alone for | lines |", "|---|---|"]
        out += [f"| {h} | {n} |" for h, n in holders.most_common()]
    return out + [""] + stalls_section(stalls)


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
