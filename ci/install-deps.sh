#!/usr/bin/env bash
# Installs every build and test dependency from Debian 12 packages. Run as
# root (or with sudo). Skips apt entirely when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 python3-jsonschema python3-yaml python3-numpy
  python3-cryptography python3-torch python3-pip python3-setuptools python3-wheel python3-venv
  openjdk-17-jdk-headless
  clang-14 libclang-rt-14-dev libfuzzer-14-dev
  libssl-dev libsodium-dev libyara-dev nlohmann-json3-dev catch2 zlib1g-dev
  libbz2-dev liblzma-dev libyaml-cpp-dev libcli11-dev libcpp-httplib-dev
  pre-commit shellcheck openssl strace groff-base zsh
  libzstd-dev liblz4-dev libarchive-dev libhdf5-dev libseccomp-dev python3-jinja2 python3-h5py python3-onnx
  zstd lz4 7zip libzstd-dev liblz4-dev libarchive-dev
  libp11-kit-dev softhsm2 opensc
  python3-joblib python3-lz4
)

# --s390x: the cross compiler and qemu-user for ci/s390x.sh (the s390x
# libraries themselves are unpacked by ci/s390x-sysroot.sh, not installed).
if [[ ${1:-} == --s390x ]]; then
  PACKAGES=(g++-s390x-linux-gnu qemu-user binutils)
elif [[ $# -ne 0 ]]; then
  echo "usage: $0 [--s390x]" >&2
  exit 2
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "ci/install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "ci/install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "ci/install-deps: done"
