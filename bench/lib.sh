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

# bench_wide_header FILE COUNT: writes the worst-case safetensors file of
# COUNT one-byte U8 tensors, entries as bench_parse writes them
# (`"t0000001":{"dtype":"U8","shape":[1],"data_offsets":[i,i+1]}`, compact,
# space-padded to 8 as the reference writer does), and sets $header_bytes.
bench_wide_header() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
path, n = sys.argv[1], int(sys.argv[2])
parts = ['"t%07d":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}' % (i, i, i + 1) for i in range(n)]
header = ("{" + ",".join(parts) + "}").encode()
header += b" " * (-(8 + len(header)) % 8)  # the reference writer pads to 8
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(header)))
    f.write(header)
    f.write(b"\0" * n)
PY
  # shellcheck disable=SC2034  # read by the scripts that source this
  header_bytes=$(python3 -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read(8))[0])' "$1")
}
