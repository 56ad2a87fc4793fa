#!/usr/bin/env bash
# Builds (installing missing packages) and runs the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# ctest runs tests side by side, each with OpenMP threads: sleeping (not spinning) idle threads
# keep an oversubscribed machine from stalling. Results do not depend on it.
export OMP_WAIT_POLICY=PASSIVE
ctest --test-dir build --output-on-failure -j "$(nproc)" --no-tests=error "$@"
