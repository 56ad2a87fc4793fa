#!/usr/bin/env bash
# A sweep's run records packed and restored by scripts/lease.sh keep every run whole.
# `pack` (also while the sweep runs): finished runs go in with all their files but checkpoints; a
# run that finishes while it is being packed goes in as pending (no result.json), never as its new
# result.json beside older logs. `unpack`: a run finished here keeps every file, a run finished
# only in the pack is taken whole from it (no file of the local attempt left beside it), a run
# pending in both keeps its local files, and a run only here or only in the pack is kept or added;
# the sweep's own files (grid.json, sweep.toml) come from the pack where it has the newer one.
# Before these rules an unpack on a machine whose sweep had gone on overwrote finished runs' logs
# with their older, partial ones (results/paper-mqrar/logs/README.md).
# Usage: tests/records.sh (from the source tree's root; works in a temporary copy).
set -euo pipefail
src=$PWD
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t"/scripts "$t"/sweeps
cp "$src"/scripts/lease.sh "$t"/scripts/
touch "$t"/sweeps/s.toml
cd "$t"
put() { mkdir -p "runs/s/$1" && echo "$3" >"runs/s/$1/$2"; }
# The pack: a (partial), b (finished), c (partial), e (finished), the sweep's grid (older than here) and sweep.toml (newer).
put a metrics.jsonl packed-a
put b metrics.jsonl packed-b && put b result.json packed-b
put c metrics.jsonl packed-c
put e result.json packed-e
echo packed-grid >runs/s/grid.json
echo packed-sweep >runs/s/sweep.toml && touch -d '2026-01-02' runs/s/sweep.toml
touch -d '2026-01-01' runs/s/grid.json
mkdir -p results/s && tar czf results/s/records.tgz runs/s && rm -rf runs
# Here: a finished since, b partial (a rerun), c further along, d only here, a grid and a sweep.toml.
put a metrics.jsonl local-a && put a result.json local-a
put b metrics.jsonl local-b && put b ckpt.safetensors local-b
put c metrics.jsonl local-c
put d metrics.jsonl local-d
echo local-grid >runs/s/grid.json && touch -d '2026-01-02' runs/s/grid.json
echo local-sweep >runs/s/sweep.toml && touch -d '2026-01-01' runs/s/sweep.toml
bash scripts/lease.sh unpack s
fail=0
expect() {  # FILE CONTENT|absent
  local got
  got=$(cat "runs/s/$1" 2>/dev/null || echo absent)
  [[ $got == "$2" ]] || { echo "runs/s/$1: expected $2, found $got"; fail=1; }
}
expect a/metrics.jsonl local-a
expect a/result.json local-a
expect b/metrics.jsonl packed-b
expect b/result.json packed-b
expect b/ckpt.safetensors absent
expect c/metrics.jsonl local-c
expect d/metrics.jsonl local-d
expect e/result.json packed-e
expect grid.json local-grid
expect sweep.toml packed-sweep
[[ -z $(find runs -name '.unpack.*') ]] || { echo "a temporary folder was left in runs/"; fail=1; }
# A fresh machine (no runs/) gets the pack as it is.
rm -rf runs && bash scripts/lease.sh unpack s
expect a/metrics.jsonl packed-a
expect grid.json packed-grid

# pack: a finished run f, a running run g that finishes while it is packed (a stand-in tar writes
# its result.json just before the real one runs), the sweep's grid.
rm -rf runs results
put f metrics.jsonl f && put f result.json f && put f model.safetensors ckpt
put g metrics.jsonl g-partial && put g resume.safetensors ckpt
echo grid >runs/s/grid.json
mkdir -p bin
cat >bin/tar <<'TAR'
#!/usr/bin/env bash
[[ -f runs/s/g/result.json ]] || echo g-done >runs/s/g/result.json
exec /usr/bin/env PATH="$REAL_PATH" tar "$@"
TAR
chmod +x bin/tar
REAL_PATH=$PATH PATH=$PWD/bin:$PATH bash scripts/lease.sh snapshot s >/dev/null
packed=$(tar tzf results/s/records.tgz | sort | tr '\n' ' ')
want="runs/s/f/ runs/s/f/metrics.jsonl runs/s/f/result.json runs/s/g/ runs/s/g/metrics.jsonl runs/s/grid.json "
[[ $packed == "$want" ]] || { echo "pack holds: $packed"; echo "expected:   $want"; fail=1; }
[[ -z $(find results -name '*.tmp') ]] || { echo "pack left a temporary file"; fail=1; }
((fail == 0)) && echo "pack and unpack keep every run whole"
exit $fail
