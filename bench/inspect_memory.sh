#!/usr/bin/env bash
# bench/inspect_memory.sh BUILD_DIR [TENSORS]: peak memory of `inspect -f json`
# (and `scan -f json`) on one safetensors file with TENSORS (default
# 1,000,000, the default max_tensors) one-byte tensors, entries of the form
# `"t0000001":{"dtype":"U8","shape":[1],"data_offsets":[i,i+1]}` as in
# bench_parse. Issue 9 point 8: inspect stays under 4x the header size.
# Prints the header bytes, each command's peak RSS and its ratio to the header.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
build=$(cd "$1" && pwd)
count=${2:-1000000}
mg="$build/cli/modelgate"
[[ -x $mg ]] || { echo "build $mg first" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "needs GNU time (/usr/bin/time, Debian package time)" >&2; exit 2; }
data=$(mktemp -d "${TMPDIR:-/tmp}/mg-inspect-bench.XXXXXX")
trap 'rm -rf "$data"' EXIT
file="$data/big.safetensors"

bench_wide_header "$file" "$count"  # sets $header_bytes
echo "file: $count tensors, header $header_bytes bytes"

measure() {  # measure NAME ARGS...: peak RSS of one run, output discarded
  local name=$1 log="$data/time.log"
  shift
  local rc=0
  /usr/bin/time -v -o "$log" "$mg" "$@" "$file" >/dev/null || rc=$?
  local kb
  kb=$(awk -F': ' '/Maximum resident set size/{print $2}' "$log")
  local secs
  secs=$(awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$log")
  awk -v n="$name" -v kb="$kb" -v h="$header_bytes" -v rc="$rc" -v t="$secs" \
    'BEGIN{printf "%-19s exit %d  %s wall  peak RSS %.1f MB  = %.3fx header\n", n, rc, t, kb*1024/1e6, kb*1024/h}'
}
measure "inspect -f json" inspect -f json
measure "inspect -o FILE" inspect -f json -o "$data/out.json"
measure "inspect (text)" inspect
measure "scan -f json" scan -f json
# What the YARA header scan adds (the shipped rules run over the header).
measure "inspect --no-yara" inspect -f json --no-yara
