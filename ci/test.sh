#!/usr/bin/env bash
# Quick start 2: install, build, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
bash ci/build.sh build
cd build && ctest --output-on-failure -j "$(nproc)"
