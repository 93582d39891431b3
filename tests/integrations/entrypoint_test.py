#!/usr/bin/env python3
"""The container entrypoint (docker/entrypoint.sh, installed as
modelgate-entrypoint), run directly: no container engine runs here.

usage: entrypoint_test.py PATH/TO/modelgate

The built modelgate is put first on PATH, as the image installs it. Checks
exit codes (0 passed, 1 rejected, 2 could not judge), what lands in DEST
(everything on pass, nothing on reject), and the JSON report.
"""
import json
import os
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (GOOD, HOSTILE, PICKLE_OS_SYSTEM, ROOT, eq, hf_model, keygen_and_sign,  # noqa: E402
                    main, modelgate_from_argv, need_tool, run, signed_policy, test, write)

MG = modelgate_from_argv()
ENTRYPOINT = os.path.join(ROOT, "docker", "entrypoint.sh")
SHELLCHECK = need_tool("shellcheck")
for tool in ("bash", "cp", "find", "diff", "realpath", "mktemp", "setpriv"):
    need_tool(tool)


def env_for(policy, **extra):
    env = {"PATH": os.path.dirname(MG) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": "/nonexistent",
           # Nothing may be written outside DEST (readOnlyRootFilesystem).
           "TMPDIR": "/nonexistent/tmp",
           "MODELGATE_POLICY": policy}
    for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
        if k in os.environ:
            env[k] = os.environ[k]
    env.update(extra)
    return env


def entry(args, policy, cwd=None, **extra):
    return run([ENTRYPOINT, *args], env=env_for(policy, **extra), cwd=cwd)


def setup(d, files=None):
    """d/src with a signed model (plus `files`), d/cfg/policy.yaml trusting its key."""
    src = os.path.join(d, "src")
    pub, signed = keygen_and_sign(MG, d, out_dir=src)
    cfg = os.path.join(d, "cfg")
    os.makedirs(cfg)
    shutil.copy(pub, os.path.join(cfg, "release.pub"))
    policy = write(cfg, "policy.yaml", signed_policy("release.pub"))
    for name, data in (files or {}).items():
        write(src, name, data)
    return src, os.path.join(d, "models"), policy


def listing(path):
    out = []
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            out.append(os.path.relpath(os.path.join(root, n), path))
    return sorted(out)


def expect(got, code, what):
    if got[0] != code:
        raise AssertionError(f"{what}: exit {got[0]}, want {code}\nstdout: {got[1]}\nstderr: {got[2]}")


def empty_or_absent(path, what):
    if os.path.exists(path) and os.listdir(path):
        raise AssertionError(f"{what}: destination holds {listing(path)}")


@test
def shellcheck_clean(d):
    code, out, err = run([SHELLCHECK, "--shell=bash", ENTRYPOINT])
    eq(code, 0, "shellcheck\n" + out + err)
    mode = os.stat(ENTRYPOINT).st_mode
    if not mode & stat.S_IXUSR:
        raise AssertionError("entrypoint is not executable")


@test
def signed_model_is_published(d):
    src, dest, policy = setup(d)
    keygen_and_sign(MG, d, name="model-00002.safetensors", out_dir=os.path.join(src, "sub"))
    report = os.path.join(d, "report.json")
    r = entry([src, dest], policy, MODELGATE_JSON_REPORT=report)
    expect(r, 0, "signed model")
    eq(listing(dest), ["model.safetensors", "sub", "sub/model-00002.safetensors"], "published tree")
    with open(os.path.join(src, "model.safetensors"), "rb") as a, \
            open(os.path.join(dest, "model.safetensors"), "rb") as b:
        eq(a.read() == b.read(), True, "bytes equal")
    eq(stat.S_IMODE(os.stat(os.path.join(dest, "model.safetensors")).st_mode), 0o644, "file mode")
    eq(stat.S_IMODE(os.stat(os.path.join(dest, "sub")).st_mode), 0o755, "dir mode")
    with open(report) as f:
        doc = json.load(f)
    eq(doc["summary"]["rejected"], 0, "report summary")
    sig = {f["path"]: f["signature"]["status"] for f in doc["files"]}
    eq(sig.get("./model.safetensors"), "valid", "signature in report")


@test
def unsigned_or_hostile_places_nothing(d):
    for name, data in (("unsigned.safetensors", GOOD), ("evil.safetensors", HOSTILE),
                       ("weights.bin", PICKLE_OS_SYSTEM)):
        case = os.path.join(d, name)
        os.makedirs(case)
        src, dest, policy = setup(case, {name: data})
        report = os.path.join(case, "report.json")
        r = entry([src, dest], policy, MODELGATE_JSON_REPORT=report)
        expect(r, 1, name)
        empty_or_absent(dest, name)
        with open(report) as f:
            verdicts = {f["path"]: f["verdict"] for f in json.load(f)["files"]}
        eq(verdicts.get("./" + name), "reject", f"{name} verdict")


@test
def policy_problems_cannot_judge(d):
    src, dest, policy = setup(d)
    bad = write(d, "bad.yaml", "apiVersion: modelgate/v1\nkind: Policy\nfailOn: yes\n")
    expect(entry([src, dest], bad), 2, "broken policy")
    expect(entry([src, dest], os.path.join(d, "missing.yaml")), 2, "missing policy")
    unknown = write(d, "unknown.yaml", "apiVersion: modelgate/v1\nkind: Policy\nfailon: high\n")
    expect(entry([src, dest], unknown), 2, "unknown key")
    eq(os.path.exists(dest), False, "nothing created for a policy that cannot be used")
    inner = write(src, "policy.yaml", signed_policy(os.path.join(d, "cfg", "release.pub")))
    r = entry([src, dest], inner)
    expect(r, 2, "policy inside the model tree")
    if "inside the source tree" not in r[2]:
        raise AssertionError("message: " + r[2])


@test
def remote_uris_are_refused(d):
    src, dest, policy = setup(d)
    for uri in ("s3://bucket/models/v3", "gs://bucket/m", "https://example.com/m.safetensors",
                "hf://org/model", "pvc://claim/models"):
        r = entry([uri, dest], policy)
        expect(r, 2, uri)
        if "never downloads" not in r[2] or "Mount the volume" not in r[2]:
            raise AssertionError(f"{uri}: message: {r[2]}")
    r = entry([src, "s3://bucket/out"], policy)
    expect(r, 2, "remote destination")
    eq(os.path.exists(dest), False, "nothing created")


@test
def local_uris_are_paths(d):
    src, dest, policy = setup(d)
    expect(entry(["file://" + src, "file://" + dest], policy), 0, "file://")
    eq(listing(dest), ["model.safetensors"], "published")
    dest2 = os.path.join(d, "models2")
    expect(entry(["modelgate://" + src, dest2], policy), 0, "modelgate://")
    expect(entry(["file://relative/path", dest2], policy), 2, "file:// without an absolute path")


@test
def single_file_source(d):
    src, dest, policy = setup(d)
    expect(entry([os.path.join(src, "model.safetensors"), dest], policy), 0, "one file")
    eq(listing(dest), ["model.safetensors"], "published under its name")


@test
def links_and_special_files_are_rejected(d):
    outside = write(d, "outside/secret.safetensors", GOOD)
    cases = {
        "escape": lambda src: os.symlink(outside, os.path.join(src, "link.safetensors")),
        "etc": lambda src: os.symlink("/etc/passwd", os.path.join(src, "passwd")),
        "inside": lambda src: os.symlink("model.safetensors", os.path.join(src, "alias.safetensors")),
        "fifo": lambda src: os.mkfifo(os.path.join(src, "pipe.safetensors")),
    }
    for name, make in cases.items():
        case = os.path.join(d, name)
        os.makedirs(case)
        src, dest, policy = setup(case)
        make(src)
        r = entry([src, dest], policy)
        expect(r, 1, name)
        empty_or_absent(dest, name)
        if "not a regular file or directory" not in r[2]:
            raise AssertionError(f"{name}: message: {r[2]}")
    # Even a policy whose bar lets the walk's high findings through.
    case = os.path.join(d, "lenient")
    os.makedirs(case)
    src, dest, _ = setup(case)
    lenient = write(case, "cfg/lenient.yaml", "apiVersion: modelgate/v1\nkind: Policy\nfailOn: critical\n")
    os.symlink(outside, os.path.join(src, "link.safetensors"))
    expect(entry([src, dest], lenient), 1, "escaping link under failOn: critical")
    empty_or_absent(dest, "lenient")


@test
def the_copy_is_checked_not_the_source(d):
    """A writer swapping the source after the copy cannot get bytes that were
    not checked into DEST: a wrapper swaps the file when `check` starts."""
    src, dest, policy = setup(d)
    target = os.path.join(src, "model.safetensors")
    with open(target, "rb") as f:
        checked = f.read()
    wrapper = write(d, "bin/modelgate",
                    "#!/bin/bash\n"
                    f"if [ \"$1\" = check ]; then cp {os.path.join(d, 'evil')} {target}; fi\n"
                    f"exec {MG} \"$@\"\n", mode=0o755)
    write(d, "evil", HOSTILE)
    expect(entry([src, dest], policy, MODELGATE_BIN=wrapper), 0, "swap after copy")
    with open(os.path.join(dest, "model.safetensors"), "rb") as f:
        eq(f.read() == checked, True, "DEST holds the checked bytes, not the swapped ones")


@test
def destination_rules(d):
    src, dest, policy = setup(d)
    # Leftovers of an interrupted run are ours: removed.
    os.makedirs(os.path.join(dest, ".modelgate-staging.abc123/x"))
    expect(entry([src, dest], policy), 0, "stale staging removed")
    eq(listing(dest), ["model.safetensors"], "published, staging gone")
    # A re-run finding exactly its own result (init container re-run) passes.
    expect(entry([src, dest], policy), 0, "idempotent re-run")
    eq(listing(dest), ["model.safetensors"], "unchanged")
    # Anything else in DEST: refused, left untouched, no staging left.
    write(dest, "other.bin", b"x")
    r = entry([src, dest], policy)
    expect(r, 2, "foreign file in DEST")
    eq(listing(dest), ["model.safetensors", "other.bin"], "untouched")
    os.unlink(os.path.join(dest, "other.bin"))
    write(dest, "model.safetensors", GOOD)  # same name, other bytes
    expect(entry([src, dest], policy), 2, "different bytes in DEST")
    # Overlapping source and destination.
    expect(entry([src, src], policy), 2, "same directory")
    expect(entry([src, os.path.join(src, "out")], policy), 2, "DEST inside SRC")
    # A source with no files.
    os.makedirs(os.path.join(d, "empty/sub"))
    expect(entry([os.path.join(d, "empty"), os.path.join(d, "m3")], policy), 2, "empty source")
    empty_or_absent(os.path.join(d, "m3"), "empty source")
    expect(entry([os.path.join(d, "nope"), os.path.join(d, "m4")], policy), 2, "missing source")
    # The staging prefix is reserved at the top of the tree.
    write(src, ".modelgate-staging.x/part.safetensors", GOOD)
    expect(entry([src, os.path.join(d, "m5")], policy), 2, "reserved name in the source")
    empty_or_absent(os.path.join(d, "m5"), "reserved name")


def detached_setup(d):
    """d/src: a Hugging Face-style directory signed once with a detached bundle
    (an ECDSA key); d/cfg/policy.yaml: its formats, signatures required."""
    prefix = os.path.join(d, "keys", "release")
    os.makedirs(os.path.dirname(prefix))
    code, _, err = run([MG, "keygen", "--alg", "ecdsa-p256", "--out", prefix])
    eq(code, 0, "keygen " + err)
    src = hf_model(d, "src")
    code, _, err = run([MG, "sign", "--detached", "--key", prefix + ".key", src])
    eq(code, 0, "sign --detached " + err)
    cfg = os.path.join(d, "cfg")
    os.makedirs(cfg)
    shutil.copy(prefix + ".pub", os.path.join(cfg, "release.pub"))
    policy = write(cfg, "policy.yaml", signed_policy("release.pub").replace(
        "formats: {allow: [safetensors]}", "formats: {allow: [safetensors, unknown]}"))
    return src, policy


@test
def detached_signed_directory_is_published_and_a_tampered_one_is_not(d):
    """The entrypoint needs nothing for detached bundles: `check` finds
    model.sig at the top of the staged copy. A directory signed once is
    published whole (the bundle with it); a tampered copy places nothing."""
    src, policy = detached_setup(d)
    dest = os.path.join(d, "models")
    report = os.path.join(d, "report.json")
    expect(entry([src, dest], policy, MODELGATE_JSON_REPORT=report), 0, "detached-signed directory")
    eq(listing(dest), listing(src), "published tree")
    eq("model.sig" in listing(dest), True, "the bundle is published with the model")
    with open(report) as f:
        doc = json.load(f)
    states = {f["path"]: f["signature"].get("detached_state") for f in doc["files"]}
    eq(states["./model.sig"], "ignored", "bundle")
    eq(states["./config.json"], "signed", "config covered by the bundle")
    eq(doc["summary"]["rejected"], 0, "summary")
    expect(entry([src], policy), 0, "verified in place")

    def changed(m):
        write(m, "tokenizer_config.json", '{"chat_template": "{{ evil }}"}\n')

    def added(m):
        write(m, "modeling_llm.py", "import os\n")

    def removed(m):
        os.unlink(os.path.join(m, "model-00001-of-00002.safetensors"))

    for tamper, want in ((changed, "MG-POLICY-SIGNATURE"), (added, "MG-POLICY-SIGNATURE"),
                         (removed, "MG-OMS-FILE-MISSING")):
        case = os.path.join(d, tamper.__name__)
        bad = os.path.join(case, "src")
        shutil.copytree(src, bad)
        tamper(bad)
        dest = os.path.join(case, "models")
        os.makedirs(dest)
        report = os.path.join(case, "report.json")
        expect(entry([bad, dest], policy, MODELGATE_JSON_REPORT=report), 1, tamper.__name__)
        eq(os.listdir(dest), [], f"{tamper.__name__}: DEST untouched")
        with open(report) as f:
            found = {x["id"] for file in json.load(f)["files"] for x in file["findings"]}
        eq(want in found, True, f"{tamper.__name__}: {want} in {sorted(found)}")
        expect(entry([bad], policy), 1, f"{tamper.__name__}, in place")


@test
def verify_in_place(d):
    src, _, policy = setup(d)
    before = listing(src)
    expect(entry([src], policy), 0, "signed, in place")
    eq(listing(src), before, "source untouched")
    expect(entry([os.path.join(src, "model.safetensors")], policy), 0, "one file in place")
    write(src, "evil.safetensors", HOSTILE)
    expect(entry([src], policy), 1, "hostile, in place")
    os.unlink(os.path.join(src, "evil.safetensors"))
    os.symlink("model.safetensors", os.path.join(src, "alias"))
    expect(entry([src], policy), 1, "link, in place")


@test
def usage(d):
    src, dest, policy = setup(d)
    expect(entry([], policy), 2, "no arguments")
    expect(entry([src, dest, dest], policy), 2, "three arguments")
    expect(entry(["--frobnicate"], policy), 2, "unknown option")
    r = entry(["--help"], policy)
    expect(r, 0, "--help")
    if "usage: modelgate-entrypoint" not in r[2]:
        raise AssertionError("help text: " + r[2])
    expect(entry([src, dest], policy, MODELGATE_BIN="/nonexistent/modelgate"), 2, "no modelgate")


@test
def runs_as_an_unprivileged_user(d):
    """The image runs as uid 10001; read-only source directories must not
    stop the copy or the cleanup."""
    src, dest, policy = setup(d)
    keygen_and_sign(MG, d, name="part.safetensors", out_dir=os.path.join(src, "ro"))
    os.chmod(os.path.join(src, "ro"), 0o555)
    if os.geteuid() != 0:
        expect(entry([src, dest], policy), 0, "as this user")
        return
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            os.lchown(os.path.join(root, n), 10001, 10001)
    os.chown(d, 10001, 10001)
    # The checkout may sit where uid 10001 cannot reach it (CI clones under
    # /root, mode 0700): run copies of the program and the script from a
    # directory of the test's own, as the image has them in /usr/local/bin.
    bindir = os.path.join(d, "bin")
    os.makedirs(bindir)
    for path, name in ((MG, "modelgate"), (ENTRYPOINT, "modelgate-entrypoint")):
        shutil.copy(path, os.path.join(bindir, name))
        os.chmod(os.path.join(bindir, name), 0o755)
    for p in (bindir, d):
        os.chmod(p, 0o755)
    p = os.path.dirname(d)
    while p != "/":
        if not os.stat(p).st_mode & stat.S_IXOTH:
            raise AssertionError(f"{p} (the temp dir's parent) is not traversable by uid 10001")
        p = os.path.dirname(p)
    user_env = dict(env_for(policy), PATH=bindir + os.pathsep + "/usr/bin:/bin")
    cmd = ["setpriv", "--reuid=10001", "--regid=10001", "--clear-groups",
           os.path.join(bindir, "modelgate-entrypoint"), src, dest]
    p = subprocess.run(cmd, env=user_env, capture_output=True, timeout=60)
    eq(p.returncode, 0, "as uid 10001: " + p.stderr.decode())
    eq(listing(dest), ["model.safetensors", "ro", "ro/part.safetensors"], "published")
    os.chmod(os.path.join(src, "ro"), 0o755)
    # Rejection as uid 10001 cleans its staging (with a read-only directory in it).
    write(src, "evil.safetensors", HOSTILE)
    os.chmod(os.path.join(src, "ro"), 0o555)
    dest2 = os.path.join(d, "models2")
    os.makedirs(dest2)
    os.chown(dest2, 10001, 10001)
    cmd[-1] = dest2
    p = subprocess.run(cmd, env=user_env, capture_output=True, timeout=60)
    eq(p.returncode, 1, "rejected as uid 10001: " + p.stderr.decode())
    eq(os.listdir(dest2), [], "staging removed")


if __name__ == "__main__":
    sys.exit(main())
