#!/usr/bin/env bash
# Downloads the "lib" packages of deps/debian-packages.txt as .deb files into .deps/ and unpacks
# them into .deps/usr, for building on an offline GPU machine (see docs/gpu.md). CMake finds
# .deps/usr by itself. Run it on a networked Debian 12 machine; carry .deps/usr with the sources.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t libs < <(awk '!/^#/ && $1 == "lib" {print $2}' deps/debian-packages.txt)
mkdir -p .deps
(cd .deps && apt-get download "${libs[@]}")
for f in .deps/*.deb; do dpkg -x "$f" .deps; done
echo "vendor-deps: unpacked ${#libs[@]} packages into .deps/usr" >&2
