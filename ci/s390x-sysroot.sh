#!/usr/bin/env bash
# ci/s390x-sysroot.sh DIR: the s390x (big-endian) libraries modelgate links,
# unpacked from Debian 12's s390x packages into DIR, for the cross build
# (cmake/s390x-linux-gnu.cmake) and for qemu-s390x to run it.
#
# Why not multiarch (apt-get install libssl-dev:s390x): Multi-Arch: same
# packages must have one version on every architecture, and bookworm's
# security archive (LTS) no longer carries s390x, so the amd64 libraries
# installed from bookworm-security are newer than any s390x build and apt
# refuses the pair. The s390x .debs are downloaded (apt-get download, from
# the Debian mirror only) and unpacked with dpkg-deb -x instead; nothing is
# installed into the host's package database. libc and libstdc++ come from
# the cross toolchain (g++-s390x-linux-gnu, /usr/s390x-linux-gnu), not from
# here.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$1

# The -dev packages of what CMakeLists.txt finds, and the header-only ones
# (architecture: all) unpacked here too: a cross build must not add the
# host's /usr/include, which holds amd64 libc headers, to its search path.
dev=(libssl-dev libsodium-dev libyara-dev zlib1g-dev libbz2-dev liblzma-dev libyaml-cpp-dev
     libzstd-dev liblz4-dev libarchive-dev libhdf5-dev libseccomp-dev libp11-kit-dev
     libcpp-httplib-dev catch2)
header_only=(nlohmann-json3-dev libcli11-dev)

# The stamp names what was unpacked: a sysroot made for another list is
# made again.
stamp="$dir/.mg-sysroot-complete"
want="${dev[*]} ${header_only[*]}"
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "ci/s390x-sysroot: $dir is ready"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! dpkg --print-foreign-architectures | grep -qx s390x; then
  $SUDO dpkg --add-architecture s390x
  $SUDO apt-get update -qq
fi

# Their dependency closure, minus what the cross toolchain provides (libc,
# libstdc++, libgcc) and alternatives and tools that nothing here links
# (the NSS and GnuTLS flavours of libcurl-dev, Fortran, JPEG headers).
skip='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libstdc\+\+6|libgcc-s1|gcc-12-base|libcrypt-dev|libcrypt1|libcurl3-nss|libcurl4-nss-dev|libnss3|libnspr4|nss-plugin-pem|libcurl4-gnutls-dev|libcurl4-openssl-dev|libnsl-dev|libtirpc-dev|rpcsvc-proto|libjpeg-dev|libjpeg62-turbo-dev|libgfortran5|libhdf5-fortran-102|libhdf5-hl-fortran-100|hdf5-helpers):'
mapfile -t pkgs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${dev[@]/%/:s390x}" 2>/dev/null |
  grep -E '^[a-z0-9][^ ]*:s390x$' | sort -u | grep -Ev "$skip")
pkgs+=("${header_only[@]}")
if [[ ${#pkgs[@]} -lt ${#dev[@]} ]]; then
  echo "ci/s390x-sysroot: apt-cache found only ${#pkgs[@]} s390x packages" >&2
  exit 1
fi

debs=$(mktemp -d "${TMPDIR:-/tmp}/mg-s390x-debs.XXXXXX")
trap 'rm -rf "$debs"' EXIT
# apt-get download writes into the current directory; _apt cannot write a
# mktemp directory, so it downloads as root (the warning says so).
# A failed download shows in the count below.
(
  cd "$debs"
  apt-get download -qq "${pkgs[@]}" 2>&1 | { grep -v 'unsandboxed' || true; }
) || true
count=$(find "$debs" -name '*.deb' | wc -l)
if [[ $count -ne ${#pkgs[@]} ]]; then
  echo "ci/s390x-sysroot: downloaded $count of ${#pkgs[@]} packages" >&2
  exit 1
fi

rm -rf "$dir"
mkdir -p "$dir"
for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$dir"; done

# Absolute symlinks (libz.so -> /lib/s390x-linux-gnu/libz.so.1) would point
# into the host: make them relative inside the sysroot.
while IFS= read -r link; do
  target=$(readlink "$link")
  ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$dir$target")" "$link"
done < <(find "$dir" -type l -lname '/*')
# libhdf5-dev names its pkg-config file through update-alternatives, which
# an unpacked sysroot does not run: the serial flavour is the one.
pc="$dir/usr/lib/s390x-linux-gnu/pkgconfig"
[[ -f $pc/hdf5.pc ]] || ln -s hdf5-serial.pc "$pc/hdf5.pc"
echo "$want" >"$stamp"
echo "ci/s390x-sysroot: ${#pkgs[@]} packages unpacked into $dir"
