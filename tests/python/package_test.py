"""The package as users install it, and its ctypes mirror of modelgate.h:
`pip install --no-build-isolation --target` offline, then import from there;
`cmake --install` of the package and library components, then import with
no MODELGATE_LIBRARY (the recorded _libpath.py finds the .so); struct
layouts against a C compiler's offsetof; every function, enum value and
constant of the header declared, and nothing else.

    package_test.py MODELGATE CXX BUILD_DIR
"""
import ctypes
import os
import re
import shutil
import subprocess
import sys

from binding_util import keygen, sign
from mgtest import eq, main, run_text, test, write
import st_reference

import numpy as np

import modelgate
from modelgate import _capi

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PACKAGE = os.path.join(ROOT, "bindings", "python")
HEADER = os.path.join(ROOT, "api", "include", "modelgate.h")
MG, CXX, BUILD = (os.path.abspath(sys.argv[1]), sys.argv[2], os.path.abspath(sys.argv[3]))
PYTHON = "/usr/bin/python3"

PROBE = """
import sys, modelgate, modelgate.numpy
from modelgate import _capi
arrays = modelgate.numpy.load_file(sys.argv[1], keys=[sys.argv[2]])
print(modelgate.__file__)
print(_capi.lib._name)
print(modelgate.library_version(), sorted(arrays), arrays["x"].tolist())
"""


def signed_file(d):
    key = keygen(d)
    path = st_reference.write(os.path.join(d, "m.safetensors"), {"x": np.arange(3, dtype="<f4")})
    sign(key, path)
    return key + ".pub", path


def probe(d, site, env_library):
    """probe imports modelgate from `site` only (not the source tree) in a
    fresh interpreter and loads a signed file; returns its lines."""
    pub, path = signed_file(d)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MODELGATE_LIBRARY")}
    env["PYTHONPATH"] = site
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if env_library:
        env["MODELGATE_LIBRARY"] = os.environ["MODELGATE_LIBRARY"]
    code, out, err = run_text([PYTHON, "-c", PROBE, path, pub], env=env, cwd=d)
    eq(code, 0, "probe\n" + out + err)
    return out.splitlines()


@test
def pip_installs_it_offline_into_a_target_and_it_imports_from_there(d):
    # A copy: setuptools writes build/ and *.egg-info next to pyproject.toml.
    src = os.path.join(d, "src")
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                "*.egg-info"))
    site = os.path.join(d, "site")
    code, out, err = run_text([PYTHON, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                               "--no-index", "--no-cache-dir", "--target", site, src], timeout=300)
    eq(code, 0, "pip install\n" + out + err)
    eq(sorted(set(os.listdir(os.path.join(site, "modelgate"))) - {"__pycache__"}),
       ["__init__.py", "_capi.py", "numpy.py", "torch.py"], "the package's files")
    lines = probe(d, site, env_library=True)
    eq(lines[0], os.path.join(site, "modelgate", "__init__.py"), "imported from the target")
    eq(lines[2], "0.1.0 ['x'] [0.0, 1.0, 2.0]", "loads a signed file")


@test
def cmake_install_records_where_the_library_went(d):
    prefix = os.path.join(d, "prefix")
    for component in ("libmodelgate", "python3-modelgate"):
        code, out, err = run_text(["cmake", "--install", BUILD, "--prefix", prefix,
                                   "--component", component], timeout=120)
        eq(code, 0, f"cmake --install --component {component}\n{out}{err}")
    libdirs = [p for p in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu"))
               if os.path.isfile(os.path.join(prefix, p, "libmodelgate.so.0"))]
    eq(len(libdirs), 1, f"one installed libmodelgate.so.0 under {prefix}")
    # Where Debian's python3 looks under /usr/local and /usr: the package is
    # importable after `cmake --install` with no PYTHONPATH there.
    rel = os.path.join("lib", "python%d.%d" % sys.version_info[:2], "dist-packages")
    for system_prefix in ("/usr/local", "/usr"):
        if os.path.join(system_prefix, rel) not in sys.path:
            raise AssertionError(f"{system_prefix}/{rel} is not on sys.path {sys.path}")
    site = os.path.join(prefix, rel)
    libpath = {}
    with open(os.path.join(site, "modelgate", "_libpath.py")) as f:
        exec(f.read(), libpath)
    eq(libpath["LIBRARY"], os.path.join(prefix, libdirs[0], "libmodelgate.so.0"), "_libpath.py")
    lines = probe(d, site, env_library=False)
    eq(lines[0], os.path.join(site, "modelgate", "__init__.py"), "the installed package")
    eq(lines[1], libpath["LIBRARY"], "loaded the installed library, not the build's")
    eq(lines[2], "0.1.0 ['x'] [0.0, 1.0, 2.0]", "loads a signed file")


@test
def a_destdir_install_records_the_final_path_not_the_staging_one(d):
    stage = os.path.join(d, "stage")
    env = dict(os.environ, DESTDIR=stage)
    code, out, err = run_text(["cmake", "--install", BUILD, "--prefix", "/opt/mg",
                               "--component", "python3-modelgate"], env=env, timeout=120)
    eq(code, 0, "cmake --install with DESTDIR\n" + out + err)
    found = [os.path.join(root, f) for root, _, files in os.walk(stage) for f in files
             if f == "_libpath.py"]
    eq(len(found), 1, f"one _libpath.py under {stage}")
    eq(found[0].startswith(os.path.join(stage, "opt", "mg") + os.sep), True, "staged under DESTDIR")
    libpath = {}
    with open(found[0]) as f:
        exec(f.read(), libpath)
    eq(libpath["LIBRARY"].startswith("/opt/mg/") and
       libpath["LIBRARY"].endswith("/libmodelgate.so.0"), True, f"final path: {libpath['LIBRARY']}")


LAYOUT = r"""
#include <stddef.h>
#include <stdio.h>
#include "modelgate.h"
#define F(T, m) printf(#T " " #m " %zu %zu\n", offsetof(T, m), sizeof(((T*)0)->m));
#define S(T) printf(#T " sizeof %zu %zu\n", sizeof(T), alignof(T));
int main(void) {
  F(mg_error, status) F(mg_error, id) F(mg_error, offset) F(mg_error, file) F(mg_error, message)
  S(mg_error)
  F(mg_open_options, struct_size) F(mg_open_options, mode) F(mg_open_options, signature)
  F(mg_open_options, bundle_path) F(mg_open_options, flags) F(mg_open_options, hash_threads)
  S(mg_open_options)
  F(mg_tensor_info, name) F(mg_tensor_info, name_len) F(mg_tensor_info, dtype)
  F(mg_tensor_info, dtype_bits) F(mg_tensor_info, rank) F(mg_tensor_info, shape)
  F(mg_tensor_info, byte_length) F(mg_tensor_info, file_index)
  S(mg_tensor_info)
  printf("enum sizeof %zu\n", sizeof(mg_status));
  return 0;
}
"""


@test
def struct_layouts_match_the_compilers(d):
    src = write(d, "layout.cc", LAYOUT)
    exe = os.path.join(d, "layout")
    code, out, err = run_text([CXX, "-std=c++20", "-I", os.path.dirname(HEADER), src, "-o", exe])
    eq(code, 0, "compile\n" + out + err)
    c = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.splitlines()
    mine = []
    for name in ("mg_error", "mg_open_options", "mg_tensor_info"):
        t = getattr(_capi, name)
        for field, _ in t._fields_:
            m = getattr(t, field)
            mine.append(f"{name} {field} {m.offset} {m.size}")
        mine.append(f"{name} sizeof {ctypes.sizeof(t)} {ctypes.alignment(t)}")
    mine.append(f"enum sizeof {ctypes.sizeof(_capi.c_enum)}")
    eq(mine, c, "ctypes layout == offsetof/sizeof")


def header_text():
    with open(HEADER) as f:
        text = f.read()
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


@test
def every_function_and_constant_of_the_header_is_declared(d):
    text = header_text()
    functions = set(re.findall(r"\b(mg_\w+)\s*\(", text))
    eq(sorted(_capi._PROTOTYPES), sorted(functions), "functions: the header's, no others")
    # Argument counts: commas at the top level of each prototype.
    for name, (_, argtypes) in _capi._PROTOTYPES.items():
        params = re.search(name + r"\s*\(([^)]*)\)", text).group(1).strip()
        count = 0 if params in ("void", "") else params.count(",") + 1
        eq(len(argtypes), count, f"{name}: argument count")
    values = {k: int(v) for k, v in re.findall(r"\b(MG_[A-Z_]+)\s*=\s*(\d+)", text)}
    mine = {}
    for prefix, enum in (("MG_ERR_", _capi.Status), ("MG_MODE_", _capi.Mode),
                         ("MG_SIGNATURE_", _capi.SignatureKind)):
        for member in enum:
            mine[("MG_OK" if member.name == "OK" else prefix + member.name)] = int(member)
    eq(mine, values, "enum values")
    eq(int(re.search(r"#define MG_API_VERSION (\d+)", text).group(1)), _capi.MG_API_VERSION,
       "MG_API_VERSION")
    eq(int(re.search(r"#define MG_OPEN_WRITABLE (0x[0-9a-f]+)u", text).group(1), 16),
       _capi.MG_OPEN_WRITABLE, "MG_OPEN_WRITABLE")
    eq(modelgate._lib.mg_api_version(), _capi.MG_API_VERSION, "the library's ABI")


@test
def importing_modelgate_imports_neither_numpy_nor_torch(d):
    # scan() and a numpy-only program should not pay for `import torch` (~1.4 s).
    code, out, err = run_text([PYTHON, "-c", "import sys, modelgate, modelgate.numpy, "
                               "modelgate.torch; print(sorted(m for m in ('numpy', 'torch') "
                               "if m in sys.modules))"])
    eq((code, out.strip()), (0, "[]"), "modules imported by import modelgate\n" + err)


@test
def the_library_is_found_in_the_documented_order(d):
    env = {k: v for k, v in os.environ.items() if k != "MODELGATE_LIBRARY"}
    env["MODELGATE_LIBRARY"] = os.path.join(d, "nope.so")
    code, out, err = run_text([PYTHON, "-c", "import modelgate"], env=env)
    eq(code != 0 and "nope.so" in err and "MODELGATE_LIBRARY" in err, True,
       "an explicit MODELGATE_LIBRARY that does not load is an ImportError naming it\n" + err)


if __name__ == "__main__":
    sys.exit(main("mg-py-pkg-"))
