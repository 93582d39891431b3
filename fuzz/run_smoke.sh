#!/usr/bin/env bash
# run_smoke.sh BUILD_DIR SECONDS: runs every fuzz_* target in BUILD_DIR/fuzz
# for SECONDS each, one after another, one job per target. libFuzzer builds
# (-DMG_LIBFUZZER=ON) fuzz a scratch copy of the seed corpus (the repo's
# corpus is never written) with the target's dictionary if it has one; replay
# builds just replay the seeds. Exits non-zero if any target crashes; its
# reproducer is left in fuzz-artifacts/ under the build dir and its log printed.
# A sanitizer report fails the target even if the process exited 0 (a UBSan
# build that recovers, a report from a child): its log is searched for one.
set -euo pipefail

# The report headers of ASan, LSan, UBSan and libFuzzer itself.
readonly report_pattern='runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer|SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer|ERROR: libFuzzer'
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

if [[ $# -ne 2 || ! $2 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
seconds=$2
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
artifacts="$build_dir/fuzz-artifacts"
mkdir -p "$artifacts"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/mg-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

shopt -s nullglob
targets=("$build_dir"/fuzz/fuzz_*)
# Targets run side by side, one per core (each is single-threaded), so the
# smoke run costs SECONDS per round of `nproc` targets, not per target.
jobs=${MG_FUZZ_JOBS:-$(nproc)}

run_one() {  # run_one NAME BIN: writes $scratch/NAME.status
  local name=$1 bin=$2
  local seeds="$src_dir/corpus/$name" log="$scratch/$name.log" status=0
  local help
  help=$("$bin" -help=1 2>&1 </dev/null || true)
  if [[ $help == *max_total_time* ]]; then
    local corpus="$scratch/corpus-$name"
    mkdir -p "$corpus"
    [[ -d $seeds ]] && cp -R "$seeds/." "$corpus/"
    local args=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10
                -print_final_stats=1 -artifact_prefix="$artifacts/$name-")
    [[ -f $src_dir/$name.dict ]] && args+=(-dict="$src_dir/$name.dict")
    # NAME.options: extra libFuzzer flags, one per line (# comments), where
    # a target's library needs them (none does today).
    if [[ -f $src_dir/$name.options ]]; then
      while read -r opt; do
        [[ -z $opt || $opt == \#* ]] || args+=("$opt")
      done <"$src_dir/$name.options"
    fi
    echo "== $name: libFuzzer, ${seconds}s" >"$scratch/$name.head"
    "$bin" "${args[@]}" "$corpus" >"$log" 2>&1 || status=$?
  else
    echo "== $name: replay build (configure with -DMG_LIBFUZZER=ON to fuzz); replaying seeds" >"$scratch/$name.head"
    "$bin" "$seeds" >"$log" 2>&1 || status=$?
  fi
  if [[ $status -eq 0 ]] && grep -Eq "$report_pattern" "$log"; then
    echo "!! $name exited 0 but its log holds a sanitizer report" >>"$scratch/$name.head"
    status=97
  fi
  echo "$status" >"$scratch/$name.status"
}

names=()
for bin in "${targets[@]}"; do
  [[ -f $bin && -x $bin ]] || continue
  name=$(basename "$bin")
  names+=("$name")
  run_one "$name" "$bin" &
  while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
done
wait || true

failed=()
for name in "${names[@]}"; do
  cat "$scratch/$name.head"
  status=$(cat "$scratch/$name.status" 2>/dev/null || echo 99)
  log="$scratch/$name.log"
  if [[ $status -ne 0 ]]; then
    echo "!! $name failed (exit $status); log:" >&2
    tail -n 60 "$log" >&2
    failed+=("$name")
  else
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|replay:)' "$log" || true
    grep -E '^Done [0-9]+ runs' "$log" || true
  fi
done

if [[ ${#names[@]} -eq 0 ]]; then
  echo "no fuzz_* targets in $build_dir/fuzz" >&2
  exit 2
fi
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "FAILED: ${failed[*]} (reproducers in $artifacts)" >&2
  exit 1
fi
echo "ok: ${#names[@]} target(s)"
