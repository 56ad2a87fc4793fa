#!/usr/bin/env bash
# Every committed sweep file parses and resolves to its runs (`pathbench sweep FILE --dry-run`,
# nothing trained): a mistyped key or value in a published protocol fails here, not hours into a
# GPU session. conversion-a5.toml and conversion-flipflop.toml start from the checkpoints their
# -base sweeps make (--init-from), so they resolve only after those; the conversion_smoke test runs
# that pipeline. Usage: tests/sweep_files.sh PATHBENCH (from the source tree's root).
set -uo pipefail
pb=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0
for f in sweeps/*.toml sweeps/bench/*.toml; do
  case $f in sweeps/conversion-a5.toml | sweeps/conversion-flipflop.toml) continue ;; esac
  "$pb" sweep "$f" --out "$out" --dry-run > "$out/log" 2>&1 || { echo "$f: $(tail -1 "$out/log")"; exit 1; }
  n=$((n + 1))
done
(( n > 0 )) || { echo "no sweep files found under sweeps/"; exit 1; }
echo "$n sweep files resolve"
