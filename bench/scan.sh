#!/usr/bin/env bash
# bench/scan.sh BUILD_DIR: scanner throughput (issue 3).
#  1. one process scanning a directory of PyTorch checkpoints and pickles:
#     files/s and MB/s;
#  2. 100 small pickles scanned one process each (what a registry hook that
#     spawns the scanner per upload pays): total wall time.
# Checkpoints come from Debian's python3-torch when /usr/bin/python3 has it
# (realistic sizes), else from copies of tests/fixtures/real/.
set -euo pipefail
build=$(cd "$1" && pwd)
mg="$build/cli/modelgate"
src=$(cd "$(dirname "$0")/.." && pwd)
[[ -x $mg ]] || { echo "build $mg first" >&2; exit 2; }
data=$(mktemp -d "${TMPDIR:-/tmp}/mg-scan-bench.XXXXXX")
trap 'rm -rf "$data"' EXIT
mkdir -p "$data/dir" "$data/small"

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 - "$data/dir" <<'PY'
import os, pickle, sys, torch
out = sys.argv[1]
torch.manual_seed(0)
for i in range(20):   # 20 checkpoints of ~1-16 MB, zip and legacy formats
    sd = {f"layer{j}.weight": torch.randn(256, 64 * (1 + i % 4)) for j in range(4 + i % 4)}
    torch.save(sd, f"{out}/ckpt{i:02d}.pt", _use_new_zipfile_serialization=(i % 2 == 0))
for i in range(80):   # 80 small plain pickles
    with open(f"{out}/obj{i:02d}.pkl", "wb") as f:
        pickle.dump({"step": i, "lr": 1e-3, "names": [f"n{k}" for k in range(50)]}, f, protocol=2 + i % 4)
PY
  echo "data: 20 torch checkpoints (torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')) + 80 pickles"
else
  for i in $(seq -w 1 25); do
    for f in "$src"/tests/fixtures/real/*; do cp "$f" "$data/dir/$i-$(basename "$f")"; done
  done
  echo "data: copies of tests/fixtures/real (python3-torch not available)"
fi
python3 - "$data/small" <<'PY'
import pickle, sys
for i in range(100):
    with open(f"{sys.argv[1]}/p{i:03d}.pkl", "wb") as f:
        pickle.dump({"i": i, "v": list(range(20))}, f, protocol=i % 6)
PY

files=$(find "$data/dir" -type f | wc -l)
bytes=$(du -sb "$data/dir" | cut -f1)
TIMEFORMAT=%R
best=""
for _ in 1 2 3; do
  t=$( { time "$mg" scan -f json "$data/dir" >/dev/null || true; } 2>&1 )
  if [[ -z $best ]] || awk "BEGIN{exit !($t < $best)}"; then best=$t; fi
done
awk -v n="$files" -v b="$bytes" -v t="$best" \
  'BEGIN{printf "one process:  %d files, %.1f MB in %.3f s (best of 3): %.0f files/s, %.0f MB/s\n", n, b/1e6, t, n/t, b/1e6/t}'

t=$( { time (for f in "$data"/small/*.pkl; do "$mg" scan -q "$f" >/dev/null || true; done); } 2>&1 )
echo "per process:  100 small pickles, one modelgate process each: $t s wall"
