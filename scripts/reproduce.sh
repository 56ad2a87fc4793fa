#!/usr/bin/env bash
# Reproduces the experiments published in results/ (results/README.md says which claims they test).
#   scripts/reproduce.sh flipflop     on a GPU: unpacks the committed run records
#                                     (results/<sweep>/records.tgz) into runs/, runs whatever of the
#                                     sweep is missing (--pack auto; interrupt and rerun at will),
#                                     packs the records back, collects the CSVs, rebuilds the tables
#   scripts/reproduce.sh lengthgen    the same for lengthgen-flipflop (trained at 512, read at 1K–8K)
#   scripts/reproduce.sh a5           the same for paper-a5 (in progress: runs what is missing;
#                                     DRAIN_AFTER=S stops starting runs after S seconds); its
#                                     tables mark the cells whose runs are pending
#   scripts/reproduce.sh a5-controls-cpu  the same for paper-a5-controls-cpu, on a CPU (A4×Z5, Z60
#                                     and S5 at length 8: days on two cores)
#   scripts/reproduce.sh mqrar        the same for paper-mqrar (MQRAR-N; GPU-hours: see its header
#                                     and paper-mqrar-pilot.toml)
#   scripts/reproduce.sh mqrar-distance  the same for diag-mqrar-distance (MQRAR-2 accuracy by recall
#                                     distance during training; one call of an H200)
#   scripts/reproduce.sh mqrar-gate-bias  the same for diag-mqrar-gate-bias (FoX and PaTH-FoX at MQRAR-3
#                                     and 1e-3 with the gate's bias started at 5; one or two calls)
#   scripts/reproduce.sh mqrar-sba-bias  the same for diag-mqrar-sba-bias (SBA at MQRAR-3 and 1e-3
#                                     with its logits offset by −5; two calls)
#   scripts/reproduce.sh ablations    the same for ablations-flipflop and ablations-kvconv-flipflop
#                                     (PaTH's ablations; every encoding with k and v convolved)
#   scripts/reproduce.sh all          flipflop, lengthgen, ablations, a5 and mqrar in turn
#   scripts/reproduce.sh --from-csv   on any machine: rebuilds every table and figure from the
#                                     committed CSVs (byte-identical: the bootstrap is seeded),
#                                     results/conversion[-a5]'s too (scripts/conversion.sh runs those)
# PATHBENCH=path/to/pathbench picks the binary (default build/pathbench, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
PB=${PATHBENCH:-build/pathbench}
[ -x "$PB" ] || bash scripts/build.sh
FLIPFLOP_SWEEPS="paper-flipflop diag-flipflop-rope diag-flipflop-rope-lr"

# Writes $1 from the output of the command $2.. atomically: a failing command inside it stops the
# script (set -e holds in the command, which an `&&` after it would switch off), the old file kept.
atomic() {
  local out=$1
  shift
  "$@" >"$out.tmp"
  mv "$out.tmp" "$out"
}
# The distinct values of column $2 of CSV $1, sorted, space-separated.
csv_values() {
  python3 -c 'import csv, sys; print(*sorted({r[sys.argv[2]] for r in csv.DictReader(open(sys.argv[1]))}))' "$1" "$2"
}
# scripts/first_step.py with its rows in the order of the encoding registry (`pathbench list`), as `table` orders them.
first_step() {
  local order
  order=$("$PB" list | awk '/^position encodings/ {on = 1; next} on && /^  [^ ]/ {print $1}' | paste -sd, -)
  python3 scripts/first_step.py "$@" --order pe="$order" --order pe_name="$order"
}

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
  "$PB" plot $d/history.csv --figure curves --metric acc --split val -o $d/curves-val.svg
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
  d=results/diag-flipflop-rope-lr
  lrs() {
    echo "# diag-flipflop-rope-lr: tables"
    echo
    echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv and seqstats.csv. Error rates in %."
    for s in val val_sparse val_dense; do
      echo
      echo "## $s"
      echo
      "$PB" table $d/evals.csv --rows pe --cols lr --split $s --metric error_rate --percent
      echo
      "$PB" table $d/evals.csv --rows pe --cols lr --split $s --metric error_rate --percent --per-seed
    done
  }
  atomic $d/tables.md lrs
}

lengthgen_tables() {
  local d=results/lengthgen-flipflop s pe
  tables() {
    echo "# lengthgen-flipflop: tables"
    echo
    echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv and seqstats.csv. Error rates in %;"
    echo "the learning rate is chosen per encoding on val at the trained length 512 and reported at every length."
    for s in val val_sparse val_dense; do
      echo
      echo "## $s"
      echo
      "$PB" table $d/evals.csv --cols len --split $s --metric error_rate --percent --best-over lr --select-on val,len=512
      echo
      "$PB" table $d/evals.csv --cols len --split $s --metric error_rate --percent --best-over lr --select-on val,len=512 --per-seed
    done
  }
  atomic $d/tables.md tables
  for s in val val_sparse val_dense; do
    "$PB" plot $d/evals.csv --figure acc-vs-length --split $s --select-on val,len=512 -o $d/acc-vs-length-$s.svg
  done
}

# The ablation sweeps, once collected: the learning rate chosen per encoding on val, as Table 1.
ablation_tables() {
  local s d sp pe
  for s in ablations-flipflop ablations-kvconv-flipflop; do
    d=results/$s
    [ -f $d/evals.csv ] || continue
    tables() {
      echo "# $s: tables"
      echo
      echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv and seqstats.csv. Error rates in %;"
      echo "the learning rate chosen per encoding on val."
      echo
      "$PB" table $d/evals.csv --rows pe --cols split --metric error_rate --best-over lr --percent
      echo
      "$PB" table $d/evals.csv --rows pe --cols split --metric error_rate --best-over lr --percent --per-seed
      for sp in val val_sparse val_dense; do
        echo
        echo "## every learning rate, $sp, per seed"
        echo
        "$PB" table $d/evals.csv --rows pe --cols lr --split $sp --metric error_rate --percent --per-seed
      done
      for pe in path:w_rank=32,beta_clip=0,block=64 sba; do
        grep -qF "$pe" $d/history.csv || continue
        echo
        echo "## ${pe%%:*} during training: val_sparse at each periodic evaluation (its first 2,048 sequences; at the last step the final evaluation, all of them), per seed"
        echo
        "$PB" table $d/history.csv --rows lr --cols step --split val_sparse --metric error_rate --percent --per-seed \
          --where pe=$pe
      done
    }
    atomic $d/tables.md tables
    "$PB" plot $d/evals.csv --figure error-rate -o $d/error-rate.svg
    "$PB" plot $d/history.csv --figure curves --split val_sparse --metric acc -o $d/curves-val_sparse.svg
  done
}

# PaTH Figure 2 bottom as tables and a figure: the smallest depth whose test seq_acc reaches 90 %, lr chosen on
# val per encoding, length and depth; cells whose runs are pending say so (docs/sweeps.md, table).
a5_tables() {
  local d=results/paper-a5 by len
  [ -f $d/evals.csv ] || return 0
  local sel=(--split test --metric seq_acc --best-over lr --select-on val)
  tables() {
    echo "# paper-a5: tables"
    echo
    echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv and seqstats.csv. The sweep is in progress:"
    echo "a cell whose seeds have not all run at some depth reads \"≥ d (k of n seeds)\", undecided."
    for by in "mean:the mean over seeds" "all:every seed" "any:some seed"; do
      echo
      echo "## Smallest depth with test seq_acc ≥ 90 %: ${by#*:}"
      echo
      "$PB" table $d/evals.csv "${sel[@]}" --min-layers 0.9 --min-layers-by "${by%%:*}"
    done
    echo
    echo "## Smallest depth with test seq_acc ≥ 90 %: each seed"
    echo
    "$PB" table $d/evals.csv "${sel[@]}" --min-layers 0.9 --per-seed
    for len in $("$PB" table $d/evals.csv "${sel[@]}" --min-layers 0.9 | sed -n 's/^| pe \\ task_len | \(.*\) |$/\1/p' | tr -d '|'); do
      echo
      echo "## Length $len: test seq_acc (%) at every depth that ran"
      echo
      echo "The depth search runs a configuration (seed, lr) no deeper than the depth where it passed, so a"
      echo "column holds only the configurations that had not passed at a shallower depth, and its values"
      echo "need not rise with depth; n counts the seeds present."
      echo
      "$PB" table $d/evals.csv "${sel[@]}" --rows pe --cols layers --where task_len=$len --percent
    done
    echo
    echo "## Length 8, two layers: how fast each run learned (first evaluation at 50 % and 90 % val seq_acc)"
    echo
    first_step $d/history.csv --split val --metric seq_acc --at 0.5 0.9 --where task_len=8 \
      --where layers=2
    for layers in 2 3; do
      echo
      echo "## $layers layers, every length: how fast each run reached 90 % val seq_acc (both lr, every seed)"
      echo
      echo "Runs the depth search skipped (a shallower depth of their configuration passed) are absent."
      echo
      first_step $d/history.csv --split val --metric seq_acc --at 0.9 --rows pe --cols task_len \
        --where layers=$layers
    done
  }
  atomic $d/tables.md tables
  "$PB" plot $d/evals.csv --figure min-depth --split test --metric seq_acc --min-layers 0.9 -o $d/min-depth.svg
  "$PB" plot $d/history.csv --figure curves --split val --metric seq_acc --where task_len=8 --where layers=2 \
    -o $d/curves-len8-layers2.svg
}

# diag-a5-budget (paper-a5's two-layer models at length 8, up to 80,000 steps): every learning rate,
# lr chosen on val, how fast each run learned, and the learning curves.
budget_tables() {
  local d=results/diag-a5-budget
  [ -f $d/evals.csv ] || return 0
  budget() {
    echo "# diag-a5-budget: tables"
    echo
    echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv and history.csv. Length 8, two layers, up to"
    echo "80,000 steps; seq_acc in %."
    echo
    echo "## Every learning rate, test"
    echo
    "$PB" table $d/evals.csv --rows pe --cols lr --split test --metric seq_acc --percent
    echo
    "$PB" table $d/evals.csv --rows pe --cols lr --split test --metric seq_acc --percent --per-seed
    echo
    echo "## lr chosen on val, every split"
    echo
    "$PB" table $d/evals.csv --rows pe --cols split --metric seq_acc --best-over lr --select-on val --percent
    echo
    echo "## Per seed, the same lr choice"
    echo
    "$PB" table $d/evals.csv --rows pe --cols split --metric seq_acc --best-over lr --select-on val --percent --per-seed
    echo
    echo "## First evaluated step with val seq_acc ≥ 0.9 and ≥ 0.99 (periodic evaluations read 1,024 sequences)"
    echo
    first_step $d/history.csv --split val --metric seq_acc --at 0.9 0.99
  }
  atomic $d/tables.md budget
  "$PB" plot $d/history.csv --figure curves --split val --metric seq_acc -o $d/curves-val.svg
}

# The controls of paper-a5 on a CPU (A4×Z5, Z60 and S5 at length 8, lr 1e-3): the smallest depth
# with test seq_acc ≥ 90 % per encoding and group, each seed's, the accuracy at every depth, how fast
# each run learned; and A5 at the same length and rate (paper-a5) beside them.
controls_tables() {
  local d=results/paper-a5-controls-cpu g
  [ -f $d/evals.csv ] || return 0
  local sel=(--rows pe --cols task_group --split test --metric seq_acc --min-layers 0.9)
  controls() {
    echo "# paper-a5-controls-cpu: tables"
    echo
    echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv, seqstats.csv and history.csv (and"
    echo "../paper-a5/evals.csv). Length 8, lr 1e-3; n counts the seeds that have run."
    echo
    echo "## Smallest depth with test seq_acc ≥ 90 %: the mean over seeds, and each seed"
    echo
    "$PB" table $d/evals.csv "${sel[@]}"
    echo
    "$PB" table $d/evals.csv "${sel[@]}" --per-seed
    if [ -f results/paper-a5/evals.csv ]; then
      echo
      echo "## A5 at length 8, lr 1e-3, for comparison (paper-a5: H200, bf16; both rates there, this one here)"
      echo
      "$PB" table results/paper-a5/evals.csv --split test --metric seq_acc --min-layers 0.9 --where task_len=8 \
        --where lr=0.001 --per-seed
    fi
    for g in $(csv_values $d/evals.csv task_group); do
      echo
      echo "## $g: test seq_acc (%) at every depth that ran"
      echo
      "$PB" table $d/evals.csv --rows pe --cols layers --split test --metric seq_acc --where task_group=$g --percent
    done
    echo
    echo "## How fast: the first periodic evaluation with val seq_acc ≥ 0.9, every run (thousands of steps)"
    echo
    first_step $d/history.csv --split val --metric seq_acc --at 0.9 --rows pe_name --cols task_group
    echo
    echo "## Every run: first step with val seq_acc ≥ 0.5, 0.9 and 0.99"
    echo
    first_step $d/history.csv --split val --metric seq_acc --at 0.5 0.9 0.99 --rows pe_name,task_group,layers
  }
  atomic $d/tables.md controls
  "$PB" plot $d/history.csv --figure curves --split val --metric seq_acc --where layers=1 -o $d/curves-val-layers1.svg
}

# PaTH Figure 2 top as tables: recall accuracy on test against N, lr chosen on val per encoding and
# N, every learning rate per seed, and the step at which each run learned; the pilots' (one seed,
# one lr) when they have run. Nothing until a sweep has results.
mqrar_tables() {
  local s d
  for s in paper-mqrar paper-mqrar-pilot paper-mqrar-pilot2; do
    d=results/$s
    [ -f $d/evals.csv ] || continue
    tables() {
      echo "# $s: tables"
      echo
      echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv, seqstats.csv and history.csv. Accuracy on the scored"
      echo "positions of test, in %; the learning rate chosen per encoding and N on val."
      echo
      "$PB" table $d/evals.csv --rows pe --cols task_n_back --split test --metric acc --best-over lr --select-on val --percent
      echo
      "$PB" table $d/evals.csv --rows pe --cols task_n_back --split test --metric acc --best-over lr --select-on val \
        --percent --per-seed
      for lr in $(csv_values $d/evals.csv lr); do
        echo
        echo "## lr $lr, per seed"
        echo
        "$PB" table $d/evals.csv --rows pe --cols task_n_back --split test --metric acc --where lr=$lr --percent --per-seed
      done
      echo
      echo "## How fast: the first periodic evaluation with val acc ≥ 0.99 (the stopping rule), every run"
      echo
      echo "A fixed budget says whether a run learned; this says when. Periodic evaluations read eval_every_n"
      echo "sequences of val (runs.csv)."
      echo
      first_step $d/history.csv --split val --metric acc --at 0.99 --rows pe_name --cols task_n_back
      echo
      echo "## Every run: first step with val acc ≥ 0.5, 0.9 and 0.99"
      echo
      first_step $d/history.csv --split val --metric acc --at 0.5 0.9 0.99 \
        --rows pe_name,task_n_back,lr
    }
    atomic $d/tables.md tables
    "$PB" plot $d/evals.csv --figure acc-vs --x task_n_back --split test -o $d/acc-vs-n.svg
    "$PB" plot $d/history.csv --figure curves --split val --metric acc -o $d/curves-val.svg
  done
}

# MQRAR-2 by recall distance (diag-mqrar-distance): test accuracy per range of distances, the first
# step at which each range passed 0.5, 0.9 and 0.99 on val, and the curves per range.
distance_tables() {
  local d=results/diag-mqrar-distance
  [ -f $d/distances.csv ] || return 0
  distances() {
    echo "# diag-mqrar-distance: tables"
    echo
    echo "Made by \`scripts/reproduce.sh --from-csv\` from distances.csv and distance_history.csv. Accuracy on"
    echo "the scored positions whose recalled value is d tokens back, from ≤ d < 2·from, in %; one seed."
    echo
    echo "## Test, final evaluation"
    echo
    "$PB" table $d/distances.csv --rows distance_from --cols pe --split test --metric acc --percent
    echo
    echo "## First periodic evaluation at which each range passed (val, 1,024 sequences per evaluation)"
    echo
    first_step $d/distance_history.csv --split val --metric acc --at 0.5 0.9 0.99 --rows pe_name,distance_from
  }
  atomic $d/tables.md distances
  "$PB" plot $d/distance_history.csv --figure curves --split val --metric acc -o $d/curves-by-distance.svg
}

# MQRAR-3 at 1e-3 with a flatter recency prior at init (diag-mqrar-gate-bias: the forget gate
# started near 1; diag-mqrar-sba-bias: stick-breaking's logits offset): test accuracy per run beside
# paper-mqrar's runs with the default, the first step at which val passed 1 % (off the uniform
# guess, 0.012 %), 50, 90 and 99 %, and the gradient norm over training. $1: the sweep, $2: what
# every run of it does.
init_prior_tables() {
  local s=$1 what=$2 d=results/$1
  [ -f $d/evals.csv ] || return 0
  init_prior() {
    echo "# $s: tables"
    echo
    echo "Made by \`scripts/reproduce.sh --from-csv\` from evals.csv and history.csv here, ../paper-mqrar/evals.csv,"
    echo "and both folders' records.tgz. Every run here $what."
    echo
    echo "## Test acc (%, scored positions), per seed"
    echo
    "$PB" table $d/evals.csv --rows pe --cols seed --split test --metric acc --percent
    echo
    echo "The same runs with the bias at 0 (the default): paper-mqrar at N = 3, lr 1e-3, every encoding."
    echo
    "$PB" table results/paper-mqrar/evals.csv --rows pe --cols seed --split test --metric acc --percent \
      --where task_n_back=3 --where lr=0.001
    echo
    echo "## First periodic evaluation at which val acc passed each level (1,024 sequences per evaluation)"
    echo
    first_step $d/history.csv --split val --metric acc --at 0.01 0.5 0.9 0.99
    echo
    echo "## Gradient norm before clipping, median over windows of steps (scripts/metric_windows.py)"
    echo
    python3 scripts/metric_windows.py $d/records.tgz $d/runs.csv --metric grad_norm --rows pe \
      --windows 0 1000 5000 10000 20000
    echo
    echo "With the bias at 0 (paper-mqrar, N = 3, lr 1e-3):"
    echo
    python3 scripts/metric_windows.py results/paper-mqrar/records.tgz results/paper-mqrar/runs.csv \
      --metric grad_norm --rows pe --where task_n_back=3 --where lr=0.001 --windows 0 1000 5000 10000 20000
  }
  atomic $d/tables.md init_prior
  "$PB" plot $d/history.csv --figure curves --split val --metric acc -o $d/curves-val.svg
}
gate_bias_tables() {
  init_prior_tables diag-mqrar-gate-bias "starts the forget gate's bias at 5 (gate_bias=5)"
}
sba_bias_tables() {
  init_prior_tables diag-mqrar-sba-bias "adds −5 to stick-breaking's logits (sba:bias=-5)"
}

# Runs what is missing of sweep $1 on the GPU, resuming from its committed run records
# (results/$1/records.tgz), packs the records back (no checkpoints) and collects the CSVs.
# DRAIN_AFTER=S starts no run after S seconds (sweep --drain-after): for time-limited machines.
sweep_run() {
  local s=$1 rc=0
  bash scripts/lease.sh unpack $s
  "$PB" sweep sweeps/$s.toml --pack auto ${DRAIN_AFTER:+--drain-after "$DRAIN_AFTER"} || rc=$?
  PATHBENCH=$PB bash scripts/lease.sh publish $s
  return $rc
}

flipflop_run() {
  local s
  for s in $FLIPFLOP_SWEEPS; do sweep_run $s; done
  flipflop_tables
}

case "${1:-}" in
  flipflop) flipflop_run ;;
  lengthgen) sweep_run lengthgen-flipflop && lengthgen_tables ;;
  a5) sweep_run paper-a5 && a5_tables ;;
  a5-controls-cpu) sweep_run paper-a5-controls-cpu && controls_tables ;;
  mqrar) sweep_run paper-mqrar && mqrar_tables ;;
  mqrar-distance) sweep_run diag-mqrar-distance && distance_tables ;;
  mqrar-gate-bias) sweep_run diag-mqrar-gate-bias && gate_bias_tables ;;
  mqrar-sba-bias) sweep_run diag-mqrar-sba-bias && sba_bias_tables ;;
  ablations) sweep_run ablations-flipflop && sweep_run ablations-kvconv-flipflop && ablation_tables ;;
  all)
    for e in flipflop lengthgen ablations a5 mqrar; do PATHBENCH=$PB bash scripts/reproduce.sh $e; done
    ;;
  --from-csv)
    bash scripts/history.sh unpack results/*/
    flipflop_tables
    lengthgen_tables
    ablation_tables
    a5_tables
    budget_tables
    controls_tables
    mqrar_tables
    distance_tables
    gate_bias_tables
    sba_bias_tables
    PATHBENCH=$PB bash scripts/conversion.sh --tables >/dev/null
    [ ! -f results/conversion-a5/evals.csv ] || PATHBENCH=$PB bash scripts/conversion.sh a5 --tables >/dev/null
    ;;
  *) echo "usage: scripts/reproduce.sh flipflop | lengthgen | a5 | a5-controls-cpu | mqrar | mqrar-distance | mqrar-gate-bias | mqrar-sba-bias | ablations | all | --from-csv" >&2
     exit 2 ;;
esac
