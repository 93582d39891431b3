#!/usr/bin/env python3
"""Static checks of the Dockerfile (no container engine runs here).

usage: docker_test.py PATH/TO/modelgate

Two stages from debian:12-slim; the build stage uses ci/install-deps.sh,
`cmake --install` and installs the entrypoint; the runtime stage runs as a
numeric non-root user with the entrypoint in exec form; its apt packages
exist in Debian 12 and provide every shared library the built modelgate links
(readelf NEEDED, mapped to packages with dpkg -S); every program the
entrypoint script calls comes from an Essential package (present in
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
for tool in ("readelf", "ldd", "dpkg", "dpkg-query", "apt-cache"):
    need_tool(tool)

# In every Debian image (Priority: required), so the runtime stage need not name them.
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}


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


@test
def two_debian_stages(d):
    froms = [a for _, w, a in INS if w == "FROM"]
    eq(froms, ["debian:12-slim AS build", "debian:12-slim"], "FROM lines")


@test
def build_stage_builds_release_and_installs(d):
    runs = " ".join(a for w, a in stage(0) if w == "RUN")
    for needle in ("bash ci/install-deps.sh", "-DCMAKE_BUILD_TYPE=Release",
                   "--target modelgate", "cmake --install /build --prefix /usr/local",
                   "install -m 0755 docker/entrypoint.sh /usr/local/bin/modelgate-entrypoint"):
        if needle not in runs:
            raise AssertionError(f"build stage lacks {needle!r}")
    for path in ("ci/install-deps.sh", "docker/entrypoint.sh"):
        if not os.path.isfile(os.path.join(ROOT, path)):
            raise AssertionError(f"{path} is missing")


@test
def runtime_stage_is_non_root_with_exec_entrypoint(d):
    final = stage(1)
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
    copies = [a for w, a in final if w == "COPY"]
    eq(copies, ["--from=build /usr/local/bin/modelgate /usr/local/bin/modelgate-entrypoint /usr/local/bin/"],
       "only the two programs come from the build stage")
    # USER comes after everything that needs root.
    words = [w for w, _ in final]
    if max(i for i, w in enumerate(words) if w in ("RUN", "COPY")) > words.index("USER"):
        raise AssertionError("RUN/COPY after USER")


def runtime_packages():
    runs = " ".join(a for w, a in stage(1) if w == "RUN")
    m = re.search(r"apt-get install ([^&;]*)", runs)
    if m is None:
        raise AssertionError("no apt-get install in the runtime stage")
    return [t for t in shlex.split(m.group(1)) if not t.startswith("-")]


@test
def runtime_packages_cover_linked_libraries(d):
    pkgs = runtime_packages()
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
        if owner not in set(pkgs) | BASE_PACKAGES:
            raise AssertionError(f"{lib} comes from {owner}, which the runtime stage does not install")


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
