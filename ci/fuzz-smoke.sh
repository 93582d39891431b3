#!/usr/bin/env bash
# ci/fuzz-smoke.sh [SECONDS]: build the libFuzzer targets (clang) and run
# each one for SECONDS (default 60) from its seed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
CC=clang-14 CXX=clang++-14 bash ci/build.sh build-fuzz -DMG_LIBFUZZER=ON -DMG_BUILD_TESTS=OFF \
  -DMG_BUILD_BENCH=OFF
bash fuzz/run_smoke.sh build-fuzz "$seconds"
