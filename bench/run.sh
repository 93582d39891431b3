#!/usr/bin/env bash
# run.sh BUILD_DIR [bench_parse options]: generates the benchmark data in a
# temporary directory (removed afterwards) and runs every scenario of
# bench_parse, each in its own process, printing one table. Build first, in
# Release:
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_BUILD_TESTS=OFF
#   cmake --build build-bench --target bench_parse -j2
#   bench/run.sh build-bench
# Options pass through, e.g. --big FILE to time an existing big file.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [--big FILE]" >&2
  exit 2
fi
bin="$1/bench/bench_parse"
shift
if [[ ! -x $bin ]]; then
  echo "$bin not built: cmake --build $(dirname "$(dirname "$bin")") --target bench_parse" >&2
  exit 2
fi
data=$(mktemp -d "${TMPDIR:-/tmp}/mg-bench.XXXXXX")
trap 'rm -rf "$data"' EXIT
echo "bench_parse on $(uname -m), $(nproc) cores; build: $(grep -m1 '^CMAKE_BUILD_TYPE' "$(dirname "$(dirname "$bin")")/CMakeCache.txt" 2>/dev/null || echo '?')"
"$bin" all --dir "$data" "$@"
