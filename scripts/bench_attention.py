#!/usr/bin/env python3
"""Attention kernel benchmark: pathbench's CUDA kernels against PyTorch SDPA, side by side.

For each shape (B, T, H, D) of docs/anchors.md's kernel table, on one GPU in one run:
  * PyTorch SDPA: torch.nn.functional.scaled_dot_product_attention(is_causal=True) with the flash
    backend forced (torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)), bf16 q, k, v laid
    out (B, T, H, D) and passed as (B, H, T, D) transposed views, scale 1/sqrt(D); forward alone
    (pass fwd) and forward + torch.autograd.grad of q, k, v with a random dout (pass fwd_bwd).
  * `pathbench bench attention --pe PE --dtype bf16 [--backward]` for PE in nope fox path path_fox
    (env PE="..." overrides; env F32=1 adds `--dtype f32` for path).
Both sides: --warmup untimed calls, then --iters calls each timed by a pair of CUDA events, the
median reported; --rotate input sets cycled so that consecutive calls miss L2; peak memory = the
most device memory allocated from before the inputs through the run, minus what was held before
(torch.cuda.max_memory_allocated after reset_peak_memory_stats; pathbench's device_alloc counter).
pathbench waits for each call before timing the next (cuda::Timer), PyTorch does not: a few µs of
launch latency per call count against pathbench only. TFLOP/s is the causal-attention count
(fwd 2·B·H·T²·D, fwd_bwd 3.5× that) for every encoding, so it compares like ms does.

Writes --out-csv with the columns
    pe,dtype,batch,seq_len,heads,head_dim,pass,ms,tflops,sdpa_ms,ratio,peak_mem_mib,gpu,commit,date
(ratio = ms / sdpa_ms of the same shape and pass; SDPA's own rows have pe=sdpa, ratio 1) and
--out-md, one Markdown table per head dim with each cell's ratio checked against the targets.
A pathbench call that fails is logged to stderr and its row left out; the table goes on.
commit/date come from env PB_COMMIT / PB_DATE (else git and the clock), like scripts/gpu.sh.

    python3 scripts/bench_attention.py --pathbench build-gpu/pathbench            # full table
    python3 scripts/bench_attention.py --pathbench build-gpu/pathbench --shapes quick
    python3 scripts/bench_attention.py --table-only    # re-render --out-md from --out-csv
"""
import argparse
import csv
import datetime
import gc
import math
import os
import shlex
import statistics
import subprocess
import sys

FULL_SHAPES = [(32, 1024, 16, 64), (16, 2048, 16, 64), (8, 4096, 16, 64), (4, 8192, 16, 64),
               (16, 1024, 16, 128), (8, 2048, 16, 128), (4, 4096, 16, 128), (2, 8192, 16, 128)]
QUICK_SHAPES = [(2, 512, 4, 64), (2, 512, 4, 128)]
DEFAULT_PES = "nope fox path path_fox"
PASSES = ("fwd", "fwd_bwd")
COLUMNS = ("pe,dtype,batch,seq_len,heads,head_dim,pass,ms,tflops,sdpa_ms,ratio,peak_mem_mib,gpu,commit,"
           "date").split(",")
# Targets of docs/anchors.md, bf16: (pe, pass) -> (baseline pe, max ratio to it).
TARGETS = {("path", "fwd"): ("sdpa", 2.5), ("path", "fwd_bwd"): ("sdpa", 2.0),
           ("path_fox", "fwd"): ("path", 1.15), ("path_fox", "fwd_bwd"): ("path", 1.15),
           ("fox", "fwd"): ("sdpa", 1.3), ("fox", "fwd_bwd"): ("sdpa", 1.3)}
TARGETS_LINE = ("Targets (bf16, measured in the same run): PaTH fwd ≤ 2.5× and fwd+bwd ≤ 2.0× SDPA; "
                "PaTH-FoX ≤ 1.15× PaTH; FoX ≤ 1.3× SDPA (fwd and fwd+bwd).")


def log(message):
    print(f"bench_attention: {message}", file=sys.stderr, flush=True)


def die(message):
    log(f"error: {message}")
    sys.exit(2)


def flops(B, T, H, D, pass_):
    """Causal attention FLOPs (SDPA-equivalent): fwd 4·B·H·T·T·D/2, bwd 2.5× fwd."""
    fwd = 4.0 * B * H * T * T * D / 2.0
    return fwd if pass_ == "fwd" else 3.5 * fwd


# --- PyTorch SDPA ---------------------------------------------------------------------------------

def load_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        log("PyTorch is not installed here: no SDPA rows, no ratios")
        return None
    if not torch.cuda.is_available():
        log("no CUDA device visible to PyTorch: no SDPA rows, no ratios")
        return None
    return torch


def flash_only(torch):
    """Context manager that forces SDPA's flash backend (torch >= 2.3, else the older API)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)


def time_sdpa(torch, shape, pass_, args):
    """(median ms, peak MiB) of SDPA at one shape and pass."""
    import torch.nn.functional as F
    B, T, H, D = shape
    backward = pass_ == "fwd_bwd"
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn():
        return torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)

    sets = []
    for _ in range(args.rotate):
        q, k, v = (randn().requires_grad_(backward) for _ in range(3))
        sets.append((q, k, v, randn() if backward else None))
    scale = 1.0 / math.sqrt(D)

    def call(s):
        q, k, v, dout = s
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, scale=scale)
        if backward:
            torch.autograd.grad(o, (q, k, v), dout.transpose(1, 2))

    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(args.iters)]
    with flash_only(torch), torch.set_grad_enabled(backward):
        for i in range(args.warmup):
            call(sets[i % args.rotate])
        torch.cuda.synchronize()
        for i, (start, end) in enumerate(events):
            start.record()
            call(sets[(args.warmup + i) % args.rotate])
            end.record()
        torch.cuda.synchronize()
    ms = statistics.median(start.elapsed_time(end) for start, end in events)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    del sets
    gc.collect()
    torch.cuda.empty_cache()
    return ms, peak


# --- pathbench ------------------------------------------------------------------------------------

def run_pathbench(args, pe, dtype, shape, pass_):
    """The key=value fields of `pathbench bench attention`'s line, or None (logged) if it failed."""
    B, T, H, D = shape
    cmd = [args.pathbench, "bench", "attention", "--pe", pe, "--dtype", dtype, "--batch", str(B),
           "--seq-len", str(T), "--heads", str(H), "--head-dim", str(D), "--warmup", str(args.warmup),
           "--iters", str(args.iters), "--rotate", str(args.rotate)] + (["--backward"] if pass_ == "fwd_bwd" else [])
    label = " ".join(shlex.quote(c) for c in cmd)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        log(f"FAILED {label}: {e}")
        return None
    line = next((l for l in r.stdout.splitlines() if l.startswith("bench attention ")), None)
    if r.returncode != 0 or line is None:
        log(f"FAILED (exit {r.returncode}) {label}: {r.stderr.strip() or r.stdout.strip()}")
        return None
    log(line)
    return dict(word.split("=", 1) for word in shlex.split(line)[2:] if "=" in word)


# --- Output ---------------------------------------------------------------------------------------

def git_commit():
    if os.environ.get("PB_COMMIT"):
        return os.environ["PB_COMMIT"]
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True,
                               text=True).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def fmt(x):
    return "–" if x is None else f"{x:.3f}"


def cell(rows, pe, dtype, shape, pass_):
    """One Markdown cell: ms (ratio to SDPA), and the target check where one applies."""
    r = rows.get((pe, dtype) + shape + (pass_,))
    if r is None:
        return "–"
    ms = float(r["ms"])
    text = fmt(ms)
    if r["ratio"]:
        text += f" ({float(r['ratio']):.2f}×)"
    target = TARGETS.get((pe, pass_)) if dtype == "bf16" else None
    if target:
        base_pe, limit = target
        base = rows.get((base_pe, "bf16") + shape + (pass_,))
        if base is not None and float(base["ms"]) > 0:
            ratio = ms / float(base["ms"])
            if base_pe != "sdpa":
                text += f" {ratio:.2f}× {base_pe}"
            text += " ✓" if ratio <= limit else " ✗"
    return text


def write_md(path, rows_list, args):
    rows = {(r["pe"], r["dtype"], int(r["batch"]), int(r["seq_len"]), int(r["heads"]), int(r["head_dim"]),
             r["pass"]): r for r in rows_list}
    cols = list(dict.fromkeys((r["pe"], r["dtype"]) for r in rows_list if r["pe"] != "sdpa"))
    first = rows_list[0] if rows_list else {"gpu": "?", "commit": "?", "date": "?"}
    out = [f"GPU: {first['gpu']}; commit {first['commit']}; {first['date']}; command: scripts/gpu.sh attention "
           f"(scripts/bench_attention.py; every row in attention.csv with TFLOP/s and peak memory)", "",
           TARGETS_LINE, "",
           f"Cells: median ms of {args.iters} calls after {args.warmup} ({args.rotate} rotating input sets), "
           "(ms / SDPA ms at the same shape and pass), ✓/✗ against the target where there is one "
           "(PaTH-FoX: against PaTH). rope times as nope (the rotation is a separate op).", ""]
    shapes = list(dict.fromkeys((int(r["batch"]), int(r["seq_len"]), int(r["heads"]), int(r["head_dim"]))
                                for r in rows_list))
    for D in sorted({s[3] for s in shapes}):
        labels = [pe if dtype == "bf16" else f"{pe} {dtype}" for pe, dtype in cols]
        out += [f"### head dim {D}", "",
                "| B | T | H | pass | SDPA ms | " + " | ".join(labels) + " |",
                "|---|---|---|---|---|" + "---|" * len(cols)]
        for shape in (s for s in shapes if s[3] == D):
            for pass_ in PASSES:
                sdpa = rows.get(("sdpa", "bf16") + shape + (pass_,))
                cells = [cell(rows, pe, dtype, shape, pass_) for pe, dtype in cols]
                if sdpa is None and all(c == "–" for c in cells):
                    continue
                out.append(f"| {shape[0]} | {shape[1]} | {shape[2]} | {pass_.replace('_', '+')} | "
                           f"{fmt(float(sdpa['ms'])) if sdpa else '–'} | " + " | ".join(cells) + " |")
        out.append("")
    with open(path, "w") as f:
        f.write("\n".join(out))


def read_csv(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        die(f"cannot read {path}: {e.strerror}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--pathbench", default="build-gpu/pathbench", help="the pathbench binary (default %(default)s)")
    p.add_argument("--out-csv", default="results/bench/attention.csv", help="default %(default)s")
    p.add_argument("--out-md", default="results/bench/attention.md", help="default %(default)s")
    p.add_argument("--shapes", choices=("quick", "full"), default="full",
                   help="full: the 8 shapes of docs/anchors.md; quick: 2 small ones (smoke test)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls first (default 10)")
    p.add_argument("--iters", type=int, default=50, help="timed calls, median reported (default 50)")
    p.add_argument("--rotate", type=int, default=4, help="input sets cycled (default 4)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per pathbench call (default 600)")
    p.add_argument("--table-only", action="store_true", help="only re-render --out-md from --out-csv")
    args = p.parse_args()
    if args.warmup < 0 or args.iters < 1 or args.rotate < 1:
        die("--warmup must be >= 0, --iters and --rotate >= 1")
    return args


def main():
    args = parse_args()
    if args.table_only:
        write_md(args.out_md, read_csv(args.out_csv), args)
        return
    if not os.access(args.pathbench, os.X_OK):
        die(f"--pathbench {args.pathbench} is not an executable file")
    pes = os.environ.get("PE", DEFAULT_PES).split()
    variants = [(pe, "bf16") for pe in pes]
    if os.environ.get("F32", "") not in ("", "0"):
        variants.append(("path", "f32"))
    shapes = FULL_SHAPES if args.shapes == "full" else QUICK_SHAPES
    commit = git_commit()
    date = os.environ.get("PB_DATE") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    torch = load_torch()
    gpu = torch.cuda.get_device_name() if torch else ""

    os.makedirs(os.path.dirname(os.path.abspath(args.out_csv)), exist_ok=True)
    tmp = args.out_csv + ".new"
    rows = []
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()

        def emit(row):
            row.update(gpu=row.get("gpu") or gpu, commit=commit, date=date)
            rows.append(row)
            w.writerow(row)
            f.flush()

        for shape in shapes:
            B, T, H, D = shape
            dims = dict(batch=B, seq_len=T, heads=H, head_dim=D)
            sdpa_ms = {}
            for pass_ in PASSES:
                if torch is None:
                    continue
                try:
                    ms, peak = time_sdpa(torch, shape, pass_, args)
                except Exception as e:  # noqa: BLE001 (e.g. out of memory: log, leave the row out)
                    log(f"FAILED SDPA {shape} {pass_}: {type(e).__name__}: {e}")
                    continue
                sdpa_ms[pass_] = ms
                log(f"sdpa B={B} T={T} H={H} D={D} {pass_}: {ms:.4f} ms, peak {peak:.1f} MiB")
                emit(dict(pe="sdpa", dtype="bf16", **dims, **{"pass": pass_}, ms=f"{ms:.4f}",
                          tflops=f"{flops(B, T, H, D, pass_) / (ms * 1e-3) / 1e12:.2f}", sdpa_ms=f"{ms:.4f}",
                          ratio="1", peak_mem_mib=f"{peak:.1f}"))
            for pe, dtype in variants:
                for pass_ in PASSES:
                    got = run_pathbench(args, pe, dtype, shape, pass_)
                    if got is None:
                        continue
                    ms, base = float(got["ms"]), sdpa_ms.get(pass_)
                    emit(dict(pe=pe, dtype=dtype, **dims, **{"pass": pass_}, ms=got["ms"], tflops=got["tflops"],
                              sdpa_ms=f"{base:.4f}" if base else "", ratio=f"{ms / base:.3f}" if base else "",
                              peak_mem_mib=got["peak_mem_mib"], gpu=got.get("gpu", "")))
    os.replace(tmp, args.out_csv)
    write_md(args.out_md, rows, args)
    log(f"wrote {args.out_csv} ({len(rows)} rows) and {args.out_md}")
    if not any(r["pe"] != "sdpa" for r in rows):
        die("no pathbench row was measured (see the FAILED lines above)")


if __name__ == "__main__":
    main()
