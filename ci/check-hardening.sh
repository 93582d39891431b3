#!/usr/bin/env bash
# ci/check-hardening.sh BINARY: fails unless BINARY (an optimised build, see
# the top-level CMakeLists.txt) was built hardened: a PIE, full RELRO
# (GNU_RELRO segment and BIND_NOW), the stack protector, fortified libc
# calls (_FORTIFY_SOURCE) and libstdc++ assertions (_GLIBCXX_ASSERTIONS).
set -euo pipefail

if [[ $# -ne 1 || ! -f $1 ]]; then
  echo "usage: $0 BINARY" >&2
  exit 2
fi
bin=$1
failed=0
check() {  # check WHAT COMMAND...: COMMAND must succeed
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then
    echo "ok: $what"
  else
    echo "MISSING: $what" >&2
    failed=1
  fi
}

header=$(readelf -hW "$bin")
segments=$(readelf -lW "$bin")
dynamic=$(readelf -dW "$bin")
symbols=$(readelf --dyn-syms -W "$bin")

check "PIE (ELF type DYN)" grep -Eq 'Type:[[:space:]]+DYN' <<<"$header"
check "RELRO (GNU_RELRO segment)" grep -q 'GNU_RELRO' <<<"$segments"
check "full RELRO (BIND_NOW / FLAGS NOW)" grep -Eq '\(BIND_NOW\)|\(FLAGS(_1)?\).*NOW' <<<"$dynamic"
check "stack protector (__stack_chk_fail)" grep -q '__stack_chk_fail' <<<"$symbols"
check "_FORTIFY_SOURCE (a __*_chk libc call)" grep -Eq ' __[a-z0-9_]+_chk(@|$)' <<<"$symbols"
# GCC 12's _GLIBCXX_ASSERTIONS inlines each check with its condition text.
check "_GLIBCXX_ASSERTIONS (libstdc++ assertion text)" grep -aq '__n < this->size()' "$bin"

if [[ $failed -ne 0 ]]; then
  echo "check-hardening: $bin is not fully hardened" >&2
  exit 1
fi
echo "check-hardening: $bin is hardened"
