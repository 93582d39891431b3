#!/bin/bash
# Step `setup` of action.yml: provides the modelgate program for step `run`
# and writes `bin=PATH` to $GITHUB_OUTPUT. In order:
#
# 1. MODELGATE_BIN set in the job's env (a prebuilt program: a cache, the
#    tests): that program, as is.
# 2. MG_DEB (input `modelgate-deb`): the .deb that `cpack` / the Dockerfile
#    makes (modelgate_<version>_<arch>.deb), a path in the workspace or an
#    https:// URL, pinned by MG_DEB_SHA256 (input `modelgate-deb-sha256`, 64
#    hex digits: no pin, no run). Its Depends are installed with
#    `apt-get satisfy` (sudo when not root) unless already met; the package
#    itself is unpacked with dpkg -x under MG_DEB_DIR ($RUNNER_TEMP), so
#    nothing of it lands outside the job's temp directory.
# 3. MG_BUILD_FROM_SOURCE=true (input `build-from-source`): the build
#    dependencies from ci/install-deps.sh, then a Release build of the
#    action's own checkout into MG_BUILD_DIR (a couple of minutes).
# Neither 2 nor 3 asked for is an error: there is no published package to
# default to.
set -euo pipefail

# shellcheck source=integrations/github/annotate.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/annotate.sh"
fail() {
  annotate error "modelgate setup" "$1"
  exit 2
}

[ -n "${GITHUB_OUTPUT:-}" ] || fail "GITHUB_OUTPUT is not set (run this as a step of action.yml)"
[ -n "${GITHUB_ACTION_PATH:-}" ] || fail "GITHUB_ACTION_PATH is not set (run this as a step of action.yml)"

# SARIF rules link to docs/findings/ID.md (helpUri). A build made here points
# them at this action's own repository and ref, when GitHub names them
# (github.action_repository, github.action_ref) and they are plain names;
# else the build keeps its default (see MG_DOCS_BASE_URI in cli/CMakeLists.txt).
docs_base=""
repo_re='^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$'
ref_re='^[A-Za-z0-9_./-]+$'
if [[ "${MG_ACTION_REPOSITORY:-}" =~ $repo_re && "${MG_ACTION_REF:-}" =~ $ref_re &&
      "${MG_ACTION_REF:-}" != *..* ]]; then
  docs_base="https://github.com/$MG_ACTION_REPOSITORY/blob/$MG_ACTION_REF/docs/findings/"
fi

deb="${MG_DEB:-}"
pin="${MG_DEB_SHA256:-}"
from_source="${MG_BUILD_FROM_SOURCE:-false}"
case "$from_source" in
  true | false) ;;
  *) fail "build-from-source must be true or false, not '$from_source'" ;;
esac

if [ -n "${MODELGATE_BIN:-}" ]; then
  bin="$MODELGATE_BIN"
  case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
  if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
    fail "MODELGATE_BIN=$MODELGATE_BIN is not an executable file"
  fi
  echo "modelgate: using the prebuilt $bin (MODELGATE_BIN)"
elif [ -n "$deb" ] && [ "$from_source" = true ]; then
  fail "both 'modelgate-deb' and 'build-from-source: true' are set: choose one"
elif [ -n "$deb" ]; then
  [ -n "${MG_DEB_DIR:-}" ] || fail "MG_DEB_DIR is not set"
  [[ "$pin" =~ ^[0-9a-f]{64}$ ]] ||
    fail "modelgate-deb-sha256 must be the package's SHA-256 (64 lowercase hex digits, from sha256sum), not '$pin'"
  case "$deb" in *$'\n'* | *$'\r'*) fail "modelgate-deb contains a line break" ;; esac
  rm -rf -- "$MG_DEB_DIR"
  mkdir -p -- "$MG_DEB_DIR"
  file="$MG_DEB_DIR/modelgate.deb"
  case "$deb" in
    https://*)
      command -v curl >/dev/null || fail "curl is not installed: apt-get install curl ca-certificates before this step"
      echo "modelgate: downloading $deb"
      curl -fsSL --proto '=https' --proto-redir '=https' --tlsv1.2 --retry 3 -o "$file" "$deb" ||
        fail "could not download $deb"
      ;;
    *://*) fail "modelgate-deb must be an https:// URL or a path, not '$deb'" ;;
    *)
      [ -f "$deb" ] || fail "modelgate-deb '$deb' is not a file"
      cp -- "$deb" "$file"
      ;;
  esac
  # The pin is checked on the copy that is unpacked, not on the original.
  got="$(sha256sum -- "$file" | cut -d' ' -f1)"
  [ "$got" = "$pin" ] || fail "modelgate-deb has SHA-256 $got, not the pinned $pin"
  name="$(dpkg-deb -f "$file" Package)" || fail "modelgate-deb is not a Debian package"
  [ "$name" = modelgate ] || fail "modelgate-deb holds package '$name', not modelgate"
  arch="$(dpkg-deb -f "$file" Architecture)"
  [ "$arch" = "$(dpkg --print-architecture)" ] ||
    fail "modelgate-deb is for $arch, this runner is $(dpkg --print-architecture)"
  depends="$(dpkg-deb -f "$file" Depends)"
  # Debian 12's apt takes the Depends line as it is; a simulation finds what
  # is missing, so a job whose image has the libraries needs no root.
  if [ -n "$depends" ] && ! LC_ALL=C apt-get -s satisfy "$depends" 2>/dev/null |
      grep -q '^0 upgraded, 0 newly installed'; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "modelgate: installing the package's dependencies: $depends"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get satisfy -y -qq --no-install-recommends "$depends" >/dev/null ||
      fail "apt-get could not install the package's dependencies: $depends"
  fi
  dpkg-deb -x "$file" "$MG_DEB_DIR/root" || fail "could not unpack modelgate-deb"
  bin="$MG_DEB_DIR/root/usr/bin/modelgate"
  [ -x "$bin" ] || fail "modelgate-deb has no usr/bin/modelgate"
  echo "modelgate: using $name $(dpkg-deb -f "$file" Version) from $deb (SHA-256 $got)"
elif [ "$from_source" = true ]; then
  [ -n "${MG_BUILD_DIR:-}" ] || fail "MG_BUILD_DIR is not set"
  bash "$GITHUB_ACTION_PATH/ci/install-deps.sh"
  cmake -S "$GITHUB_ACTION_PATH" -B "$MG_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMG_BUILD_TESTS=OFF -DMG_BUILD_BENCH=OFF ${docs_base:+"-DMG_DOCS_BASE_URI=$docs_base"} >/dev/null
  [ -z "$docs_base" ] || echo "modelgate: SARIF help links under $docs_base"
  cmake --build "$MG_BUILD_DIR" --target modelgate -j "$(nproc)"
  bin="$MG_BUILD_DIR/cli/modelgate"
else
  fail "no modelgate to run: pin a package (modelgate-deb and modelgate-deb-sha256, docs/ci-policy-check.md) or set build-from-source: true"
fi
case "$bin" in *$'\n'* | *$'\r'*) fail "the modelgate path contains a line break" ;; esac
"$bin" --version
printf 'bin=%s\n' "$bin" >>"$GITHUB_OUTPUT"
