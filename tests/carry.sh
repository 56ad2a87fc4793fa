#!/usr/bin/env bash
# scripts/carry.sh use takes a carried binary only where the sources match the ones it was built
# from and it runs: a stand-in binary in a temporary copy of the tree, used, refused after a
# source file changes, refused when it does not run, and refused when a source file is added;
# unpacked without xz on the PATH (Python's lzma);
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
printf '#!/usr/bin/env bash\necho "pathbench 0.1.0 (stand-in)"\n' | xz >.carry/pathbench.xz
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
# without xz on the PATH, Python's lzma module unpacks it
mkdir nox
for c in bash env find sort xargs sha256sum cut mkdir chmod mv cp cat dirname rm; do ln -s "$(command -v $c)" nox/$c; done
ln -s "$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')" nox/python3  # past any pyenv shim
rm -rf out
PATH=$t/nox bash scripts/carry.sh use out/pathbench >/dev/null 2>&1 && [[ $(out/pathbench) == *stand-in* ]] ||
  { echo "FAIL: unpacking without xz"; fail=1; }
touch kernels/new.cu
expect 1 "an added source file"
rm kernels/new.cu
printf '#!/usr/bin/env bash\nexit 127\n' | xz >.carry/pathbench.xz
expect 1 "a binary that does not run"
echo "not xz" >.carry/pathbench.xz
expect 1 "a file that does not unpack"
rm .carry/pathbench.xz
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
