#!/bin/bash
# Step `run` of action.yml: runs modelgate once, the text report to the log
# and SARIF to MG_SARIF_FILE, sets the outputs `sarif-file` and `exit-code`,
# and exits with modelgate's code (0 passed, 1 rejected, 2 could not judge),
# so the job fails on 1 and 2. The SARIF file is always written, so a later
# `upload-sarif` step with `if: always()` has something to upload: when
# modelgate could not produce one (bad input, bad policy), a SARIF log with no
# results and a failed invocation takes its place. A stale file from an
# earlier step is removed first.
#
# Inputs come from the environment only (set from `inputs.*` by action.yml):
#   MG_BIN         modelgate program (from step `setup`)
#   MG_PATHS       files/directories, one per line
#   MG_POLICY      policy file; empty: `scan --fail-on`
#   MG_FAIL_ON     severity bar without a policy (empty: high)
#   MG_SARIF_FILE  SARIF path (default modelgate.sarif)
set -euo pipefail

# shellcheck source=integrations/github/annotate.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/annotate.sh"
error() { annotate error modelgate "$1"; }

[ -n "${GITHUB_OUTPUT:-}" ] || { error "GITHUB_OUTPUT is not set (run this as a step of action.yml)"; exit 2; }
bin="${MG_BIN:-}"
policy="${MG_POLICY:-}"
fail_on="${MG_FAIL_ON:-}"
sarif="${MG_SARIF_FILE:-}"
[ -n "$sarif" ] || sarif=modelgate.sarif

code=0
problem=""
case "$sarif" in
  *$'\n'* | *$'\r'*) problem="sarif-file contains a line break"; sarif=modelgate.sarif ;;
esac
if [ -z "$problem" ] && [ -d "$sarif" ]; then
  problem="sarif-file '$sarif' is a directory"
  sarif=modelgate.sarif
fi
rm -f -- "$sarif"
mkdir -p -- "$(dirname -- "$sarif")"

paths=()
if [ -n "${MG_PATHS:-}" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line%$'\r'}"
    line="${line#"${line%%[![:space:]]*}"}"  # trim surrounding blanks
    line="${line%"${line##*[![:space:]]}"}"
    [ -z "$line" ] || paths+=("$line")
  done <<<"$MG_PATHS"
fi

# A checkout's .git holds every committed blob zlib-compressed: scanning it
# would judge history, not the tree. A directory with a top-level .git is
# replaced by its other entries -- unless it holds a detached bundle
# (model.sig): then it is passed whole, so the bundle covers its files, and
# check itself leaves out the .git that a valid bundle ignores.
if [ "${#paths[@]}" -gt 0 ]; then
  given=("${paths[@]}")
  paths=()
  for p in "${given[@]}"; do
    if [ -d "$p" ] && [ -e "$p/.git" ] && ! [ -f "$p/model.sig" ]; then
      while IFS= read -r -d '' entry; do
        paths+=("$entry")
      done < <(find "$p" -mindepth 1 -maxdepth 1 ! -name .git -print0 | sort -z)
    else
      paths+=("$p")
    fi
  done
fi

if [ -n "$problem" ]; then
  :
elif [ -z "$bin" ] || [ ! -x "$bin" ]; then
  problem="modelgate program '$bin' not found (did the setup step run?)"
elif [ "${#paths[@]}" -eq 0 ]; then
  problem="input 'path' names no files (besides .git)"
elif [ -n "$policy" ] && [ -n "$fail_on" ]; then
  problem="both 'policy' and 'fail-on' are set: under a policy its failOn decides; drop 'fail-on' or set failOn in the policy"
elif [ -n "$policy" ] && [ ! -f "$policy" ]; then
  problem="policy file '$policy' not found"
elif [ -z "$policy" ] && [ -n "$fail_on" ]; then
  case "$fail_on" in
    critical | high | medium | low | info) ;;
    *) problem="fail-on '$fail_on' is not one of critical, high, medium, low, info" ;;
  esac
fi

if [ -n "$problem" ]; then
  error "$problem"
  code=2
else
  if [ -n "$policy" ]; then
    args=(check --policy "$policy")
  else
    args=(scan --fail-on "${fail_on:-high}")
  fi
  args+=(-f text --sarif-output "$sarif" -- "${paths[@]}")
  # File names in the report come from the repository: stop the runner from
  # reading any line of it as a workflow command.
  token="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  echo "::stop-commands::$token"
  "$bin" "${args[@]}" || code=$?
  echo "::$token::"
  case "$code" in
    0) echo "modelgate: every file passed" ;;
    1) error "modelgate rejected at least one file (exit 1); see the report above and the code scanning alerts" ;;
    2) error "modelgate could not judge (exit 2): usage, unreadable path or bad policy; see the log" ;;
    *)
      error "modelgate failed (exit $code); counted as could not judge (2)"
      code=2
      ;;
  esac
fi

if [ ! -s "$sarif" ]; then
  tmp="$(mktemp -- "$sarif.XXXXXX")"
  cat >"$tmp" <<JSON
{"\$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0",
 "runs": [{"tool": {"driver": {"name": "modelgate"}},
           "invocations": [{"executionSuccessful": false, "exitCode": $code,
             "toolExecutionNotifications": [{"level": "error",
               "message": {"text": "modelgate could not judge (exit $code); see the job log"}}]}],
           "results": []}]}
JSON
  mv -f -- "$tmp" "$sarif"
fi

printf 'sarif-file=%s\nexit-code=%s\n' "$sarif" "$code" >>"$GITHUB_OUTPUT"
exit "$code"
