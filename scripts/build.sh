#!/usr/bin/env bash
# Installs missing packages, configures build/ and builds everything. Fast when up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v apt-get >/dev/null && bash scripts/install-deps.sh
# nvcc lives outside PATH on some machines; CUDA is optional (PATHBENCH_CUDA=AUTO).
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ] && [ -z "${CUDACXX:-}" ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${PATHBENCH_CMAKE_ARGS:-} >&2
fi
cmake --build build -j "$(nproc)" >&2
