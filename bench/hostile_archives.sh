#!/usr/bin/env bash
# bench/hostile_archives.sh BUILD_DIR [CASE...]: the hostile archives of
# issue 9 ("one budget"), each scanned by one `modelgate scan -f json`
# process under /usr/bin/time -v: wall and CPU (user+sys) seconds, peak RSS,
# exit code and the finding ids (with counts). On a loaded machine CPU time is
# the steadier figure. The archives are written by hostile_archives.py
# into a temp dir (removed afterwards; ~40 MB, generated in about a second).
# Target per case: under 2 s and 256 MB peak RSS on 2 cores, and never a pass
# for content the budget could not decode. A case is killed after
# MG_BENCH_TIMEOUT seconds (default 300) and shown as "timeout".
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [CASE...]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
shift
mg="$build/cli/modelgate"
src=$(cd "$(dirname "$0")/.." && pwd)
[[ -x $mg ]] || { echo "build $mg first" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (Debian package 'time')" >&2; exit 2; }
data=$(mktemp -d "${TMPDIR:-/tmp}/mg-hostile.XXXXXX")
trap 'rm -rf "$data"' EXIT
python3 "$src/bench/hostile_archives.py" "$data/files" >/dev/null
cases=("$@")
if [[ ${#cases[@]} -eq 0 ]]; then
  cases=(overlap.zip four.zip bomb10g.zip members100k.zip nest20.zip bomb.pt members.tar.gz)
fi
timeout_s=${MG_BENCH_TIMEOUT:-300}

echo "modelgate scan -f json, one process per file; $(nproc) cores; build $(grep -m1 '^CMAKE_BUILD_TYPE' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2 || echo '?')"
printf '%-16s %8s %8s %7s %8s %4s  %s\n' case size_MB wall_s cpu_s peak_MB exit "verdict: finding ids"
for c in "${cases[@]}"; do
  f="$data/files/$c"
  [[ -f $f ]] || { echo "no case $c" >&2; exit 2; }
  rc=0
  timeout -s KILL "$timeout_s" /usr/bin/time -v -o "$data/time" "$mg" scan -f json "$f" \
    >"$data/report.json" 2>"$data/stderr" || rc=$?
  if [[ $rc -eq 137 ]] && ! grep -q 'Elapsed' "$data/time" 2>/dev/null; then
    printf '%-16s %8.1f %8s %7s %8s %4s  %s\n' "$c" "$(awk -v b="$(stat -c %s "$f")" 'BEGIN{print b/1e6}')" \
      ">$timeout_s" - - - timeout
    continue
  fi
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = 0;
         for (i = 1; i <= n; i++) s = s * 60 + t[i]; printf "%.2f", s}' "$data/time")
  cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {printf "%.2f", s}' "$data/time")
  peak=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$data/time")
  ids=$(python3 - "$data/report.json" <<'PY'
import collections, json, sys
try:
    doc = json.load(open(sys.argv[1]))
except ValueError:
    print("(no JSON report)")
    sys.exit()
for f in doc["files"]:
    n = collections.Counter(x["id"] for x in f["findings"])
    print(f["verdict"] + ": " + (" ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(n.items())) or "-"))
PY
)
  printf '%-16s %8.1f %8s %7s %8s %4s  %s\n' "$c" "$(awk -v b="$(stat -c %s "$f")" 'BEGIN{print b/1e6}')" \
    "$wall" "$cpu" "$peak" "$rc" "$ids"
done
