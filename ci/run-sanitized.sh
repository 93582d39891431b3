#!/usr/bin/env bash
# ci/run-sanitized.sh COMMAND [ARGS...]: runs COMMAND (e.g. ctest in an
# ASan+UBSan build) so that any sanitizer report fails it, whatever its exit
# code says. Belt and braces, because a report can be lost on the way up:
# - ASan/UBSan halt (and abort) on the first error, so the process fails;
# - every sanitized process, including children whose output a test runner
#   swallows (the Python CLI tests run the binary), writes its reports to
#   files under a scratch directory (log_path): any file there fails the run;
# - COMMAND's own output, and ctest's Testing/Temporary/LastTest.log when
#   COMMAND ran ctest, are searched for report headers.
# Exits with COMMAND's status if it failed, else 1 if any report was found.
set -euo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi

# The report headers of ASan, LSan and UBSan (recoverable or not).
readonly report_pattern='runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer|SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer'

reports=$(mktemp -d "${TMPDIR:-/tmp}/mg-sanitizer.XXXXXX")
output="$reports/output.log"
trap 'rm -rf "$reports"' EXIT

# handle_sigbus=0: the gate guards its own mappings against SIGBUS (a file
# truncated mid-scan) and tests check an unguarded one still kills with
# SIGBUS; ASan would turn it into its own report and an abort.
common="halt_on_error=1:abort_on_error=1:log_path=$reports/report"
export ASAN_OPTIONS="detect_leaks=1:handle_sigbus=0:$common${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:$common${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="$common${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

touch "$reports/start"
status=0
"$@" 2>&1 | tee "$output" || status=${PIPESTATUS[0]}

found=0
shopt -s nullglob
for f in "$reports"/report*; do
  echo "!! sanitizer report $(basename "$f"):" >&2
  cat "$f" >&2
  found=1
done
logs=("$output")
[[ Testing/Temporary/LastTest.log -nt $reports/start ]] && logs+=(Testing/Temporary/LastTest.log)
for log in "${logs[@]}"; do
  if grep -Eq "$report_pattern" "$log"; then
    echo "!! sanitizer report in $log:" >&2
    grep -En "$report_pattern" "$log" | head -n 20 >&2
    found=1
  fi
done

if [[ $status -ne 0 ]]; then
  echo "run-sanitized: '$*' failed (exit $status)" >&2
  exit "$status"
fi
if [[ $found -ne 0 ]]; then
  echo "run-sanitized: '$*' exited 0 but a sanitizer reported an error" >&2
  exit 1
fi
echo "run-sanitized: '$*' passed with no sanitizer report"
