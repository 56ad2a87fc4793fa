#!/usr/bin/env bash
# Fuzzes the readers with libFuzzer (fuzz/README.md): scripts/fuzz.sh [TARGET...] [SECONDS]
# TARGET: spec sweep dataset safetensors csv collect config (default: all), SECONDS per target
# (default 60). Builds build-fuzz/ (clang, ASan + UBSan) first; new inputs go to
# build-fuzz/corpus/TARGET, findings (crashes, leaks, timeouts, out-of-memory) to
# build-fuzz/findings/TARGET/, the log to build-fuzz/findings/TARGET.log. Exit status 1 when a
# target had a finding. A tool, not a CI step.
set -euo pipefail
cd "$(dirname "$0")/.."
all=(spec sweep dataset safetensors csv collect config)
targets=()
seconds=60
for a in "$@"; do
  if [[ $a =~ ^[0-9]+$ ]]; then seconds=$a
  elif [[ " ${all[*]} " == *" $a "* ]]; then targets+=("$a")
  else echo "fuzz.sh: unknown target '$a' (targets: ${all[*]})" >&2; exit 2
  fi
done
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

if command -v apt-get >/dev/null; then
  bash scripts/install-deps.sh
  bash scripts/install-deps.sh deps/fuzz-packages.txt
fi
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPATHBENCH_FUZZ=ON -DPATHBENCH_CUDA=OFF -DPATHBENCH_NATIVE=OFF >&2
fi
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}" >&2

found=()
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/findings/$t"
  echo "fuzz.sh: fuzz_$t for ${seconds} s" >&2
  # One process (-jobs would spread over the cores); -timeout: an input slower than 10 s is a hang.
  if ! "build-fuzz/fuzz_$t" "build-fuzz/corpus/$t" "fuzz/corpus/$t" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$t/" \
      > "build-fuzz/findings/$t.log" 2>&1; then
    found+=("$t")
  fi
  tail -n 12 "build-fuzz/findings/$t.log" |
    grep -E '^(stat::number_of_executed_units|stat::new_units_added|SUMMARY|==[0-9]+==ERROR)' >&2 || true
done
if [ ${#found[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in ${found[*]}: see build-fuzz/findings/" >&2
  exit 1
fi
echo "fuzz.sh: no findings" >&2
