#!/usr/bin/env python3
"""Evaluation at long lengths: the parallel forward against token-by-token decoding (CPU).

`pathbench eval` scores a whole sequence with one parallel forward, whose attention holds O(T²)
state; `eval --decode` walks it token by token with the KV cache, O(T·d) per sequence
(models/decoder.h). This measures both on the same checkpoint, one process per call:
  1. trains a small flip-flop model once (PaTH, 1 layer, d_model 64, 2 heads, length 512, 300
     steps; --run DIR, reused when it holds a finished run);
  2. for each length T of --lens: `eval --task flipflop:len=T --split val --n 2`, parallel and
     with --decode (the parallel one only up to --parallel-max, beyond which it outgrows memory);
     each call's wall time and peak resident memory (getrusage of the child, ru_maxrss);
  3. prints a Markdown table: per T, both modes' seconds and MiB, the decode/parallel memory
     ratio, and whether the two give the same accuracy (they must: tests/test_decode.cpp).
Each eval appends its row to DIR/eval.jsonl, as `eval` always does.

    python3 scripts/eval_memory.py --pathbench build/pathbench --run runs/eval-memory
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def run(cmd):
    """(seconds, peak RSS in MiB, stdout) of one child process; exits with its error if it fails."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        pid = subprocess.Popen(cmd, stdout=out, stderr=err).pid
        _, status, usage = os.wait4(pid, 0)  # this child's own rusage, not the children's maximum
        seconds = time.monotonic() - t0
        out.seek(0), err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"eval_memory: {' '.join(cmd)} failed: {err.read().strip()}")
        return seconds, usage.ru_maxrss / 1024, out.read()  # ru_maxrss is in KiB on Linux


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pathbench", default="build/pathbench")
    ap.add_argument("--run", default="runs/eval-memory", help="the run directory (trained if missing)")
    ap.add_argument("--lens", default="4096,16384,32768,65536")
    ap.add_argument("--parallel-max", type=int, default=32768, help="largest T evaluated in parallel")
    a = ap.parse_args()
    pb = a.pathbench
    if not os.path.exists(os.path.join(a.run, "result.json")):
        subprocess.run([pb, "train", "--task", "flipflop:len=512", "--pe", "path", "--layers", "1", "--d-model",
                        "64", "--heads", "2", "--steps", "300", "--batch", "16", "--eval-n", "64", "--device", "cpu",
                        "--out", a.run], check=True, capture_output=True)
    print("| T | parallel s | parallel MiB | decode s | decode MiB | memory decode / parallel | same acc |")
    print("|---|---|---|---|---|---|---|")
    for T in sorted(int(x) for x in a.lens.split(",")):
        base = [pb, "eval", "--run", a.run, "--task", f"flipflop:len={T}", "--split", "val", "--n", "2"]
        rows = {}
        for mode, extra in (("decode", ["--decode"]), ("parallel", [])):
            if mode == "parallel" and T > a.parallel_max:
                continue
            s, mib, out = run(base + extra)
            rows[mode] = (s, mib, json.loads(out)["acc"])
        d = rows["decode"]
        if "parallel" in rows:
            p = rows["parallel"]
            print(f"| {T} | {p[0]:.2f} | {p[1]:.0f} | {d[0]:.2f} | {d[1]:.0f} | {d[1] / p[1]:.3f} | "
                  f"{'yes' if p[2] == d[2] else 'NO'} |")
        else:
            print(f"| {T} | not run | | {d[0]:.2f} | {d[1]:.0f} | | |")


if __name__ == "__main__":
    main()
