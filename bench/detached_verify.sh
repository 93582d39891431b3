#!/usr/bin/env bash
# bench/detached_verify.sh BUILD_DIR [REPS]: detached (OMS bundle) signing
# and verification of a model directory (issue 11 point 9) next to
# `openssl dgst -sha256` over the same files in the same run. The directory
# is 4 shards of 256 MiB (valid safetensors: one U8 tensor of random bytes
# each), their model.safetensors.index.json and small config/tokenizer
# files, written to a temp dir (removed afterwards; needs ~1.1 GiB free under
# $TMPDIR, default /tmp) and read into the page cache first. Each operation
# runs in its own process under /usr/bin/time, best of REPS (default 3):
#   openssl dgst -sha256 FILE...                          (one core)
#   modelgate sign --detached --key K -o BUNDLE DIR       (hash + write)
#   modelgate verify --sig BUNDLE --pubkey P DIR          (hash + compare)
# and prints wall, MB/s (10^6 bytes of the directory), the ratio to
# openssl's time (target for verify: >= 1.8x on 2 cores, as for one file),
# user+sys CPU, and peak RSS. The key is ECDSA P-256 (what model_signing
# uses) when `keygen --alg` has it, else Ed25519. The bundle's per-file
# SHA-256 digests are checked against openssl's before anything is printed.
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
[[ -x $mg ]] || { echo "build $mg first: cmake --build $1 --target modelgate" >&2; exit 2; }
bench_need_tools

bench_scratch 1200 detached
model="$data/model"

python3 - "$model" <<'PY'
import json, os, struct, sys
root = sys.argv[1]
os.makedirs(root)
shards, size = 4, 256 << 20
weight_map, tensor_bytes = {}, 0
for k in range(1, shards + 1):
    name = f"model-{k:05d}-of-{shards:05d}.safetensors"
    tensor = f"layers.{k}.weight"

    def header(n):
        h = json.dumps({tensor: {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}},
                       separators=(",", ":")).encode()
        return h + b" " * ((8 - len(h) % 8) % 8)

    # One U8 tensor filling the shard exactly: 8 + header + data = 256 MiB.
    n = size - 8 - len(header(size))
    h = header(n)
    assert 8 + len(h) + n == size
    with open(os.path.join(root, name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        left = n
        while left:
            chunk = os.urandom(min(left, 8 << 20))
            f.write(chunk)
            left -= len(chunk)
    weight_map[tensor] = name
    tensor_bytes += n
files = {
    "model.safetensors.index.json":
        json.dumps({"metadata": {"total_size": tensor_bytes}, "weight_map": weight_map}, indent=2) + "\n",
    "config.json": json.dumps({"architectures": ["BenchForCausalLM"], "hidden_size": 4096,
                               "num_hidden_layers": shards, "torch_dtype": "uint8"}, indent=2) + "\n",
    "generation_config.json": json.dumps({"bos_token_id": 1, "eos_token_id": 2}, indent=2) + "\n",
    "tokenizer_config.json": json.dumps({"model_max_length": 4096, "chat_template": "{{ messages }}"}, indent=2) + "\n",
    "tokenizer.json": json.dumps({"version": "1.0", "model": {"vocab": {f"tok{i}": i for i in range(20000)}}}) + "\n",
    "README.md": "# bench model\n",
}
for name, text in files.items():
    with open(os.path.join(root, name), "w", encoding="utf-8") as f:
        f.write(text)
PY
mapfile -t files < <(cd "$model" && LC_ALL=C ls | sort)
bytes=$(cd "$model" && cat -- "${files[@]}" | wc -c)  # also reads everything into the page cache
paths=()
for f in "${files[@]}"; do paths+=("$model/$f"); done

keys="$data/keys/k"
mkdir -p "$data/keys"
alg=ecdsa-p256
if ! "$mg" keygen --alg "$alg" --out "$keys" >/dev/null 2>"$data/keygen.err"; then
  alg=ed25519
  rm -f "$keys.key" "$keys.pub"
  "$mg" keygen --out "$keys" >/dev/null
fi
bundle="$data/model.sig"

# once OP CMD...: runs CMD once under /usr/bin/time and keeps OP's best
# (lowest wall) run in wall[OP] cpu[OP] rss[OP]; exits on failure.
declare -A wall cpu rss
once() {
  local op=$1
  shift
  local rc=0
  /usr/bin/time -f '%e %U %S %M' -o "$data/time" "$@" >"$data/out.$op" 2>"$data/err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "$op failed (exit $rc): $*" >&2
    tail -n 20 "$data/err" "$data/out.$op" >&2
    exit 2
  fi
  local w u s m
  read -r w u s m < <(tail -n 1 "$data/time")
  if [[ -z ${wall[$op]:-} ]] || awk -v a="$w" -v b="${wall[$op]}" 'BEGIN{exit !(a < b)}'; then
    wall[$op]=$w
    cpu[$op]=$(awk -v u="$u" -v s="$s" 'BEGIN{printf "%.2f", u + s}')
    rss[$op]=$(awk -v k="$m" 'BEGIN{printf "%.1f", k / 1024}')
  fi
}

row() {  # row OP LABEL
  printf '%-24s %7.2f %8.0f %9.2fx %7s %9.0f %9s\n' "$2" "${wall[$1]}" \
    "$(awk -v b="$bytes" -v t="${wall[$1]}" 'BEGIN{print b / 1e6 / t}')" \
    "$(awk -v o="${wall[openssl]}" -v t="${wall[$1]}" 'BEGIN{print o / t}')" "${cpu[$1]}" \
    "$(awk -v b="$bytes" -v c="${cpu[$1]}" 'BEGIN{print (c > 0 ? b / 1e6 / c : 0)}')" "${rss[$1]}"
}

echo "detached sign/verify of ${#files[@]} files, $((bytes / 1048576)) MiB ($bytes bytes); $(nproc) cores," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), sha_ni: $(grep -q sha_ni /proc/cpuinfo && echo yes || echo no);" \
     "$(openssl version | cut -d' ' -f1-2); key $alg; build $(grep -m1 '^CMAKE_BUILD_TYPE' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2 || echo '?'); best of $reps"
echo "MB = 10^6 bytes of the directory; best_s = best wall time of the process (start-up included);"
echo "vs_openssl = openssl's best time / this one's; cpu_s = user+sys CPU of that run (wall < cpu_s: it ran in parallel)."
echo "The three run in turn, REPS rounds, so a change in load hits each alike."
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (other work on these cores slows every row)"

once sign "$mg" sign --detached --quiet --key "$keys.key" -o "$bundle" "$model"
# The bundle must say what openssl says about every file.
openssl dgst -sha256 "${paths[@]}" >"$data/openssl.txt"
python3 - "$bundle" "$data/openssl.txt" "$model" <<'PY'
import base64, json, re, sys
bundle = json.load(open(sys.argv[1]))
statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
signed = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
root = sys.argv[3].rstrip("/") + "/"
ours = {}
for line in open(sys.argv[2]):
    m = re.fullmatch(r"SHA2?-?256\((.*)\)= ([0-9a-f]{64})\n", line)
    ours[m.group(1)[len(root):]] = m.group(2)
if signed != ours:
    sys.exit(f"bundle digests differ from openssl's: {sorted(set(signed.items()) ^ set(ours.items()))[:4]}")
PY
for ((r = 0; r < reps; ++r)); do
  once openssl openssl dgst -sha256 "${paths[@]}"
  once verify "$mg" verify --sig "$bundle" --pubkey "$keys.pub" "$model"
  once sign "$mg" sign --detached --quiet --key "$keys.key" -o "$bundle" "$model"
done
printf '%-24s %7s %8s %10s %7s %9s %9s\n' operation best_s MB/s vs_openssl cpu_s MB/cpu_s peak_MB
row openssl "openssl dgst -sha256"
row sign "sign --detached"
row verify "verify --sig"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v o="${wall[openssl]}" -v v="${wall[verify]}" -v s="${wall[sign]}" -v b="$bytes" 'BEGIN{
  printf "verify vs openssl dgst: %.2fx (target >= 1.8x on 2 cores); sign throughput %.0f MB/s\n", o / v, b / 1e6 / s}'
