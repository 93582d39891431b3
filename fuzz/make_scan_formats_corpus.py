#!/usr/bin/python3
"""Seeds for fuzz_scan of the issue 14 formats: the first byte picks the
name fuzz_scan.cc gives the memfd (its kNames index), the rest is the file.

    /usr/bin/python3 fuzz/make_scan_formats_corpus.py fuzz/corpus/fuzz_scan
Needs Debian's python3-onnx, python3-h5py, numpy and the zstd, lz4 and 7zz
tools (ci/install-deps.sh).
"""
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib

OUT = sys.argv[1]
NAMES = {"gguf": 6, "json": 8, "jinja": 9, "py": 10, "onnx": 11, "h5": 12, "keras": 13, "7z": 14,
         "joblib": 5, "pkl": 3}


def seed(name, kind, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([NAMES[kind]]) + data)


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(template):
    kvs = [("general.architecture", 8, gstr("llama")), ("general.alignment", 4, struct.pack("<I", 32)),
           ("tokenizer.chat_template", 8, gstr(template))]
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs))
    for k, t, v in kvs:
        head += gstr(k) + struct.pack("<I", t) + v
    head += gstr("w") + struct.pack("<I", 2) + struct.pack("<QQ", 4, 2) + struct.pack("<I", 0) + \
        struct.pack("<Q", 0)
    head += b"\0" * ((32 - len(head) % 32) % 32)
    return head + b"\0" * 32


EVIL = b"cos\nsystem\n(S'echo pwned'\ntR."
BENIGN = pickle.dumps({"lr": 0.001}, protocol=4)
seed("formats-gguf", "gguf", gguf("{% for m in messages %}{{ m['content'] }}{% endfor %}"))
seed("formats-gguf-template", "gguf", gguf("{{ cycler.__init__.__globals__.os.popen('id') }}"))
seed("formats-config.json", "json", json.dumps({"model_type": "llama", "auto_map": {
    "AutoModel": "modeling_x.X"}, "chat_template": "{{ bos_token }}{{ messages[0].content }}"}).encode())
seed("formats-chat.jinja", "jinja", b"{% set ns = namespace(found=false) %}{% for m in messages %}"
     b"{% if m.role == 'system' %}{% set ns.found = true %}{% endif %}{{ m.content | trim }}{% endfor %}")
seed("formats-modeling.py", "py", b"import torch\n\nclass M(torch.nn.Module):\n    pass\n")
seed("formats-zstd.joblib", "joblib", subprocess.run(["zstd", "-q", "-c"], input=EVIL,
                                                     capture_output=True, check=True).stdout)
seed("formats-lz4.joblib", "joblib", subprocess.run(["lz4", "-q", "-c"], input=BENIGN,
                                                    capture_output=True, check=True).stdout)
seed("formats-zf.pkl", "pkl", b"ZF" + hex(len(BENIGN)).encode().ljust(19) + zlib.compress(BENIGN))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper, numpy_helper, TensorProto  # noqa: E402
w = numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), name="w")
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [w])
seed("formats-model.onnx", "onnx", helper.make_model(g).SerializeToString())

import h5py  # noqa: E402
buf = io.BytesIO()
with h5py.File(buf, "w") as f:
    f.attrs["model_config"] = json.dumps({"class_name": "Sequential", "config": {"layers": [
        {"class_name": "Lambda", "config": {"function": ["4wEAAAAA", None, None]}}]}})
seed("formats-lambda.h5", "h5", buf.getvalue())

buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("metadata.json", json.dumps({"keras_version": "3.3.3"}))
    z.writestr("config.json", json.dumps({"module": "keras", "class_name": "Sequential",
                                          "config": {"layers": []}}))
seed("formats-model.keras", "keras", buf.getvalue())

with tempfile.TemporaryDirectory() as d:
    with open(f"{d}/a.pkl", "wb") as f:
        f.write(EVIL)
    with open(f"{d}/config.json", "w") as f:
        f.write('{"a": 1, "a": 2}')
    subprocess.run(["7zz", "a", "-bso0", "-bsp0", f"{d}/x.7z", f"{d}/a.pkl", f"{d}/config.json"],
                   check=True)
    with open(f"{d}/x.7z", "rb") as f:
        seed("formats-archive.7z", "7z", f.read())
