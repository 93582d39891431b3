#!/usr/bin/env bash
# The unit tests (and the fuzz seed replays) under ASan + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
CC=clang-14 CXX=clang++-14 bash ci/build.sh build-asan -DMG_SANITIZE=ON -DMG_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=Debug
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd build-asan && ctest --output-on-failure -j "$(nproc)"
