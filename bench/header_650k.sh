#!/usr/bin/env bash
# bench/header_650k.sh BUILD_DIR [TENSORS] [REPS]: the cost of judging the
# worst-case safetensors header of issue 16 (650,000 one-byte U8 tensors,
# a ~39 MB header) against python3's json.loads of the same header bytes,
# in the same run. Entries as bench_parse and inspect_memory.sh write them:
# `"t0000001":{"dtype":"U8","shape":[1],"data_offsets":[i,i+1]}`, compact,
# space padded to 8 as the reference writer does.
#
# Each of REPS rounds (default 5) runs, in turn:
#   json.loads   python3 reading the header bytes once, then timing
#                json.loads(header) in-process (interpreter start and file
#                read not counted: the reference gets every advantage)
#   scan         `modelgate scan -q FILE` (YARA on: the shipped rules), one
#                process under /usr/bin/time -v (whole process: start,
#                mapping, parse, YARA, report)
#   scan --no-yara  the same without the rules (what YARA costs)
#   scan, empty hdr the same process on a file whose header is "{}": the
#                floor (start-up, rules, report) the header's cost sits on
# Prints, per command, the best and median wall time, the ratio
# json.loads / scan (target >= 10 for scan), the median CPU time (user +
# sys: scan runs the header's rules on a second thread beside the parse, so
# its CPU time exceeds its wall time; json.loads is one thread, its CPU time
# its wall time), the peak RSS and peak RSS / header bytes (target <= 1.5
# for scan).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
[[ $# -ge 1 ]] || { echo "usage: $0 BUILD_DIR [TENSORS] [REPS]" >&2; exit 2; }
build=$(cd "$1" && pwd)
count=${2:-650000}
reps=${3:-5}
mg="$build/cli/modelgate"
[[ -x $mg ]] || { echo "build $mg first" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (Debian package 'time')" >&2; exit 2; }
bench_scratch 256 header650k
file="$data/big.safetensors"

bench_wide_header "$file" "$count"  # sets $header_bytes
cat "$file" >/dev/null  # page cache warm for every command
echo "header_650k: $count tensors, header $header_bytes bytes, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "modelgate: $mg ($(grep -m1 '^CMAKE_BUILD_TYPE' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2 || echo '?'))"

# json.loads: REPS timings in one process (best and median taken below),
# its peak RSS as the process's (interpreter + header bytes + the tree).
py_times="$data/py.times"
/usr/bin/time -f '%M' -o "$data/py.rss" python3 - "$file" "$reps" >"$py_times" <<'PY'
import json, struct, sys, time
path, reps = sys.argv[1], int(sys.argv[2])
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = f.read(n)
for _ in range(reps):
    t0 = time.perf_counter()
    obj = json.loads(header)
    t1 = time.perf_counter()
    print("%.6f" % (t1 - t0))
    del obj
PY

# run_mg LABEL ARGS...: REPS runs, one "wall_s peak_kb exit cpu_s" line
# each; the wall time from `date +%s.%N` around the run (time's %e has 10 ms
# steps), the CPU time time's %U + %S.
run_mg() {
  local label=$1 out="$data/$1.times"
  shift
  : >"$out"
  local i rc t0 t1
  for ((i = 0; i < reps; i++)); do
    rc=0
    t0=$(date +%s.%N)
    /usr/bin/time -f '%M %U %S' -o "$data/t.log" "$mg" "$@" "$file" >/dev/null 2>"$data/err.log" || rc=$?
    t1=$(date +%s.%N)
    echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.6f", b-a}') $(tail -1 "$data/t.log" |
      awk '{printf "%s", $1}') $rc $(tail -1 "$data/t.log" | awk '{printf "%.2f", $2 + $3}')" >>"$out"
  done
}
run_mg scan scan -q
run_mg scan_noyara scan -q --no-yara
# The floor: the same process on a file whose header is "{}" (start-up,
# loading the rules, the report), so that what the header costs is the
# difference.
printf '\x02\x00\x00\x00\x00\x00\x00\x00{}' >"$data/empty.safetensors"
big=$file
file="$data/empty.safetensors"
run_mg scan_empty scan -q
file=$big

summary() {  # summary LABEL FILE PEAK_KB: best, median, ratio, CPU, RSS
  local label=$1 times=$2 kb=$3
  sort -n "$times" | awk -v l="$label" -v kb="$kb" -v h="$header_bytes" -v py="$py_best" '
    { t[NR] = $1; if ($2 != "") k = ($2 > k ? $2 : k); if ($3 != "" && $3 != 0) bad = $3
      c[NR] = ($4 != "" ? $4 : $1) }
    END {
      if (kb == "") kb = k
      best = t[1]; med = t[int((NR + 1) / 2)]
      for (i = 2; i <= NR; i++) { v = c[i]; for (j = i - 1; j >= 1 && c[j] > v; j--) c[j + 1] = c[j]; c[j + 1] = v }
      cpu = c[int((NR + 1) / 2)]
      printf "%-16s %9.3f %9.3f %10.2fx %9.2f %9.1f %9.3fx%s\n", l, best, med, py / best, cpu,
             kb * 1024 / 1e6, kb * 1024 / h, (bad ? "  exit " bad : "")
    }'
}
py_best=$(sort -n "$py_times" | head -1)
printf "%-16s %9s %9s %11s %9s %9s %10s\n" command best_s median_s "json/this" cpu_s peak_MB "peak/hdr"
summary "json.loads" "$py_times" "$(cat "$data/py.rss")"
summary "scan" "$data/scan.times" ""
summary "scan --no-yara" "$data/scan_noyara.times" ""
summary "scan, empty hdr" "$data/scan_empty.times" ""
[[ -n ${MG_BENCH_DEBUG:-} ]] && head -50 "$data"/*.times
