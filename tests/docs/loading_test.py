#!/usr/bin/env python3
"""docs/loading.md's examples run as written (issue 12, point 5).

usage: loading_test.py MODELGATE LIBMODELGATE INCLUDE_DIR PYTHON_PKG_DIR JAR JNI_LIBRARY

Every block marked `<!-- test: NAME -->` in docs/loading.md is taken out of
the page verbatim and run against a model signed here with `modelgate keygen`
and `modelgate sign` (tensors embed.weight [8,4], head.weight [2,4],
head.bias [2], F32): the C block built with plain `cc`, the C++ block with
`c++` (a main() calling its function is appended), the numpy and torch blocks
with Debian's python3 (the torch block after a prelude defining MyModel),
the Java block inside a class (its imports moved to the top) with javac/java.
Each must load the signed model, and the blocks that report errors must name
MG-SIG-TENSOR-MISMATCH for a copy with one tensor byte changed. The offline
install the pages give (a venv, pip --no-build-isolation --no-index) is run too.
"""
import os
import re
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from mgtest import eq, main, st_bytes, test  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
if len(sys.argv) != 7:
    print(__doc__)
    sys.exit(2)
MG, LIB, INCLUDE, PYPKG, JAR, JNI = (os.path.abspath(a) for a in sys.argv[1:])
LIBDIR = os.path.dirname(LIB)
PYTHON = "/usr/bin/python3"

with open(os.path.join(ROOT, "docs", "loading.md"), encoding="utf-8") as f:
    PAGE = f.read()


def block(name):
    m = re.search(r"<!-- test: " + re.escape(name) + r" -->\n```\w*\n(.*?)\n```", PAGE, re.S)
    if not m:
        raise AssertionError(f"docs/loading.md has no block {name}")
    return m.group(1)


def tool(name):
    path = shutil.which(name)
    if path is None:
        raise AssertionError(f"{name} is not installed: run `bash ci/install-deps.sh`")
    return path


def run(argv, cwd, env=None):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run(argv, cwd=cwd, env=full, capture_output=True, text=True, timeout=120)


def ok(p, what):
    if p.returncode != 0:
        raise AssertionError(f"{what}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


VALUES = [float(i) / 4 for i in range(8 * 4 + 2 * 4 + 2)]


def model(d):
    """d/release.{key,pub}, d/model.safetensors (signed), d/tampered.safetensors
    (the signed file with head.bias's last byte changed)."""
    data = struct.pack("<42f", *VALUES)
    header = {"embed.weight": {"dtype": "F32", "shape": [8, 4], "data_offsets": [0, 128]},
              "head.weight": {"dtype": "F32", "shape": [2, 4], "data_offsets": [128, 160]},
              "head.bias": {"dtype": "F32", "shape": [2], "data_offsets": [160, 168]}}
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(st_bytes(header, data))
    ok(run([MG, "keygen", "--out", "release"], d), "keygen")
    ok(run([MG, "sign", "--key", "release.key", "model.safetensors"], d), "sign")
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        signed = bytearray(f.read())
    signed[-1] ^= 0x01
    with open(os.path.join(d, "tampered.safetensors"), "wb") as f:
        f.write(signed)


def use_tampered(d):
    os.replace(os.path.join(d, "tampered.safetensors"), os.path.join(d, "model.safetensors"))


@test
def c_example(d):
    model(d)
    with open(os.path.join(d, "load.c"), "w") as f:
        f.write(block("c") + "\n")
    ok(run([tool("cc"), "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", INCLUDE,
            "load.c", "-o", "load", "-L", LIBDIR, "-lmodelgate", "-Wl,-rpath," + LIBDIR], d), "cc")
    p = ok(run(["./load"], d), "signed model")
    eq(p.stdout.splitlines(), ["embed.weight F32 128 bytes", "head.bias F32 8 bytes",
                               "head.weight F32 32 bytes"], "tensors by name")
    use_tampered(d)
    p = run(["./load"], d)
    eq(p.returncode, 1, "tampered: exit")
    if not p.stderr.startswith("MG-SIG-TENSOR-MISMATCH: "):
        raise AssertionError(f"tampered: stderr {p.stderr!r}")


@test
def cpp_example(d):
    model(d)
    main_fn = ("\nint main() {\n  auto m = OpenVerified(\"model.safetensors\", \"release.pub\");\n"
               "  return mg_model_tensor_count(m.get()) == 3 ? 0 : 1;\n}\n")
    with open(os.path.join(d, "load.cc"), "w") as f:
        f.write(block("cpp") + "\n" + main_fn)
    ok(run([tool("c++"), "-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", INCLUDE, "load.cc",
            "-o", "load", "-L", LIBDIR, "-lmodelgate", "-Wl,-rpath," + LIBDIR], d), "c++")
    ok(run(["./load"], d), "signed model")
    use_tampered(d)
    p = run(["./load"], d)
    if p.returncode == 0 or "MG-SIG-TENSOR-MISMATCH" not in p.stderr:
        raise AssertionError(f"tampered: exit {p.returncode}, stderr {p.stderr!r}")


PY_ENV = {"PYTHONPATH": PYPKG, "MODELGATE_LIBRARY": LIB, "PYTHONDONTWRITEBYTECODE": "1"}


@test
def python_numpy_example(d):
    model(d)
    with open(os.path.join(d, "example.py"), "w") as f:
        f.write(block("python-numpy") + "\n"
                "import numpy as np\n"
                "want = np.arange(42, dtype='<f4') / 4\n"
                "assert (tensors['embed.weight'] == want[:32].reshape(8, 4)).all()\n"
                "assert (tensors['head.bias'] == want[40:]).all()\n"
                "assert rows.shape == (8, 4)\n"
                "print('checked')\n")
    p = ok(run([PYTHON, "example.py"], d, PY_ENV), "numpy example")
    lines = p.stdout.splitlines()
    if "checked" not in lines or not any(l.startswith("MG-SIG-TENSOR-MISMATCH ") for l in lines):
        raise AssertionError(f"numpy example printed {p.stdout!r}")


@test
def python_torch_example(d):
    model(d)
    prelude = ("import torch\n\n"
               "class MyModel(torch.nn.Module):\n"
               "    def __init__(self):\n"
               "        super().__init__()\n"
               "        self.embed = torch.nn.Embedding(8, 4)\n"
               "        self.head = torch.nn.Linear(4, 2)\n\n")
    check = ("\nwant = torch.arange(42, dtype=torch.float32) / 4\n"
             "assert torch.equal(model.embed.weight.data, want[:32].reshape(8, 4))\n"
             "assert torch.equal(model.head.bias.data, want[40:])\n"
             "print('checked')\n")
    with open(os.path.join(d, "example.py"), "w") as f:
        f.write(prelude + block("python-torch") + "\n" + check)
    p = ok(run([PYTHON, "example.py"], d, PY_ENV), "torch example")
    eq(p.stdout.splitlines()[-1:], ["checked"], "torch example output")
    use_tampered(d)
    p = run([PYTHON, "example.py"], d, PY_ENV)
    if p.returncode == 0 or "VerificationError" not in p.stderr \
            or "MG-SIG-TENSOR-MISMATCH" not in p.stderr:
        raise AssertionError(f"tampered: exit {p.returncode}, stderr {p.stderr[-800:]!r}")


@test
def java_example(d):
    model(d)
    body = block("java").splitlines()
    imports = [l for l in body if l.startswith("import ")]
    code = [l for l in body if not l.startswith("import ")]
    src = "\n".join(
        ["import java.nio.ByteBuffer;", "import java.nio.file.Files;", "import java.nio.file.Path;",
         "import java.security.KeyFactory;", "import java.security.PublicKey;",
         "import java.security.spec.X509EncodedKeySpec;", "import java.util.Base64;",
         "import java.util.List;", "import dev.modelgate.ModelGateException;"] + imports +
        ["public class DocExample {",
         "  static byte[] spkiDerOf(String path) throws Exception {",
         "    String pem = Files.readString(Path.of(path));",
         "    return Base64.getMimeDecoder().decode(",
         "        pem.replaceAll(\"-----[A-Z ]+-----\", \"\"));",
         "  }",
         "  public static void main(String[] args) throws Exception {"] +
        ["    " + l for l in code] + ["  }", "}", ""])
    with open(os.path.join(d, "DocExample.java"), "w") as f:
        f.write(src)
    ok(run([tool("javac"), "-Xlint:all", "-Werror", "-cp", JAR, "DocExample.java"], d), "javac")
    java = [tool("java"), "-Dmodelgate.jni.library=" + JNI, "-cp", JAR + ":.", "DocExample"]
    p = ok(run(java, d), "signed model")
    eq(p.stderr, "", "signed model: stderr")
    use_tampered(d)
    p = run(java, d)
    if not p.stderr.startswith("MG-SIG-TENSOR-MISMATCH: "):
        raise AssertionError(f"tampered: exit {p.returncode}, stderr {p.stderr!r}")


@test
def venv_install(d):
    """The README's and docs/loading.md's offline install: a venv that sees
    Debian's numpy, pip --no-build-isolation --no-index of the package (a copy,
    so pip's in-tree build leaves the source tree alone)."""
    for page in ("README.md", os.path.join("docs", "loading.md")):
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        for piece in ("python3 -m venv --system-site-packages ~/mg",
                      "/bin/pip install --no-build-isolation --no-index ./bindings/python"):
            if piece not in text:
                raise AssertionError(f"{page} no longer says {piece!r}")
    model(d)
    pkg = os.path.join(d, "src", "bindings", "python")
    shutil.copytree(PYPKG, pkg, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                              "__pycache__"))
    env_dir = os.path.join(d, "mg")
    ok(run([PYTHON, "-m", "venv", "--system-site-packages", env_dir], d), "venv")
    ok(run([os.path.join(env_dir, "bin", "pip"), "install", "-q", "--no-build-isolation",
            "--no-index", "./bindings/python"], os.path.join(d, "src")), "pip install")
    code = ("import modelgate, modelgate.numpy as mn\n"
            "assert modelgate.__file__.startswith(%r), modelgate.__file__\n"
            "t = mn.load_file('model.safetensors', keys=['release.pub'])\n"
            "print(sorted(t), float(t['head.bias'][1]))\n") % env_dir
    p = ok(run([os.path.join(env_dir, "bin", "python"), "-c", code], d,
               {"MODELGATE_LIBRARY": LIB, "PYTHONDONTWRITEBYTECODE": "1"}), "venv import")
    eq(p.stdout.strip(), "['embed.weight', 'head.bias', 'head.weight'] 10.25", "venv load")


sys.exit(main("mg-docs-loading-"))
