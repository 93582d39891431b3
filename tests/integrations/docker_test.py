#!/usr/bin/env python3
"""Static checks of the Dockerfile (no container engine runs here).

usage: docker_test.py PATH/TO/modelgate

Three stages: `build` from debian:12-slim uses ci/install-deps.sh, builds
Release under the prefix /usr and makes the .deb with cpack
(cmake/Packaging.cmake, Depends by dpkg-shlibdeps); `deb` (from scratch)
holds only that .deb, for `docker build --target deb --output`; the runtime
stage from debian:12-slim installs the .deb with apt-get (no runtime package
named by hand), runs as a numeric non-root user with the entrypoint in exec
form. dpkg-shlibdeps, run here on the built modelgate as cpack runs it, names
a Debian 12 package owning every shared library the program links (readelf
NEEDED, mapped with dpkg -S): what apt installs in the image. Every program
the entrypoint script calls comes from an Essential package (present in
debian:12-slim); .dockerignore keeps .git and build trees out.
"""
import json
import os
import re
import shlex
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, eq, main, modelgate_from_argv, need_tool, run, test  # noqa: E402

MG = modelgate_from_argv()
for tool in ("readelf", "ldd", "dpkg", "dpkg-query", "apt-cache", "dpkg-shlibdeps"):
    need_tool(tool)


def instructions():
    """(stage index, INSTRUCTION, argument text) with continuations joined."""
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        text = f.read()
    lines, cur = [], ""
    for raw in text.split("\n"):
        if not cur and (raw.strip().startswith("#") or not raw.strip()):
            continue
        if raw.strip().startswith("#"):
            continue
        if raw.endswith("\\"):
            cur += raw[:-1] + " "
            continue
        lines.append(cur + raw)
        cur = ""
    out, stage = [], -1
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        word = word.upper()
        if word == "FROM":
            stage += 1
        out.append((stage, word, rest.strip()))
    return out


INS = instructions()


def stage(n):
    return [(w, a) for s, w, a in INS if s == n]


BUILD, DEB, RUNTIME = 0, 1, 2
DEB_GLOB = "/tmp/modelgate/modelgate_*.deb"


@test
def build_deb_and_runtime_stages(d):
    froms = [a for _, w, a in INS if w == "FROM"]
    eq(froms, ["debian:12-slim AS build", "scratch AS deb", "debian:12-slim"], "FROM lines")


@test
def build_stage_builds_release_and_packages(d):
    runs = " ".join(a for w, a in stage(BUILD) if w == "RUN")
    for needle in ("bash ci/install-deps.sh", "-DCMAKE_BUILD_TYPE=Release",
                   "-DCMAKE_INSTALL_PREFIX=/usr", "--target modelgate modelgate_api",
                   "cpack --config /build/CPackConfig.cmake -G DEB -B /pkg",
                   "install -m 0755 docker/entrypoint.sh /pkg/modelgate-entrypoint"):
        if needle not in runs:
            raise AssertionError(f"build stage lacks {needle!r}")
    if "cmake --install" in runs:
        raise AssertionError("the build stage installs outside the package: the image would "
                             "not run what the .deb holds")
    for path in ("ci/install-deps.sh", "docker/entrypoint.sh", "cmake/Packaging.cmake"):
        if not os.path.isfile(os.path.join(ROOT, path)):
            raise AssertionError(f"{path} is missing")
    # cpack builds nothing: the targets built are those of the components the
    # package holds (the program, and libmodelgate for the library and -dev).
    with open(os.path.join(ROOT, "cmake", "Packaging.cmake")) as f:
        packaging = f.read()
    m = re.search(r"^set\(CPACK_COMPONENTS_ALL ([^)]*)\)", packaging, re.M)
    if m is None:
        raise AssertionError("cmake/Packaging.cmake sets no CPACK_COMPONENTS_ALL")
    eq(m.group(1).split(), ["Unspecified", "libmodelgate", "libmodelgate-dev"], "packaged components")
    for needle in ("set(CPACK_GENERATOR DEB)", "set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)",
                   "set(CPACK_PACKAGING_INSTALL_PREFIX /usr)"):
        if needle not in packaging:
            raise AssertionError(f"cmake/Packaging.cmake lacks {needle}")
    if "CPACK_DEBIAN_PACKAGE_DEPENDS" in packaging:
        raise AssertionError("Depends written by hand in cmake/Packaging.cmake: dpkg-shlibdeps decides")


@test
def deb_stage_holds_only_the_package(d):
    eq(stage(DEB), [("FROM", "scratch AS deb"), ("COPY", "--from=build /pkg/modelgate_*.deb /")],
       "deb stage")


@test
def runtime_stage_installs_the_deb_with_apt(d):
    final = stage(RUNTIME)
    copies = [a for w, a in final if w == "COPY"]
    eq(copies, ["--from=build /pkg/ /tmp/modelgate/"], "only the build's /pkg comes from the build stage")
    runs = " ".join(a for w, a in final if w == "RUN")
    for needle in ("apt-get update", "install -m 0755 /tmp/modelgate/modelgate-entrypoint "
                   "/usr/local/bin/modelgate-entrypoint", "rm -rf /tmp/modelgate /var/lib/apt/lists/*",
                   "modelgate --version"):
        if needle not in runs:
            raise AssertionError(f"runtime stage lacks {needle!r}")
    eq(runtime_packages(), [DEB_GLOB], "apt-get installs the .deb and nothing named by hand")
    if runs.index("modelgate --version") < runs.index("apt-get install"):
        raise AssertionError("modelgate --version runs before the package is installed")


@test
def runtime_stage_is_non_root_with_exec_entrypoint(d):
    final = stage(RUNTIME)
    users = [a for w, a in final if w == "USER"]
    eq(len(users), 1, "one USER")
    uid, _, gid = users[0].partition(":")
    if not uid.isdigit() or int(uid) == 0 or not gid.isdigit() or int(gid) == 0:
        raise AssertionError(f"USER must be a numeric non-root uid:gid (runAsNonRoot), not {users[0]}")
    eq(uid, "10001", "uid (the docs' runAsUser)")
    runs = " ".join(a for w, a in final if w == "RUN")
    if f"--uid {uid}" not in runs or f"--gid {gid}" not in runs:
        raise AssertionError("the runtime user is not created with that uid/gid")
    entry = [a for w, a in final if w == "ENTRYPOINT"]
    eq([json.loads(e) for e in entry], [["/usr/local/bin/modelgate-entrypoint"]], "ENTRYPOINT (exec form)")
    eq(stage(RUNTIME)[-1], ("CMD", '["--help"]'), "CMD")
    # USER comes after everything that needs root.
    words = [w for w, _ in final]
    if max(i for i, w in enumerate(words) if w in ("RUN", "COPY")) > words.index("USER"):
        raise AssertionError("RUN/COPY after USER")


def runtime_packages():
    runs = " ".join(a for w, a in stage(RUNTIME) if w == "RUN")
    m = re.search(r"apt-get install ([^&;]*)", runs)
    if m is None:
        raise AssertionError("no apt-get install in the runtime stage")
    return [t for t in shlex.split(m.group(1)) if not t.startswith("-")]


def shlibdeps(program, d):
    """The package names dpkg-shlibdeps gives for program, as cpack runs it
    (a debian/control in the working directory)."""
    os.makedirs(os.path.join(d, "debian"))
    with open(os.path.join(d, "debian", "control"), "w") as f:
        f.write("Source: modelgate\n\nPackage: modelgate\nArchitecture: any\n")
    code, out, err = run(["dpkg-shlibdeps", "-O", program], cwd=d)
    eq(code, 0, "dpkg-shlibdeps: " + err)
    m = re.fullmatch(r"shlibs:Depends=(.+)\n?", out)
    if m is None:
        raise AssertionError("dpkg-shlibdeps output: " + out)
    return [re.match(r"\s*([^\s(]+)", dep).group(1) for dep in m.group(1).split(",")]


@test
def package_depends_cover_linked_libraries(d):
    pkgs = shlibdeps(MG, d)
    code, out, err = run(["apt-cache", "show", "--no-all-versions", *pkgs])
    for p in pkgs:
        if f"Package: {p}\n" not in out:
            raise AssertionError(f"{p} is not a Debian 12 package here: {err}")
    code, out, err = run(["readelf", "-d", MG])
    eq(code, 0, "readelf")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
    if not needed:
        raise AssertionError("no NEEDED entries")
    code, out, err = run(["ldd", MG])
    eq(code, 0, "ldd")
    where = dict(re.findall(r"^\s*(\S+) => (\S+)", out, re.M))
    paths = {}
    for lib in needed:
        if lib.startswith("ld-linux") and re.search(r"^\s*/\S*/" + re.escape(lib) + r" \(", out, re.M):
            continue  # the dynamic loader itself (libc6, in every image); ldd prints no "=>"
        if lib not in where:
            raise AssertionError(f"ldd does not resolve {lib}")
        paths[lib] = where[lib]
    owners = owning_packages(paths)
    for lib, owner in owners.items():
        if owner not in pkgs:
            raise AssertionError(f"{lib} comes from {owner}, which dpkg-shlibdeps does not name: {pkgs}")


def owning_packages(paths):
    """{name: Debian package owning the file at paths[name]}, with one dpkg -S
    call (usrmerge: the database may list /lib or /usr/lib)."""
    candidates = {}
    for name, path in paths.items():
        for c in {path, os.path.realpath(path)}:
            for v in (c, c.replace("/usr/lib/", "/lib/", 1), c.replace("/usr/bin/", "/bin/", 1),
                      "/usr" + c if c.startswith(("/lib/", "/bin/")) else c):
                candidates.setdefault(v, set()).add(name)
    _, out, _ = run(["dpkg", "-S", *sorted(candidates)])
    owners = {}
    for line in out.splitlines():
        pkg, _, path = line.partition(": ")
        for name in candidates.get(path.strip(), ()):
            owners[name] = pkg.split(":")[0].split(",")[0].strip()
    missing = sorted(set(paths) - set(owners))
    if missing:
        raise AssertionError(f"no Debian package owns {missing}")
    return owners


@test
def entrypoint_tools_are_in_the_base_image(d):
    with open(os.path.join(ROOT, "docker", "entrypoint.sh")) as f:
        script = f.read()
    eq(script.splitlines()[0], "#!/bin/bash", "shebang")
    tools = ["bash", "cp", "find", "diff", "cmp", "realpath", "mktemp", "sync", "chmod", "rm",
             "rmdir", "mv", "mkdir", "basename", "dirname", "sort", "cat"]
    for t in tools[1:]:
        if not re.search(rf"(^|[\s(|;]){t} ", script, re.M):
            raise AssertionError(f"list of tools is stale: the script does not call {t}")
    paths = {t: shutil.which(t) for t in tools}
    for t, p in paths.items():
        if p is None:
            raise AssertionError(f"{t} not found")
    owners = owning_packages(paths)
    code, out, _ = run(["dpkg-query", "-W", "-f=${Package} ${Essential}\n", *set(owners.values())])
    essential = dict(l.split(" ", 1) for l in out.splitlines())
    for t, owner in owners.items():
        eq(essential.get(owner), "yes", f"{t} comes from {owner}, which must be Essential (in debian:12-slim)")


@test
def dockerignore_keeps_the_context_small(d):
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        patterns = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    for p in (".git", "build", "build-*"):
        if p not in patterns:
            raise AssertionError(f".dockerignore lacks {p}")


if __name__ == "__main__":
    sys.exit(main())
