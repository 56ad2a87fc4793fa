#!/usr/bin/env bash
# A GPU binary built ahead, on a machine with nvcc but no GPU, and carried to a lent GPU machine
# with the sources, so that a call there need not spend its first minute and a half building.
#   scripts/carry.sh build      builds the CLI with the CUDA backend (sm_90, portable host code:
#                               PATHBENCH_NATIVE=OFF) in build-carry/ and puts it stripped and
#                               xz-compressed (.carry/pathbench.xz), with the
#                               digest of the sources it was built from, into .carry/ (git-ignored;
#                               name it in the device call's carry list). Refuses a tree whose
#                               sources differ from HEAD, so the binary's commit names its code
#   scripts/carry.sh use DEST   on the GPU machine: unpacks .carry/pathbench.xz to DEST (and its
#                               digest to DEST.digest) when the digest of the sources here equals
#                               the carried one and the binary runs (`--version`); exits 1
#                               otherwise (the caller builds instead)
#   scripts/carry.sh stamp      writes .carry/sources: the digest of the sources and HEAD's commit
#                               (build writes it too); refuses sources that differ from HEAD
#   scripts/carry.sh commit     on the GPU machine, whose copy of the tree may have no or older
#                               git metadata: prints the stamped commit when the sources here
#                               have its digest, exits 1 otherwise, and 2 when PB_COMMIT is set
#                               and names another commit. scripts/gpu.sh builds with it as PB_COMMIT, so a binary
#                               built there is stamped with its code's commit, not a hand-typed one
#   scripts/carry.sh digest     prints the digest of the sources
# The digest covers every file the CLI is built from (CMakeLists.txt, cmake/, core/, kernels/,
# models/, runners/, tasks/), by path and content, so a binary is used only where the tree it lands
# in holds the very code it was built from. Stripped and xz -9e, the binary is 5.6 MB instead of 26
# (gzip -9: 8.4 MB): a device call carries at most 64 MiB, the tracked tree (34 MB on 2026-12-06,
# mostly results/) and .deps/usr.tgz included. The GPU machine unpacks it with xz, or with
# Python's lzma module where xz is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
sources=(CMakeLists.txt cmake core kernels models runners tasks)
digest() { find "${sources[@]}" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-32; }
xz_cat() {  # FILE: its xz-decompressed bytes on stdout (not xz-utils' unxz, which unpacks in place)
  if command -v xz >/dev/null; then xz -dc "$1"
  else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi
}
clean() {
  git diff --quiet HEAD -- "${sources[@]}" && [[ -z $(git ls-files --others --exclude-standard -- "${sources[@]}") ]] ||
    { echo "carry.sh: the sources differ from HEAD (commit them first: the binary records its commit)" >&2; exit 2; }
}
stamp() {  # DIGEST [COMMIT]: .carry/sources, "DIGEST COMMIT" (default HEAD's) of the sources
  mkdir -p .carry
  echo "$1 ${2:-$(git rev-parse --short=12 HEAD)}" >.carry/sources.tmp && mv .carry/sources.tmp .carry/sources
}
case ${1:-} in
  digest) digest ;;
  stamp) clean && stamp "$(digest)" && echo "carry.sh: .carry/sources: $(cat .carry/sources)" ;;
  commit)
    read -r d c <.carry/sources 2>/dev/null || { echo "carry.sh: no .carry/sources (scripts/carry.sh stamp)" >&2; exit 1; }
    [[ $d == "$(digest)" ]] || { echo "carry.sh: .carry/sources stamps other sources than these" >&2; exit 1; }
    [[ -z ${PB_COMMIT:-} || $c == "$PB_COMMIT"* || ${PB_COMMIT%-dirty} == "$c"* ]] ||
      { echo "carry.sh: PB_COMMIT=$PB_COMMIT, but .carry/sources stamps these sources as $c's" >&2; exit 2; }
    echo "$c"
    ;;
  build)
    clean
    before=$(digest)
    # The sources are HEAD's, so HEAD names the binary's code, whatever else the tree holds.
    PB_COMMIT=$(git rev-parse --short=12 HEAD)
    export PB_COMMIT CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
    mkdir -p build-carry
    cmake -S . -B build-carry -G Ninja -DCMAKE_BUILD_TYPE=Release -DPATHBENCH_CUDA=ON -DPATHBENCH_NATIVE=OFF \
      >build-carry/configure.log 2>&1 || { tail -30 build-carry/configure.log >&2; exit 1; }
    cmake --build build-carry --target pathbench >build-carry/build.log 2>&1 ||
      { grep -E "error|FAILED" build-carry/build.log | head -40 >&2; exit 1; }
    [[ $(digest) == "$before" ]] || { echo "carry.sh: the sources changed during the build; run it again" >&2; exit 1; }
    mkdir -p .carry
    rm -f .carry/pathbench.digest  # no moment where an old digest vouches for the new binary
    strip -o build-carry/pathbench.stripped build-carry/pathbench
    xz -9e -c build-carry/pathbench.stripped >.carry/pathbench.xz.tmp && mv .carry/pathbench.xz.tmp .carry/pathbench.xz
    echo "$before" >.carry/pathbench.digest.tmp && mv .carry/pathbench.digest.tmp .carry/pathbench.digest
    stamp "$before" "$PB_COMMIT"  # the commit the build began at: HEAD may have moved since
    echo "carry.sh: .carry/pathbench.xz ($(du -h .carry/pathbench.xz | cut -f1), $(build-carry/pathbench --version | head -1)); carry \".carry\" with the call (and \".deps/usr.tgz\" where a build may be needed)"
    # What a call would send: the tracked files, the untracked ones git does not ignore, .carry
    # and .deps/usr.tgz.
    sent=$( (git ls-files -z; git ls-files -z --others --exclude-standard; printf '%s\0' .carry/* .deps/usr.tgz) |
      xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    echo "carry.sh: a call carrying both sends $((sent / 1048576)) MiB of the 64 it may"
    ;;
  use)
    dest=${2:?usage: scripts/carry.sh use DEST}
    [[ -f .carry/pathbench.xz && -f .carry/pathbench.digest ]] || { echo "carry.sh: no carried binary" >&2; exit 1; }
    [[ $(digest) == "$(cat .carry/pathbench.digest)" ]] ||
      { echo "carry.sh: the carried binary was built from other sources; not used" >&2; exit 1; }
    mkdir -p "$(dirname "$dest")"
    xz_cat .carry/pathbench.xz >"$dest.tmp" && chmod +x "$dest.tmp" ||
      { rm -f "$dest.tmp"; echo "carry.sh: the carried binary does not unpack" >&2; exit 1; }
    version=$("$dest.tmp" --version 2>&1) ||
      { rm -f "$dest.tmp"; echo "carry.sh: the carried binary does not run here: ${version%%$'\n'*}" >&2; exit 1; }
    mv "$dest.tmp" "$dest"
    cp .carry/pathbench.digest "$dest.digest"  # the sources it was built from, for scripts/lease.sh
    echo "carry.sh: using the carried binary ($version)"
    ;;
  *) echo "usage: scripts/carry.sh build | use DEST | stamp | commit | digest" >&2; exit 2 ;;
esac
