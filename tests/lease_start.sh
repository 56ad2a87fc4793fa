#!/usr/bin/env bash
# scripts/lease.sh start hands the sweep its options: PACK, the drain, ONLY (one --only per word),
# to a stand-in pathbench that records its arguments; and `call` on a machine where a sweep is still
# running (left by the last call) waits for it and then starts its own when its ONLY differs, with
# what is left of its drain, and starts nothing when it is the same (in any word order); and `call` replaces a binary
# that an earlier call made from other sources (its .digest) by the carried one; and ERRORS=N makes
# `call` write the wrong reads of every run finished on this machine that has none in the tree.
# Usage: tests/lease_start.sh (from the source tree's root; works in a temporary copy).
set -euo pipefail
src=$PWD
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t"/scripts "$t"/sweeps "$t"/bin
cp "$src"/scripts/lease.sh "$src"/scripts/history.sh "$src"/scripts/carry.sh "$t"/scripts/
touch "$t"/sweeps/s.toml
cd "$t"
mkdir cmake core kernels models runners tasks && echo "project(stub)" >CMakeLists.txt && touch core/a.cpp
cat >bin/pathbench <<'PB'
#!/usr/bin/env bash
[[ $1 == --version ]] && { echo "pathbench stub"; exit 0; }
[[ $1 == collect || " $* " == *" --dry-run "* ]] && exit 0
if [[ $1 == eval ]]; then  # records its options but --run's copy, and writes the CSV --errors names
  echo "eval ${*:4}" >>evals
  echo "wrong reads of $3" >"${@: -1}"
  exit 0
fi
mkdir -p runs/s
echo "$*" >args.tmp && mv args.tmp args
sleep "$(cat sleep_s 2>/dev/null || echo 0)"  # a sweep that runs this long
PB
chmod +x bin/pathbench
fail=0
check() {  # WANT, after a start with the environment given before the call
  for ((i = 0; i < 50; ++i)); do [[ -f args ]] && break; sleep 0.1; done
  local got
  got=$(cat args 2>/dev/null || echo "no call")
  [[ $got == "$1" ]] || { echo "pathbench got: $got"; echo "expected:      $1"; fail=1; }
  rm -f args
}
PATHBENCH=bin/pathbench PACK=2 ONLY="pe=sba,fox task.n_back=2" bash scripts/lease.sh start s 130 >/dev/null
check "sweep sweeps/s.toml --pack 2 --drain-after 130 --only pe=sba,fox --only task.n_back=2"
PATHBENCH=bin/pathbench bash scripts/lease.sh start s >/dev/null
check "sweep sweeps/s.toml --pack auto"
echo 8 >sleep_s  # longer than the 5 s for which start watches a sweep that could fail at once
PATHBENCH=bin/pathbench ONLY="pe=a" bash scripts/lease.sh start s >/dev/null
check "sweep sweeps/s.toml --pack auto --only pe=a"
echo 0 >sleep_s
out=$(PATHBENCH=bin/pathbench ONLY="pe=b" bash scripts/lease.sh call s 30 2>&1)
[[ $out == *"running with another selection (ONLY='pe=a')"* ]] || { echo "call did not wait: $out"; fail=1; }
check "sweep sweeps/s.toml --pack auto --only pe=b"
echo 8 >sleep_s
PATHBENCH=bin/pathbench ONLY="pe=c" bash scripts/lease.sh start s >/dev/null
check "sweep sweeps/s.toml --pack auto --only pe=c"
PATHBENCH=bin/pathbench ONLY="pe=c" bash scripts/lease.sh call s 30 >/dev/null 2>&1
check "no call"
echo 8 >sleep_s
PATHBENCH=bin/pathbench ONLY="pe=g seed=1" bash scripts/lease.sh start s >/dev/null
check "sweep sweeps/s.toml --pack auto --only pe=g --only seed=1"
PATHBENCH=bin/pathbench ONLY="seed=1  pe=g" bash scripts/lease.sh call s 30 >/dev/null 2>&1
check "no call"  # the same selection in another order
echo 8 >sleep_s
PATHBENCH=bin/pathbench ONLY="pe=d" bash scripts/lease.sh start s >/dev/null
check "sweep sweeps/s.toml --pack auto --only pe=d"
echo 0 >sleep_s
PATHBENCH=bin/pathbench ONLY="pe=e" bash scripts/lease.sh call s 60 30 >/dev/null 2>&1
got=$(cat args 2>/dev/null || echo "no call")
rm -f args
[[ $got =~ ^"sweep sweeps/s.toml --pack auto --drain-after "([0-9]+)" --only pe=e"$ ]] &&
  ((BASH_REMATCH[1] >= 15 && BASH_REMATCH[1] <= 25)) ||
  { echo "after waiting ~10 s, a 30 s drain should leave ~20: $got"; fail=1; }
# a binary made from other sources is replaced by the carried one made from these
mkdir .carry && xz -c bin/pathbench >.carry/pathbench.xz && scripts/carry.sh digest >.carry/pathbench.digest
printf '#!/bin/sh\necho stale >stale_ran\n' >bin/pathbench && chmod +x bin/pathbench && echo other >bin/pathbench.digest
out=$(PATHBENCH=bin/pathbench ONLY="pe=f" bash scripts/lease.sh call s 30 2>&1)
[[ $out == *"built from other sources than these; replacing it"* && $out == *"using the carried binary"* &&
  ! -f stale_ran && $(cat bin/pathbench.digest) == "$(scripts/carry.sh digest)" ]] ||
  { echo "the stale binary was not replaced: $out"; fail=1; }
check "sweep sweeps/s.toml --pack auto --only pe=f"
# ERRORS=N: eval --errors on every finished run with a checkpoint here and no errors file in the
# tree (a: made; b: its file is there; c: no checkpoint; d: not finished), the new files in $OUT
for r in a b c d; do mkdir -p runs/s/$r && touch runs/s/$r/model.safetensors runs/s/$r/result.json; done
rm runs/s/c/model.safetensors runs/s/d/result.json
mkdir -p results/s/errors out && echo kept >results/s/errors/b-errors.csv.gz
OUT=$PWD/out ERRORS=8 PATHBENCH=bin/pathbench ONLY="pe=f" bash scripts/lease.sh call s 30 >/dev/null 2>&1 || true
[[ $(cat evals 2>/dev/null) == "eval --split test --n 8 --errors "*/errors.csv && $(tar tf out/errors.tar) == a-errors.csv.gz &&
  $(gzip -dc results/s/errors/a-errors.csv.gz) == "wrong reads of "*/a && $(cat results/s/errors/b-errors.csv.gz) == kept &&
  ! -e results/s/errors/c-errors.csv.gz && ! -e results/s/errors/d-errors.csv.gz ]] ||
  { echo "ERRORS=8: eval calls '$(cat evals 2>/dev/null)', errors.tar: $(tar tf out/errors.tar 2>&1)"; fail=1; }
((fail == 0)) && echo "start passes PACK, the drain and ONLY; call waits for a sweep of another selection, then starts its own with the drain left; call replaces a stale binary; ERRORS=N evaluates the finished runs' errors once"
exit $fail
