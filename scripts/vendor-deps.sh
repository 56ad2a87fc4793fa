#!/usr/bin/env bash
# Downloads the "lib" packages of deps/debian-packages.txt as .deb files into .deps/ and unpacks
# them into .deps/usr, for building on an offline GPU machine (see docs/gpu.md). CMake finds
# .deps/usr by itself. Run it on a networked Debian 12 machine. .deps/usr.tgz is the same tree
# gzipped (3 MB rather than 16) for carrying to the GPU machine, where scripts/gpu.sh unpacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t libs < <(awk '!/^#/ && $1 == "lib" {print $2}' deps/debian-packages.txt)
mkdir -p .deps
(cd .deps && apt-get download "${libs[@]}")
for f in .deps/*.deb; do dpkg -x "$f" .deps; done
tar -C .deps -czf .deps/usr.tgz.tmp usr && mv .deps/usr.tgz.tmp .deps/usr.tgz
echo "vendor-deps: unpacked ${#libs[@]} packages into .deps/usr (carry .deps/usr.tgz)" >&2
