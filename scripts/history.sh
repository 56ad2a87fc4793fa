#!/usr/bin/env bash
# The large CSVs of `pathbench collect` are committed gzipped, as NAME.csv.gz: history.csv (every
# evaluation of every run), distance_history.csv (its rows per range of recall distances, where
# runs recorded them) and seqstats.csv (per-sequence error counts, for the intervals). They are
# the largest files of a results folder and grow with every run, and the repository travels whole
# to GPU machines with a size limit (docs/gpu.md). `table` and `plot` refuse a folder whose
# seqstats.csv is still gzipped rather than print it without intervals.
#   scripts/history.sh pack DIR...     DIR/NAME.csv → DIR/NAME.csv.gz (gzip -9n: the same bytes for
#                                      the same CSV), after `collect`
#   scripts/history.sh unpack DIR...   DIR/NAME.csv.gz → DIR/NAME.csv when the CSV is missing or
#                                      older, before `plot` or `table` read it
set -euo pipefail
mode=${1:-}
[[ $mode == pack || $mode == unpack ]] || { echo "usage: scripts/history.sh pack|unpack DIR..." >&2; exit 2; }
shift
for d in "$@"; do
  for name in history distance_history seqstats; do
    csv=$d/$name.csv gz=$d/$name.csv.gz
    if [[ $mode == pack && -f $csv ]]; then
      gzip -9nc "$csv" >"$gz.tmp" && mv "$gz.tmp" "$gz"
    elif [[ $mode == unpack && -f $gz && ( ! -f $csv || $gz -nt $csv ) ]]; then
      gzip -dc "$gz" >"$csv.tmp" && mv "$csv.tmp" "$csv"
    fi
  done
done
