#!/usr/bin/env bash
# scripts/carry.sh use takes a carried binary only where the sources match the ones it was built
# from and it runs: a stand-in binary in a temporary copy of the tree, used, refused after a
# source file changes, refused when it does not run, and refused when a source file is added;
# and the commit stamp, printed only for the stamped sources and against a disagreeing PB_COMMIT.
# Usage: tests/carry.sh (from the source tree's root; works in a temporary copy).
set -euo pipefail
src=$PWD
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t"/scripts
cp "$src"/scripts/carry.sh "$t"/scripts/
cp -r "$src"/CMakeLists.txt "$src"/cmake "$src"/core "$src"/kernels "$src"/models "$src"/runners "$src"/tasks "$t"/
cd "$t"
mkdir -p .carry
printf '#!/usr/bin/env bash\necho "pathbench 0.1.0 (stand-in)"\n' | gzip >.carry/pathbench.gz
bash scripts/carry.sh digest >.carry/pathbench.digest
fail=0
expect() {  # WANT_RC WHAT: scripts/carry.sh use out/pathbench exits WANT_RC, out/pathbench exists iff 0
  rm -rf out
  local rc=0
  bash scripts/carry.sh use out/pathbench >/dev/null 2>&1 || rc=$?
  local got=absent want=absent
  [[ -x out/pathbench ]] && got=present
  [[ $1 == 0 ]] && want=present
  [[ $rc == "$1" && $got == "$want" ]] || { echo "FAIL: $2: exit $rc, out/pathbench $got"; fail=1; }
}
expect 0 "matching sources"
echo "// changed" >>core/error.h
expect 1 "a changed source file"
cp "$src"/core/error.h core/error.h
expect 0 "the source restored"
touch kernels/new.cu
expect 1 "an added source file"
rm kernels/new.cu
printf '#!/usr/bin/env bash\nexit 127\n' | gzip >.carry/pathbench.gz
expect 1 "a binary that does not run"
echo "not gzip" >.carry/pathbench.gz
expect 1 "a file that does not unpack"
rm .carry/pathbench.gz
expect 1 "no carried binary"
# The stamp: the commit of the stamped sources, not of others, and a PB_COMMIT that disagrees refused.
commit_rc() {  # WANT_RC WANT_OUT WHAT [PB_COMMIT]
  local rc=0 out
  out=$(PB_COMMIT=${4:-} bash scripts/carry.sh commit 2>/dev/null) || rc=$?
  [[ $rc == "$1" && $out == "$2" ]] || { echo "FAIL: commit, $3: exit $rc, printed '$out'"; fail=1; }
}
commit_rc 1 "" "no stamp"
echo "$(bash scripts/carry.sh digest) 0123456789ab" >.carry/sources
commit_rc 0 0123456789ab "the stamped sources"
commit_rc 0 0123456789ab "PB_COMMIT agreeing" 0123456
commit_rc 2 "" "PB_COMMIT naming another commit" fedcba9
echo "// changed" >>core/error.h
commit_rc 1 "" "a changed source file"
((fail == 0)) && echo "carry.sh use takes the carried binary only for its own sources, and only when it runs; commit names only the stamped sources"
exit $fail
