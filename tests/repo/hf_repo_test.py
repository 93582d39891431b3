"""Issue 14: a Hugging Face-style repository judged file by file. Every
benign file is made by the real writer Debian ships (json.dump, onnx.save,
h5py, the zstd/lz4 tools, joblib's formats as numpy_pickle_compat writes
them) or from the format's spec; every hostile file is one class of attack.
The repository is scanned once, as a registry's pre-upload gate would scan
it (`modelgate scan -f json DIR`), and each file's verdict and finding ids
are checked.

    hf_repo_test.py MODELGATE FIXTURE_DIR
FIXTURE_DIR holds what the format fixture scripts wrote (may be empty of a
format; then its cases fail, never skip).
"""
import json
import os
import pickle
import struct
import subprocess
import sys
import zipfile
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from mgtest import test, eq, main, write  # noqa: E402

MG = sys.argv[1]

# (relative path, bytes, expected verdict, ids that must be present)
CASES = []


def case(path, data, verdict, *ids):
    CASES.append((path, data if isinstance(data, bytes) else data.encode(), verdict, set(ids)))


def jdump(obj):
    return json.dumps(obj, indent=2)


# --- configs and code ---
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "num_attention_heads": 4, "torch_dtype": "float16", "vocab_size": 32000,
          "_name_or_path": "meta-llama/Llama-2-7b-hf"}
case("benign/config.json", jdump(CONFIG), "pass")
case("benign/generation_config.json", jdump({"bos_token_id": 1, "eos_token_id": 2,
                                            "max_length": 4096, "temperature": 0.6}), "pass")
case("benign/special_tokens_map.json", jdump({"bos_token": "<s>", "eos_token": "</s>"}), "pass")
case("remote/config.json", jdump(dict(CONFIG, auto_map={
    "AutoConfig": "configuration_evil.EvilConfig",
    "AutoModelForCausalLM": "modeling_evil.EvilModel"})), "reject", "MG-CODE-AUTO-MAP")
case("remote/tokenizer_config.json", jdump({"auto_map": {
    "AutoTokenizer": ["someone/else--tokenization_x.XTokenizer", None]}}), "reject",
    "MG-CODE-AUTO-MAP")
case("remote/modeling_evil.py", "import os\n\nclass EvilModel:\n    pass\n", "reject",
     "MG-CODE-PYTHON")
case("remote/pipeline_config.json", jdump({"custom_pipelines": {
    "evil-task": {"impl": "evil_pipeline.EvilPipeline", "pt": ["AutoModel"]}}}), "reject",
    "MG-CODE-CUSTOM-PIPELINE")
case("json/duplicate_key.json", '{"model_type": "llama", "hidden_size": 64, "model_type": "evil"}',
     "reject", "MG-CFG-DUPLICATE-KEY")
case("json/escaped_duplicate.json", '{"a": 1, "\\u0061": 2}', "reject", "MG-CFG-DUPLICATE-KEY")
case("json/syntax.json", '{"model_type": "llama",}', "reject", "MG-CFG-JSON-SYNTAX")
case("json/trailing.json", '{"model_type": "llama"} {"x": 1}', "reject", "MG-CFG-JSON-SYNTAX")
case("json/invalid_utf8.json", b'{"model_type": "ll\xffama"}', "reject", "MG-CFG-JSON-SYNTAX")
case("json/deep.json", "[" * 300 + "]" * 300, "reject", "MG-CFG-LIMIT")
case("json/template_type.json", jdump({"chat_template": 42}), "reject", "MG-CFG-TEMPLATE-TYPE")


# --- chat templates ---
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
          "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
          " + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
          "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
           "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate') }}"
           "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
           "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}")
RCE = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
case("benign/tokenizer_config.json", jdump({"bos_token": "<s>", "chat_template": LLAMA3}), "pass")
case("benign/chat_template.jinja", MISTRAL, "pass")
case("template/tokenizer_config.json", jdump({"chat_template": RCE}), "reject", "MG-TMPL-UNSAFE-ATTR")
case("template/named/tokenizer_config.json", jdump({"chat_template": [
    {"name": "default", "template": MISTRAL},
    {"name": "tool_use", "template": "{{ ''.__class__.__mro__[1].__subclasses__() }}"}]}),
    "reject", "MG-TMPL-UNSAFE-ATTR")
case("template/chat_template.jinja", "{% include '/etc/passwd' %}", "reject")
case("template/broken.jinja", "{% for m in messages %}{{ m", "reject")


# --- GGUF (written from the spec: ggml docs/gguf.md) ---
def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(kvs, tensors, data_pad=0, version=3):
    """kvs: [(key, type, packed value)]; tensors: [(name, dims, ggml type, offset, nbytes)]."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += gstr(k) + struct.pack("<I", t) + v
    for name, dims, t, off, _ in tensors:
        head += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", x) for x in dims)
        head += struct.pack("<I", t) + struct.pack("<Q", off)
    head += b"\0" * ((32 - len(head) % 32) % 32)
    end = max([off + n for _, _, _, off, n in tensors] or [0])
    data = bytearray(end)
    return head + bytes(data) + b"\0" * data_pad


KV = [("general.architecture", 8, gstr("llama")), ("general.alignment", 4, struct.pack("<I", 32))]
T2 = [("a.weight", [8, 4], 0, 0, 128), ("b.weight", [32], 1, 128, 64)]  # F32, F16
case("gguf/model.gguf", gguf(KV + [("tokenizer.chat_template", 8, gstr(MISTRAL))], T2), "pass")
case("gguf/template.gguf", gguf(KV + [("tokenizer.chat_template", 8, gstr(RCE))], T2), "reject",
     "MG-TMPL-UNSAFE-ATTR")
case("gguf/overlap.gguf", gguf(KV, [("a", [8, 4], 0, 0, 128), ("b", [32], 0, 64, 128)]), "reject")
case("gguf/past_end.gguf", gguf(KV, T2)[:-32], "reject")
case("gguf/hidden.gguf", gguf(KV, T2, data_pad=4096), "reject")
case("gguf/dup_key.gguf", gguf(KV + [("general.architecture", 8, gstr("evil"))], T2), "reject")
case("gguf/not_gguf.gguf", b"GGML" + b"\0" * 60, "reject")


# --- compressed pickles (joblib's compressors: the zstd and lz4 tools
#     write the same frames) and joblib's old ZF container ---
EVIL = b"cos\nsystem\n(S'echo pwned'\ntR."
BENIGN = pickle.dumps({"lr": 0.001, "steps": [1, 2, 3]}, protocol=4)


def tool(argv, data):
    return subprocess.run(argv, input=data, capture_output=True, check=True).stdout


def zf(data):  # numpy_pickle_compat.write_zfile: "ZF" + hex length padded to 19 + zlib
    return b"ZF" + hex(len(data)).encode().ljust(19) + zlib.compress(data, 3)


case("joblib/benign-zstd.joblib", tool(["zstd", "-q", "-c"], BENIGN), "pass")
case("joblib/evil-zstd.joblib", tool(["zstd", "-q", "-c"], EVIL), "reject", "MG-PK-CRITICAL-IMPORT")
case("joblib/benign-lz4.joblib", tool(["lz4", "-q", "-c"], BENIGN), "pass")
case("joblib/evil-lz4.joblib", tool(["lz4", "-q", "-c"], EVIL), "reject", "MG-PK-CRITICAL-IMPORT")
case("joblib/benign-zf.pkl", zf(BENIGN), "pass")
case("joblib/evil-zf.pkl", zf(EVIL), "reject", "MG-PK-CRITICAL-IMPORT")
case("joblib/truncated-zstd.joblib", tool(["zstd", "-q", "-c"], BENIGN * 50)[:-7], "reject")


def build_tool_made(d):
    """Files the real writers make (onnx, h5py, 7z): written into d."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    w = numpy_helper.from_array(np.ones((4, 4), dtype=np.float32), name="w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])

    def model(nodes, inits, domains=("",)):
        g = helper.make_graph(nodes, "g", [x], [y], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid(dm, 17 if dm == "" else 1)
                                                   for dm in domains])
    os.makedirs(f"{d}/onnx", exist_ok=True)
    onnx.save(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [w]), f"{d}/onnx/model.onnx")
    ext = numpy_helper.from_array(np.ones((4, 4), dtype=np.float32), name="w")
    ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../../../../etc/passwd"), ("offset", "0"), ("length", "64")):
        e = ext.external_data.add()
        e.key, e.value = k, v
    ext.ClearField("raw_data")
    onnx.save(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [ext]), f"{d}/onnx/traversal.onnx")
    onnx.save(model([helper.make_node("Evil", ["x", "w"], ["y"], domain="com.evil")], [w],
                    ("", "com.evil")), f"{d}/onnx/custom_op.onnx")
    with open(f"{d}/onnx/garbage.onnx", "wb") as f:
        f.write(b"\xff" * 64)

    import h5py
    os.makedirs(f"{d}/keras", exist_ok=True)
    dense = {"class_name": "Dense", "config": {"name": "d", "units": 4}}
    lam = {"class_name": "Lambda", "config": {"name": "l", "function": [
        "4wEAAAAAAAAAAAAAAAEAAAACAAAAQwAAAHMEAAAAfABTACkBTqkAKQHaAXhyAQAAAHIBAAAA+gE8bGFtYmRhPg==",
        None, None], "function_type": "lambda"}}

    def h5(path, layers):
        with h5py.File(path, "w") as f:
            f.attrs["model_config"] = json.dumps({"class_name": "Sequential",
                                                  "config": {"name": "s", "layers": layers}})
            f.attrs["keras_version"] = "2.15.0"
            f.create_dataset("model_weights/d/kernel", data=np.ones((4, 4), dtype=np.float32))
    h5(f"{d}/keras/model.h5", [dense])
    h5(f"{d}/keras/lambda.h5", [dense, lam])

    def keras_zip(path, layers):
        cfg = {"module": "keras", "class_name": "Sequential", "config": {"name": "s", "layers": [
            dict(l, module="keras.layers") for l in layers]}, "registered_name": None}
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("metadata.json", json.dumps({"keras_version": "3.3.3"}))
            z.writestr("config.json", json.dumps(cfg))
            z.writestr("model.weights.h5", b"")
    keras_zip(f"{d}/keras/model.keras", [dense])
    keras_zip(f"{d}/keras/lambda.keras", [dense, lam])

    os.makedirs(f"{d}/7z", exist_ok=True)
    for name, payload in (("benign", BENIGN), ("evil", EVIL)):
        with open(f"{d}/7z/{name}.pkl", "wb") as f:
            f.write(payload)
        subprocess.run(["7zz", "a", "-bso0", "-bsp0", f"{d}/7z/{name}.7z", f"{d}/7z/{name}.pkl"],
                       check=True)
        os.remove(f"{d}/7z/{name}.pkl")
    with open(f"{d}/7z/{name}.7z", "rb") as f:
        whole = f.read()
    with open(f"{d}/7z/truncated.7z", "wb") as f:
        f.write(whole[: len(whole) // 2])


TOOL_MADE = [
    ("onnx/model.onnx", "pass", set()),
    ("onnx/traversal.onnx", "reject", {"MG-ONNX-EXTERNAL-PATH"}),
    ("onnx/custom_op.onnx", "reject", {"MG-ONNX-CUSTOM-OP"}),
    ("onnx/garbage.onnx", "reject", set()),
    ("keras/model.h5", "pass", set()),
    ("keras/lambda.h5", "reject", {"MG-KERAS-LAMBDA"}),
    ("keras/model.keras", "pass", set()),
    ("keras/lambda.keras", "reject", {"MG-KERAS-LAMBDA"}),
    ("7z/benign.7z", "pass", set()),
    ("7z/evil.7z", "reject", {"MG-PK-CRITICAL-IMPORT"}),
    ("7z/truncated.7z", "reject", set()),
]


def build(d):
    for path, data, _, _ in CASES:
        write(d, path, data)
    build_tool_made(d)


def scan_dir(d):
    r = subprocess.run([MG, "scan", "-f", "json", d], capture_output=True, timeout=300)
    eq(r.returncode in (0, 1), True, "exit code " + str(r.returncode) + r.stderr.decode())
    doc = json.loads(r.stdout)
    return r.returncode, {os.path.relpath(f["path"], d): f for f in doc["files"]}


@test
def every_file_judged_as_expected(d):
    build(d)
    code, files = scan_dir(d)
    bad = []
    for path, _, verdict, ids in [(p, None, v, i) for p, _, v, i in CASES] + \
            [(p, None, v, i) for p, v, i in TOOL_MADE]:
        f = files.get(path)
        if f is None:
            bad.append(f"{path}: not in the report")
            continue
        got = {x["id"] for x in f["findings"]}
        if f["verdict"] != verdict or not ids <= got:
            bad.append(f"{path}: verdict {f['verdict']} (want {verdict}), ids {sorted(got)} "
                       f"(want {sorted(ids)})")
    eq(bad, [], "files judged otherwise")
    eq(code, 1, "a repository with hostile files is rejected")


@test
def findings_point_at_the_key(d):
    p = write(d, "config.json", '{\n  "model_type": "llama",\n  "auto_map": {"AutoModel": "m.M"}\n}\n')
    r = subprocess.run([MG, "scan", "-f", "json", p], capture_output=True)
    f = json.loads(r.stdout)["files"][0]
    eq(f["format"], "json", "format")
    hit = [x for x in f["findings"] if x["id"] == "MG-CODE-AUTO-MAP"][0]
    eq((hit["offset"], hit["line"], hit["column"]), (29, 3, 3), "offset, line, column of auto_map")


@test
def benign_files_have_nothing_above_low(d):
    build(d)
    _, files = scan_dir(d)
    for path, verdict in [(p, v) for p, _, v, _ in CASES] + [(p, v) for p, v, _ in TOOL_MADE]:
        if verdict != "pass":
            continue
        # A pickle is a pickle (medium, passes); nothing else above low.
        worst = [x["id"] for x in files[path]["findings"]
                 if x["severity"] not in ("info", "low") and x["id"] != "MG-PK-PICKLE-FORMAT"]
        eq(worst, [], path)


sys.exit(main())
