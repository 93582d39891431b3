#!/usr/bin/env bash
# ci/build.sh BUILD_DIR [cmake args...]: configure and build with warnings as
# errors. Used by the README's commands and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
build="$1"; shift
cmake -S . -B "$build" -G Ninja -DMG_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
