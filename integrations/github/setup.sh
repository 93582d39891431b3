#!/bin/bash
# Step `setup` of action.yml: provides the modelgate program for step `run`
# and writes `bin=PATH` to $GITHUB_OUTPUT.
#
# With MODELGATE_BIN set in the job's env (a prebuilt program: a cached
# build, a release, the tests), that program is used as is. Otherwise the
# build dependencies are installed with ci/install-deps.sh (apt; sudo when not
# root) and modelgate is built Release from the action's own checkout into
# MG_BUILD_DIR (under $RUNNER_TEMP).
set -euo pipefail

# shellcheck source=integrations/github/annotate.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/annotate.sh"
fail() {
  annotate error "modelgate setup" "$1"
  exit 2
}

[ -n "${GITHUB_OUTPUT:-}" ] || fail "GITHUB_OUTPUT is not set (run this as a step of action.yml)"
[ -n "${GITHUB_ACTION_PATH:-}" ] || fail "GITHUB_ACTION_PATH is not set (run this as a step of action.yml)"

# SARIF rules link to docs/findings/ID.md (helpUri). A build made here points
# them at this action's own repository and ref, when GitHub names them
# (github.action_repository, github.action_ref) and they are plain names;
# else the build keeps its default (see MG_DOCS_BASE_URI in cli/CMakeLists.txt).
docs_base=""
repo_re='^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$'
ref_re='^[A-Za-z0-9_./-]+$'
if [[ "${MG_ACTION_REPOSITORY:-}" =~ $repo_re && "${MG_ACTION_REF:-}" =~ $ref_re &&
      "${MG_ACTION_REF:-}" != *..* ]]; then
  docs_base="https://github.com/$MG_ACTION_REPOSITORY/blob/$MG_ACTION_REF/docs/findings/"
fi

if [ -n "${MODELGATE_BIN:-}" ]; then
  bin="$MODELGATE_BIN"
  case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
  if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
    fail "MODELGATE_BIN=$MODELGATE_BIN is not an executable file"
  fi
  echo "modelgate: using the prebuilt $bin (MODELGATE_BIN)"
else
  [ -n "${MG_BUILD_DIR:-}" ] || fail "MG_BUILD_DIR is not set"
  bash "$GITHUB_ACTION_PATH/ci/install-deps.sh"
  cmake -S "$GITHUB_ACTION_PATH" -B "$MG_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMG_BUILD_TESTS=OFF -DMG_BUILD_BENCH=OFF ${docs_base:+"-DMG_DOCS_BASE_URI=$docs_base"} >/dev/null
  [ -z "$docs_base" ] || echo "modelgate: SARIF help links under $docs_base"
  cmake --build "$MG_BUILD_DIR" --target modelgate -j "$(nproc)"
  bin="$MG_BUILD_DIR/cli/modelgate"
fi
case "$bin" in *$'\n'* | *$'\r'*) fail "the modelgate path contains a line break" ;; esac
"$bin" --version
printf 'bin=%s\n' "$bin" >>"$GITHUB_OUTPUT"
