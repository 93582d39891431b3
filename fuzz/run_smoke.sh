#!/usr/bin/env bash
# run_smoke.sh BUILD_DIR SECONDS: runs every fuzz_* target in BUILD_DIR/fuzz
# for SECONDS each, one after another, one job per target. libFuzzer builds
# (-DMG_LIBFUZZER=ON) fuzz a scratch copy of the seed corpus (the repo's
# corpus is never written) with the target's dictionary if it has one; replay
# builds just replay the seeds. Exits non-zero if any target crashes; its
# reproducer is left in fuzz-artifacts/ under the build dir and its log printed.
set -euo pipefail

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
failed=()
ran=0
for bin in "${targets[@]}"; do
  [[ -f $bin && -x $bin ]] || continue
  name=$(basename "$bin")
  seeds="$src_dir/corpus/$name"
  log="$scratch/$name.log"
  ran=$((ran + 1))
  help=$("$bin" -help=1 2>&1 </dev/null || true)
  if [[ $help == *max_total_time* ]]; then
    corpus="$scratch/corpus-$name"
    mkdir -p "$corpus"
    [[ -d $seeds ]] && cp -R "$seeds/." "$corpus/"
    args=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10
          -print_final_stats=1 -artifact_prefix="$artifacts/$name-")
    [[ -f $src_dir/$name.dict ]] && args+=(-dict="$src_dir/$name.dict")
    echo "== $name: libFuzzer, ${seconds}s"
    status=0
    "$bin" "${args[@]}" "$corpus" >"$log" 2>&1 || status=$?
  else
    echo "== $name: replay build (configure with -DMG_LIBFUZZER=ON to fuzz); replaying seeds"
    status=0
    "$bin" "$seeds" >"$log" 2>&1 || status=$?
  fi
  if [[ $status -ne 0 ]]; then
    echo "!! $name failed (exit $status); log:" >&2
    tail -n 60 "$log" >&2
    failed+=("$name")
  else
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|replay:)' "$log" || true
    grep -E '^Done [0-9]+ runs' "$log" || true
  fi
done

if [[ $ran -eq 0 ]]; then
  echo "no fuzz_* targets in $build_dir/fuzz" >&2
  exit 2
fi
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "FAILED: ${failed[*]} (reproducers in $artifacts)" >&2
  exit 1
fi
echo "ok: $ran target(s)"
