#!/usr/bin/env bash
# scripts/lease.sh start hands the sweep its options: PACK, the drain, ONLY (one --only per word),
# to a stand-in pathbench that records its arguments.
# Usage: tests/lease_start.sh (from the source tree's root; works in a temporary copy).
set -euo pipefail
src=$PWD
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t"/scripts "$t"/sweeps "$t"/bin
cp "$src"/scripts/lease.sh "$t"/scripts/
touch "$t"/sweeps/s.toml
cd "$t"
cat >bin/pathbench <<'PB'
#!/usr/bin/env bash
echo "$*" >args.tmp && mv args.tmp args
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
((fail == 0)) && echo "start passes PACK, the drain and ONLY"
exit $fail
