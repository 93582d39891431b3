#!/usr/bin/env bash
# Quick start 1: install, build, and scan the bundled example models: one valid
# file passes, one hostile file is rejected with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
# The program is all the demo runs: the library, bindings and docs are built
# (and tested) by ci/test.sh. Same build directory and options as ci/test.sh
# (RelWithDebInfo): after it (as in .ci/run) this builds nothing; alone, it
# builds only the program, and ci/test.sh later reuses what it built.
MG_BUILD_TARGETS=modelgate bash ci/build.sh build
# The binary users install is hardened (PIE, full RELRO, stack protector,
# _FORTIFY_SOURCE, _GLIBCXX_ASSERTIONS): the default build type is.
bash ci/check-hardening.sh build/cli/modelgate
set +e
./build/cli/modelgate scan examples/models/
status=$?
set -e
echo "modelgate scan exited $status (0 pass, 1 a file was rejected, 2 could not judge)"
# The examples hold one hostile file, so "rejected" is the expected outcome.
[ "$status" -eq 1 ]
