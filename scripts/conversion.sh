#!/usr/bin/env bash
# The RoPE -> PaTH conversion experiment on flip-flop (docs/conversion.md; the PaTH paper's claim
# that a trained RoPE model can be converted to PaTH and trained briefly instead of from scratch):
#   a. RoPE, 10,000 steps, seeds 0 1 2         sweeps/conversion-flipflop-base.toml
#   b. each converted to PaTH, N = 2,000 and 5,000 more steps (fresh AdamW and schedule), and
#   c. each trained N more steps as RoPE (the "more steps" control)   sweeps/conversion-flipflop.toml
#   d. PaTH from scratch, 10,000 + N steps      sweeps/conversion-flipflop-scratch.toml
# then `collect` into results/conversion/ (CSVs, records.tgz), tables.md and curves-*.svg: error rates (%) on
# val, val_sparse and val_dense, PaTH converted against PaTH from scratch, and RoPE before and
# after its N more steps.
#
#   scripts/conversion.sh            on a GPU (the sweeps say device = "cuda", precision = "bf16");
#                                    runs go to runs/conversion/, the RoPE sources are linked as
#                                    runs/conversion-sources/rope-seed<s>. Resumable: rerun after an
#                                    interruption; finished runs are skipped, pending ones resume.
#   scripts/conversion.sh --smoke    the same pipeline on the CPU at tiny sizes (len 16, 20 + 5/10
#                                    steps, 64 evaluation sequences), into runs/conversion-smoke*
#                                    (results too): 21 runs, about a minute on 2 shared cores
#   scripts/conversion.sh --tables [DIR]   only rebuilds DIR's (default results/conversion) tables.md
#                                    and curves-*.svg from its CSVs, on any machine (byte-identical:
#                                    the bootstrap is seeded); the conversion runs themselves need
#                                    their sources' checkpoints, whose checksums are in the run ids
# PATHBENCH=path/to/pathbench picks the binary (default build/pathbench, built if missing);
# SWEEP_ARGS replaces the sweep engine's options (default: --pack auto; --smoke: none).
set -euo pipefail
cd "$(dirname "$0")/.."
PB=${PATHBENCH:-build/pathbench}
[ -x "$PB" ] || bash scripts/build.sh
SWEEPS="conversion-flipflop-base conversion-flipflop conversion-flipflop-scratch"

# The tables and figures of $RESULTS, from its CSVs.
publish() {
  tables() {
    echo "# conversion: tables"
    echo
    echo "Made by \`scripts/conversion.sh\` from evals.csv, seqstats.csv and history.csv. Error rates in %. Rows:"
    echo "the steps of the run; PaTH at N = 2,000 and 5,000 steps is converted from the RoPE model (10,000"
    echo "steps), at 10,000 + N from scratch; RoPE at N steps is that model trained N more steps."
    for pe in path rope; do
      echo
      echo "## $pe"
      echo
      "$PB" table "$RESULTS/evals.csv" --rows steps --cols split --metric error_rate --percent --where pe_name=$pe
      echo
      "$PB" table "$RESULTS/evals.csv" --rows steps --cols split --metric error_rate --percent --where pe_name=$pe --per-seed
    done
    echo
    echo "## path during training: val_sparse at each periodic evaluation (its first eval_every_n sequences)"
    echo
    "$PB" table "$RESULTS/history.csv" --rows steps --cols step --split val_sparse --metric error_rate --percent \
      --where pe_name=path --per-seed
  }
  tables >"$RESULTS/tables.md.tmp"
  mv "$RESULTS/tables.md.tmp" "$RESULTS/tables.md"
  for s in val val_sparse; do
    "$PB" plot "$RESULTS/history.csv" --figure curves --split $s --metric acc -o "$RESULTS/curves-$s.svg"
  done
  cat "$RESULTS/tables.md"
}

if [ "${1:-}" = "--tables" ]; then
  RESULTS=${2:-results/conversion}
  publish
  exit 0
elif [ "${1:-}" = "--smoke" ]; then
  ROOT=runs/conversion-smoke SOURCES=runs/conversion-smoke-sources RESULTS=runs/conversion-smoke-results
  ENGINE=${SWEEP_ARGS:-}
  mkdir -p "$ROOT/sweeps"
  # The committed sweep files at tiny sizes, on the CPU; the steps in order S1, N, S1 + N.
  for s in $SWEEPS; do
    sed -e 's/^device = "cuda"/device = "cpu"/; s/^precision = "bf16"/precision = "fp32"/; s/len=512/len=16/' \
        -e 's/^eval_every = .*/eval_every = 5/; s/^eval_every_n = .*/eval_every_n = 32/; s/^eval_n = .*/eval_n = 64/' \
        -e 's/^eval_sizes = .*/eval_sizes = "val_sparse=128"/; s/^warmup = .*/warmup = 2/' \
        -e '/^steps/{s/15000/30/; s/12000/25/; s/10000/20/; s/5000/10/; s/2000/5/}' \
        -e "s#runs/conversion-sources#$SOURCES#" "sweeps/$s.toml" >"$ROOT/sweeps/$s.toml"
  done
  SWEEP_DIR=$ROOT/sweeps
elif [ $# -eq 0 ]; then
  ROOT=runs/conversion SOURCES=runs/conversion-sources RESULTS=results/conversion
  ENGINE=${SWEEP_ARGS:---pack auto}
  SWEEP_DIR=sweeps
else
  echo "usage: scripts/conversion.sh [--smoke | --tables [DIR]]" >&2
  exit 2
fi

# a. The RoPE models, linked per seed where the conversion sweep's init_from looks for them.
# shellcheck disable=SC2086
"$PB" sweep "$SWEEP_DIR/conversion-flipflop-base.toml" --out "$ROOT" $ENGINE
mkdir -p "$SOURCES"
"$PB" sweep "$SWEEP_DIR/conversion-flipflop-base.toml" --out "$ROOT" --dry-run |
  while IFS=$'\t' read -r id _ label; do
    seed=${label##*seed=}
    seed=${seed%% *}
    ln -sfn "$(realpath --relative-to="$SOURCES" "$ROOT/conversion-flipflop-base/$id")" "$SOURCES/rope-seed$seed"
  done

# b, c, d. Converted and continued (from the sources), and PaTH from scratch.
for s in conversion-flipflop conversion-flipflop-scratch; do
  # shellcheck disable=SC2086
  "$PB" sweep "$SWEEP_DIR/$s.toml" --out "$ROOT" $ENGINE
done

mkdir -p "$RESULTS"
"$PB" collect "$ROOT" -o "$RESULTS"
# The run records (no checkpoints) and the source links, for the record: a rerun needs the sources'
# checkpoints, whose checksums are part of the conversion runs' ids.
tar czf "$RESULTS/records.tgz.tmp" --exclude='*.safetensors' "$ROOT" "$SOURCES"
mv "$RESULTS/records.tgz.tmp" "$RESULTS/records.tgz"
publish
