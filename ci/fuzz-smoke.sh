#!/usr/bin/env bash
# ci/fuzz-smoke.sh [SECONDS]: build the libFuzzer targets (clang) and run
# each one for SECONDS (default 45) from its seed corpus. A crash, a trapped
# invariant or any sanitizer report fails it (fuzz/run_smoke.sh).
# MG_FUZZ_BUILD names the build dir.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-45}"
build="${MG_FUZZ_BUILD:-build-fuzz}"
# Only the fuzz targets (fuzz/CMakeLists.txt's `fuzzers`), not the whole tree.
CC=clang-14 CXX=clang++-14 MG_BUILD_TARGETS=fuzzers bash ci/build.sh "$build" -DMG_LIBFUZZER=ON \
  -DMG_BUILD_TESTS=OFF -DMG_BUILD_BENCH=OFF
bash fuzz/run_smoke.sh "$build" "$seconds"
