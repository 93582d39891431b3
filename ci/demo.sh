#!/usr/bin/env bash
# Quick start 1: install, build, and scan the bundled example models: one valid
# file passes, one hostile file is rejected with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
# The program is all the demo runs: the library, bindings and docs are built
# (and tested) by ci/test.sh.
MG_BUILD_TARGETS=modelgate bash ci/build.sh build-release -DCMAKE_BUILD_TYPE=Release \
  -DMG_BUILD_TESTS=OFF -DMG_BUILD_BENCH=OFF
# The Release binary users install is hardened (PIE, full RELRO, stack
# protector, _FORTIFY_SOURCE, _GLIBCXX_ASSERTIONS).
bash ci/check-hardening.sh build-release/cli/modelgate
set +e
./build-release/cli/modelgate scan examples/models/
status=$?
set -e
echo "modelgate scan exited $status (0 pass, 1 a file was rejected, 2 could not judge)"
# The examples hold one hostile file, so "rejected" is the expected outcome.
[ "$status" -eq 1 ]
