#!/usr/bin/env bash
# A sweep that outlives one command on a time-limited GPU machine (a lent GPU whose commands are
# capped at minutes, an interactive Slurm job): start it detached, look at it from later commands,
# and finish it by a deadline with its run records packed for the next machine.
#   scripts/lease.sh start SWEEP [DRAIN_AFTER]  unpacks results/SWEEP/records.tgz into runs/ (as
#                                               `unpack` does) and starts `sweep sweeps/SWEEP.toml --pack auto`
#                                               on every visible GPU in its own session (setsid), so it
#                                               survives the command that started it; no run starts
#                                               after DRAIN_AFTER s
#   scripts/lease.sh status SWEEP               the sweep's last log lines, its runs by state, and
#                                               each run in flight that has logged a step: its step
#                                               and the time it may still need (lost if the machine
#                                               goes back first)
#   scripts/lease.sh snapshot SWEEP             packs the run records (the finished runs whole, the
#                                               others without result.json and checkpoints) into
#                                               results/SWEEP/records.tgz while the sweep goes on:
#                                               copy it off the machine at the end of every command,
#                                               so that a machine lost between commands loses only
#                                               the runs in flight
#   scripts/lease.sh call SWEEP UNTIL_S [DRAIN_AFTER]
#                                               one capped command of a leased sweep: builds the binary
#                                               if missing or built from other sources (or takes the
#                                               one scripts/carry.sh built ahead, when it matches the
#                                               sources), starts the sweep unless it is running (a
#                                               fresh machine resumes from records.tgz; a sweep found
#                                               running with another ONLY, left by the last call on
#                                               a warm machine, is waited for, and this call's starts
#                                               when it ends, with what is left of DRAIN_AFTER, which
#                                               counts from the call's start; 0: no drain), returns
#                                               UNTIL_S s after the call began (sooner when the
#                                               sweep ends), then snapshots and collects; with $OUT
#                                               set, copies records.tgz and the log there (and the
#                                               waited-for sweep's log as SWEEP.earlier.log; the CSVs
#                                               are `collect`'s of the records, anywhere). TEST=1
#                                               first builds and runs the GPU tests (scripts/gpu.sh
#                                               test; logs in runs/gpu-test, and with $OUT
#                                               ctest_cuda.log and gpu.txt there) and starts no
#                                               sweep unless every one passed: for a fresh machine
#   scripts/lease.sh unpack SWEEP               results/SWEEP/records.tgz into runs/SWEEP, run by run: a
#                                               run finished here keeps its files; any other run is
#                                               replaced whole by the packed one when that one finished;
#                                               a run pending in both keeps its files here. No run's
#                                               folder ever mixes the files of two of its attempts
#   scripts/lease.sh publish SWEEP              packs the records and collects the CSVs (results/SWEEP)
#   scripts/lease.sh finish SWEEP WAIT_S        waits up to WAIT_S s for the sweep to end, then stops it
#                                               (SIGTERM: runs in flight stay pending and rerun next
#                                               time), packs the run records (no checkpoints) into
#                                               results/SWEEP/records.tgz and collects the CSVs
# PATHBENCH=path/to/pathbench picks the binary (default build-gpu/pathbench); PACK=K runs K runs at
# once per GPU instead of --pack auto (sized to memory, at most 32); STACK=N stacks the runs of a
# shape N at a time (sweep --stack N, docs/sweeps.md); OVERWRITE=1 passes --overwrite (as TEST=1,
# any value but empty or 0), which a
# sweep file whose grid grew since its runs started needs once; ONLY='KEY=V,V KEY=V' runs only
# the runs with those values (sweep --only, one word each: chosen cells first). ERRORS=N (call):
# after the sweep, `eval --errors` on N sequences of split ERRORS_SPLIT (default test) of every
# finished run whose checkpoint is on this machine and whose results/SWEEP/errors/ID-errors.csv.gz
# is not in the tree, into that file (gzipped), the new files also into $OUT/errors.tar. The log is
# runs/SWEEP.log; a sweep that stops within 5 s with an error makes `start` fail with the error's
# line.
set -euo pipefail
cd "$(dirname "$0")/.."
PB=${PATHBENCH:-build-gpu/pathbench}
cmd=${1:-}
s=${2:-}
[[ -n $s && -f sweeps/$s.toml ]] || { echo "usage: scripts/lease.sh start|status|snapshot|call|finish|unpack|publish SWEEP [S]; sweeps/SWEEP.toml must exist" >&2; exit 2; }
log=runs/$s.log pidfile=runs/$s.pid onlyfile=runs/$s.only
running() { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
selection() { tr -s ' ' '\n' <<<"$1" | sort | tr '\n' ' '; }  # an ONLY's words in one order
# results/SWEEP/records.tgz into runs/SWEEP without mixing two attempts of a run (see `unpack` above):
# a run is taken whole from one side. Files of the sweep itself (grid.json, sweep.toml) are taken
# from the pack where missing here or newer there (tar keeps their times): `sweep` rewrites
# sweep.toml at every start, so the records carry the sweep file their latest runs ran under.
unpack() {
  [[ -f results/$s/records.tgz ]] || return 0
  mkdir -p runs/"$s"
  local tmp p id
  tmp=$(mktemp -d runs/.unpack.XXXXXX)
  tar xzf results/"$s"/records.tgz -C "$tmp"
  for p in "$tmp"/runs/"$s"/*; do
    [[ -e $p ]] || continue  # a pack of no runs
    id=${p##*/}
    if [[ -d $p ]]; then
      [[ -f runs/$s/$id/result.json ]] && continue
      [[ -d runs/$s/$id && ! -f $p/result.json ]] && continue
      rm -rf runs/"$s"/"$id"
    elif [[ -e runs/$s/$id && ! $p -nt runs/$s/$id ]]; then
      continue
    fi
    mv -f "$p" runs/"$s"/"$id"
  done
  rm -rf "$tmp"
}
# The runs the sweep is training now (a metrics.jsonl written in the last 2 minutes, no
# result.json), each with its step, its rate over its last two logged steps and the time it may
# still take to the step cap (early stopping may end it sooner). Checkpoints do not travel: a run
# in flight when the machine goes back starts again from step 0 on the next one.
inflight() {
  running || return 0
  local m last prev
  find runs/"$s" -mindepth 2 -maxdepth 2 -name metrics.jsonl -mmin -2 | sort | while read -r m; do
    [[ -f ${m%/*}/result.json || ! -f ${m%/*}/config.json ]] && continue
    last=$(tail -n 1 "$m") prev=$(tail -n 2 "$m" | head -n 1)
    [[ $last == *'"step":'* ]] || continue  # a line being written
    awk -v id="${m%/*}" -v last="$last" -v prev="$prev" '
      function num(line, key) { return match(line, "\"" key "\": ?[0-9.e+-]+") ? substr(line, RSTART + length(key) + 3) + 0 : -1 }
      /"steps":/ { cap = num($0, "steps") } /"pe":/ { pe = $2 } /"seed":/ { seed = $2 }
      END {
        gsub(/[",]/, "", pe); gsub(/,/, "", seed); sub(/.*\//, "", id)
        step = num(last, "step"); ds = step - num(prev, "step"); dt = num(last, "elapsed_s") - num(prev, "elapsed_s")
        rate = (ds > 0 && dt > 0) ? ds / dt : 0
        printf "in flight: %s (pe=%s seed=%s) at step %d of %d", id, pe, seed, step, cap
        if (rate > 0) printf ", %.1f steps/s: up to %.0f s more", rate, (cap - step) / rate
        print "; lost if the machine goes back before it ends"
      }' "${m%/*}"/config.json || true
  done
}
# The run records (no checkpoints) into results/SWEEP/records.tgz, atomically, also while the sweep
# runs: the runs finished when listed go in whole (a finished run's files no longer change); the
# others without result.json, so a run that finishes while it is packed stays pending in the pack
# rather than its new result.json beside older logs.
pack() {
  mkdir -p results/"$s"  # an empty folder made by start may not outlive the command that made it
  local r=results/"$s"/records lists
  lists=$(mktemp -d)
  find runs/"$s" -mindepth 1 -maxdepth 1 -type d -exec test -f {}/result.json \; -print | sort >"$lists"/done
  find runs/"$s" -mindepth 1 -maxdepth 1 | sort | comm -23 - "$lists"/done >"$lists"/rest
  tar cf "$r".tar.tmp --exclude='*.safetensors*' -T "$lists"/done
  tar rf "$r".tar.tmp --exclude='*.safetensors*' --exclude=result.json -T "$lists"/rest
  rm -r "$lists"
  gzip -c "$r".tar.tmp >"$r".tgz.tmp && rm "$r".tar.tmp
  mv "$r".tgz.tmp "$r".tgz
}
# What the finished runs got wrong (ERRORS=N above): checkpoints do not travel, so only on the
# machine that trained them. eval runs on a copy, since it appends to the run's eval.jsonl.
errors() {
  local n=$1 split=${ERRORS_SPLIT:-test} d id tmp made=() rc=0
  mkdir -p results/"$s"/errors
  for d in runs/"$s"/*/; do
    id=$(basename "$d")
    [[ -f $d/result.json && -f $d/model.safetensors && ! -f results/$s/errors/$id-errors.csv.gz ]] || continue
    tmp=$(mktemp -d)
    cp -r "$d" "$tmp/$id"
    if "$PB" eval --run "$tmp/$id" --split "$split" --n "$n" --errors "$tmp/errors.csv" >/dev/null &&
       gzip -9n -c "$tmp/errors.csv" >results/"$s"/errors/"$id"-errors.csv.gz.tmp; then
      mv results/"$s"/errors/"$id"-errors.csv.gz.tmp results/"$s"/errors/"$id"-errors.csv.gz
      made+=("$id-errors.csv.gz")
    else
      rm -f results/"$s"/errors/"$id"-errors.csv.gz.tmp
      echo "lease.sh: eval --errors failed on run $id" >&2
      rc=1
    fi
    rm -rf "$tmp"
  done
  echo "errors: ${#made[@]} runs' wrong reads ($n $split sequences each) in results/$s/errors/"
  [[ -z ${OUT:-} || ${#made[@]} == 0 ]] || tar -C results/"$s"/errors -cf "$OUT"/errors.tar "${made[@]}" || rc=$?
  return $rc
}
# The records packed, and the CSVs of results/SWEEP (history.csv committed gzipped) from them.
publish() {  # fails when any step does, after trying every one (set -e is off where it is tested)
  local rc=0
  pack || rc=$?
  "$PB" collect runs/"$s" -o results/"$s" || rc=$?
  scripts/history.sh pack results/"$s" || rc=$?
  return $rc
}

case $cmd in
  start)
    running && { echo "lease.sh: $s is already running (pid $(cat "$pidfile"))" >&2; exit 2; }
    mkdir -p runs results/"$s"
    unpack
    opts=() words=()
    read -ra words <<<"${ONLY:-}"
    for f in "${words[@]}"; do opts+=(--only "$f"); done
    [[ ${OVERWRITE:-0} == 0 ]] || opts+=(--overwrite)
    setsid "$PB" sweep sweeps/"$s".toml --pack "${PACK:-auto}" ${STACK:+--stack "$STACK"} ${3:+--drain-after "$3"} \
      "${opts[@]}" >"$log" 2>&1 </dev/null &
    pid=$!
    echo $pid >"$pidfile"
    echo "${ONLY:-}" >"$onlyfile"
    for ((i = 0; i < 10; ++i)); do  # a sweep refused at once (a changed grid, a bad file) says so here
      kill -0 $pid 2>/dev/null || break
      sleep 0.5
    done
    if ! kill -0 $pid 2>/dev/null; then
      rc=0
      wait $pid || rc=$?
      if ((rc != 0)); then
        echo "lease.sh: $s stopped at once (status $rc): $(grep -m1 'error' "$log" || tail -1 "$log")" >&2
        exit 1
      fi
    fi
    echo "started $s (pid $pid), log $log"
    ;;
  status)
    tail -5 "$log" || true
    "$PB" sweep sweeps/"$s".toml --dry-run | awk '{n[$2]++} END {for (k in n) printf "%s %d  ", k, n[k]; print ""}'
    inflight
    ;;
  finish)
    wait_s=${3:?finish needs WAIT_S}
    for ((i = 0; i < wait_s && $(running && echo 1 || echo 0); i += 5)); do sleep 5; done
    if running; then
      kill -TERM "$(cat "$pidfile")"
      for ((i = 0; i < 60 && $(running && echo 1 || echo 0); ++i)); do sleep 1; done
    fi
    tail -3 "$log" || true
    publish
    ;;
  snapshot) pack && echo "packed runs/$s into results/$s/records.tgz" ;;
  unpack)
    running && { echo "lease.sh: $s is running (pid $(cat "$pidfile")); unpack replaces run folders, so not now" >&2; exit 2; }
    unpack
    ;;
  publish) publish ;;
  call)
    until_s=${3:?call needs UNTIL_S}
    t0=$SECONDS
    wait_sweep() { while ((SECONDS - t0 < until_s)) && running; do sleep 5; done; }  # until it ends or UNTIL_S
    if [[ ${TEST:-0} != 0 ]]; then
      LOG_DIR=runs/gpu-test scripts/gpu.sh test
      [[ -z ${OUT:-} ]] || cp runs/gpu-test/ctest_cuda.log runs/gpu-test/gpu.txt "$OUT"/
      grep -q "100% tests passed" runs/gpu-test/ctest_cuda.log ||
        { echo "lease.sh: not every GPU test passed (runs/gpu-test/ctest_cuda.log); no sweep started" >&2; exit 1; }
    fi
    # A binary left by an earlier call on a warm machine may be another commit's: its runs would
    # record that commit for this tree's code. $PB.digest (written by gpu.sh and carry.sh use) names
    # the sources it was made from.
    if [[ -x $PB && -f $PB.digest && $(cat "$PB.digest") != "$(scripts/carry.sh digest)" ]]; then
      echo "lease.sh: $PB was built from other sources than these; replacing it"
      rm -f "$PB" "$PB.digest"
    fi
    if [[ ! -x $PB ]] && ! scripts/carry.sh use "$PB"; then
      LOG_DIR=runs scripts/gpu.sh build
      [[ -x $PB ]] || { echo "lease.sh: scripts/gpu.sh builds build-gpu/pathbench, not PATHBENCH=$PB" >&2; exit 2; }
      echo "built $PB in $((SECONDS - t0)) s"
    fi
    rc=0
    if running && [[ $(selection "$(cat "$onlyfile" 2>/dev/null)") != $(selection "${ONLY:-}") ]]; then
      echo "lease.sh: $s is running with another selection (ONLY='$(cat "$onlyfile" 2>/dev/null)'); this call's starts when it ends"
      wait_sweep
      [[ -z ${OUT:-} ]] || cp "$log" "$OUT/$s.earlier.log"  # the next start rewrites the log
    fi
    drain=${4:-0}  # counts from the call's start (a build or a wait spends it); 0: no drain
    if ((drain > 0)); then drain=$((drain - (SECONDS - t0))); ((drain > 0)) || drain=-1; fi
    if ! running && ((SECONDS - t0 < until_s && drain >= 0)); then
      args=("$s")
      ((drain == 0)) || args+=("$drain")
      "$0" start "${args[@]}" || rc=$?  # and still publish what is here
    fi
    wait_sweep
    "$0" status "$s" || rc=$?
    publish || rc=$?  # the records come back even when collect refuses a run (docs/guarantees.md)
    [[ ${ERRORS:-0} == 0 ]] || errors "$ERRORS" || rc=$?
    [[ -z ${OUT:-} ]] || cp results/"$s"/records.tgz "$log" "$OUT"/
    exit $rc
    ;;
  *) echo "usage: scripts/lease.sh start|status|snapshot|call|finish|unpack|publish SWEEP [S]" >&2; exit 2 ;;
esac
