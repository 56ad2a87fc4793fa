#!/usr/bin/env bash
# A binary rebuilt while a sweep runs does not change the sweep's runs: every run of a sweep is
# trained by the binary the sweep itself started from (and stamped with its commit). The sweep
# runs from a copy of pathbench; once its first run has started, that copy is replaced by a
# stand-in that fails; the later runs must still finish.
# Usage: tests/sweep_rebuild.sh PATHBENCH
set -euo pipefail
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
cp "$1" "$t"/pb
cat >"$t"/s.toml <<'EOF'
[sweep]
name = "rebuild"
task = "flipflop:len=32"
seeds = [0, 1, 2]

[base]
layers = 1
d_model = 16
heads = 2
steps = 300
batch = 8
eval_n = 64
device = "cpu"
EOF
"$t"/pb sweep "$t"/s.toml --out "$t"/runs --jobs 1 >"$t"/log 2>&1 &
sweep=$!
for ((i = 0; i < 300; ++i)); do  # until the first run has started
  compgen -G "$t/runs/rebuild/*/log.txt" >/dev/null && break
  sleep 0.1
done
rm "$t"/pb  # as a linker does: a new file where the old one was
printf '#!/bin/sh\nexit 3\n' >"$t"/pb
chmod +x "$t"/pb
rc=0
wait $sweep || rc=$?
done=$(grep -l '"status": *"ok"' "$t"/runs/rebuild/*/result.json 2>/dev/null | wc -l)
if ((rc != 0 || done != 3)); then
  echo "FAIL: sweep exit $rc, $done of 3 runs ok"
  tail -5 "$t"/log
  exit 1
fi
echo "3 of 3 runs trained by the sweep's own binary after it was replaced"
