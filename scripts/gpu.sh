#!/usr/bin/env bash
# On a GPU machine (offline is fine, with .deps/usr.tgz carried: docs/gpu.md): builds with the CUDA
# engine, runs the GPU tests, runs the training benchmarks against PyTorch, and prints a summary
# table last. Full logs go to $LOG_DIR (default build-gpu/logs).
#   scripts/gpu.sh [build|test|bench|attention|multi|profile|ncu-attention|ncu-stalls|sweep-bench|all] [extra ctest args...]
#   build: the CLI alone (build-gpu/pathbench), nothing run
#   BENCH_STEPS=30 PE="rope path" CONFIGS="flipflop a5" PRECISIONS="fp32 bf16" scripts/gpu.sh bench
#   PE="path path_fox" F32=1 ATTN_SHAPES=quick scripts/gpu.sh attention
#   SANITIZE=1 scripts/gpu.sh test   also runs test_cuda_model under compute-sanitizer memcheck
# bench writes results/bench/train.csv (one row per framework × config × encoding × precision);
# attention writes results/bench/attention.csv and attention.md (scripts/bench_attention.py): the
# attention kernels (`pathbench bench attention`, bf16; F32=1 adds f32 PaTH) against PyTorch SDPA
# (flash) at the shapes of docs/anchors.md's kernel table (ATTN_SHAPES=quick: 2 small ones), fwd and fwd+bwd;
# profile (not part of all) writes results/bench/ncu/: ncu kernel times of one TF32 step of RoPE
# and PaTH per config, summarised by scripts/ncu_summary.py into summary.md;
# ncu-attention (not part of all): ncu kernel times of one bf16 fwd+bwd call of each PE (default
# path) at NCU_SHAPE="B T H D" (default "8 4096 16 64"), into $LOG_DIR, summarised on stdout;
# ncu-stalls (not part of all): where the warps of the kernels matching NCU_KERNELS (a regex, default
# path_(fwd|bwd)_scan, the PaTH scans; names in kernels/cuda/README.md; the first NCU_COUNT launches,
# default 2) of that call wait: ncu's warp-state, scheduler and per-instruction stall sections into
# $LOG_DIR (details text and SASS CSV), summarised on stdout by scripts/ncu_stalls.py;
# sweep-bench (not part of all) times sweeps/bench/bench-*.toml (24 runs of each paper sweep's
# shape at a stated fraction of its steps) with the process engine (--jobs-per-gpu $PROCESS_K,
# default 8) and packed (--pack auto), and with STACK=N also stacked (--pack auto --stack N), into
# results/bench/sweep.csv (scripts/sweep_bench.py), and prints `sweep --estimate` for the three
# paper sweeps; SWEEP_BENCH="flipflop a5 mqrar" narrows it (a5-stack: bench-a5-stack.toml, 6 runs
# per shape as paper-a5 has them),
# ESTIMATE=0 skips the estimates; the run records go to $SWEEP_RUNS (default build-gpu/sweep-bench);
# multi (2+ GPUs) writes results/bench/multi_gpu.csv: data-parallel step time of the mqrar config
# on 1, 2, 4, … GPUs, and quick-sweep throughput on one GPU against all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
shift || true
modes=(build test bench attention multi profile ncu-attention ncu-stalls sweep-bench all)
known=0
for m in "${modes[@]}"; do [[ $m == "$mode" ]] && known=1; done
((known)) || { echo "gpu.sh: unknown mode '$mode' (${modes[*]})" >&2; exit 2; }
BUILD=${BUILD_DIR:-build-gpu}
LOG_DIR=${LOG_DIR:-$BUILD/logs}
mkdir -p "$LOG_DIR" results/bench
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
# The commit the build stamps into its runs: the one scripts/carry.sh stamped (.carry/sources)
# when these are the stamped sources, whatever git says, since a copy of the tree on a lent GPU
# machine may have no git metadata, or metadata older than its files (then git reads the code as
# an older commit "-dirty"); a PB_COMMIT set by hand must agree with the stamp. Without a matching
# stamp, PB_COMMIT or git (cmake/git_commit.cmake).
if [[ -f .carry/sources ]]; then
  rc=0
  stamped=$(scripts/carry.sh commit 2>"$LOG_DIR/stamp.txt") || rc=$?
  ((rc != 2)) || { cat "$LOG_DIR/stamp.txt" >&2; exit 2; }
  ((rc != 0)) || export PB_COMMIT=$stamped
fi

echo "== build ($BUILD)" >&2
# the vendored headers travel gzipped (scripts/vendor-deps.sh); CMake looks for .deps/usr
if [[ ! -d .deps/usr && -f .deps/usr.tgz ]]; then  # unpacked aside, so an interrupted tar leaves no half
  rm -rf .deps/usr.tmp && mkdir .deps/usr.tmp && tar -C .deps/usr.tmp -xzf .deps/usr.tgz && mv .deps/usr.tmp/usr .deps/usr
  rmdir .deps/usr.tmp
fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPATHBENCH_CUDA=ON >"$LOG_DIR/configure.log" 2>&1 ||
  { tail -30 "$LOG_DIR/configure.log"; exit 1; }
targets=()
[[ $mode == sweep-bench || $mode == build ]] && targets=(--target pathbench)  # the CLI alone
if [[ $mode == test ]]; then  # the CLI and the GPU tests, not the CPU tests that `ctest -L cuda` skips
  targets=(--target pathbench)
  for f in tests/test_cuda_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
cmake --build "$BUILD" -j "$(nproc)" "${targets[@]}" >"$LOG_DIR/build.log" 2>&1 || { grep -E "error|FAILED" "$LOG_DIR/build.log" | head -40; exit 1; }
scripts/carry.sh digest >"$BUILD/pathbench.digest"  # the sources it was built from, for scripts/lease.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOG_DIR/gpu.txt" >&2

summary=()
if [[ $mode == test || $mode == all ]]; then
  echo "== GPU tests" >&2
  set +e
  (cd "$BUILD" && OMP_NUM_THREADS=4 ctest -L cuda -j4 --output-on-failure --timeout 420 "$@") >"$LOG_DIR/ctest_cuda.log" 2>&1
  rc=$?
  set -e
  grep -E "tests passed|Test +#|Passed|Failed|\*\*\*" "$LOG_DIR/ctest_cuda.log" | tail -12 >&2
  summary+=("gpu tests: $(grep -E 'tests passed' "$LOG_DIR/ctest_cuda.log" || echo "exit $rc")")
  if [[ -n ${SANITIZE:-} ]]; then
    compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/test_cuda_model" "[model]~[train]" \
      >"$LOG_DIR/memcheck.log" 2>&1 && rc=0 || rc=$?
    summary+=("memcheck test_cuda_model: exit $rc, $(grep -E 'ERROR SUMMARY' "$LOG_DIR/memcheck.log" | tail -1)")
  fi
fi

if [[ $mode == bench || $mode == all ]]; then
  echo "== training benchmarks" >&2
  csv=results/bench/train.csv
  # PB_COMMIT / PB_DATE override git and the clock (a copied checkout may carry no or stale .git).
  commit=${PB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  [[ -z ${PB_COMMIT:-} && -n $(git status --porcelain 2>/dev/null) ]] && commit="$commit-dirty"
  date=${PB_DATE:-$(date -u +%Y-%m-%dT%H:%MZ)}
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  steps=${BENCH_STEPS:-30}
  echo "framework,config,pe,precision,compiled,layers,d_model,heads,seq_len,batch,vocab,ms_per_step,tokens_per_s,gpu,torch,commit,date" >"$csv.new"
  declare -A task=([flipflop]="flipflop:len=512" [mqrar]="mqrar:n_keys=32,n_values=8160,len=768"
                   [a5]="wordproblem:group=a5,len=64,bos=0")
  declare -A shape=([flipflop]="--layers 1 --d-model 128 --heads 2 --batch 64"
                    [mqrar]="--layers 2 --d-model 256 --heads 2 --batch 64"
                    [a5]="--layers 4 --d-model 128 --heads 4 --batch 256")
  torch_version=$(python3 -c "import torch; print(torch.__version__)" 2>/dev/null || echo none)
  for config in ${CONFIGS:-flipflop mqrar a5}; do
    for precision in ${PRECISIONS:-fp32 tf32 bf16}; do
      if [[ $torch_version != none ]]; then
        python3 scripts/bench_torch.py --config "$config" --precision "$precision" --steps "$steps" 2>>"$LOG_DIR/torch.log" |
          tail -n +2 | sed "s/\$/,$commit,$date/" >>"$csv.new" || echo "bench_torch failed: see $LOG_DIR/torch.log" >&2
      fi
      for pe in ${PE:-nope rope alibi sba fox path path_fox}; do
        line=$("$BUILD/pathbench" bench train --device cuda --precision "$precision" --task "${task[$config]}" --pe "$pe" \
                 ${shape[$config]} --warmup-steps 5 --measure-steps "$steps" 2>>"$LOG_DIR/bench.log") ||
          { echo "bench train $config $pe $precision failed: see $LOG_DIR/bench.log" >&2; continue; }
        echo "$line" >>"$LOG_DIR/bench.log"
        get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
        echo "pathbench,$config,$pe,$(get precision),0,$(get layers),$(get d_model),$(get heads),$(get seq_len),$(get batch),$(get vocab),$(get ms_per_step),$(get tokens_per_s),$gpu,,$commit,$date" >>"$csv.new"
      done
    done
  done
  mv "$csv.new" "$csv"
  python3 scripts/bench_table.py "$csv" >results/bench/train.md
  summary+=("bench: $csv, results/bench/train.md")
  cat results/bench/train.md
fi

if [[ $mode == attention || $mode == all ]]; then
  echo "== attention kernel benchmark" >&2
  commit=${PB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  [[ -z ${PB_COMMIT:-} && -n $(git status --porcelain 2>/dev/null) ]] && commit="$commit-dirty"
  date=${PB_DATE:-$(date -u +%Y-%m-%dT%H:%MZ)}
  PB_COMMIT=$commit PB_DATE=$date python3 scripts/bench_attention.py --pathbench "$BUILD/pathbench" \
    --out-csv results/bench/attention.csv --out-md results/bench/attention.md --shapes "${ATTN_SHAPES:-full}" \
    2>"$LOG_DIR/attention.log" && rc=0 || rc=$?
  grep -E "FAILED|error" "$LOG_DIR/attention.log" | head -20 >&2 || true
  if (( rc == 0 )); then
    cat results/bench/attention.md
    summary+=("attention: results/bench/attention.csv, results/bench/attention.md ($(grep -c FAILED "$LOG_DIR/attention.log" || true) failed calls)")
  else
    summary+=("attention: exit $rc, see $LOG_DIR/attention.log")
  fi
fi

if [[ $mode == profile ]]; then
  echo "== ncu profile of one training step" >&2
  mkdir -p results/bench/ncu
  declare -A pargs=([flipflop]="--task flipflop:len=512 --layers 1 --d-model 128 --heads 2 --batch 64"
                    [mqrar]="--task mqrar:n_keys=32,n_values=8160,len=768 --layers 2 --d-model 256 --heads 2 --batch 64"
                    [a5]="--task wordproblem:group=a5,len=64,bos=0 --layers 4 --d-model 128 --heads 4 --batch 256")
  for config in ${CONFIGS:-flipflop mqrar a5}; do
    for pe in ${PE:-rope path}; do
      ncu --clock-control none --metrics gpu__time_duration.sum --csv "$BUILD/pathbench" bench train \
        --device cuda --precision tf32 ${pargs[$config]} --pe "$pe" --warmup-steps 0 --measure-steps 1 \
        >"results/bench/ncu/ncu_${config}_${pe}.csv" 2>>"$LOG_DIR/ncu.log"
    done
  done
  python3 scripts/ncu_summary.py results/bench/ncu/ncu_*.csv >results/bench/ncu/summary.md
  summary+=("profile: results/bench/ncu/summary.md")
fi

if [[ $mode == ncu-attention ]]; then
  read -r B T H D <<<"${NCU_SHAPE:-8 4096 16 64}"
  for pe in ${PE:-path}; do
    csv="$LOG_DIR/ncu_attention_${pe}_B${B}_T${T}_H${H}_D${D}.csv"
    ncu --clock-control none --metrics gpu__time_duration.sum --csv "$BUILD/pathbench" bench attention \
      --pe "$pe" --dtype bf16 --batch "$B" --seq-len "$T" --heads "$H" --head-dim "$D" --backward \
      --warmup 0 --iters 1 --rotate 1 >"$csv" 2>>"$LOG_DIR/ncu.log"
    echo "## ncu: $pe fwd+bwd, B=$B T=$T H=$H D=$D"
    python3 scripts/ncu_summary.py "$csv"
    summary+=("ncu $pe B=$B T=$T D=$D: $csv")
  done
fi

if [[ $mode == ncu-stalls ]]; then
  read -r B T H D <<<"${NCU_SHAPE:-8 4096 16 64}"
  for pe in ${PE:-path}; do
    rep="$LOG_DIR/ncu_stalls_${pe}_B${B}_T${T}_H${H}_D${D}"
    ncu --clock-control none -k "regex:${NCU_KERNELS:-path_(fwd|bwd)_scan}" -c "${NCU_COUNT:-2}" --section SpeedOfLight \
      --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
      --section SourceCounters --section MemoryWorkloadAnalysis -f -o "$rep" "$BUILD/pathbench" bench attention \
      --pe "$pe" --dtype bf16 --batch "$B" --seq-len "$T" --heads "$H" --head-dim "$D" --backward \
      --warmup 0 --iters 1 --rotate 1 >>"$LOG_DIR/ncu.log" 2>&1
    ncu -i "$rep.ncu-rep" --page details --print-details all >"${rep}_details.txt"
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"${rep}_sass.csv"
    python3 scripts/ncu_stalls.py "${rep}_sass.csv"
    summary+=("ncu stalls $pe B=$B T=$T D=$D: ${rep}_details.txt, ${rep}_sass.csv")
  done
fi

if [[ $mode == sweep-bench ]]; then
  echo "== sweep engines" >&2
  commit=${PB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  date=${PB_DATE:-$(date -u +%Y-%m-%dT%H:%MZ)}
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  runs=${SWEEP_RUNS:-$BUILD/sweep-bench}
  k=${PROCESS_K:-8}
  for name in ${SWEEP_BENCH:-flipflop a5 mqrar}; do
    file=sweeps/bench/bench-$name.toml
    full=sweeps/paper-${name%-stack}.toml
    full_runs=$("$BUILD/pathbench" sweep "$full" --out "$runs/none" --dry-run 2>/dev/null | wc -l)
    declare -A wall=()
    engines=(processes packed)
    [[ -n ${STACK:-} ]] && engines+=(stacked)
    for engine in "${engines[@]}"; do
      rm -rf "$runs/$engine"
      args=(--jobs-per-gpu "$k")
      [[ $engine == packed ]] && args=(--pack auto)
      [[ $engine == stacked ]] && args=(--pack auto --stack "$STACK")
      t0=$(date +%s.%N)
      "$BUILD/pathbench" sweep "$file" --out "$runs/$engine" "${args[@]}" >>"$LOG_DIR/sweep_bench_$name.log" 2>&1 ||
        echo "sweep $name ($engine) failed: $LOG_DIR/sweep_bench_$name.log" >&2
      wall[$engine]=$(python3 -c "print($(date +%s.%N) - $t0)")
    done
    pk=$(sed -n 's/.*(packed, \([0-9]*\) slots).*/\1/p' "$LOG_DIR/sweep_bench_$name.log" | tail -1)
    stacked=()
    [[ -n ${STACK:-} ]] && stacked=(--stacked "$runs/stacked/bench-$name" "${wall[stacked]}" "${pk}x$STACK")
    python3 scripts/sweep_bench.py --sweep "$name" --full "$full" --full-runs "$full_runs" \
      --processes "$runs/processes/bench-$name" "${wall[processes]}" "$k" \
      --packed "$runs/packed/bench-$name" "${wall[packed]}" "$pk" "${stacked[@]}" \
      --gpu "$gpu" --commit "$commit" --date "$date" --csv results/bench/sweep.csv | tee -a "$LOG_DIR/sweep_bench.txt" >&2
  done
  if [[ ${ESTIMATE:-1} == 1 ]]; then
    for name in flipflop a5 mqrar; do
      "$BUILD/pathbench" sweep "sweeps/paper-$name.toml" --out "$runs/none" --pack auto --estimate \
        >"$LOG_DIR/estimate_$name.md" 2>>"$LOG_DIR/sweep_bench_estimate.log" || echo "estimate $name failed" >&2
      summary+=("estimate paper-$name: $(tail -1 "$LOG_DIR/estimate_$name.md")")
    done
  fi
  summary+=("sweep engines: results/bench/sweep.csv" "$(column -s, -t results/bench/sweep.csv 2>/dev/null || cat results/bench/sweep.csv)")
fi

if [[ $mode == multi || $mode == all ]] && (( $(nvidia-smi -L | wc -l) >= 2 )); then
  echo "== multi-GPU" >&2
  export NCCL_NVLS_ENABLE=0  # never NVLink multicast (docs/multi-gpu.md)
  n_gpus=$(nvidia-smi -L | wc -l)
  commit=${PB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  date=${PB_DATE:-$(date -u +%Y-%m-%dT%H:%MZ)}
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  csv=results/bench/multi_gpu.csv
  echo "what,gpus,batch,value,unit,gpu,commit,date" >"$csv.new"
  mqrar="--task mqrar:n_keys=32,n_values=8160,len=768 --layers 2 --d-model 256 --heads 2 --pe ${DP_PE:-rope} --precision tf32"
  for batch in 64 256; do
    for ((g = 1; g <= n_gpus; g *= 2)); do
      line=$("$BUILD/pathbench" bench train --device cuda $mqrar --batch "$batch" --gpus "$g" \
               --warmup-steps 5 --measure-steps "${BENCH_STEPS:-30}" 2>>"$LOG_DIR/multi.log") || continue
      echo "$line" >>"$LOG_DIR/multi.log"
      echo "dp_step_mqrar,$g,$batch,$(sed -n 's/.* ms_per_step=\([^ ]*\).*/\1/p' <<<"$line"),ms,$gpu,$commit,$date" >>"$csv.new"
    done
  done
  for gpus in 0 all; do
    rm -rf /tmp/pb_sweep_tp
    t0=$(date +%s.%N)
    "$BUILD/pathbench" sweep sweeps/quick.toml --gpus "$gpus" --jobs-per-gpu 4 --out /tmp/pb_sweep_tp >>"$LOG_DIR/multi.log" 2>&1
    t1=$(date +%s.%N)
    g=$([[ $gpus == all ]] && echo "$n_gpus" || echo 1)
    echo "sweep_quick_runs_per_min,$g,16,$(python3 -c "print(round(8 * 60 / ($t1 - $t0), 1))"),runs/min,$gpu,$commit,$date" >>"$csv.new"
  done
  mv "$csv.new" "$csv"
  (column -s, -t "$csv" 2>/dev/null || cat "$csv") >&2
  summary+=("multi-GPU: $csv")
fi

printf '%s\n' "${summary[@]}"
