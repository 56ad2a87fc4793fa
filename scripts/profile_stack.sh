#!/usr/bin/env bash
# Where the time of one stacked training step goes (kernels/dev/stacked_step_notes.md): for each
# PE (default "rope path") it times `pathbench bench train --stack R` at the A5 shape (bf16, 2
# layers, d_model 256, 8 heads, batch 128, len 16) without a profiler, then runs the same call
# once under Nsight Compute (ncu, one kernel at a time, graph nodes profiled one by one) and keeps
# the kernels of the last replayed step of the one-run phase (R = 1) and of the stacked phase (R).
# Steps are told apart by their AdamW launches (R per step, after the graph). Needs ncu, python3;
# scripts/ncu_steps.py cuts the steps and writes the tables.
#   scripts/profile_stack.sh [OUT_DIR [BINARY]]     defaults: $OUT/profile, build-gpu/pathbench
#   PES="rope path" R=32 WARMUP=1 NCU_METRICS=... NCU_TIMEOUT=150 scripts/profile_stack.sh /tmp/prof
# Writes into OUT_DIR: bench_PE.txt (ms_per_step without ncu), ncu_PE.csv / .out (raw), PE_R{1,R}_kernels.csv
# (kernel, count, total_us, share, mean_us, dram_MB, GB_per_s, grid, block), PE_R{1,R}_launches.csv
# (the step's launches in order) and summary.csv (step time, kernel time, launches, DRAM bytes).
set -euo pipefail
usage="usage: scripts/profile_stack.sh [OUT_DIR [BINARY]] (OUT_DIR defaults to \$OUT/profile)"
[[ ${1:-} != -* ]] || { echo "profile_stack.sh: options are environment variables, not flags; $usage" >&2; exit 2; }
(($# <= 2)) || { echo "profile_stack.sh: too many arguments; $usage" >&2; exit 2; }
dir=${1:-${OUT:+$OUT/profile}}
[[ -n $dir ]] || { echo "profile_stack.sh: no OUT_DIR given and \$OUT is unset; $usage" >&2; exit 2; }
bin=${2:-build-gpu/pathbench}
[[ -x $bin ]] || { echo "profile_stack.sh: $bin is not an executable (build it: scripts/gpu.sh build); $usage" >&2; exit 2; }
R=${R:-32} WARMUP=${WARMUP:-1}
[[ $R =~ ^[0-9]+$ && $R -ge 2 && $WARMUP =~ ^[0-9]+$ && $WARMUP -ge 1 ]] ||
  { echo "profile_stack.sh: R must be an integer >= 2 and WARMUP >= 1 (so the profiled step is a graph launch), got R=$R WARMUP=$WARMUP" >&2; exit 2; }
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
[[ -x $ncu ]] || { echo "profile_stack.sh: no ncu (not on PATH, not $ncu; set NCU=/path/to/ncu)" >&2; exit 2; }
metrics=${NCU_METRICS:-gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum}
mkdir -p "$dir"
"$ncu" --version | tail -1 >"$dir/ncu_version.txt"
# shellcheck disable=SC2054  # the commas belong to the task spec
shape=(--device cuda --precision bf16 --task wordproblem:group=a5,len=16,bos=1 --layers 2 --d-model 256 --heads 8 --batch 128)
for pe in ${PES:-rope path}; do
  echo "== $pe: bench train --stack $R, no profiler" >&2
  "$bin" bench train "${shape[@]}" --pe "$pe" --stack "$R" | tee "$dir/bench_$pe.txt" >&2
  echo "== $pe: ncu ($metrics), warm-up $WARMUP + 1 step per phase" >&2
  rm -f "$dir/ncu_$pe.csv"
  timeout "${NCU_TIMEOUT:-150}" "$ncu" --clock-control none --cache-control none --graph-profiling node \
    --metrics "$metrics" --csv --log-file "$dir/ncu_$pe.csv" \
    "$bin" bench train "${shape[@]}" --pe "$pe" --stack "$R" --warmup-steps "$WARMUP" --measure-steps 1 >"$dir/ncu_$pe.out" ||
    echo "profile_stack.sh: ncu for $pe failed or timed out (exit $?); parsing what it wrote" >&2
done
# shellcheck disable=SC2086  # one argument per PE
python3 "$(dirname "$0")/ncu_steps.py" "$dir" "$R" ${PES:-rope path}
