"""Shared helpers for the integration tests (python3 standard library,
python3-yaml and python3-jsonschema from Debian).

Each test script registers functions with @test; main() runs each in a fresh
temp directory, prints "ok"/"FAIL" lines and "N passed, M failed", and exits
non-zero on any failure. Nothing is skipped: a missing tool fails the test
with a message naming ci/install-deps.sh.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, sarif_validators, st_bytes, test, validate_sarif as _validate  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCHEMA_DIR = os.path.join(ROOT, "tests", "sarif", "schemas")


def die(msg):
    print(f"FAIL {msg}")
    sys.exit(1)


def need_tool(name):
    path = shutil.which(name)
    if path is None:
        die(f"'{name}' is not installed: run `bash ci/install-deps.sh` (Debian 12 package {name})")
    return path


def modelgate_from_argv():
    if len(sys.argv) < 2:
        die(f"usage: {sys.argv[0]} PATH/TO/modelgate")
    mg = os.path.abspath(sys.argv[1])
    if not os.access(mg, os.X_OK):
        die(f"{mg} is not an executable modelgate")
    return mg


GOOD = st_bytes(
    {"__metadata__": {"format": "pt"},
     "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
     "b": {"dtype": "F16", "shape": [2], "data_offsets": [16, 20]}},
    bytes(20))
# pickle.dumps(obj, protocol=4) of an object whose __reduce__ is (os.system, ("true",)).
PICKLE_OS_SYSTEM = (b"\x80\x04\x95\x1f\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system"
                    b"\x94\x93\x94\x8c\x04true\x94\x85\x94R\x94.")
# A valid file with a pickle hidden after its data: MG-ST-TRAILING-BYTES (critical).
HOSTILE = GOOD + PICKLE_OS_SYSTEM
# A pickle whose only import is allowlisted (collections.OrderedDict): a
# medium MG-PK-PICKLE-FORMAT finding, so it passes at the default bar.
PICKLE_MEDIUM = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01."


def hf_model(d, name="llm-7b"):
    """A Hugging Face-style model directory d/name: config, generation config,
    tokenizer files, a chat template, README, .gitattributes, two safetensors
    shards and their index (consistent: the set checks pass). Returns its path."""
    root = os.path.join(d, name)
    w = st_bytes({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16))
    b = st_bytes({"b": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, bytes(4))
    files = {
        ".gitattributes": "*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
        "README.md": "---\nlicense: apache-2.0\n---\n# llm-7b\n",
        "config.json": '{"architectures": ["LlamaForCausalLM"], "hidden_size": 2, "torch_dtype": "float32"}\n',
        "generation_config.json": '{"bos_token_id": 1, "eos_token_id": 2}\n',
        "tokenizer.json": '{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}\n',
        "tokenizer_config.json": '{"bos_token": "<s>", "eos_token": "</s>"}\n',
        "special_tokens_map.json": '{"bos_token": "<s>", "eos_token": "</s>"}\n',
        "chat_template.jinja": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}",
        "model-00001-of-00002.safetensors": w,
        "model-00002-of-00002.safetensors": b,
        "model.safetensors.index.json": json.dumps(
            {"metadata": {"total_size": 20},
             "weight_map": {"b": "model-00002-of-00002.safetensors",
                            "w": "model-00001-of-00002.safetensors"}}, indent=2) + "\n",
    }
    for n, data in files.items():
        write(root, n, data)
    return root


def write(d, name, data, mode=0o644):
    path = os.path.join(d, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    os.chmod(path, mode)
    return path


def run(cmd, env=None, cwd=None, timeout=60, stdin=None):
    p = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env, cwd=cwd,
                       stdin=subprocess.DEVNULL if stdin is None else stdin)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def keygen_and_sign(mg, d, src_bytes=GOOD, name="model.safetensors", out_dir=None):
    """Makes d/keys/release.{key,pub} and a signed copy of src_bytes at
    out_dir/name. Returns (pub path, signed path)."""
    keys = os.path.join(d, "keys")
    os.makedirs(keys, exist_ok=True)
    prefix = os.path.join(keys, "release")
    if not os.path.exists(prefix + ".key"):
        code, out, err = run([mg, "keygen", "--out", prefix])
        eq(code, 0, f"keygen: {err}")
    unsigned = write(d, "unsigned-src.safetensors", src_bytes)
    out_dir = out_dir or os.path.join(d, "signed")
    os.makedirs(out_dir, exist_ok=True)
    signed = os.path.join(out_dir, name)
    code, out, err = run([mg, "sign", "--key", prefix + ".key", "-o", signed, unsigned])
    eq(code, 0, f"sign: {err}")
    os.unlink(unsigned)
    return prefix + ".pub", signed


def signed_policy(pub_path, fail_on="high"):
    """A policy: only safetensors signed by the key at pub_path."""
    return (
        "apiVersion: modelgate/v1\n"
        "kind: Policy\n"
        f"failOn: {fail_on}\n"
        "formats: {allow: [safetensors]}\n"
        "signatures:\n"
        "  required: true\n"
        "  threshold: 1\n"
        "  keys:\n"
        "    - name: release\n"
        f"      file: {pub_path}\n")


_SARIF_VALIDATORS = []


def validate_sarif(doc):
    """Validates a SARIF document against both 2.1.0 schemas."""
    if not _SARIF_VALIDATORS:
        _SARIF_VALIDATORS.extend(sarif_validators(SCHEMA_DIR))
    _validate(doc, _SARIF_VALIDATORS)
    eq(doc.get("version"), "2.1.0", "SARIF version")


def doc_blocks(relpath):
    """The fenced code blocks of a docs page that are marked for tests by a
    `<!-- test: NAME -->` line right above them: {NAME: text}."""
    import re
    with open(os.path.join(ROOT, relpath)) as f:
        text = f.read()
    blocks = {}
    for m in re.finditer(r"<!-- test: ([\w.-]+) -->\n```[\w-]*\n(.*?)\n```", text, re.S):
        if m.group(1) in blocks:
            raise AssertionError(f"{relpath}: two blocks named {m.group(1)}")
        blocks[m.group(1)] = m.group(2) + "\n"
    return blocks
