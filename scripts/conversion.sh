#!/usr/bin/env bash
# The RoPE -> PaTH conversion experiments (docs/conversion.md; the PaTH paper's claim that a trained
# RoPE model can be converted to PaTH and trained briefly instead of from scratch). EXP is flipflop
# (the default) or a5; its three sweeps run in order:
#   a. RoPE for S1 steps, seeds 0 1 2                  sweeps/conversion-EXP-base.toml
#   b. each converted to PaTH and trained N more steps (fresh AdamW and schedule), and
#   c. each trained N more steps as RoPE (the "more steps" control)   sweeps/conversion-EXP.toml
#   d. PaTH from scratch for S1 + N steps              sweeps/conversion-EXP-scratch.toml
# flipflop: S1 = 10,000, N = 2,000 and 5,000, error rates (%) on val, val_sparse and val_dense;
# a5: length 8 at 2 layers (RoPE fails there), S1 = 20,000, N up to 10,000 with paper-a5's
# stopping rules, seq_acc on val and test and the step each run stopped at.
# Then `collect` into the results folder (CSVs, records.tgz), tables.md and curves-*.svg.
#
#   scripts/conversion.sh [EXP]           on a GPU (the sweeps say device = "cuda", precision =
#                                         "bf16"); runs go to runs/conversion[-a5]/, the RoPE sources
#                                         are linked as runs/conversion[-a5]-sources/rope-seed<s>, the
#                                         results to results/conversion[-a5]/. Resumable: rerun after an
#                                         interruption; finished runs are skipped, pending ones resume.
#   scripts/conversion.sh [EXP] --smoke   the same pipeline on the CPU at tiny sizes (steps / 500,
#                                         flip-flop length 16, A5 length 4 at width 32 and stopping
#                                         at val acc >= 0.2, so that some runs stop early, 64
#                                         evaluation sequences), into runs/conversion[-a5]-smoke*
#                                         (results too): 3-10 s on 2 cores (CTest conversion_smoke)
#   scripts/conversion.sh [EXP] --tables [DIR]   only rebuilds DIR's (default: the results folder)
#                                         tables.md and curves-*.svg from its CSVs, on any machine
#                                         (byte-identical: the bootstrap is seeded); the conversion runs
#                                         themselves need their sources' checkpoints, whose checksums
#                                         are in the run ids
# PATHBENCH=path/to/pathbench picks the binary (default build/pathbench, built if missing);
# SWEEP_ARGS replaces the sweep engine's options (default: --pack auto; --smoke: none).
set -euo pipefail
cd "$(dirname "$0")/.."
PB=${PATHBENCH:-build/pathbench}
[ -x "$PB" ] || bash scripts/build.sh
EXP=flipflop
case "${1:-}" in flipflop | a5) EXP=$1 && shift ;; esac
BASE=conversion-$EXP-base SWEEPS="conversion-$EXP-base conversion-$EXP conversion-$EXP-scratch"
NAME=conversion  # the folders' stem under runs/ and results/ (flip-flop's, published first, has no suffix)
[ "$EXP" = a5 ] && NAME=conversion-a5

# The tables and figures of $RESULTS, from its CSVs (history.csv unpacked: scripts/history.sh).
publish() {
  bash scripts/history.sh unpack "$RESULTS"
  # Per encoding (path, rope): the mean and per-seed tables of metric $1 with the steps as rows;
  # for A5 (seq_acc) also the step each run stopped at.
  by_steps() {
    local pe
    for pe in path rope; do
      echo
      echo "## $pe${2:+: $2}"
      echo
      "$PB" table "$RESULTS/evals.csv" --rows steps --cols split --metric "$1" --percent --where pe_name=$pe
      echo
      "$PB" table "$RESULTS/evals.csv" --rows steps --cols split --metric "$1" --percent --where pe_name=$pe --per-seed
      [ "$1" = seq_acc ] || continue
      echo
      echo "## $pe: the step each run stopped at"
      echo
      "$PB" table "$RESULTS/evals.csv" --rows steps --cols split --split val --metric step --where pe_name=$pe --per-seed
    done
  }
  flipflop_tables() {
    echo "# conversion: tables"
    echo
    echo "Made by \`scripts/conversion.sh\` from evals.csv, seqstats.csv and history.csv. Error rates in %. Rows:"
    echo "the steps of the run; PaTH at N = 2,000 and 5,000 steps is converted from the RoPE model (10,000"
    echo "steps), at 10,000 + N from scratch; RoPE at N steps is that model trained N more steps."
    by_steps error_rate
    echo
    echo "## path during training: val_sparse at each periodic evaluation (its first eval_every_n sequences)"
    echo
    "$PB" table "$RESULTS/history.csv" --rows steps --cols step --split val_sparse --metric error_rate --percent \
      --where pe_name=path --per-seed
  }
  a5_tables() {
    echo "# conversion-a5: tables"
    echo
    echo "Made by \`scripts/conversion.sh a5\` from evals.csv, seqstats.csv and history.csv. Rows: the steps"
    echo "allowed; RoPE at 20,000 is the source, PaTH and RoPE at 10,000 continue from it (PaTH converted),"
    echo "PaTH at 30,000 is from scratch. Runs stop at val seq_acc >= 0.99 or 8 evaluations without a"
    echo "better val loss."
    by_steps seq_acc "seq_acc (%)"
  }
  ${EXP}_tables >"$RESULTS/tables.md.tmp"
  mv "$RESULTS/tables.md.tmp" "$RESULTS/tables.md"
  local metric=acc splits="val val_sparse"
  [ "$EXP" = a5 ] && metric=seq_acc splits=val
  for s in $splits; do
    "$PB" plot "$RESULTS/history.csv" --figure curves --split $s --metric $metric -o "$RESULTS/curves-$s.svg"
  done
  cat "$RESULTS/tables.md"
}

if [ "${1:-}" = "--tables" ]; then
  RESULTS=${2:-results/$NAME}
  publish
  exit 0
elif [ "${1:-}" = "--smoke" ]; then
  ROOT=runs/$NAME-smoke SOURCES=runs/$NAME-smoke-sources RESULTS=runs/$NAME-smoke-results
  ENGINE=${SWEEP_ARGS:-}
  mkdir -p "$ROOT/sweeps"
  # The committed sweep files at tiny sizes, on the CPU: every step count / 500 (order kept).
  for s in $SWEEPS; do
    sed -e 's/^device = "cuda"/device = "cpu"/; s/^precision = "bf16"/precision = "fp32"/; s/len=512/len=16/' \
        -e 's/group=a5,len=8/group=a5,len=4/; s/^d_model = 256/d_model = 32/; s/^heads = 8/heads = 2/' \
        -e 's/^batch = 128/batch = 16/; s/^patience = .*/patience = 4/; s/^stop_at = .*/stop_at = "val:acc>=0.2"/' \
        -e 's/^eval_every = .*/eval_every = 5/; s/^eval_every_n = .*/eval_every_n = 32/; s/^eval_n = .*/eval_n = 64/' \
        -e 's/^eval_sizes = .*/eval_sizes = "val_sparse=128"/; s/^warmup = .*/warmup = 2/' \
        -e "s#runs/$NAME-sources#$SOURCES#" "sweeps/$s.toml" |
      perl -pe 's/(\d+)/$1 \/ 500/ge if /^steps/' >"$ROOT/sweeps/$s.toml"
  done
  SWEEP_DIR=$ROOT/sweeps
elif [ $# -eq 0 ]; then
  ROOT=runs/$NAME SOURCES=runs/$NAME-sources RESULTS=results/$NAME
  ENGINE=${SWEEP_ARGS:---pack auto}
  SWEEP_DIR=sweeps
else
  echo "usage: scripts/conversion.sh [flipflop | a5] [--smoke | --tables [DIR]]" >&2
  exit 2
fi

# a. The RoPE models, linked per seed where the conversion sweep's init_from looks for them.
# shellcheck disable=SC2086
"$PB" sweep "$SWEEP_DIR/$BASE.toml" --out "$ROOT" $ENGINE
mkdir -p "$SOURCES"
"$PB" sweep "$SWEEP_DIR/$BASE.toml" --out "$ROOT" --dry-run |
  while IFS=$'\t' read -r id _ label; do
    seed=${label##*seed=}
    seed=${seed%% *}
    ln -sfn "$(realpath --relative-to="$SOURCES" "$ROOT/$BASE/$id")" "$SOURCES/rope-seed$seed"
  done

# b, c, d. Converted and continued (from the sources), and PaTH from scratch.
for s in conversion-$EXP conversion-$EXP-scratch; do
  # shellcheck disable=SC2086
  "$PB" sweep "$SWEEP_DIR/$s.toml" --out "$ROOT" $ENGINE
done

mkdir -p "$RESULTS"
"$PB" collect "$ROOT" -o "$RESULTS"
bash scripts/history.sh pack "$RESULTS"
# The run records (no checkpoints) and the source links, for the record: a rerun needs the sources'
# checkpoints, whose checksums are part of the conversion runs' ids.
tar czf "$RESULTS/records.tgz.tmp" --exclude='*.safetensors*' "$ROOT" "$SOURCES"
mv "$RESULTS/records.tgz.tmp" "$RESULTS/records.tgz"
publish
