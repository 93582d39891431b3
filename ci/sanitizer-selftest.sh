#!/usr/bin/env bash
# ci/sanitizer-selftest.sh: proves the sanitizer steps fail on a report. It
# compiles a few deliberately broken programs with the flags of the
# MG_SANITIZE / MG_LIBFUZZER builds and checks that ci/run-sanitized.sh and
# fuzz/run_smoke.sh fail on each (and pass a clean one). A few seconds; none
# of this is part of the project's build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cxx=${CXX_SELFTEST:-clang++-14}
san=("-fsanitize=address,undefined" -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
# A build that recovers from UBSan: exits 0 after "runtime error:", so only
# the log search can catch it.
recover=("-fsanitize=address,undefined" -fsanitize-recover=undefined -fno-omit-frame-pointer -g)

work=$(mktemp -d "${TMPDIR:-/tmp}/mg-san-selftest.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

cat >ub.cc <<'EOF'
#include <climits>
#include <cstdio>
int main(int argc, char**) { int x = INT_MAX - 1 + argc; x += argc; std::printf("%d\n", x); }
EOF
cat >overflow.cc <<'EOF'
int main(int argc, char**) { int* p = new int[4]; int v = p[argc + 3]; delete[] p; return v & 0; }
EOF
cat >leak.cc <<'EOF'
#include <cstdio>
int main() { int* p = new int[64]; p[0] = 1; std::printf("%p\n", static_cast<void*>(p)); }
EOF
cat >clean.cc <<'EOF'
#include <vector>
int main() { std::vector<int> v(4, 1); return v[3] - 1; }
EOF
# A parent that hides its child's failure and its stderr, as a test runner
# capturing a subprocess might.
cat >parent.sh <<'EOF'
#!/usr/bin/env bash
"$(dirname "$0")/ub_recover" 2>/dev/null >/dev/null || true
exit 0
EOF
chmod +x parent.sh
cat >fuzz_selftest.cc <<'EOF'
#include <climits>
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  volatile int x = INT_MAX - 1;
  x = x + data[0] + 2;  // overflows for every byte
  return 0;
}
EOF

"$cxx" "${san[@]}" ub.cc -o ub
"$cxx" "${recover[@]}" ub.cc -o ub_recover
"$cxx" "${san[@]}" overflow.cc -o overflow
"$cxx" "${san[@]}" leak.cc -o leak
"$cxx" "${san[@]}" clean.cc -o clean
mkdir -p fuzz-abort/fuzz fuzz-recover/fuzz
"$cxx" "${san[@]}" -fsanitize=fuzzer fuzz_selftest.cc -o fuzz-abort/fuzz/fuzz_selftest
"$cxx" "${recover[@]}" -fsanitize=fuzzer fuzz_selftest.cc -o fuzz-recover/fuzz/fuzz_selftest

failures=0
expect() {  # expect pass|fail WHAT COMMAND...
  local want=$1 what=$2 got=pass
  shift 2
  "$@" >"$work/last.log" 2>&1 || got=fail
  if [[ $got == "$want" ]]; then
    echo "ok: $what: ${got}ed as it must"
  else
    echo "SELFTEST FAILED: $what: ${got}ed, must ${want}; log:" >&2
    tail -n 30 "$work/last.log" >&2
    failures=$((failures + 1))
  fi
}

run=("$root/ci/run-sanitized.sh")
expect pass "clean program" bash "${run[@]}" ./clean
expect fail "signed overflow (aborting UBSan)" bash "${run[@]}" ./ub
expect fail "heap overflow" bash "${run[@]}" ./overflow
expect fail "leak" bash "${run[@]}" ./leak
# halt_on_error=0 (the caller's options come last and win) makes the runners'
# own halt_on_error=1 moot: these processes exit 0, so only the search of
# the report files and logs can fail them.
expect pass "recovering UBSan alone exits 0" env UBSAN_OPTIONS=halt_on_error=0 ./ub_recover
expect fail "recovered signed overflow (exit 0)" \
  env UBSAN_OPTIONS=halt_on_error=0 bash "${run[@]}" ./ub_recover
expect fail "report from a child whose parent exits 0 and hides its output" \
  env UBSAN_OPTIONS=halt_on_error=0 bash "${run[@]}" ./parent.sh
expect fail "fuzz smoke: UB in a target" bash "$root/fuzz/run_smoke.sh" fuzz-abort 2
expect fail "fuzz smoke: recovered UB in a target (exit 0)" \
  env UBSAN_OPTIONS=halt_on_error=0 bash "$root/fuzz/run_smoke.sh" fuzz-recover 2

if [[ $failures -ne 0 ]]; then
  echo "sanitizer-selftest: $failures check(s) failed" >&2
  exit 1
fi
echo "sanitizer-selftest: every broken program failed its runner"
