# shellcheck shell=bash
# bench/lib.sh: what the benchmark scripts share; source it.

# bench_need_tools: /usr/bin/time and openssl are there, or exit 2.
bench_need_tools() {
  [[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (Debian package 'time')" >&2; exit 2; }
  command -v openssl >/dev/null || { echo "openssl not found (apt-get install openssl)" >&2; exit 2; }
}

# bench_scratch MIB NAME: sets $data to a fresh directory under $TMPDIR (or
# /tmp), removed when the script exits; exits 2 unless MIB MiB are free there.
bench_scratch() {
  local need_mib=$1 name=$2 parent="${TMPDIR:-/tmp}" avail
  avail=$(df --output=avail -B1 "$parent" | tail -1 | tr -d ' ')
  if (( avail < need_mib * 1024 * 1024 )); then
    echo "need $need_mib MiB free in $parent, have $((avail / 1048576)) MiB (set TMPDIR elsewhere)" >&2
    exit 2
  fi
  data=$(mktemp -d "$parent/mg-bench-$name.XXXXXX")
  # shellcheck disable=SC2064  # expand $data now: it is this scratch dir
  trap "rm -rf '$data'" EXIT
}
