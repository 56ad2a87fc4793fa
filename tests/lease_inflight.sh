#!/usr/bin/env bash
# scripts/lease.sh status names each run the sweep is training now (no result.json, metrics.jsonl
# written in the last 2 minutes) with its step, rate and the time it may still need; not a finished
# run, not a pending run whose metrics are an earlier attempt's, and none when no sweep runs.
# Usage: tests/lease_inflight.sh (from the source tree's root; works in a temporary copy).
set -euo pipefail
src=$PWD
t=$(mktemp -d)
sweep_pid=
trap '[[ -z $sweep_pid ]] || kill "$sweep_pid" 2>/dev/null; rm -rf "$t"' EXIT
mkdir -p "$t"/scripts "$t"/sweeps
cp "$src"/scripts/lease.sh "$src"/scripts/history.sh "$t"/scripts/
touch "$t"/sweeps/s.toml
cd "$t"
run() {  # ID PE SEED: a run folder with two logged steps, 1,000 steps in 40 s
  mkdir -p runs/s/"$1"
  printf '{\n  "pe": "%s",\n  "seed": %s,\n  "steps": 20000,\n  "stop_at": "val:acc>=0.99"\n}\n' "$2" "$3" >runs/s/"$1"/config.json
  printf '%s\n' '{"acc":0.1,"elapsed_s":100.5,"loss":8.8,"step":5000,"tokens_per_s":1.2e+06}' \
    '{"acc":0.2,"elapsed_s":140.5,"loss":8.7,"step":6000,"tokens_per_s":1.2e+06}' >runs/s/"$1"/metrics.jsonl
}
run aaa sba 0
run bbb fox 1 && echo '{}' >runs/s/bbb/result.json
run ccc rope 2 && touch -d '-10 minutes' runs/s/ccc/metrics.jsonl
echo "log line" >runs/s.log
fail=0
out=$(PATHBENCH=true bash scripts/lease.sh status s)
[[ $out != *"in flight"* ]] || { echo "no sweep runs, yet: $out"; fail=1; }
sleep 60 &
sweep_pid=$!
echo $sweep_pid >runs/s.pid
out=$(PATHBENCH=true bash scripts/lease.sh status s)
want="in flight: aaa (pe=sba seed=0) at step 6000 of 20000, 25.0 steps/s: up to 560 s more; lost if the machine goes back before it ends"
[[ $(grep -c "in flight" <<<"$out") == 1 && $out == *"$want"* ]] || { echo "got: $out"; echo "expected: $want"; fail=1; }
((fail == 0)) && echo "status lists the run in flight, its step, rate and time to the cap, and no other"
exit $fail
