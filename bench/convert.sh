#!/usr/bin/env bash
# bench/convert.sh BUILD_DIR [REPS]: `modelgate convert` of a 1 GiB PyTorch
# zip checkpoint (torch.save of 64 F32 tensors of 16 MiB, random values,
# plus 8 transposed views of 1 MiB over their own storages) next to the
# usual conversion in the same run: torch.load of the checkpoint and
# writing every tensor's raw bytes (contiguous) to one file (what
# safetensors' save_file does, without its header), Debian's
# /usr/bin/python3 with python3-torch. Each in its own process under
# /usr/bin/time, best of REPS (default 3), the file read into the page cache
# first; prints wall seconds, MB/s (10^6 bytes of the checkpoint), the
# ratio torch's wall / convert's wall (above 1: convert is faster), and
# peak RSS (%M). Needs ~3.2 GiB free under $TMPDIR (default /tmp).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [REPS]" >&2
  exit 2
fi
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
build=$(cd "$1" && pwd)
reps=${2:-3}
mg="$build/cli/modelgate"
py=/usr/bin/python3
[[ -x $mg ]] || { echo "build first: cmake --build $1 --target modelgate" >&2; exit 2; }
bench_need_tools
"$py" -c "import torch" || { echo "needs python3-torch" >&2; exit 2; }

bench_scratch 3300 convert
ckpt="$data/pytorch_model.bin"
"$py" - "$ckpt" <<'PY'
import sys, torch
torch.manual_seed(0)
sd = {f"layer{i}.weight": torch.randn(2048, 2048) for i in range(64)}
for i in range(8):
    sd[f"view{i}"] = torch.randn(512, 512).t()
torch.save(sd, sys.argv[1])
PY
cat "$ckpt" > /dev/null
size=$(stat -c %s "$ckpt")

# best_of NAME CMD...: runs CMD reps times, keeps the best wall and its RSS.
best_wall="" best_rss=""
best_of() {
  local name=$1; shift
  best_wall="" best_rss=""
  for ((i = 0; i < reps; i++)); do
    rm -f "$data/out"
    /usr/bin/time -f "%e %M" -o "$data/time" "$@" > /dev/null
    read -r wall rss < "$data/time"
    if [[ -z $best_wall ]] || awk "BEGIN{exit !($wall < $best_wall)}"; then
      best_wall=$wall best_rss=$rss
    fi
  done
  printf '%-34s %7.2f s %8.0f MB/s  peak RSS %7d KiB\n' "$name" "$best_wall" \
    "$(awk "BEGIN{print $size / 1e6 / ($best_wall > 0 ? $best_wall : 0.01)}")" "$best_rss"
}

echo "checkpoint: $size bytes (64 x 16 MiB F32 + 8 transposed 1 MiB views)"
best_of "modelgate convert" "$mg" convert -q -o "$data/out" "$ckpt"
mg_wall=$best_wall
best_of "torch.load + raw bytes written" "$py" -c '
import sys, torch
sd = torch.load(sys.argv[1], map_location="cpu")
with open(sys.argv[2], "wb") as f:
    for k in sorted(sd):
        f.write(sd[k].contiguous().numpy().tobytes())
' "$ckpt" "$data/out"
torch_wall=$best_wall
echo "ratio torch.load+write / convert (wall): $(awk "BEGIN{printf \"%.2f\", $torch_wall / ($mg_wall > 0 ? $mg_wall : 0.01)}")"
