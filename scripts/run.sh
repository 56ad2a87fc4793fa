#!/usr/bin/env bash
# The main job: builds (installing missing packages), runs the quick sweep sweeps/quick.toml on
# the CPU (finished runs are skipped, an interrupted sweep resumes), collects its CSVs into
# out/quick/ (ignored by git; the committed results/quick/ stays as it was made), draws the
# figure and prints the table, the sparse split's error by recall distance and the paths of what
# it made.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
pb=build/pathbench
out=out/quick
$pb sweep sweeps/quick.toml --out runs --jobs "${PATHBENCH_JOBS:-2}"
$pb collect runs/quick -o "$out"
$pb plot "$out/evals.csv" --figure error-rate --metric acc -o "$out/error-rate.svg"
$pb table "$out/evals.csv" --rows pe --cols split --metric error_rate | tee "$out/table.md"
echo
# The sparse split's reads by how long ago the last write set the bit (tasks/README.md).
$pb table "$out/distances.csv" --rows distance_from --cols pe --split val_sparse --metric error_rate |
  tee "$out/distances.md"
echo
echo "runs:    runs/quick/<run_id>/ (config.json, metrics.jsonl, eval.jsonl, result.json, model.safetensors)"
echo "csv:     $out/runs.csv $out/evals.csv $out/history.csv $out/seqstats.csv $out/distances.csv"
echo "tables:  $out/table.md $out/distances.md"
echo "figure:  $out/error-rate.svg"
