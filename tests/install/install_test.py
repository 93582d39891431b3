#!/usr/bin/env python3
"""libmodelgate as a user gets it: what the .so exports, and what
`cmake --install` puts down, used by a plain `cc` and by a CMake project.

    install_test.py exports --lib SO --header modelgate.h --map modelgate.map
                            --nm NM --readelf READELF
    install_test.py install --build BUILD --source SRC --modelgate PROGRAM
                            --libdir LIBDIR --includedir INCLUDEDIR
                            --cxx CXX --generator GEN --readelf READELF
                            --cmake CMAKE --pkg-config PKG_CONFIG --prefix PREFIX

exports: the dynamic symbols the library defines are exactly the functions
modelgate.h declares (each under the map's version node), and its SONAME is
libmodelgate.so.0.

install: installs the libmodelgate and libmodelgate-dev components into a
fresh prefix, checks the file list, the SONAME and that no RPATH/RUNPATH
is left, and a DESTDIR install of the configured PREFIX, then builds
examples/c/load_model.c with `cc -std=c99 ... $(pkg-config --cflags --libs
modelgate)` and examples/cmake-consumer with find_package(modelgate), and
runs both on a model signed, tampered with and signed by another key, and
the C example on a directory under a detached ECDSA bundle (fixtures made
here with the built modelgate).

Standard library only.
"""

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

SONAME = "libmodelgate.so.0"
REAL_NAME = "libmodelgate.so.0.1.0"


def fail(msg):
    raise AssertionError(msg)


def must(cond, msg):
    if not cond:
        fail(msg)


def run(cmd, env=None, cwd=None, expect_rc=0):
    """Runs cmd; fails unless it exits with expect_rc (a signal is not a
    non-zero exit). Returns the CompletedProcess."""
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    if p.returncode != expect_rc:
        fail(f"{' '.join(cmd)}: exit {p.returncode}, expected {expect_rc}\n"
             f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


# ---- exports ---------------------------------------------------------------

def header_functions(path):
    """The names of the functions `path` declares: every `mg_x(` outside
    comments and preprocessor lines (the header has no function-like macros
    or function-pointer types; a declaration is the only `name(`)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return set(re.findall(r"\b(mg_[A-Za-z0-9_]+)\s*\(", text))


def version_nodes(path):
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    return set(re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\{", text, flags=re.M))


def soname(readelf, lib):
    out = run([readelf, "-d", "-W", lib]).stdout
    names = re.findall(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out)
    return names, out


def check_exports(a):
    declared = header_functions(a.header)
    must("mg_open" in declared and "mg_version" in declared,
         f"header parse found {sorted(declared)}")
    nodes = version_nodes(a.map)
    must(len(nodes) == 1, f"{a.map}: one version node expected, found {sorted(nodes)}")
    node = next(iter(nodes))

    out = run([a.nm, "-D", "--defined-only", a.lib]).stdout
    exported = set()
    bad = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        kind, sym = fields[-2], fields[-1]
        # The version node's own definition: "MODELGATE_0" (GNU nm) or
        # "MODELGATE_0@@MODELGATE_0" (llvm-nm, CMAKE_NM of a clang build).
        if kind == "A" and sym in (node, f"{node}@@{node}"):
            continue
        name, _, version = sym.partition("@")
        if kind != "T" or not name.startswith("mg_") or version.lstrip("@") != node:
            bad.append(line.strip())
            continue
        exported.add(name)
    must(not bad, "exported beyond the C API (or not under " + node + "):\n  " + "\n  ".join(bad))
    must(not (declared - exported),
         f"declared in modelgate.h but not exported: {sorted(declared - exported)}")
    must(not (exported - declared),
         f"exported but not declared in modelgate.h: {sorted(exported - declared)}")

    names, dyn = soname(a.readelf, a.lib)
    must(names == [SONAME], f"SONAME {names}, expected {SONAME}\n{dyn}")
    print(f"{len(exported)} functions exported under {node}, all declared; SONAME {SONAME}")


# ---- install -----------------------------------------------------------------

def clean_env():
    """The environment without anything that would let a test find the
    build tree or another install instead of the fresh prefix."""
    env = dict(os.environ)
    for var in ("DESTDIR", "LD_LIBRARY_PATH", "LD_PRELOAD", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR",
                "CMAKE_PREFIX_PATH", "modelgate_DIR", "MODELGATE_LIBRARY", "CPATH",
                "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH"):
        env.pop(var, None)
    return env


def safetensors(tensors):
    """A safetensors file as the reference writer lays it out: `tensors` is
    [(name, dtype, shape, data)] in data order; header padded with spaces."""
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors)


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


# The model the examples load, in the reference's order (I64 before F32,
# then by name). layer.weight is last: the tamper flips its last byte.
TENSORS = [
    ("step", "I64", [], struct.pack("<q", 7)),
    ("layer.bias", "F32", [3], f32(-1, -2, -3)),
    ("layer.weight", "F32", [2, 3], f32(0.5, 1.5, 2.5, 3.5, 4.5, 5.5)),
]
LISTING = ('  "layer.bias"  F32  [3]  12 bytes  -1 -2 -3\n'
           '  "layer.weight"  F32  [2, 3]  24 bytes  0.5 1.5 2.5 3.5 ...\n'
           '  "step"  I64  []  8 bytes\n')


def make_fixtures(modelgate, d, env):
    run([modelgate, "keygen", "--out", os.path.join(d, "trusted")], env=env)
    run([modelgate, "keygen", "--out", os.path.join(d, "other")], env=env)
    unsigned = os.path.join(d, "unsigned.safetensors")
    with open(unsigned, "wb") as f:
        f.write(safetensors(TENSORS))
    signed = os.path.join(d, "model.safetensors")
    run([modelgate, "sign", "-q", "--key", os.path.join(d, "trusted.key"), "-o", signed, unsigned],
        env=env)
    with open(signed, "rb") as f:
        data = bytearray(f.read())
    data[-1] ^= 0x01
    tampered = os.path.join(d, "tampered.safetensors")
    with open(tampered, "wb") as f:
        f.write(data)
    return (os.path.join(d, "trusted.pub"), os.path.join(d, "other.pub"), signed, tampered,
            unsigned)


def make_detached_dir(modelgate, d, env):
    """A model directory of two files under a detached ECDSA P-256 bundle
    (DIR/model.sig), and a copy with one byte of b.safetensors changed."""
    run([modelgate, "keygen", "--alg", "ecdsa-p256", "--out", os.path.join(d, "ecdsa")], env=env)
    good = os.path.join(d, "model-dir")
    os.mkdir(good)
    with open(os.path.join(good, "a.safetensors"), "wb") as f:
        f.write(safetensors(TENSORS[:2]))
    with open(os.path.join(good, "b.safetensors"), "wb") as f:
        f.write(safetensors(TENSORS[2:]))
    run([modelgate, "sign", "-q", "--detached", "--key", os.path.join(d, "ecdsa.key"), good],
        env=env)
    bad = os.path.join(d, "model-dir-tampered")
    shutil.copytree(good, bad)
    with open(os.path.join(bad, "b.safetensors"), "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last ^ 0x01]))
    return os.path.join(d, "ecdsa.pub"), good, bad


def check_installed_files(prefix, a):
    lib = os.path.join(prefix, a.libdir)
    expected = {
        os.path.join(a.libdir, REAL_NAME), os.path.join(a.libdir, SONAME),
        os.path.join(a.libdir, "libmodelgate.so"),
        os.path.join(a.includedir, "modelgate.h"),
        os.path.join(a.libdir, "pkgconfig", "modelgate.pc"),
        os.path.join(a.libdir, "cmake", "modelgate", "modelgateConfig.cmake"),
        os.path.join(a.libdir, "cmake", "modelgate", "modelgateConfigVersion.cmake"),
        os.path.join(a.libdir, "cmake", "modelgate", "modelgateTargets.cmake"),
    }
    found = set()
    for root, _, files in os.walk(prefix):
        for name in files:
            found.add(os.path.relpath(os.path.join(root, name), prefix))
    # One per-configuration targets file, whatever the build type is.
    targets_prefix = os.path.join(a.libdir, "cmake", "modelgate", "modelgateTargets-")
    per_config = {f for f in found if re.fullmatch(re.escape(targets_prefix) + r"[a-z]+\.cmake", f)}
    must(len(per_config) == 1, f"one modelgateTargets-<config>.cmake expected: {sorted(found)}")
    must(found == expected | per_config,
         f"installed files differ: missing {sorted(expected - found)}, "
         f"unexpected {sorted(found - expected - per_config)}")
    must(not os.path.islink(os.path.join(lib, REAL_NAME)), REAL_NAME + " is the file")
    must(os.readlink(os.path.join(lib, SONAME)) == REAL_NAME, SONAME + " -> " + REAL_NAME)
    must(os.readlink(os.path.join(lib, "libmodelgate.so")) == SONAME,
         "libmodelgate.so -> " + SONAME)
    with open(os.path.join(prefix, a.includedir, "modelgate.h"), "rb") as f, \
            open(os.path.join(a.source, "api", "include", "modelgate.h"), "rb") as g:
        must(f.read() == g.read(), "installed modelgate.h is the source's")

    names, dyn = soname(a.readelf, os.path.join(lib, REAL_NAME))
    must(names == [SONAME], f"installed SONAME {names}\n{dyn}")
    must(not re.search(r"\((RPATH|RUNPATH)\)", dyn), "installed .so has an RPATH/RUNPATH:\n" + dyn)
    must(a.build not in dyn, "installed .so names the build tree:\n" + dyn)


def check_destdir(a, d, env):
    """A packager's staged install (DESTDIR, the configured prefix): the
    files land under DESTDIR and modelgate.pc names the final prefix."""
    stage = os.path.join(d, "stage")
    for component in ("libmodelgate", "libmodelgate-dev"):
        run([a.cmake, "--install", a.build, "--component", component],
            env=dict(env, DESTDIR=stage + "/"))
    staged = os.path.join(stage, a.prefix.lstrip("/"))
    must(os.path.isfile(os.path.join(staged, a.libdir, REAL_NAME)), "staged under DESTDIR")
    with open(os.path.join(staged, a.libdir, "pkgconfig", "modelgate.pc"), encoding="utf-8") as f:
        pc = f.read()
    must(pc.startswith(f"prefix={a.prefix}\n") and stage not in pc, "staged modelgate.pc:\n" + pc)


def check_c_example(prefix, a, fx, d, env):
    pubkey, other, signed, tampered, unsigned = fx
    pc_env = dict(env, PKG_CONFIG_PATH=os.path.join(prefix, a.libdir, "pkgconfig"))
    flags = run([a.pkg_config, "--cflags", "--libs", "modelgate"], env=pc_env).stdout.split()
    must(f"-I{os.path.join(prefix, a.includedir)}" in flags and
         f"-L{os.path.join(prefix, a.libdir)}" in flags and "-lmodelgate" in flags,
         f"pkg-config flags name the prefix: {flags}")
    must(run([a.pkg_config, "--modversion", "modelgate"], env=pc_env).stdout.strip() == "0.1.0",
         "modelgate.pc version")
    exe = os.path.join(d, "load_model")
    run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
         os.path.join(a.source, "examples", "c", "load_model.c"), *flags, "-o", exe], env=env)

    run_env = dict(env, LD_LIBRARY_PATH=os.path.join(prefix, a.libdir))
    heads = {"eager": "verified (eager)", "copy": "verified (copy)",
             "lazy": "signature verified (lazy: each tensor is checked when read)"}
    for mode, head in heads.items():
        p = run([exe, "--pubkey", pubkey, "--mode", mode, signed], env=run_env)
        want = f"{signed}: {head}, 3 tensors, 1 file\n" + LISTING
        must(p.stdout == want and p.stderr == "",
             f"{mode}: stdout\n{p.stdout}\nexpected\n{want}\nstderr\n{p.stderr}")
        p = run([exe, "--pubkey", pubkey, "--mode", mode, tampered], env=run_env, expect_rc=1)
        must(re.search(r"^MG-SIG-TENSOR-MISMATCH: .*layer\.weight", p.stderr, flags=re.M),
             f"{mode} tampered: {p.stderr}")
        # The tampered tensor is never printed, in any mode.
        must("layer.weight" not in p.stdout, f"{mode} tampered printed: {p.stdout}")
    p = run([exe, "--pubkey", other, signed], env=run_env, expect_rc=1)
    must(re.match(r"MG-SIG-UNTRUSTED: ", p.stderr) and p.stdout == "", f"untrusted: {p.stderr}")
    p = run([exe, "--pubkey", pubkey, unsigned], env=run_env, expect_rc=1)
    must(re.match(r"MG-SIG-MISSING: ", p.stderr) and p.stdout == "", f"unsigned: {p.stderr}")
    p = run([exe, "--pubkey", other, "--pubkey", pubkey, signed], env=run_env)
    must(p.stdout.endswith(LISTING), "second of two keys verifies: " + p.stdout)
    # A name is printed escaped: quote and backslash, every byte outside
    # printable ASCII (the parser already refuses control characters).
    names = os.path.join(d, "names.safetensors")
    with open(names, "wb") as f:
        f.write(safetensors([('a"\\\u00e9', "U8", [2], b"\x01\x02")]))
    run([a.modelgate, "sign", "-q", "--key", os.path.join(d, "trusted.key"), names], env=env)
    p = run([exe, "--pubkey", pubkey, names], env=run_env)
    must(p.stdout.endswith('\n  "a\\"\\\\\\xc3\\xa9"  U8  [2]  2 bytes\n'),
         "escaped name: " + p.stdout)
    run([exe, signed], env=run_env, expect_rc=2)
    run([exe, "--pubkey", pubkey, os.path.join(d, "absent.safetensors")], env=run_env,
        expect_rc=2)
    run([exe, "--pubkey", os.path.join(d, "absent.pub"), signed], env=run_env, expect_rc=2)

    # A directory under a detached ECDSA bundle: OpenSSL through the .so.
    ecdsa, good_dir, bad_dir = make_detached_dir(a.modelgate, d, env)
    for mode, head in heads.items():
        p = run([exe, "--pubkey", ecdsa, "--mode", mode, good_dir], env=run_env)
        want = f"{good_dir}: {head}, 3 tensors, 2 files\n" + LISTING
        must(p.stdout == want, f"{mode} directory: stdout\n{p.stdout}\nexpected\n{want}")
        p = run([exe, "--pubkey", ecdsa, "--mode", mode, bad_dir], env=run_env, expect_rc=1)
        must(re.search(r"^MG-OMS-FILE-CHANGED: .*b\.safetensors", p.stderr, flags=re.M),
             f"{mode} tampered directory: {p.stderr}")
        must("layer.weight" not in p.stdout, f"{mode} tampered directory printed: {p.stdout}")
    p = run([exe, "--pubkey", pubkey, good_dir], env=run_env, expect_rc=1)
    must(re.match(r"MG-OMS-UNTRUSTED: ", p.stderr), f"directory, untrusted key: {p.stderr}")


def check_cmake_consumer(prefix, a, fx, d, env):
    pubkey, other, signed, tampered, _ = fx
    bdir = os.path.join(d, "consumer-build")
    run([a.cmake, "-S", os.path.join(a.source, "examples", "cmake-consumer"), "-B", bdir,
         "-G", a.generator, f"-DCMAKE_CXX_COMPILER={a.cxx}", f"-DCMAKE_PREFIX_PATH={prefix}"],
        env=env)
    with open(os.path.join(bdir, "CMakeCache.txt"), encoding="utf-8") as f:
        cache = f.read()
    want_dir = os.path.join(prefix, a.libdir, "cmake", "modelgate")
    must(f"modelgate_DIR:PATH={want_dir}\n" in cache, "find_package found the fresh install: " +
         "".join(re.findall(r"modelgate_DIR:PATH=.*\n", cache)))
    run([a.cmake, "--build", bdir], env=env)
    exe = os.path.join(bdir, "consumer")
    # No LD_LIBRARY_PATH: the imported target's location is in the build RPATH.
    p = run([exe, "--pubkey", pubkey, signed], env=env)
    must(p.stdout == f"libmodelgate 0.1.0: {signed} verified, 3 tensors, 44 bytes\n",
         "consumer: " + p.stdout)
    p = run([exe, "--pubkey", pubkey, tampered], env=env, expect_rc=1)
    must(re.match(r"MG-SIG-TENSOR-MISMATCH: ", p.stderr), "consumer tampered: " + p.stderr)
    p = run([exe, "--pubkey", other, signed], env=env, expect_rc=1)
    must(re.match(r"MG-SIG-UNTRUSTED: ", p.stderr), "consumer untrusted: " + p.stderr)


def check_install(a):
    must(not os.path.isabs(a.libdir) and not os.path.isabs(a.includedir),
         "CMAKE_INSTALL_LIBDIR/INCLUDEDIR are absolute: an install under --prefix cannot hold them")
    env = clean_env()
    d = tempfile.mkdtemp(prefix="mg-install-")
    try:
        prefix = os.path.join(d, "prefix")
        for component in ("libmodelgate", "libmodelgate-dev"):
            run([a.cmake, "--install", a.build, "--prefix", prefix, "--component", component],
                env=env)
        check_installed_files(prefix, a)
        check_destdir(a, d, env)
        fx = make_fixtures(a.modelgate, d, env)
        check_c_example(prefix, a, fx, d, env)
        check_cmake_consumer(prefix, a, fx, d, env)
    finally:
        shutil.rmtree(d)
    print("installed, C example and CMake consumer built and run against", a.libdir)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("exports")
    for opt in ("--lib", "--header", "--map", "--nm", "--readelf"):
        e.add_argument(opt, required=True)
    i = sub.add_parser("install")
    for opt in ("--build", "--source", "--modelgate", "--libdir", "--includedir", "--cxx",
                "--generator", "--readelf", "--cmake", "--pkg-config", "--prefix"):
        i.add_argument(opt, required=True)
    a = ap.parse_args()
    try:
        check_exports(a) if a.cmd == "exports" else check_install(a)
    except AssertionError as err:
        print("FAIL:", err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
