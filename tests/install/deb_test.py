#!/usr/bin/env python3
"""The .deb as a user gets it (cmake/Packaging.cmake).

    deb_test.py --build BUILD --source SRC --cpack CPACK --version VERSION
                --libdir LIBDIR --includedir INCLUDEDIR --readelf READELF
                --pkg-config PKG_CONFIG --cmake CMAKE --generator GEN --cxx CXX

Builds the package with `cpack -G DEB` from BUILD into a temp directory
(the staging tree too: BUILD is left as it was), then checks:
- the control fields (dpkg-deb -f): name, version, architecture, a
  Maintainer "Name <email>", section, priority, description, and a Depends
  that names, with a version, the package owning every library a packaged
  ELF file links (readelf NEEDED, then dpkg -S here): dpkg-shlibdeps ran;
- the control files: shlibs for libmodelgate.so.0, ldconfig in postinst;
- the file list (dpkg-deb -c) is exactly the expected one, every file
  root-owned, the program 0755, the .so 0644 with its SONAME and .so links;
- the extracted tree (dpkg -x, never dpkg -i: this runs on developers'
  machines): README.md, docs/ and the rules byte for byte as in SRC,
  modelgate.pc naming /usr; the extracted program scans the bundled
  examples/models (0 for good, 1 with MG-ST-TRAILING-BYTES for the evil one)
  and signs a model; examples/c/load_model.c built against the extracted
  header and modelgate.pc (PKG_CONFIG_SYSROOT_DIR) and examples/cmake-consumer
  with find_package(modelgate) from the extracted tree both verify it and
  reject a tampered copy;
- the GitHub Action's setup step (integrations/github/setup.sh) takes the
  package by path and SHA-256 and hands on a program that runs (its
  dependencies are met here: apt-get only simulates).
Any file missing from the package fails a check. Standard library only.
"""

import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

SONAME = "libmodelgate.so.0"


def fail(msg):
    raise AssertionError(msg)


def must(cond, msg):
    if not cond:
        fail(msg)


def run(cmd, env=None, cwd=None, expect_rc=0, timeout=300):
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != expect_rc:
        fail(f"{' '.join(cmd)}: exit {p.returncode}, expected {expect_rc}\n"
             f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def clean_env():
    env = dict(os.environ)
    for var in ("DESTDIR", "LD_LIBRARY_PATH", "LD_PRELOAD", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR",
                "PKG_CONFIG_SYSROOT_DIR", "CMAKE_PREFIX_PATH", "modelgate_DIR",
                "MODELGATE_LIBRARY", "CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH"):
        env.pop(var, None)
    return env


def build_deb(a, d, env):
    out = os.path.join(d, "pkg")
    run([a.cpack, "-G", "DEB", "-B", out, "--config", os.path.join(a.build, "CPackConfig.cmake")],
        env=env, cwd=a.build)
    arch = run(["dpkg", "--print-architecture"], env=env).stdout.strip()
    debs = sorted(glob.glob(os.path.join(out, "*.deb")))
    want = os.path.join(out, f"modelgate_{a.version}_{arch}.deb")
    must(debs == [want], f"cpack wrote {debs}, expected [{want}]")
    return want, arch


def expected_files(a):
    """{path in the package (no leading ./): 'f' file or 'l' link}."""
    lib = f"usr/{a.libdir}"
    files = {
        "usr/bin/modelgate": "f",
        "usr/share/man/man1/modelgate.1": "f",
        "usr/share/bash-completion/completions/modelgate": "f",
        "usr/share/zsh/vendor-completions/_modelgate": "f",
        f"usr/{a.includedir}/modelgate.h": "f",
        f"{lib}/libmodelgate.so.{a.version}": "f",
        f"{lib}/{SONAME}": "l",
        f"{lib}/libmodelgate.so": "l",
        f"{lib}/pkgconfig/modelgate.pc": "f",
        f"{lib}/cmake/modelgate/modelgateConfig.cmake": "f",
        f"{lib}/cmake/modelgate/modelgateConfigVersion.cmake": "f",
        f"{lib}/cmake/modelgate/modelgateTargets.cmake": "f",
        "usr/share/doc/modelgate/README.md": "f",
    }
    for rule in glob.glob(os.path.join(a.source, "scanner", "rules", "*.yar")):
        files["usr/share/modelgate/rules/" + os.path.basename(rule)] = "f"
    docs = os.path.join(a.source, "docs")
    for root, _, names in os.walk(docs):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), docs)
            files["usr/share/doc/modelgate/docs/" + rel] = "f"
    must(len([f for f in files if f.startswith("usr/share/modelgate/rules/")]) >= 1,
         "no scanner/rules/*.yar in the source")
    return files


def check_control(a, deb, arch, env):
    fields = {}
    for line in run(["dpkg-deb", "-f", deb], env=env).stdout.splitlines():
        if line and not line[0].isspace():
            k, _, v = line.partition(": ")
            fields[k] = v
    for k, v in (("Package", "modelgate"), ("Version", a.version), ("Architecture", arch),
                 ("Section", "utils"), ("Priority", "optional"),
                 ("Description", "security gate for ML model files")):
        must(fields.get(k) == v, f"control field {k}: {fields.get(k)!r}, expected {v!r}")
    must(re.fullmatch(r"[^<>]+ <[^<>@\s]+@[^<>@\s]+>", fields.get("Maintainer", "")),
         f"Maintainer is not 'Name <email>': {fields.get('Maintainer')!r}")
    must(fields.get("Depends"), "no Depends field: dpkg-shlibdeps did not run")
    depends = {}
    for dep in fields["Depends"].split(","):
        m = re.fullmatch(r"\s*([a-z0-9][a-z0-9+.-]+)(?:\s*\((.+)\))?\s*", dep)
        must(m, f"odd Depends entry {dep!r} in {fields.get('Depends')!r}")
        depends[m.group(1)] = m.group(2)
    ctrl = os.path.join(os.path.dirname(deb), "control")
    run(["dpkg-deb", "-e", deb, ctrl], env=env)
    with open(os.path.join(ctrl, "shlibs"), encoding="utf-8") as f:
        shlibs = f.read()
    must(shlibs.strip() == f"libmodelgate 0 modelgate (>= {a.version})", "shlibs: " + shlibs)
    with open(os.path.join(ctrl, "postinst"), encoding="utf-8") as f:
        must(re.search(r"^\s*ldconfig\s*$", f.read(), re.M), "postinst does not run ldconfig")
    return depends


def check_listing(a, deb, env):
    listing = run(["dpkg-deb", "-c", deb], env=env).stdout
    found = {}
    for line in listing.splitlines():
        m = re.match(r"([dl-])(\S{9}) (\S+)/(\S+)\s+\d+ \S+ \S+ \./(\S*)(?: -> (\S+))?$", line)
        must(m, "odd dpkg-deb -c line: " + line)
        kind, mode, user, group, path, target = m.groups()
        must(user == "root" and group == "root", "not root-owned: " + line)
        path = path.rstrip("/")
        if kind == "d":
            continue
        found[path] = ("l" if kind == "l" else "f", mode, target)
    want = expected_files(a)
    extra = sorted(set(found) - set(want) - {p for p in found if re.fullmatch(
        rf"usr/{re.escape(a.libdir)}/cmake/modelgate/modelgateTargets-[a-z]+\.cmake", p)})
    missing = sorted(set(want) - set(found))
    must(not missing and not extra, f"package files differ: missing {missing}, unexpected {extra}")
    per_config = [p for p in found if "modelgateTargets-" in p]
    must(len(per_config) == 1, f"one modelgateTargets-<config>.cmake: {per_config}")
    for path, kind in want.items():
        must(found[path][0] == kind, f"{path} is {'a link' if found[path][0] == 'l' else 'a file'}")
    must(found["usr/bin/modelgate"][1] == "rwxr-xr-x", "program mode " + found["usr/bin/modelgate"][1])
    lib = f"usr/{a.libdir}"
    must(found[f"{lib}/libmodelgate.so.{a.version}"][1] == "rw-r--r--", "library mode (0644)")
    must(found[f"{lib}/{SONAME}"][2] == f"libmodelgate.so.{a.version}",
         f"{SONAME} -> {found[f'{lib}/{SONAME}'][2]}")
    must(found[f"{lib}/libmodelgate.so"][2] == SONAME, "libmodelgate.so -> " + SONAME)
    return want


def owning_package(path, env):
    """The Debian package owning a library file here (usrmerge: the database
    may list it under /lib or /usr/lib)."""
    real = os.path.realpath(path)
    cands = []
    for c in (path, real):
        cands += [c, c.replace("/usr/lib/", "/lib/", 1), "/usr" + c if c.startswith("/lib/") else c]
    p = subprocess.run(["dpkg", "-S", *sorted(set(cands))], env=env, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        pkg, _, _ = line.partition(": ")
        return pkg.split(":")[0].split(",")[0].strip()
    fail(f"no Debian package owns {path}")


def check_depends(a, root, depends, env):
    """Every library an ELF file in the package links comes from a package
    the .deb depends on (or is the package's own libmodelgate)."""
    elves = [os.path.join(root, "usr/bin/modelgate"),
             os.path.join(root, f"usr/{a.libdir}/libmodelgate.so.{a.version}")]
    for elf in elves:
        dyn = run([a.readelf, "-d", elf], env=env).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn)
        must(needed, f"no NEEDED in {elf}")
        must(not re.search(r"\((RPATH|RUNPATH)\)", dyn), f"{elf} has an RPATH/RUNPATH")
        must(a.build not in dyn, f"{elf} names the build tree")
        ldd = run(["ldd", elf], env=env).stdout
        where = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
        for lib in needed:
            if lib.startswith("ld-linux"):
                continue
            must(lib in where, f"ldd does not resolve {lib} of {elf}:\n{ldd}")
            pkg = owning_package(where[lib], env)
            must(pkg in depends, f"{elf} links {lib} from {pkg}, which Depends lacks: {depends}")
    # dpkg-shlibdeps writes the minimum version the symbols used need.
    must(depends.get("libc6") and depends["libc6"].startswith(">= "),
         f"Depends is not dpkg-shlibdeps' (libc6 without a minimum version): {depends}")
    return sorted(depends)


def check_extracted(a, root, want):
    for path in want:
        rel = None
        if path.startswith("usr/share/doc/modelgate/docs/"):
            rel = os.path.join("docs", path[len("usr/share/doc/modelgate/docs/"):])
        elif path == "usr/share/doc/modelgate/README.md":
            rel = "README.md"
        elif path.startswith("usr/share/modelgate/rules/"):
            rel = os.path.join("scanner", "rules", os.path.basename(path))
        elif path == f"usr/{a.includedir}/modelgate.h":
            rel = os.path.join("api", "include", "modelgate.h")
        if rel is not None:
            with open(os.path.join(root, path), "rb") as f, \
                    open(os.path.join(a.source, rel), "rb") as g:
                must(f.read() == g.read(), f"{path} differs from {rel}")
    with open(os.path.join(root, f"usr/{a.libdir}/pkgconfig/modelgate.pc"), encoding="utf-8") as f:
        pc = f.read()
    must(pc.startswith("prefix=/usr\n") and a.build not in pc, "modelgate.pc:\n" + pc)
    with open(os.path.join(root, "usr/share/man/man1/modelgate.1"), encoding="utf-8") as f:
        must(re.search(r"^\.TH MODELGATE 1 ", f.read(), re.M), "man page has no .TH MODELGATE 1")


def check_program(a, root, d, env):
    mg = os.path.join(root, "usr/bin/modelgate")
    run_env = dict(env, LD_LIBRARY_PATH=os.path.join(root, "usr", a.libdir))
    p = run([mg, "--version"], env=run_env)
    must(a.version in p.stdout, "--version: " + p.stdout)
    models = os.path.join(a.source, "examples", "models")
    run([mg, "scan", os.path.join(models, "good.safetensors")], env=run_env)
    p = run([mg, "scan", os.path.join(models, "evil-trailing.safetensors")], env=run_env,
            expect_rc=1)
    must("MG-ST-TRAILING-BYTES" in p.stdout, "evil-trailing: " + p.stdout)
    keys = os.path.join(d, "release")
    run([mg, "keygen", "--out", keys], env=run_env)
    signed = os.path.join(d, "model.safetensors")
    run([mg, "sign", "-q", "--key", keys + ".key", "-o", signed,
         os.path.join(models, "good.safetensors")], env=run_env)
    with open(signed, "rb") as f:
        data = bytearray(f.read())
    data[-1] ^= 0x01
    tampered = os.path.join(d, "tampered.safetensors")
    with open(tampered, "wb") as f:
        f.write(data)
    run([mg, "verify", "--pubkey", keys + ".pub", signed], env=run_env)
    return keys + ".pub", signed, tampered, run_env


def check_c_example(a, root, d, env, fx):
    pubkey, signed, tampered, run_env = fx
    pc_env = dict(env, PKG_CONFIG_SYSROOT_DIR=root,
                  PKG_CONFIG_LIBDIR=os.path.join(root, "usr", a.libdir, "pkgconfig"))
    flags = run([a.pkg_config, "--cflags", "--libs", "modelgate"], env=pc_env).stdout.split()
    must(f"-I{root}/usr/{a.includedir}" in flags and f"-L{root}/usr/{a.libdir}" in flags and
         "-lmodelgate" in flags, f"pkg-config flags name the extracted tree: {flags}")
    exe = os.path.join(d, "load_model")
    run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
         os.path.join(a.source, "examples", "c", "load_model.c"), *flags, "-o", exe], env=env)
    p = run([exe, "--pubkey", pubkey, signed], env=run_env)
    must(p.stdout.startswith(f"{signed}: verified (eager)"), "load_model: " + p.stdout)
    run([exe, "--pubkey", pubkey, tampered], env=run_env, expect_rc=1)
    ldd = run(["ldd", exe], env=run_env).stdout
    must(re.search(rf"{SONAME} => {re.escape(root)}/", ldd), "load_model ran another library:\n" + ldd)


def check_cmake_consumer(a, root, d, env, fx):
    pubkey, signed, tampered, _ = fx
    bdir = os.path.join(d, "consumer-build")
    run([a.cmake, "-S", os.path.join(a.source, "examples", "cmake-consumer"), "-B", bdir,
         "-G", a.generator, f"-DCMAKE_CXX_COMPILER={a.cxx}",
         f"-DCMAKE_PREFIX_PATH={os.path.join(root, 'usr')}"], env=env)
    with open(os.path.join(bdir, "CMakeCache.txt"), encoding="utf-8") as f:
        must(f"modelgate_DIR:PATH={root}/usr/{a.libdir}/cmake/modelgate\n" in f.read(),
             "find_package did not find the extracted package")
    run([a.cmake, "--build", bdir], env=env)
    exe = os.path.join(bdir, "consumer")
    p = run([exe, "--pubkey", pubkey, signed], env=env)
    must(p.stdout.startswith(f"libmodelgate {a.version}: {signed} verified"), "consumer: " + p.stdout)
    run([exe, "--pubkey", pubkey, tampered], env=env, expect_rc=1)


def check_action_setup(a, deb, d, env):
    with open(deb, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    out = os.path.join(d, "github-output")
    open(out, "w").close()
    step_env = dict(env, GITHUB_OUTPUT=out, GITHUB_ACTION_PATH=a.source, MG_DEB=deb,
                    MG_DEB_SHA256=sha, MG_DEB_DIR=os.path.join(d, "action"),
                    MG_BUILD_FROM_SOURCE="false")
    step_env.pop("MODELGATE_BIN", None)
    p = run(["bash", "--noprofile", "--norc", "-eo", "pipefail",
             os.path.join(a.source, "integrations", "github", "setup.sh")], env=step_env, cwd=d)
    must(f"using modelgate {a.version} from {deb} (SHA-256 {sha})" in p.stdout,
         "setup.sh did not take the package: " + p.stdout + p.stderr)
    with open(out, encoding="utf-8") as f:
        lines = f.read().splitlines()
    want = os.path.join(d, "action", "root", "usr", "bin", "modelgate")
    must(lines == [f"bin={want}"], f"setup.sh outputs {lines}")
    p = run([want, "scan", os.path.join(a.source, "examples", "models", "evil-trailing.safetensors")],
            env=env, expect_rc=1)
    must("MG-ST-TRAILING-BYTES" in p.stdout, "the Action's program: " + p.stdout)


def check(a):
    env = clean_env()
    d = tempfile.mkdtemp(prefix="mg-deb-")
    try:
        deb, arch = build_deb(a, d, env)
        depends = check_control(a, deb, arch, env)
        want = check_listing(a, deb, env)
        root = os.path.join(d, "root")
        run(["dpkg", "-x", deb, root], env=env)
        deps = check_depends(a, root, depends, env)
        check_extracted(a, root, want)
        fx = check_program(a, root, d, env)
        check_c_example(a, root, d, env, fx)
        check_cmake_consumer(a, root, d, env, fx)
        check_action_setup(a, deb, d, env)
        print(f"{os.path.basename(deb)}: {len(want)} files as expected; Depends: {', '.join(deps)}; "
              "program, C example, CMake consumer and the Action's setup run from it")
    finally:
        shutil.rmtree(d)


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--build", "--source", "--cpack", "--version", "--libdir", "--includedir",
                "--readelf", "--pkg-config", "--cmake", "--generator", "--cxx"):
        ap.add_argument(opt, required=True)
    a = ap.parse_args()
    a.build, a.source = os.path.abspath(a.build), os.path.abspath(a.source)
    try:
        check(a)
    except AssertionError as err:
        print("FAIL:", err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
