#!/usr/bin/env bash
# Reproduces the experiments published in results/ (results/README.md says which claims they test).
#   scripts/reproduce.sh flipflop     on a GPU: unpacks the committed run records
#                                     (results/<sweep>/records.tgz) into runs/, runs whatever of the
#                                     sweep is missing (--pack auto; interrupt and rerun at will),
#                                     packs the records back, collects the CSVs, rebuilds the tables
#   scripts/reproduce.sh --from-csv   on any machine: rebuilds every table and figure from the
#                                     committed CSVs (byte-identical: the bootstrap is seeded)
# The A5 and MQRAR-N experiments have not been run yet (results/README.md).
# PATHBENCH=path/to/pathbench picks the binary (default build/pathbench, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
PB=${PATHBENCH:-build/pathbench}
[ -x "$PB" ] || bash scripts/build.sh
FLIPFLOP_SWEEPS="paper-flipflop diag-flipflop-rope"

# Writes $2 from the output of the command $1.. atomically (a failed table leaves the old file).
atomic() { local out=$1; shift; "$@" >"$out.tmp" && mv "$out.tmp" "$out"; }

flipflop_tables() {
  local d=results/paper-flipflop w s lr
  paper() {
    echo "# paper-flipflop: tables"
    echo
    echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv and seqstats.csv. Error rates in %."
    for w in 64 128; do
      echo
      echo "## d_model $w (head dim $((w / 2))): learning rate chosen per encoding on val"
      echo
      "$PB" table $d/evals.csv --rows pe --cols split --metric error_rate --best-over lr --where d_model=$w --percent
      echo
      "$PB" table $d/evals.csv --rows pe --cols split --metric error_rate --best-over lr --where d_model=$w --percent --per-seed
      for s in val val_sparse val_dense; do
        echo
        echo "### d_model $w, every learning rate, $s"
        echo
        "$PB" table $d/evals.csv --rows pe --cols lr --split $s --metric error_rate --where d_model=$w --percent
      done
    done
  }
  atomic $d/tables.md paper
  for w in 64 128; do "$PB" plot $d/evals.csv --figure error-rate --where d_model=$w -o $d/error-rate-d$w.svg; done
  d=results/diag-flipflop-rope
  diag() {
    echo "# diag-flipflop-rope: tables"
    echo
    echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv and seqstats.csv. Error rates in %."
    for lr in 0.001 0.003; do
      echo
      echo "## lr $lr"
      echo
      "$PB" table $d/evals.csv --rows pe --cols split --metric error_rate --where lr=$lr --percent
      echo
      "$PB" table $d/evals.csv --rows pe --cols split --metric error_rate --where lr=$lr --percent --per-seed
    done
  }
  atomic $d/tables.md diag
}

flipflop_run() {
  local s
  for s in $FLIPFLOP_SWEEPS; do
    mkdir -p runs results/$s
    [ -f results/$s/records.tgz ] && tar xzf results/$s/records.tgz -C .
    "$PB" sweep sweeps/$s.toml --pack auto
    tar czf results/$s/records.tgz.tmp --exclude=model.safetensors runs/$s && mv results/$s/records.tgz.tmp results/$s/records.tgz
    "$PB" collect runs/$s -o results/$s
  done
  flipflop_tables
}

case "${1:-}" in
  flipflop) flipflop_run ;;
  --from-csv) flipflop_tables ;;
  *) echo "usage: scripts/reproduce.sh flipflop | --from-csv" >&2; exit 2 ;;
esac
