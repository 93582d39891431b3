#!/usr/bin/env bash
# ci/sanitize.sh: the unit tests (and the fuzz seed replays) under ASan +
# UBSan. Any sanitizer report fails the step (ci/run-sanitized.sh), even one
# from a child process whose test passed. MG_ASAN_BUILD names the build dir.
#
# The build is also the libFuzzer build (-DMG_LIBFUZZER=ON: coverage
# instrumentation, fuzz targets linked with libFuzzer, their seed replays
# run as `-runs=0`), so .ci/run's fuzz smoke runs from this same tree
# instead of compiling the library a third time (fuzz/run_smoke.sh
# build-asan). Debug: assertions on, as the sanitizer step always had.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${MG_ASAN_BUILD:-build-asan}"
CC=clang-14 CXX=clang++-14 bash ci/build.sh "$build" -DMG_SANITIZE=ON -DMG_LIBFUZZER=ON \
  -DMG_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug
root=$(pwd)
cd "$build" && bash "$root/ci/run-sanitized.sh" ctest --output-on-failure -j "$(nproc)"
