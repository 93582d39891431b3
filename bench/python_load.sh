#!/usr/bin/env bash
# bench/python_load.sh BUILD_DIR [REPS]: the Python package's verified load
# of a 1 GiB signed model (issue 12 point 6) next to reading the same file
# with numpy.fromfile and next to `openssl dgst -sha256` of it, in the same
# run. The model is 64 F32 tensors of 16 MiB (random bytes), signed with an
# Ed25519 key (embedded STSIG), written to a temp dir (removed afterwards;
# needs ~1.1 GiB free under $TMPDIR, default /tmp) and read into the page
# cache first. Each operation runs in its own process under /usr/bin/time,
# best of REPS (default 3), with Debian's /usr/bin/python3:
#   np.load_file   modelgate.numpy.load_file(mode="eager"), then one byte of
#                  every page of every tensor summed (every page faulted in)
#   pt.load_file   modelgate.torch.load_file, the same touch
#   np.fromfile    numpy.fromfile(FILE, uint8), the same touch
#   openssl dgst   openssl dgst -sha256 FILE (what hashing the file costs)
# and prints wall time (interpreter start-up included), the time inside the
# process (load + touch), MB/s (10^6 bytes of the file), openssl's wall over
# this one's, fromfile's over this one's, user+sys CPU, peak RSS
# (/usr/bin/time %M: mapped file pages count too) and, for the Python runs,
# RssAnon at the end (private memory: what a copy would show).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [REPS]" >&2
  exit 2
fi
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
build=$(cd "$1" && pwd)
reps=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
mg="$build/cli/modelgate"
lib="$build/api/libmodelgate.so.0"
py=/usr/bin/python3
[[ -x $mg && -f $lib ]] || { echo "build first: cmake --build $1 --target modelgate modelgate_api" >&2; exit 2; }
bench_need_tools
"$py" -c "import numpy, torch" || { echo "needs python3-numpy and python3-torch" >&2; exit 2; }

bench_scratch 1150 python
model="$data/model.safetensors"
export MODELGATE_LIBRARY="$lib" PYTHONPATH="$here/../bindings/python" PYTHONDONTWRITEBYTECODE=1

"$py" - "$model" <<'PY'
import json, struct, sys
import numpy as np
count, size = 64, 16 << 20
header = {f"layers.{i:02d}.weight": {"dtype": "F32", "shape": [size // 4],
                                      "data_offsets": [i * size, (i + 1) * size]}
          for i in range(count)}
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
rng = np.random.default_rng(1)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _ in range(count):
        f.write(rng.bytes(size))
PY
mkdir -p "$data/keys"
"$mg" keygen --out "$data/keys/k" >/dev/null
"$mg" sign --quiet --key "$data/keys/k.key" "$model"
pub="$data/keys/k.pub"
bytes=$(stat -c %s "$model")
cat "$model" >/dev/null  # into the page cache

# The Python runs print "SECONDS RSSANON_KIB" (load + touch, in-process).
read -r -d '' touch_py <<'PY' || true
import sys, time
import numpy as np
def rss_anon():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("RssAnon:"))
def touch(arrays):
    return sum(int(a[::4096].sum()) for a in arrays)
op, path, pub = sys.argv[1:4]
if op == "pt":
    import torch, modelgate.torch
    t0 = time.perf_counter()
    tensors = modelgate.torch.load_file(path, keys=[pub])
    touch(t.view(torch.uint8) for t in tensors.values())
elif op == "np":
    import modelgate.numpy
    t0 = time.perf_counter()
    arrays = modelgate.numpy.load_file(path, keys=[pub], mode="eager")
    touch(a.view(np.uint8) for a in arrays.values())
else:
    t0 = time.perf_counter()
    whole = np.fromfile(path, dtype=np.uint8)
    touch([whole])
print(f"{time.perf_counter() - t0:.3f} {rss_anon()}")
PY

# once OP CMD...: runs CMD under /usr/bin/time; keeps OP's best (lowest
# wall) run in wall[OP] cpu[OP] rss[OP] inner[OP] anon[OP].
declare -A wall cpu rss inner anon
once() {
  local op=$1
  shift
  local rc=0
  /usr/bin/time -f '%e %U %S %M' -o "$data/time" "$@" >"$data/out" 2>"$data/err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "$op failed (exit $rc): $*" >&2
    tail -n 20 "$data/err" "$data/out" >&2
    exit 2
  fi
  local w u s m i=- a=-
  read -r w u s m < <(tail -n 1 "$data/time")
  if [[ $op != openssl ]]; then read -r i a < "$data/out"; fi
  if [[ -z ${wall[$op]:-} ]] || awk -v x="$w" -v y="${wall[$op]}" 'BEGIN{exit !(x < y)}'; then
    wall[$op]=$w
    cpu[$op]=$(awk -v u="$u" -v s="$s" 'BEGIN{printf "%.2f", u + s}')
    rss[$op]=$(awk -v k="$m" 'BEGIN{printf "%.1f", k / 1024}')
    inner[$op]=$i
    anon[$op]=$([[ $a == - ]] && echo - || awk -v k="$a" 'BEGIN{printf "%.1f", k / 1024}')
  fi
}

for ((r = 0; r < reps; r++)); do
  once openssl openssl dgst -sha256 "$model"
  once fromfile "$py" -c "$touch_py" fromfile "$model" "$pub"
  once np "$py" -c "$touch_py" np "$model" "$pub"
  once pt "$py" -c "$touch_py" pt "$model" "$pub"
done

echo "model: $((bytes / 1048576)) MiB, 64 F32 tensors, embedded Ed25519 signature; best of $reps;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-26s %7s %8s %7s %10s %11s %6s %8s %9s\n' operation wall_s inproc_s MB/s vs_openssl \
  vs_fromfile cpu_s peak_MB RssAnon_MB
row() {  # row OP LABEL
  awk -v op="$2" -v w="${wall[$1]}" -v i="${inner[$1]}" -v b="$bytes" -v o="${wall[openssl]}" \
      -v f="${wall[fromfile]}" -v c="${cpu[$1]}" -v m="${rss[$1]}" -v a="${anon[$1]}" \
      'BEGIN{printf "%-26s %7.2f %8s %7.0f %9.2fx %10.2fx %6.2f %8.1f %9s\n",
             op, w, i, b / 1e6 / w, o / w, f / w, c, m, a}'
}
row openssl "openssl dgst -sha256"
row fromfile "numpy.fromfile + touch"
row np "numpy.load_file (eager)"
row pt "torch.load_file (eager)"
