#!/usr/bin/env bash
# bench/formats.sh BUILD_DIR: scan cost per format (issue 14) on real-sized
# files, next to `cat FILE >/dev/null` of the same bytes in the same run
# (page cache warm for both; best of 3 each, one process per run):
#   gguf      1 GiB GGUF v3 (16 F32 tensors of 64 MiB): a header read, not a data read
#   onnx      ~256 MiB ONNX model (onnx.helper + onnx.save, raw initializers)
#   h5        ~256 MiB Keras-style HDF5 (h5py: model_config + weight datasets)
#   zstd/lz4  joblib-style pickle of a ~64 MiB numpy array, compressed by
#             the zstd / lz4 tools (what joblib's compressors write)
#   json      a 32 MiB tokenizer.json-like config
# Each row: file size, scan time, cat time, scan/cat, and where a reference
# reader runs here (zstd -dc, lz4 -dc, python3 json.load) its time and
# scan/ref. For the GGUF the scan must not depend on the data size: scan/cat
# far below 1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
build=$(cd "$1" && pwd)
mg="$build/cli/modelgate"
[[ -x $mg ]] || { echo "build $mg first" >&2; exit 2; }
if ! command -v zstd >/dev/null || ! command -v lz4 >/dev/null; then
  echo "needs the zstd and lz4 tools (apt-get install zstd lz4)" >&2
  exit 2
fi
bench_scratch 3072 formats

/usr/bin/python3 - "$data" <<'PY'
import json, os, pickle, struct, sys
import numpy as np
out = sys.argv[1]

def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b

# GGUF v3, little-endian: 16 tensors of 4096x4096 F32 (64 MiB each).
n, dim = 16, 4096
kv = [("general.architecture", 8, gstr("llama")), ("general.alignment", 4, struct.pack("<I", 32)),
      ("tokenizer.chat_template", 8, gstr("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"))]
head = b"GGUF" + struct.pack("<IQQ", 3, n, len(kv))
for k, t, v in kv:
    head += gstr(k) + struct.pack("<I", t) + v
size = dim * dim * 4
for i in range(n):
    head += gstr(f"blk.{i}.weight") + struct.pack("<I", 2) + struct.pack("<QQ", dim, dim) + \
            struct.pack("<I", 0) + struct.pack("<Q", i * size)
head += b"\0" * ((32 - len(head) % 32) % 32)
chunk = np.random.default_rng(0).standard_normal(size // 4, dtype=np.float32).tobytes()
with open(f"{out}/model.gguf", "wb") as f:
    f.write(head)
    for i in range(n):
        f.write(chunk)

# ONNX: a MatMul chain over 16 initializers of 16 MiB.
import onnx
from onnx import helper, TensorProto, numpy_helper
inits, nodes, prev = [], [], "x"
for i in range(16):
    w = np.random.default_rng(i).standard_normal((2048, 2048), dtype=np.float32)
    inits.append(numpy_helper.from_array(w, name=f"w{i}"))
    nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"y{i}"]))
    prev = f"y{i}"
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
                      [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 2048])], inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), f"{out}/model.onnx")

# HDF5 as Keras 2 wrote .h5 models.
import h5py
cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "Dense", "config": {"name": f"d{i}", "units": 2048}} for i in range(16)]}}
with h5py.File(f"{out}/model.h5", "w") as f:
    f.attrs["model_config"] = json.dumps(cfg)
    f.attrs["keras_version"] = "2.15.0"
    f.attrs["backend"] = "tensorflow"
    grp = f.create_group("model_weights")
    for i in range(16):
        grp.create_dataset(f"d{i}", data=np.random.default_rng(i).standard_normal((2048, 2048), dtype=np.float32))

# A pickled array (joblib wraps the same pickle in its compressors).
with open(f"{out}/array.pkl", "wb") as f:
    pickle.dump(np.random.default_rng(1).standard_normal(1 << 24, dtype=np.float32), f, protocol=4)

# tokenizer.json-like: a big vocabulary.
vocab = {f"tok{i:07d}": i for i in range(1_100_000)}
with open(f"{out}/tokenizer.json", "w") as f:
    json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}}, f)
PY
zstd -q -3 "$data/array.pkl" -o "$data/array.pkl.joblib.zst" 2>/dev/null
mv "$data/array.pkl.joblib.zst" "$data/array-zstd.joblib"
lz4 -q "$data/array.pkl" "$data/array-lz4.joblib"
rm "$data/array.pkl"

best() {  # best wall seconds of 3 runs of "$@"
  local b="" t
  TIMEFORMAT=%R
  for _ in 1 2 3; do
    t=$( { time "$@" >/dev/null 2>&1 || true; } 2>&1 )
    if [[ -z $b ]] || awk "BEGIN{exit !($t < $b)}"; then b=$t; fi
  done
  echo "$b"
}
# ref: what the format's own reader costs on the same file, where one runs
# here: the zstd / lz4 tools decompressing to /dev/null, python3's json.load.
has_ref() { case $1 in array-zstd.joblib|array-lz4.joblib|tokenizer.json) return 0 ;; esac; return 1; }
ref_run() {
  case $1 in
    array-zstd.joblib) zstd -dc "$2" >/dev/null ;;
    array-lz4.joblib) lz4 -dc "$2" >/dev/null ;;
    tokenizer.json) /usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$2" ;;
  esac
}
printf '%-20s %8s %8s %8s %8s %9s %8s  %s\n' file MB scan_s cat_s scan/cat ref_s scan/ref verdict
for f in model.gguf model.onnx model.h5 array-zstd.joblib array-lz4.joblib tokenizer.json; do
  p="$data/$f"
  cat "$p" >/dev/null
  mb=$(awk -v b="$(stat -c %s "$p")" 'BEGIN{printf "%.1f", b/1e6}')
  s=$(best "$mg" scan -q "$p")
  c=$(best cat "$p")
  r="-" rr="-"
  if has_ref "$f"; then
    r=$(best ref_run "$f" "$p")
    rr=$(awk -v s="$s" -v r="$r" 'BEGIN{printf "%.2f", (r>0? s/r : 0)}')
  fi
  v=$("$mg" scan -q "$p" >/dev/null 2>&1 && echo pass || echo "reject/err $?")
  printf '%-20s %8s %8s %8s %8.2f %9s %8s  %s\n' "$f" "$mb" "$s" "$c" \
    "$(awk -v s="$s" -v c="$c" 'BEGIN{print (c>0? s/c : 0)}')" "$r" "$rr" "$v"
done
