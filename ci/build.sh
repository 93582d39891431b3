#!/usr/bin/env bash
# ci/build.sh BUILD_DIR [cmake args...]: configure and build with warnings as
# errors. Used by the README's commands and by .ci/run. MG_BUILD_TARGETS
# narrows the build to the targets it names.
set -euo pipefail
cd "$(dirname "$0")/.."
build="$1"; shift
cmake -S . -B "$build" -G Ninja -DMG_WERROR=ON "$@" >/dev/null
# MG_BUILD_TARGETS (space-separated) builds only those targets: a step that
# needs one binary does not pay for the whole tree.
# shellcheck disable=SC2086  # the targets are words on purpose
cmake --build "$build" -j "$(nproc)" ${MG_BUILD_TARGETS:+--target $MG_BUILD_TARGETS}
