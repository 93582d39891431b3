#!/usr/bin/env bash
# sign_verify.sh BUILD_DIR [bench_sign_verify all options]: sign / verify /
# OpenVerified throughput on synthetic 256 MiB and 1 GiB models next to
# `openssl dgst -sha256` of the same file in the same run, each operation in
# its own process (best of 3, files in the page cache), with peak RSS.
# Build first, in Release:
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_BUILD_TESTS=OFF
#   cmake --build build-bench --target bench_sign_verify -j2
#   bench/sign_verify.sh build-bench
# Options pass through, e.g. --models 1024x64 --reps 5.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [--models 256x16,1024x64,1024x1] [--reps N]" >&2
  exit 2
fi
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
build="$1"
shift
bin="$build/bench/bench_sign_verify"
if [[ ! -x $bin ]]; then
  echo "$bin not built: cmake --build $build --target bench_sign_verify" >&2
  exit 2
fi
command -v openssl >/dev/null || { echo "openssl not found (apt-get install openssl)" >&2; exit 2; }

# The largest model is written twice (unsigned, signed) plus a re-signed copy:
# about 3.2 GiB for the default 1 GiB models. Refuse to start without 4 GiB.
bench_scratch 4096 sig

echo "bench_sign_verify on $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
     "sha_ni: $(grep -q sha_ni /proc/cpuinfo && echo yes || echo no); $(openssl version | cut -d' ' -f1-2);" \
     "build: $(grep -m1 '^CMAKE_BUILD_TYPE' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2 || echo '?')"
echo "MB = 10^6 bytes of the signed file; best_s = best wall time of the process (start-up included);"
echo "vs_openssl = openssl's best time / this one's (>1: faster than openssl dgst -sha256);"
echo "cpu_s = user+sys CPU of that run (MB/cpu_s: per-core speed; wall < cpu_s means it ran in parallel)."
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (other work on these cores slows every row)"
"$bin" all --dir "$data" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
