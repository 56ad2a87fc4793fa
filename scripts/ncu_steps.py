#!/usr/bin/env python3
"""One replayed training step per phase of `pathbench bench train --stack R` under ncu.

scripts/profile_stack.sh runs `bench train --stack R` (R = 1 timed first, then R stacked runs) under
`ncu --graph-profiling node --csv` with duration and DRAM-byte metrics. The launches of a step end
with its AdamW launches (one per run, after the graph), so the last step with 1 AdamW launch is the
replayed one-run step and the last with R the replayed stacked step. Per phase this writes, into
OUT_DIR, PE_R{r}_launches.csv (the step's launches in order) and PE_R{r}_kernels.csv (per kernel:
count, total_us, share, mean_us, dram_MB, GB_per_s, grid, block), and summary.csv (per PE and
phase: bench ms/step, kernel ms, launches, DRAM GB, top kernels).
Usage: scripts/ncu_steps.py OUT_DIR R PE [PE ...]   (reads OUT_DIR/ncu_PE.{csv,out}, bench_PE.txt)
"""
import csv
import os
import re
import sys

from ncu_summary import ncu_rows

SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6,
         "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
METRIC = {"gpu__time_duration.sum": "us", "dram__bytes_read.sum": "rd", "dram__bytes_write.sum": "wr"}


def short(name):
    """A kernel name without its return type, parameter list and pathbench namespaces."""
    name = re.sub(r"^void ", "", name.strip())
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return re.sub(r"pb::(cuda::)?(path::)?(<unnamed>::|\(anonymous namespace\)::)?", "", name)[:110]


def launches(rows):
    """Per launch, in launch order: name, grid, block, us, bytes read and written."""
    out = {}
    for row in rows:
        if not row["ID"].isdigit():
            continue
        k = out.setdefault(int(row["ID"]), {"name": short(row["Kernel Name"]), "grid": row.get("Grid Size", ""),
                                            "block": row.get("Block Size", ""), "us": 0.0, "rd": 0.0, "wr": 0.0})
        try:
            v = float(row["Metric Value"].replace(",", "")) * SCALE.get(row["Metric Unit"], 1)
        except ValueError:
            v = 0.0
        if row["Metric Name"] in METRIC:
            k[METRIC[row["Metric Name"]]] = v
    return [out[i] for i in sorted(out)]


def steps(seq):
    """(AdamW launches, launches) per step: a step ends with its run of adamw_kernel launches."""
    out, cur, n_adam = [], [], 0
    for j, k in enumerate(seq):
        cur.append(k)
        is_adam = "adamw_kernel" in k["name"]
        n_adam += is_adam
        if is_adam and (j + 1 == len(seq) or "adamw_kernel" not in seq[j + 1]["name"]):
            out.append((n_adam, cur))
            cur, n_adam = [], 0
    return out


def write_phase(out, pe, r, step):
    tot = sum(k["us"] for k in step) or 1.0
    with open(os.path.join(out, f"{pe}_R{r}_launches.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "kernel", "grid", "block", "us", "dram_read_MB", "dram_write_MB"])
        for i, k in enumerate(step):
            w.writerow([i, k["name"], k["grid"], k["block"], f"{k['us']:.2f}", f"{k['rd'] / 1e6:.2f}",
                        f"{k['wr'] / 1e6:.2f}"])
    agg = {}
    for k in step:
        a = agg.setdefault(k["name"], {"n": 0, "us": 0.0, "b": 0.0, "grid": k["grid"], "block": k["block"]})
        a["n"] += 1
        a["us"] += k["us"]
        a["b"] += k["rd"] + k["wr"]
    ranked = sorted(agg.items(), key=lambda kv: -kv[1]["us"])
    with open(os.path.join(out, f"{pe}_R{r}_kernels.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "count", "total_us", "share", "mean_us", "dram_MB", "GB_per_s", "grid", "block"])
        for name, a in ranked:
            w.writerow([name, a["n"], f"{a['us']:.1f}", f"{a['us'] / tot:.4f}", f"{a['us'] / a['n']:.2f}",
                        f"{a['b'] / 1e6:.1f}", f"{a['b'] / 1e3 / a['us']:.0f}" if a["us"] else "", a["grid"],
                        a["block"]])
    top = "; ".join(f"{n} {a['us'] / tot:.0%}" for n, a in ranked[:3])
    return tot, top


def main():
    if len(sys.argv) < 4 or not sys.argv[2].isdigit():
        print("usage: scripts/ncu_steps.py OUT_DIR R PE [PE ...]", file=sys.stderr)
        sys.exit(2)
    out, R, pes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    summary = [["pe", "R", "bench_ms_per_step", "ncu_kernel_ms", "launches", "dram_GB", "top_kernels"]]
    for pe in pes:
        # The table goes to ncu's --log-file; its stdout is the fallback.
        paths = [os.path.join(out, f"ncu_{pe}.{ext}") for ext in ("csv", "out")]
        rows = next((r for r in (ncu_rows(p) for p in paths if os.path.exists(p)) if r), None)
        if rows is None:
            print(f"ncu_steps: neither {paths[0]} nor {paths[1]} holds an ncu table", file=sys.stderr)
            continue
        by_adam = steps(launches(rows))
        with open(os.path.join(out, f"bench_{pe}.txt")) as f:
            ms = dict(re.findall(r"stack=(\d+) params=\d+ ms_per_step=([\d.]+)", f.read()))
        for r in (1, R):
            mine = [s for n, s in by_adam if n == r]
            if not mine:
                print(f"ncu_steps: {pe}: no step with {r} AdamW launches ({len(by_adam)} steps)", file=sys.stderr)
                continue
            tot, top = write_phase(out, pe, r, mine[-1])
            dram = sum(k["rd"] + k["wr"] for k in mine[-1]) / 1e9
            summary.append([pe, r, ms.get(str(r), ""), f"{tot / 1e3:.3f}", len(mine[-1]), f"{dram:.2f}", top])
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        csv.writer(f).writerows(summary)
    for row in summary:
        print(",".join(map(str, row)))
    if len(summary) == 1:
        sys.exit("ncu_steps: no step could be extracted; see the ncu_*.out files")


if __name__ == "__main__":
    main()
