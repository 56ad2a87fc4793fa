#!/usr/bin/env bash
# history.csv (every evaluation of every run, `pathbench collect`) is committed gzipped, as
# history.csv.gz: it is the largest file of a results folder and grows with every run, and the
# repository travels whole to GPU machines with a size limit (docs/gpu.md).
#   scripts/history.sh pack DIR...     DIR/history.csv → DIR/history.csv.gz (gzip -9n: the same
#                                      bytes for the same CSV), after `collect`
#   scripts/history.sh unpack DIR...   DIR/history.csv.gz → DIR/history.csv when the CSV is missing
#                                      or older, before `plot` or `table` read it
set -euo pipefail
mode=${1:-}
[[ $mode == pack || $mode == unpack ]] || { echo "usage: scripts/history.sh pack|unpack DIR..." >&2; exit 2; }
shift
for d in "$@"; do
  csv=$d/history.csv gz=$d/history.csv.gz
  if [[ $mode == pack && -f $csv ]]; then
    gzip -9nc "$csv" >"$gz.tmp" && mv "$gz.tmp" "$gz"
  elif [[ $mode == unpack && -f $gz && ( ! -f $csv || $gz -nt $csv ) ]]; then
    gzip -dc "$gz" >"$csv.tmp" && mv "$csv.tmp" "$csv"
  fi
done
