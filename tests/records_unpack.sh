#!/usr/bin/env bash
# `scripts/lease.sh unpack` restores a sweep's packed run records without mixing two attempts of a
# run: a run finished here keeps every file, a run finished only in the pack is taken whole from
# it (no file of the local attempt left beside it), a run pending in both keeps its local files,
# and a run only here or only in the pack is kept or added. Before this rule an unpack on a
# machine whose sweep had gone on overwrote finished runs' logs with their older, partial ones.
# Usage: tests/records_unpack.sh (from the source tree's root; works in a temporary copy).
set -euo pipefail
src=$PWD
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t"/scripts "$t"/sweeps
cp "$src"/scripts/lease.sh "$t"/scripts/
touch "$t"/sweeps/s.toml
cd "$t"
put() { mkdir -p "runs/s/$1" && echo "$3" >"runs/s/$1/$2"; }
# The pack: a (partial), b (finished), c (partial), e (finished), and the sweep's grid.
put a metrics.jsonl packed-a
put b metrics.jsonl packed-b && put b result.json packed-b
put c metrics.jsonl packed-c
put e result.json packed-e
echo packed-grid >runs/s/grid.json
mkdir -p results/s && tar czf results/s/records.tgz runs/s && rm -rf runs
# Here: a finished since, b partial (a rerun), c further along, d only here, and a grid.
put a metrics.jsonl local-a && put a result.json local-a
put b metrics.jsonl local-b && put b ckpt.safetensors local-b
put c metrics.jsonl local-c
put d metrics.jsonl local-d
echo local-grid >runs/s/grid.json
bash scripts/lease.sh unpack s
fail=0
expect() {  # FILE CONTENT|absent
  local got
  got=$(cat "runs/s/$1" 2>/dev/null || echo absent)
  [[ $got == "$2" ]] || { echo "runs/s/$1: expected $2, found $got"; fail=1; }
}
expect a/metrics.jsonl local-a
expect a/result.json local-a
expect b/metrics.jsonl packed-b
expect b/result.json packed-b
expect b/ckpt.safetensors absent
expect c/metrics.jsonl local-c
expect d/metrics.jsonl local-d
expect e/result.json packed-e
expect grid.json local-grid
[[ -z $(find runs -name '.unpack.*') ]] || { echo "a temporary folder was left in runs/"; fail=1; }
# A fresh machine (no runs/) gets the pack as it is.
rm -rf runs && bash scripts/lease.sh unpack s
expect a/metrics.jsonl packed-a
expect grid.json packed-grid
((fail == 0)) && echo "unpack keeps every run whole"
exit $fail
