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
build="$1"
bin="$build/bench/bench_parse"
shift
if [[ ! -x $bin ]]; then
  echo "$bin not built: cmake --build $(dirname "$(dirname "$bin")") --target bench_parse" >&2
  exit 2
fi
data=$(mktemp -d "${TMPDIR:-/tmp}/mg-bench.XXXXXX")
trap 'rm -rf "$data"' EXIT
echo "bench_parse on $(uname -m), $(nproc) cores; build: $(grep -m1 '^CMAKE_BUILD_TYPE' "$(dirname "$(dirname "$bin")")/CMakeCache.txt" 2>/dev/null || echo '?')"
"$bin" all --dir "$data" "$@"

# End to end: the CLI scanning the same kind of directory (1,000 small
# files), one process, JSON report to /dev/null.
mg="$build/cli/modelgate"
if [[ -x $mg ]]; then
  "$bin" gen-small "$data/cli" >/dev/null
  TIMEFORMAT=%R
  best=""
  for _ in 1 2 3; do
    t=$( { time "$mg" scan -f json "$data/cli" >/dev/null; } 2>&1 )
    if [[ -z $best ]] || awk "BEGIN{exit !($t < $best)}"; then best=$t; fi
  done
  n=$(find "$data/cli" -type f | wc -l)
  awk -v n="$n" -v t="$best" 'BEGIN{printf "cli scan    %d files, one process           best %.3f s  %.0f files/s\n", n, t, n/t}'
fi
