#!/usr/bin/env bash
# ci/s390x.sh: modelgate on a big-endian host. Cross-builds the library, the
# program and the core, signer and scanner unit tests for s390x (Debian's
# g++-s390x-linux-gnu, the s390x libraries unpacked by ci/s390x-sysroot.sh)
# and runs them under qemu-user:
#   1. the core, signer (STSIG known-answer vectors: M and the signatures
#      byte for byte) and scanner Catch2 tests;
#   2. `modelgate scan -f json` over the whole test corpus
#      (tests/corpus/count_findings.py: examples, every fuzz seed, every
#      committed test file, the generated fixtures), whose every report object
#      (verdict, findings, offsets, messages) must equal the x86-64 build's,
#      byte for byte, and whose counts must equal findings-expected.txt.
# MG_BUILD_X86 (default build) is the x86-64 build to compare with: ci/test.sh
# makes it; its program is built here if missing. MG_S390X_BUILD names the
# cross build dir, MG_S390X_SYSROOT the sysroot.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
x86="${MG_BUILD_X86:-build}"
build="${MG_S390X_BUILD:-build-s390x}"
sysroot="${MG_S390X_SYSROOT:-/opt/mg-s390x}"

bash ci/install-deps.sh --s390x
bash ci/s390x-sysroot.sh "$sysroot"

# -O1, no debug info: the cross build is compiled once and run once; its
# point is the byte order, not the optimiser (ci/test.sh tests -O2 builds).
# CMAKE_BUILD_TYPE=None keeps assertions on.
targets=(modelgate core_tests signer_tests scanner_tests check_fixtures)
MG_BUILD_TARGETS="${targets[*]}" bash ci/build.sh "$build" \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/s390x-linux-gnu.cmake" -DMG_S390X_SYSROOT="$sysroot" \
  -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_C_FLAGS=-O1 \
  -DMG_BUILD_JAVA=OFF -DMG_BUILD_BENCH=OFF

# The emulator line CMake runs the tests with (the toolchain file's).
mapfile -t emulator < <(sed -n 's/^CMAKE_CROSSCOMPILING_EMULATOR:[A-Z]*=//p' "$build/CMakeCache.txt" | tr ';' '\n')
if [[ ${#emulator[@]} -eq 0 ]]; then
  emulator=(qemu-s390x -L /usr/s390x-linux-gnu
            -E "LD_LIBRARY_PATH=$sysroot/usr/lib/s390x-linux-gnu:$sysroot/lib/s390x-linux-gnu")
fi
# The binaries really are big-endian s390x ELF files: the run below means
# nothing if the host ran them natively.
file_out=$(readelf -h "$build/cli/modelgate")
if ! grep -q 'big endian' <<<"$file_out" || ! grep -q 'IBM S/390' <<<"$file_out"; then
  echo "ci/s390x: $build/cli/modelgate is not a big-endian s390x binary" >&2
  echo "$file_out" >&2
  exit 1
fi
"${emulator[@]}" "$build/cli/modelgate" --version

# 1. Unit tests: each test program runs all its cases in one emulated
# process (ctest would start qemu once per case: minutes of start-up).
echo "== s390x: core_tests"
"${emulator[@]}" "$build/tests/core_tests"
# signer_tests without [pkcs11]: SoftHSM2 is the host's amd64 module, which
# an s390x process cannot load (PKCS#11 is tested on x86-64 by ci/test.sh).
echo "== s390x: signer_tests ~[pkcs11]"
"${emulator[@]}" "$build/tests/signer/signer_tests" '~[pkcs11]'
echo "== s390x: scanner_tests"
"${emulator[@]}" "$build/tests/scanner/scanner_tests"
# The GGUF files make_gguf.py writes (little- and big-endian), through
# ctest's fixture (the writer runs on the host, the reader under qemu).
(cd "$build" && ctest --output-on-failure -R '^scanner_gguf_(make|files)$')
"${emulator[@]}" "$build/tests/check_fixtures" \
  --file examples/models/good.safetensors ok \
  --file examples/models/evil-trailing.safetensors MG-ST-TRAILING-BYTES

# 2. The corpus, judged alike on both byte orders.
[[ -x $x86/cli/modelgate ]] || MG_BUILD_TARGETS=modelgate bash ci/build.sh "$x86"
work=$(mktemp -d "${TMPDIR:-/tmp}/mg-s390x.XXXXXX")
trap 'rm -rf "$work"' EXIT
{
  echo '#!/bin/sh'
  printf 'exec'
  printf ' %q' "${emulator[@]}" "$root/$build/cli/modelgate"
  echo ' "$@"'
} >"$work/modelgate-s390x"
chmod +x "$work/modelgate-s390x"
py=/usr/bin/python3
"$py" tests/corpus/count_findings.py "$x86/cli/modelgate" --dump "$work/x86.json" --out "$work/x86.txt"
"$py" tests/corpus/count_findings.py "$work/modelgate-s390x" --dump "$work/s390x.json" \
  --expected tests/corpus/findings-expected.txt
if ! cmp -s "$work/x86.json" "$work/s390x.json"; then
  echo "ci/s390x: the s390x build judges the corpus differently from the x86-64 build:" >&2
  diff -u "$work/x86.json" "$work/s390x.json" | head -200 >&2
  exit 1
fi
files=$(grep -m1 '^files ' "$work/x86.txt")
echo "ci/s390x: unit tests passed under qemu; the corpus ($files) is judged byte for byte alike on s390x and x86-64"
